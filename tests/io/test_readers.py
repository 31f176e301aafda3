"""The input readers (spacy_bert_pipes.io.readers) on their own: every format
gives the same rows, located by line, row or file; whole-input problems raise
a `ConversionError` at once."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spacy_bert_pipes import convert
from spacy_bert_pipes.io.errors import ConversionError
from spacy_bert_pipes.io.readers import count_rows, input_format_for, read_input
from spacy_bert_pipes.io.rows import InputRow

RECORDS = [{"id": "a", "text": "one"}, {"id": "b", "text": ""}, {"id": "c", "text": "three"}]


def test_convert_still_exports_the_same_error() -> None:
    assert convert.ConversionError is ConversionError
    err = ConversionError("in.csv:3", "bad value")
    assert str(err) == "in.csv:3: bad value" and err.location == "in.csv:3"


def test_every_format_gives_the_same_rows(tmp_path: Path) -> None:
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n\n" for r in RECORDS), encoding="utf8")
    table = tmp_path / "in.csv"
    table.write_text("\ufeffid,text\na,one\nb,\nc,three\n", encoding="utf8")
    parquet = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(RECORDS), parquet, row_group_size=2)
    found = {path.suffix: list(read_input(path)) for path in (jsonl, table, parquet)}
    for rows in found.values():
        assert [(r.number, r.id, r.text, r.error) for r in rows] == [
            (i, r["id"], r["text"], None) for i, r in enumerate(RECORDS)
        ]
    assert [r.source for r in found[".jsonl"]] == ["in.jsonl:1", "in.jsonl:3", "in.jsonl:5"]
    assert [r.source for r in found[".csv"]] == ["in.csv:2", "in.csv:3", "in.csv:4"]
    assert [r.source for r in found[".parquet"]][2] == "in.parquet:row 2"
    assert count_rows(parquet, "parquet") == 3 and count_rows(jsonl, "jsonl") is None


def test_a_folder_of_txt_files(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "b.txt").write_text("bee", encoding="utf8")
    (tmp_path / "docs" / "sub" / "a.txt").write_bytes(b"\xef\xbb\xbfay")
    assert input_format_for(tmp_path / "docs") == "txt"
    assert list(read_input(tmp_path / "docs")) == [
        InputRow(0, "b.txt", "bee", {}, "docs/b.txt"),
        InputRow(1, "sub/a.txt", "ay", {}, "docs/sub/a.txt"),
    ]


def test_whole_input_problems_raise_at_once(tmp_path: Path) -> None:
    table = tmp_path / "in.csv"
    table.write_text("id,body\na,x\n", encoding="utf8")
    with pytest.raises(ConversionError, match=r"no column 'text'; the columns are: 'id', 'body'"):
        read_input(table)
    with pytest.raises(ConversionError, match="unknown input type '.tsv'"):
        read_input(tmp_path / "in.tsv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match="no .txt files"):
        read_input(tmp_path / "empty")
