"""Training one pipeline on several corpora at once.

corpus.py      MultiCorpus, the reader `spacy-bert-pipes.MultiCorpus.v1`: several
               `.spacy` sources interleaved by size ** alpha, each doc tagged with
               its source in `doc._.bert_pipes_source`
"""

from .corpus import SOURCE_ATTR, MultiCorpus, create_multi_corpus_reader

__all__ = ["SOURCE_ATTR", "MultiCorpus", "create_multi_corpus_reader"]
