"""The annotate output format (spacy_bert_pipes.io.output): rows, their
writers, and the readers that read any OUTPUT back."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy

from spacy_bert_pipes.io.errors import ConversionError
from spacy_bert_pipes.io.output import (
    OUTPUT_COLUMNS,
    concatenate,
    doc_to_row,
    error_row,
    link_shards,
    read_error_records,
    read_output_rows,
    write_rows,
)
from spacy_bert_pipes.io.rows import InputRow

ROWS: List[Dict[str, Any]] = [
    {
        "id": "a",
        "cats": {"x": 0.25, "y": 0.75},
        "entities": [],
        "answers": [],
        "route": {"label": None, "top": "y", "confidence": 0.02, "decision": "out_of_scope"},
    },
    {
        "id": 'b, "quoted"\nline',
        "cats": None,
        "entities": [{"text": "Zoë", "label": "PER", "start": 0, "end": 3, "score": 0.5}],
        "answers": [{"key": "k", "text": "", "score": 0.1}],
        "route": None,
    },
    {"id": "c", "cats": {"x": 1.0}, "entities": [], "answers": [], "route": None},
]


def test_doc_to_row_without_classifier_or_scores() -> None:
    nlp = spacy.blank("en")
    doc = nlp("Angela Merkel")
    doc.ents = [doc.char_span(0, 13, label="PER")]
    row = doc_to_row(doc, "x")
    assert row["cats"] is None and row["answers"] == []
    assert row["entities"] == [
        {"text": "Angela Merkel", "label": "PER", "start": 0, "end": 13, "score": None}
    ]
    assert tuple(row) == OUTPUT_COLUMNS


def write_parts(folder: Path, fmt: str) -> List[Path]:
    """The rows in three parts, the middle one empty."""
    parts = [folder / f"part-{i}.{fmt}" for i in range(3)]
    for part, rows in zip(parts, [ROWS[:2], [], ROWS[2:]]):
        write_rows(part, rows, fmt)
    return parts


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_parts_joined_read_back_as_written(tmp_path: Path, fmt: str) -> None:
    output = tmp_path / f"out.{fmt}"
    concatenate(write_parts(tmp_path, fmt), output, fmt)
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
    write_rows(path, [error_row(row) for row in rows], "jsonl")
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
    assert rows == [{"id": "a", "cats": None, "entities": [], "answers": [], "route": None}]
