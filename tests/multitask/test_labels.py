"""spacy-bert-pipes.corpus_labels.v1: the labels of one corpus."""

from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin, Span
from spacy.util import registry

READ = registry.readers.get("spacy-bert-pipes.corpus_labels.v1")


def test_reads_cats_and_entity_labels(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    a, b = nlp("my card"), nlp("john in paris")
    a.cats = {"card": 1.0, "fx": 0.0}
    b.ents = [Span(b, 0, 1, "PER"), Span(b, 2, 3, "LOC")]
    (tmp_path / "part").mkdir()
    DocBin(docs=[a]).to_disk(tmp_path / "part" / "a.spacy")
    DocBin(docs=[b]).to_disk(tmp_path / "b.spacy")
    assert READ(tmp_path / "part" / "a.spacy") == ["card", "fx"]
    assert READ(tmp_path, attr="ents") == ["LOC", "PER"]  # a folder: all its files
    with pytest.raises(ValueError, match="has no cats"):
        READ(tmp_path / "b.spacy")


def test_a_missing_corpus_is_none_unless_required(tmp_path: Path) -> None:
    assert READ(tmp_path / "nowhere.spacy") is None
    with pytest.raises(ValueError, match="no .spacy corpus at"):
        READ(tmp_path / "nowhere.spacy", require=True)
