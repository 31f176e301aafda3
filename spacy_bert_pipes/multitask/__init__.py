"""Training one pipeline on several corpora at once.

corpus.py      MultiCorpus, the reader `spacy-bert-pipes.MultiCorpus.v1`: several
               `.spacy` sources interleaved by size ** alpha, each doc tagged with
               its source in `doc._.bert_pipes_source`
labels.py      `spacy-bert-pipes.corpus_labels.v1`: the labels of one corpus, for
               a head's [initialize] when its docs are mixed with others'
distill.py     `bert-pipes distill`: teachers trained apart annotate every doc that
               lacks their head's annotation (imported on its own: it loads pipes);
               their probabilities go to `doc._.bert_pipes_targets` (corpus_attrs.py)
shrink.py      `bert-pipes shrink`: a student of a trained pipeline with K of its
               encoder layers, its heads trained again (gold, or distill.py's)
hidden_states.py  shrink's first step: the cut encoder learns the teacher's
               hidden states (kept layers, heads' own top layers)
compare.py     the one-pass pipeline's scores and docs/s beside the heads apart
"""

from ..corpus_attrs import SOURCE_ATTR
from .corpus import MultiCorpus, create_multi_corpus_reader
from .labels import corpus_labels

__all__ = ["SOURCE_ATTR", "MultiCorpus", "corpus_labels", "create_multi_corpus_reader"]
