from pathlib import Path

import pytest
import spacy
import srsly.msgpack
from spacy.tokens import DocBin
from spacy.util import registry

from spacy_bert_pipes.io.docbins import (
    READER,
    codecs_looked_up_once,
    create_corpus_reader,
    read_docs,
    write_docs,
)


def sample_docs(n: int) -> list:
    nlp = spacy.blank("en")
    docs = []
    for i in range(n):
        doc = nlp.make_doc(f"request number {i}")
        doc.user_data["answers"] = {"slot": [i, i + 1], "text": f"number {i}"}
        docs.append(doc)
    return docs


def write_sample(path: Path, n: int) -> Path:
    DocBin(docs=sample_docs(n), store_user_data=True).to_disk(path)
    return path


def read_user_data(path: Path) -> list:
    vocab = spacy.blank("en").vocab
    return [dict(doc.user_data) for doc in DocBin().from_disk(path).get_docs(vocab)]


def count_lookups(monkeypatch: pytest.MonkeyPatch, registry: object) -> list:
    """Each lookup of one of srsly's registries, counted."""
    registry_class = type(registry)
    original = registry_class.get_all
    calls: list = []

    def counted(self: object) -> dict:
        if self is registry:  # spaCy's own registries are looked up too
            calls.append(1)
        return original(self)  # type: ignore[arg-type]

    monkeypatch.setattr(registry_class, "get_all", counted)
    return calls


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each lookup of srsly's decoders, counted."""
    return count_lookups(monkeypatch, srsly.msgpack.msgpack_decoders)


@pytest.fixture
def encoder_lookups(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each lookup of srsly's encoders, counted."""
    return count_lookups(monkeypatch, srsly.msgpack.msgpack_encoders)


def test_the_same_user_data_with_one_lookup(tmp_path: Path, lookups: list) -> None:
    path = write_sample(tmp_path / "docs.spacy", 40)
    plain = read_user_data(path)
    assert len(lookups) >= 40  # srsly alone: one lookup a doc
    lookups.clear()
    with codecs_looked_up_once():
        fast = read_user_data(path)
    assert len(lookups) == 1
    assert fast == plain and plain[3]["answers"] == {"slot": (3, 4), "text": "number 3"}


def test_nested_blocks_restore_the_lookup_at_the_outer_end(tmp_path: Path, lookups: list) -> None:
    path = write_sample(tmp_path / "docs.spacy", 5)
    registry = srsly.msgpack.msgpack_decoders
    with codecs_looked_up_once():
        with codecs_looked_up_once():
            read_user_data(path)
        assert "get_all" in vars(registry)  # still the outer block's
        read_user_data(path)
    assert "get_all" not in vars(registry)
    assert len(lookups) == 1
    read_user_data(path)
    assert len(lookups) == 1 + 1 + 5  # the file's own unpacking, then one a doc


def test_the_lookup_comes_back_after_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        with codecs_looked_up_once():
            raise ValueError("a bad doc")
    assert "get_all" not in vars(srsly.msgpack.msgpack_decoders)
    assert "get_all" not in vars(srsly.msgpack.msgpack_encoders)


def test_write_docs_gives_docbins_bytes_with_one_lookup(
    tmp_path: Path, encoder_lookups: list
) -> None:
    plain = write_sample(tmp_path / "plain.spacy", 40)
    assert len(encoder_lookups) >= 40  # srsly alone: one lookup a doc
    encoder_lookups.clear()
    ours = tmp_path / "new" / "ours.spacy"  # its folder is made
    assert write_docs(sample_docs(40), ours, store_user_data=True) == 40
    assert len(encoder_lookups) == 2  # the docs' user data, then the file's own packing
    assert ours.read_bytes() == plain.read_bytes()
    assert "get_all" not in vars(srsly.msgpack.msgpack_encoders)


def test_read_docs_gives_every_doc_with_its_user_data_and_one_lookup(
    tmp_path: Path, lookups: list
) -> None:
    path = write_sample(tmp_path / "docs.spacy", 40)
    lookups.clear()
    docs = read_docs(path, spacy.blank("en").vocab)
    assert len(lookups) == 1 + 1  # the file's own unpacking, then one for the docs
    assert [doc.text for doc in docs] == [f"request number {i}" for i in range(40)]
    assert [dict(doc.user_data) for doc in docs] == read_user_data(path)


def test_the_reader_gives_spacys_examples_with_one_lookup_a_thousand_docs(
    tmp_path: Path, lookups: list
) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_sample(folder / "a.spacy", 1500)
    write_sample(folder / "b.spacy", 30)
    nlp = spacy.blank("en")

    def examples(reader: str, **settings: int) -> list:
        config = {"@readers": reader, "path": str(folder), "gold_preproc": False, **settings}
        corpus = registry.resolve({"c": config})
        return [
            (eg.reference.text, dict(eg.reference.user_data), eg.predicted.text)
            for eg in corpus["c"](nlp)
        ]

    lookups.clear()
    ours = examples(READER)
    assert len(lookups) == 3  # 1,530 docs: two blocks of at most a thousand, one empty
    spacys = examples("spacy.Corpus.v1")
    assert len(lookups) > 1500
    assert ours == spacys and len(ours) == 1530
    assert ours[1500][1]["answers"] == {"slot": (0, 1), "text": "number 0"}  # b.spacy
    # limit counts over the files, as spaCy's
    assert examples(READER, limit=1510) == examples("spacy.Corpus.v1", limit=1510)
    assert len(examples(READER, limit=1510)) == 1510


def test_the_reader_names_a_missing_path() -> None:
    with pytest.raises(ValueError, match=r"spacy-bert-pipes.Corpus.v1: path is null"):
        create_corpus_reader(None)
