"""`bert_ner`: named entities as BERT token tagging, with a confidence per entity.

The factory and what a config sets: the default model (`DEFAULT_NER_MODEL`), each
setting with its default and its meaning (`make_bert_ner`), the scores training
reports. The pipe the factory makes, `BertEntityRecognizer`, is `ner_pipe.py`.
"""

from typing import Callable, List, Optional

from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Config, Model
from thinc.types import Floats2d

from ..models.heads.tags import Scheme
from .ner_pipe import SCORE_ATTR, Annotate, BertEntityRecognizer

__all__ = ["DEFAULT_NER_MODEL", "SCORE_ATTR", "BertEntityRecognizer", "make_bert_ner"]

DEFAULT_NER_MODEL = """
[model]
@architectures = "spacy-bert-pipes.TokenTaggerModel.v1"
token_vector = "first"
dropout = 0.1
nO = null

[model.encoder]
@architectures = "spacy-bert-pipes.BertEncoder.v2"
max_length = 128
stride = 32
max_batch_tokens = 4096
precision = "fp32"
predict_precision = "auto"
frozen_layers = 0
hidden_layers = "last"
context = "auto"
"""
DEFAULT_NER_CONFIG = Config().from_str(DEFAULT_NER_MODEL)["model"]


@Language.factory(
    "bert_ner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans"],
    default_config={
        "model": DEFAULT_NER_CONFIG,
        "scheme": "BIO",
        "annotate": "ents",
        "spans_key": "bert_ner",
        "join_sentences": 32,
        "scorer": {"@scorers": "spacy-bert-pipes.ner_scorer.v1"},
    },
    default_score_weights={
        "ents_f": 1.0,
        "ents_p": 0.0,
        "ents_r": 0.0,
        "ents_per_type": None,
    },
)
def make_bert_ner(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats2d]],
    scheme: Scheme,
    annotate: Annotate,
    spans_key: str,
    join_sentences: int,
    scorer: Optional[Callable],
) -> "BertEntityRecognizer":
    """Tag named entities with a BERT encoder, one tag per spaCy token.

    model (Model[List[Doc], List[Floats2d]]): A spacy-bert-pipes.TokenTaggerModel.v1.
    scheme (str): "BIO" or "BILUO" tags. Decoding is a Viterbi search over valid
        tag sequences only, so an entity is never broken.
    annotate (str): "ents" writes `doc.ents` (replacing any); "spans" writes the span
        group `doc.spans[spans_key]` and leaves `doc.ents` alone, for pipelines that
        already have an `ner`.
    spans_key (str): The span group written in "spans" mode (and read as gold, when
        the reference docs have it, in training and scoring).
    join_sentences (int): When the component's own encoder reads sentences found
        by rule (`context = "auto"` on sentence-level training docs), training
        joins the batch's examples in runs of 1 to `join_sentences` (at random)
        into docs without sentence boundaries, as raw text is read at prediction:
        sentences without final punctuation then run into their neighbours in
        training too. 0 or 1: each example alone.
    scorer (Optional[Callable]): Scoring function: entity P/R/F overall and per type.
    """
    return BertEntityRecognizer(
        nlp.vocab,
        model,
        name,
        scheme=scheme,
        annotate=annotate,
        spans_key=spans_key,
        join_sentences=join_sentences,
        scorer=scorer,
    )
