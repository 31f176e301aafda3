"""The frozen body's vectors that vector_anchor pulls towards, computed once per text."""

from pathlib import Path
from typing import List

import numpy
import spacy
from helpers import TRAIN_TEXTS, textcat_examples
from spacy.tokens import Doc
from test_textcat_fewshot import make_nlp
from thinc.api import Model

from spacy_bert_pipes.pipeline.frozen_vectors import FrozenVectors


def counting_body(width: int = 4) -> Model:
    """A body whose vector of a doc depends on its text alone; it records the
    texts of each call."""
    calls: List[List[str]] = []

    def forward(model: Model, docs: List[Doc], is_train: bool):
        calls.append([doc.text for doc in docs])
        rows = [[float(len(doc.text) + i) for i in range(width)] for doc in docs]
        return model.ops.asarray2f(rows or numpy.zeros((0, width), dtype="f")), None

    model: Model = Model("counting", forward)
    model.attrs["calls"] = calls
    return model


def test_each_text_is_computed_once_and_rows_keep_the_docs_order() -> None:
    nlp = spacy.blank("en")
    body = counting_body()
    frozen = FrozenVectors(body)
    docs = [nlp.make_doc(t) for t in ("a card", "hello", "a card", "exchange rate")]
    first = frozen.predict(docs)
    assert body.attrs["calls"] == [["a card", "hello", "exchange rate"]]
    again = frozen.predict([docs[3], nlp.make_doc("new one"), docs[0]])
    assert body.attrs["calls"][1:] == [["new one"]]
    assert numpy.array_equal(again[0], first[3]) and numpy.array_equal(again[2], first[0])
    assert numpy.array_equal(first, body.predict(docs))
    assert frozen.predict([]).shape == (0, 4)
    assert len(frozen) == 4


def test_past_max_texts_vectors_are_computed_and_not_kept() -> None:
    nlp = spacy.blank("en")
    body = counting_body()
    frozen = FrozenVectors(body, max_texts=2)
    docs = [nlp.make_doc(t) for t in ("one", "two two", "three 3")]
    rows = frozen.predict(docs)
    assert numpy.array_equal(rows, body.predict(docs)) and len(frozen) == 2
    frozen.predict(docs)
    assert body.attrs["calls"][-1] == ["three 3"]  # computed again, not kept


def test_anchored_training_encodes_each_training_text_once(tiny_bert: Path) -> None:
    """Over several epochs the frozen copy encodes each training text once, and
    its vectors are those of the body as training started."""
    nlp = make_nlp(tiny_bert, vector_anchor=1.0)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    textcat = nlp.get_pipe("bert_textcat")
    texts = [text for text, _ in TRAIN_TEXTS]
    start = textcat.prototypes.sentence_vectors([nlp.make_doc(t) for t in texts])
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    frozen = textcat._vector_teacher()
    assert isinstance(frozen, FrozenVectors) and len(frozen) == len(set(texts))
    numpy.testing.assert_allclose(
        frozen.predict([nlp.make_doc(t) for t in texts]), start, atol=1e-5
    )
