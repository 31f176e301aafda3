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


TICKETS = [
    {"ticket_id": "t1", "text": "lost card", "customer": "ann", "tier": 1},
    {"ticket_id": "t2", "text": "refund", "customer": None, "tier": 2},
]


def test_kept_columns_in_every_format(tmp_path: Path) -> None:
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in TICKETS), encoding="utf8")
    table = tmp_path / "in.csv"
    table.write_text("ticket_id,text,customer,tier\nt1,lost card,ann,1\nt2,refund,,2\n")
    parquet = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(TICKETS), parquet)
    expected = {
        ".jsonl": [{"tier": 1, "text": "lost card", "customer": "ann"}, None],
        ".csv": [{"tier": "1", "text": "lost card", "customer": "ann"}, None],
        ".parquet": [{"tier": 1, "text": "lost card", "customer": "ann"}, None],
    }
    for path in (jsonl, table, parquet):
        rows = list(
            read_input(path, id_column="ticket_id", keep_columns=["tier", "text", "customer"])
        )
        assert [r.id for r in rows] == ["t1", "t2"]
        assert rows[0].kept == expected[path.suffix][0]
        assert list(rows[0].kept) == ["tier", "text", "customer"]  # the order asked
        assert rows[1].kept["customer"] == ("" if path.suffix == ".csv" else None)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_missing_kept_column_names_the_file_and_column(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"in.{fmt}"
    if fmt == "csv":
        path.write_text("ticket_id,text\nt1,x\n")
    elif fmt == "jsonl":
        path.write_text('\n{"ticket_id": "t1", "text": "x"}\n')
    else:
        pq.write_table(pa.Table.from_pylist([{"ticket_id": "t1", "text": "x"}]), path)
    where = r"in\.jsonl:2" if fmt == "jsonl" else r"in\." + fmt
    with pytest.raises(
        ConversionError,
        match=rf"{where}: no column 'customer' to keep \(--keep-columns\); .*'ticket_id', 'text'",
    ):
        read_input(path, keep_columns=["text", "customer"])


def test_a_later_jsonl_row_without_a_kept_field_is_an_error_row(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "text": "x", "c": 1}\n{"id": "b", "text": "y"}\n')
    rows = list(read_input(path, keep_columns=["c"]))
    assert rows[0].kept == {"c": 1} and rows[0].error is None
    assert (rows[1].id, rows[1].error) == (
        "b",
        "no field 'c' to keep (--keep-columns); the fields are: 'id', 'text'",
    )


def test_kept_parquet_values_become_json_values(tmp_path: Path) -> None:
    import datetime
    import decimal

    path = tmp_path / "in.parquet"
    table = pa.table(
        {
            "text": pa.array([b"caf\xc3\xa9", b"bad \xff"], pa.binary()),
            "when": pa.array([datetime.date(2024, 5, 1), None], pa.date32()),
            "amount": pa.array([decimal.Decimal("12.50"), None], pa.decimal128(5, 2)),
            "tags": pa.array([["a", "b"], []], pa.list_(pa.string())),
            "raw": pa.array([b"ok", b"\xfe"], pa.binary()),
        }
    )
    pq.write_table(table, path)
    rows = list(read_input(path, keep_columns=["text", "when", "amount", "tags", "raw"]))
    assert rows[0].kept == {
        "text": "café",
        "when": "2024-05-01",
        "amount": "12.50",
        "tags": ["a", "b"],
        "raw": "ok",
    }
    # invalid UTF-8 in the text is reported for the text, as without kept columns
    assert rows[1].error == "invalid UTF-8 in the text at byte 4: b'\\xff'"


def test_a_bad_kept_value_makes_an_error_row(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "x", "note": "lone \\ud800"}\n')
    (row,) = read_input(path, keep_columns=["note"])
    assert (
        row.error == "column 'note' is not valid Unicode: a lone surrogate '\\ud800' at character 5"
    )


def test_a_folder_of_txt_files_keeps_only_its_text(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("ay", encoding="utf8")
    (row,) = read_input(tmp_path / "docs", keep_columns=["text"])
    assert row.kept == {"text": "ay"}
    with pytest.raises(ConversionError, match="no column 'customer' to keep.*has only its text"):
        read_input(tmp_path / "docs", keep_columns=["customer"])
