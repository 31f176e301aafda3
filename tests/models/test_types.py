"""DocEncoding: plain data that must survive Doc serialization (msgpack hooks)."""

import numpy
import pytest
import spacy
import srsly
from spacy.tokens import Doc, DocBin

from spacy_bert_pipes.models.types import DocEncoding
from spacy_bert_pipes.pipeline.common import ensure_encoding_extension


def make_encoding(n_pieces=4, width=6, seed=0):
    rng = numpy.random.default_rng(seed)
    return DocEncoding(
        cls=rng.normal(size=(width,)).astype("f"),
        wordpieces=rng.normal(size=(n_pieces, width)).astype("f"),
        offsets=numpy.arange(n_pieces * 2, dtype="i").reshape((n_pieces, 2)),
    )


def assert_equal_encodings(a, b):
    assert isinstance(b, DocEncoding)
    for name in ("cls", "wordpieces", "offsets"):
        x, y = getattr(a, name), getattr(b, name)
        assert y.dtype == x.dtype and y.shape == x.shape, name
        assert numpy.array_equal(x, y), name


@pytest.fixture(scope="module")
def nlp():
    ensure_encoding_extension()
    return spacy.blank("en")


def test_width_and_dict_round_trip():
    encoding = make_encoding(width=7)
    assert encoding.width == 7
    assert_equal_encodings(encoding, DocEncoding.from_dict(encoding.to_dict()))


@pytest.mark.parametrize("n_pieces", [0, 1, 9])
def test_doc_bytes_round_trip(nlp, n_pieces):
    doc = nlp("Hello world, my card did not arrive.")
    encoding = make_encoding(n_pieces)
    doc._.bert_encoding = encoding
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert restored.text == doc.text
    assert_equal_encodings(encoding, restored._.bert_encoding)


def test_strided_arrays_round_trip(nlp):
    """Encodings hold views into batch outputs; views must serialize by value."""
    batch = numpy.random.default_rng(1).normal(size=(3, 10, 8)).astype("f")
    encoding = DocEncoding(
        cls=batch[1, 0],
        wordpieces=batch[1, 1:8:2],  # not contiguous
        offsets=numpy.asfortranarray(numpy.arange(8, dtype="i").reshape((4, 2))),
    )
    assert not encoding.wordpieces.flags["C_CONTIGUOUS"]
    doc = nlp("some text")
    doc._.bert_encoding = encoding
    restored = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert_equal_encodings(encoding, restored._.bert_encoding)


def test_docbin_round_trip(nlp):
    docs = [nlp("first doc"), nlp(""), nlp("third one here")]
    encodings = [make_encoding(n, seed=n) for n in (2, 0, 3)]
    for doc, encoding in zip(docs, encodings):
        doc._.bert_encoding = encoding
    data = DocBin(docs=docs, store_user_data=True).to_bytes()
    restored = list(DocBin().from_bytes(data).get_docs(nlp.vocab))
    for encoding, doc in zip(encodings, restored):
        assert_equal_encodings(encoding, doc._.bert_encoding)


def test_msgpack_hooks_leave_other_data_alone():
    array = numpy.arange(6, dtype="f").reshape((2, 3))
    data = {"array": array, "nested": [make_encoding(2), {"x": 1}], "text": "hi"}
    restored = srsly.msgpack_loads(srsly.msgpack_dumps(data))
    assert numpy.array_equal(restored["array"], array)
    assert_equal_encodings(data["nested"][0], restored["nested"][0])
    assert restored["nested"][1] == {"x": 1}
    assert restored["text"] == "hi"
