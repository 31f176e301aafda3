from pathlib import Path

import pytest
import spacy
import srsly.msgpack
from spacy.tokens import DocBin

from spacy_bert_pipes.io.docbins import decoders_looked_up_once


def write_docs(path: Path, n: int) -> Path:
    nlp = spacy.blank("en")
    docs = []
    for i in range(n):
        doc = nlp.make_doc(f"request number {i}")
        doc.user_data["answers"] = {"slot": [i, i + 1], "text": f"number {i}"}
        docs.append(doc)
    DocBin(docs=docs, store_user_data=True).to_disk(path)
    return path


def read_user_data(path: Path) -> list:
    vocab = spacy.blank("en").vocab
    return [dict(doc.user_data) for doc in DocBin().from_disk(path).get_docs(vocab)]


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each lookup of srsly's decoders, counted."""
    decoders = srsly.msgpack.msgpack_decoders
    registry_class = type(decoders)
    original = registry_class.get_all
    calls: list = []

    def counted(self: object) -> dict:
        if self is decoders:  # spaCy's own registries are looked up too
            calls.append(1)
        return original(self)  # type: ignore[arg-type]

    monkeypatch.setattr(registry_class, "get_all", counted)
    return calls


def test_the_same_user_data_with_one_lookup(tmp_path: Path, lookups: list) -> None:
    path = write_docs(tmp_path / "docs.spacy", 40)
    plain = read_user_data(path)
    assert len(lookups) >= 40  # srsly alone: one lookup a doc
    lookups.clear()
    with decoders_looked_up_once():
        fast = read_user_data(path)
    assert len(lookups) == 1
    assert fast == plain and plain[3]["answers"] == {"slot": (3, 4), "text": "number 3"}


def test_nested_blocks_restore_the_lookup_at_the_outer_end(tmp_path: Path, lookups: list) -> None:
    path = write_docs(tmp_path / "docs.spacy", 5)
    registry = srsly.msgpack.msgpack_decoders
    with decoders_looked_up_once():
        with decoders_looked_up_once():
            read_user_data(path)
        assert "get_all" in vars(registry)  # still the outer block's
        read_user_data(path)
    assert "get_all" not in vars(registry)
    assert len(lookups) == 1
    read_user_data(path)
    assert len(lookups) == 1 + 1 + 5  # the file's own unpacking, then one a doc


def test_the_lookup_comes_back_after_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        with decoders_looked_up_once():
            raise ValueError("a bad doc")
    assert "get_all" not in vars(srsly.msgpack.msgpack_decoders)
