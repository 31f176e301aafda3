"""Reproducible batches on the real encoder (`annotate --reproducible`,
`load_pipeline(reproducible=True)`): a doc's probabilities and entity scores
are the same alone and inside a collection, bit for bit; without it they
differ in their last digits (the control that shows the test can tell)."""

from typing import Tuple

import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example
from test_real_encoder import banking77

from spacy_bert_pipes.loading import load_pipeline

pytestmark = pytest.mark.slow

PICKED = range(0, 100, 10)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> str:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat")
    nlp.add_pipe("bert_ner")
    examples = [
        Example.from_dict(
            nlp.make_doc("My card has not arrived in London"),
            {"cats": {"card": 1.0, "billing": 0.0}, "entities": [(27, 33, "LOC")]},
        ),
        Example.from_dict(
            nlp.make_doc("I was charged twice by Google"),
            {"cats": {"card": 0.0, "billing": 1.0}, "entities": [(23, 29, "ORG")]},
        ),
    ]
    nlp.initialize(lambda: examples)
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    nlp.to_disk(path)
    return str(path)


def outputs(doc: Doc) -> Tuple:
    ents = [(e.start_char, e.end_char, e.label_, e._.bert_ner_score) for e in doc.ents]
    return doc.cats, ents


@pytest.mark.parametrize("reproducible", [True, False])
def test_a_docs_output_alone_and_in_a_collection(pipeline: str, reproducible: bool) -> None:
    nlp = load_pipeline(pipeline, reproducible=reproducible)
    texts = [text for text, _ in banking77("test", 100)]
    together = [outputs(doc) for doc in nlp.pipe(texts, batch_size=64)]
    same = sum(outputs(nlp(texts[i])) == together[i] for i in PICKED)
    if reproducible:
        assert same == len(PICKED)
    else:  # batches of one and of 64 round differently
        assert same < len(PICKED)
