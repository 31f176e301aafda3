"""The annotate output format (spacy_bert_pipes.io.output): rows, their
writers, and the readers that read any OUTPUT back
(spacy_bert_pipes.io.output_readers)."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy

from spacy_bert_pipes.io.errors import ConversionError
from spacy_bert_pipes.io.output import (
    OUTPUT_COLUMNS,
    OutputColumns,
    concatenate,
    doc_to_row,
    error_row,
    link_shards,
    write_records,
    write_rows,
)
from spacy_bert_pipes.io.output_readers import (
    output_id_column,
    read_error_records,
    read_output_rows,
)
from spacy_bert_pipes.io.rows import InputRow

ROWS: List[Dict[str, Any]] = [
    {
        "id": "a",
        "cats": {"x": 0.25, "y": 0.75},
        "entities": [],
        "answers": [],
        "route": {"label": None, "top": "y", "confidence": 0.02, "decision": "out_of_scope"},
        "empty_text": False,
    },
    {
        "id": 'b, "quoted"\nline',
        "cats": None,
        "entities": [{"text": "Zoë", "label": "PER", "start": 0, "end": 3, "score": 0.5}],
        "answers": [{"key": "k", "text": "", "score": 0.1}],
        "route": None,
        "empty_text": False,
    },
    {
        "id": "c",
        "cats": {"x": 1.0},
        "entities": [],
        "answers": [],
        "route": None,
        "empty_text": True,
    },
]


def test_doc_to_row_without_classifier_or_scores() -> None:
    nlp = spacy.blank("en")
    doc = nlp("Angela Merkel")
    doc.ents = [doc.char_span(0, 13, label="PER")]
    row = doc_to_row(doc, "x")
    assert row["cats"] is None and row["answers"] == [] and row["empty_text"] is False
    assert row["entities"] == [
        {"text": "Angela Merkel", "label": "PER", "start": 0, "end": 13, "score": None}
    ]
    assert tuple(row) == OUTPUT_COLUMNS


@pytest.mark.parametrize("text", ["", " \n\t", "\u3000"])
def test_doc_to_row_flags_an_empty_or_whitespace_text(text: str) -> None:
    assert doc_to_row(spacy.blank("en")(text), "x")["empty_text"] is True


def write_parts(
    folder: Path, fmt: str, columns: OutputColumns = OutputColumns(), rows: List[Any] = ROWS
) -> List[Path]:
    """The rows in three parts, the middle one empty."""
    parts = [folder / f"part-{i}.{fmt}" for i in range(3)]
    for part, part_rows in zip(parts, [rows[:2], [], rows[2:]]):
        write_rows(part, part_rows, fmt, columns)
    return parts


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_parts_joined_read_back_as_written(tmp_path: Path, fmt: str) -> None:
    output = tmp_path / f"out.{fmt}"
    concatenate(write_parts(tmp_path, fmt), output, fmt, OutputColumns())
    found = list(read_output_rows(output))
    assert [row for _, row in found] == ROWS
    where = "row 2" if fmt == "parquet" else ("3" if fmt == "jsonl" else "5")
    assert found[2][0] == f"{output}:{where}"  # CSV: the header, then "b" takes two lines


def test_shards_read_back_in_path_order(tmp_path: Path) -> None:
    shards = tmp_path / "out"
    link_shards(shards, write_parts(tmp_path, "parquet"))
    assert sorted(p.name for p in shards.iterdir()) == [f"part-{i}.parquet" for i in range(3)]
    assert [row for _, row in read_output_rows(shards)] == ROWS


def test_the_readers_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "cats": null, "entities": [], "answers": []}\n{"id": "b"}\n')
    with pytest.raises(ConversionError, match=r"bad\.jsonl:2: a row without \"cats\""):
        list(read_output_rows(bad))
    table = tmp_path / "bad.csv"
    table.write_text('id,cats,entities,answers\na,null,[],"[not json"\n')
    with pytest.raises(ConversionError, match=r"bad\.csv:2: answers is not JSON text"):
        list(read_output_rows(table))
    with pytest.raises(ConversionError, match="not an output of bert-pipes annotate"):
        read_output_rows(tmp_path / "out.txt")


def test_error_records_round_trip(tmp_path: Path) -> None:
    rows = [InputRow(3, "x", None, {}, "in.csv:5", "text is null")]
    path = tmp_path / "out.jsonl.errors.jsonl"
    write_records(path, [error_row(row) for row in rows])
    ((where, record),) = read_error_records(path)
    assert where == f"{path}:1"
    assert record == {"id": "x", "row": 3, "source": "in.csv:5", "reason": "text is null"}
    path.write_text(json.dumps({"id": "x"}) + "\n")
    with pytest.raises(ConversionError, match=":1: not an error record"):
        list(read_error_records(path))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_outputs_written_before_the_route_column_read_back(tmp_path: Path, fmt: str) -> None:
    old = tmp_path / f"old.{fmt}"
    if fmt == "jsonl":
        old.write_text('{"id": "a", "cats": null, "entities": [], "answers": []}\n')
    else:
        old.write_text("id,cats,entities,answers\na,null,[],[]\n")
    rows = [row for _, row in read_output_rows(old)]
    assert rows == [
        {
            "id": "a",
            "cats": None,
            "entities": [],
            "answers": [],
            "route": None,
            "empty_text": None,
        }
    ]


# A textcat-only output of an input whose id column is "ticket_id", keeping two columns.
TICKETS = OutputColumns(id="ticket_id", kept=("text", "customer"), annotations=("cats", "route"))
TICKET_ROWS: List[Dict[str, Any]] = [
    {**ROWS[0], "id": "t1", "text": "lost card", "customer": 'Zoë, "VIP"'},
    {**ROWS[1], "id": "t2", "text": " ", "customer": None, "empty_text": True},
    {**ROWS[2], "id": "t3", "text": "refund", "customer": 42},
]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_the_columns_of_an_output(tmp_path: Path, fmt: str) -> None:
    """The id under its input name, the kept columns, only the annotations the
    pipeline fills, "empty_text"; read back in the shape of `doc_to_row`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    output = tmp_path / f"out.{fmt}"
    concatenate(write_parts(tmp_path, fmt, TICKETS, TICKET_ROWS), output, fmt, TICKETS)
    names = ["ticket_id", "text", "customer", "cats", "route", "empty_text"]
    assert TICKETS.names() == names
    if fmt == "jsonl":
        first = json.loads(output.read_text(encoding="utf8").splitlines()[0])
        assert list(first) == names and first["customer"] == 'Zoë, "VIP"'
        assert json.loads(output.read_text(encoding="utf8").splitlines()[2])["customer"] == 42
    elif fmt == "csv":
        lines = output.read_text(encoding="utf8").splitlines()
        assert lines[0] == ",".join(names)
        assert lines[2].startswith("t2, ,,null,null,true")  # a null kept value is empty
        assert lines[3].startswith("t3,refund,42,")
    else:
        schema = pq.read_schema(output)
        assert schema.names == names
        assert schema.field("empty_text").type == pa.bool_()
        assert pq.read_table(output).column("customer").to_pylist() == ['Zoë, "VIP"', None, "42"]
    assert output_id_column(output) == "ticket_id"
    rows = [row for _, row in read_output_rows(output)]
    assert [row["id"] for row in rows] == ["t1", "t2", "t3"]
    # the omitted columns read back as a pipeline without them gives them
    assert [(row["entities"], row["answers"]) for row in rows] == [([], [])] * 3
    assert [row["empty_text"] for row in rows] == [False, True, True]
    assert [row["route"] for row in rows] == [ROWS[0]["route"], None, None]
    assert list(rows[0])[:6] == list(OUTPUT_COLUMNS)
    # kept values: as written in JSONL; strings (null: "" in CSV) in CSV and Parquet
    expected = {"jsonl": [None, 42], "csv": ["", "42"], "parquet": [None, "42"]}[fmt]
    assert [row["customer"] for row in rows] == ['Zoë, "VIP"', *expected]
    assert [row["text"] for row in rows] == ["lost card", " ", "refund"]


def test_a_row_without_a_column_of_the_first_row_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ticket_id": "a", "cats": null, "empty_text": false}\n{"ticket_id": "b"}\n')
    with pytest.raises(ConversionError, match=r'bad\.jsonl:2: a row without "cats", "empty_text"'):
        list(read_output_rows(bad))
    table = tmp_path / "table.csv"
    table.write_text("ticket_id,text\na,b\n")
    message = r"table\.csv:1: no column 'cats', .* or 'empty_text': not an output"
    with pytest.raises(ConversionError, match=message):
        list(read_output_rows(table))
    with pytest.raises(ConversionError, match=message):
        output_id_column(table)
    first = tmp_path / "first.jsonl"
    first.write_text('{"ticket_id": "a", "text": "no annotations"}\n')
    with pytest.raises(
        ConversionError, match=r'first\.jsonl:1: a row without "cats", .*"empty_text"'
    ):
        list(read_output_rows(first))
