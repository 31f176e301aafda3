"""Shared by the annotate tests (tests/annotate, tests/cli): a tiny saved
pipeline, inputs in every format, and readers of what `annotate` wrote."""

import csv
import importlib.util
import io
import json
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spacy
from helpers import tiny_pipeline

from spacy_bert_pipes.annotate import AnnotateOptions, annotate

TEXTS = ["john smith is in paris", "my card not working", "", "hello world", "apple in london"]
IDS = ["a", "b", "c", "d", "e"]

# Ray is an optional extra: its tests skip without it.
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="Ray is an optional extra: pip install 'spacy-bert-pipes[ray]'",
)


def save_tiny_pipeline(path: Path, tiny_bert: Path, qa: bool = True) -> Path:
    """bert_textcat and bert_ner (and bert_qa), each on its own tiny encoder,
    initialized (not trained) and saved."""
    nlp = tiny_pipeline(tiny_bert, qa=qa)
    nlp.to_disk(path)
    return path


def word_rows(n_rows: int, step: int, shortest: int, spread: int) -> List[Dict[str, Any]]:
    """`n_rows` records {"id": "r<i>", "text": ...} of words from the tiny
    vocabulary, row i starting at word i * step, shortest + i % spread words long."""
    words = "john smith paris card apple london working bank the is in my".split()
    return [
        {
            "id": f"r{i}",
            "text": " ".join(
                words[(i * step + j) % len(words)] for j in range(shortest + i % spread)
            ),
        }
        for i in range(n_rows)
    ]


def write_input(folder: Path, fmt: str, records: List[Dict[str, Any]]) -> Path:
    """The records as a CSV, JSONL or Parquet file, or a folder of .txt files
    (named by id)."""
    if fmt == "txt":
        path = folder / "docs"
        for record in records:
            (path / record["id"]).parent.mkdir(parents=True, exist_ok=True)
            (path / record["id"]).write_text(record["text"], encoding="utf8")
        return path
    path = folder / f"input.{fmt}"
    if fmt == "jsonl":
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
        path.write_text("".join(lines), encoding="utf8")
    elif fmt == "csv":
        with path.open("w", encoding="utf8", newline="") as file_:
            writer = csv.DictWriter(file_, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    else:
        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=2)
    return path


def read_output(path: Path) -> List[Dict[str, Any]]:
    """The output rows as written, their columns in order, with the JSON strings
    of CSV and Parquet annotations (and of CSV's "empty_text") decoded; the id
    and the kept columns as they are (a Parquet "vector" column, of `annotate
    --vectors`, is a list already)."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()]
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf8"))))
    else:
        rows = pq.read_table(path).to_pylist()
    return [
        {
            k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v
            for k, v in row.items()
        }
        for row in rows
    ]


JSON_COLUMNS = ("cats", "entities", "answers", "route", "empty_text")


def read_errors(output: Path) -> List[Dict[str, Any]]:
    errors = output.with_name(output.name + ".errors.jsonl").read_text(encoding="utf8")
    return [json.loads(line) for line in errors.splitlines()]


def run(pipeline: str, input_path: Path, output: Path, **options: Any) -> Any:
    summary = annotate(pipeline, input_path, output, AnnotateOptions(**options))
    assert summary.input_rows == summary.output_rows + summary.error_rows
    assert len(read_output(output)) == summary.output_rows
    assert len(read_errors(output)) == summary.error_rows
    assert not output.with_name(output.name + ".parts").exists()
    return summary


VECTOR_WIDTH = 12


def save_vectors_pipeline(path: Path, tiny_bert: Path, width: int = VECTOR_WIDTH) -> Path:
    """The tiny pipeline (no bert_qa) with static word vectors for every word of
    TEXTS and conftest.WORDS: `doc.vector` is the mean of its words' vectors
    (`annotate --vectors` without a vectors component), deterministic from the
    text; docs of unknown words only have none."""
    import numpy
    from helpers import WORDS

    save_tiny_pipeline(path, tiny_bert, qa=False)
    nlp = spacy.load(path)
    rng = numpy.random.default_rng(0)
    for word in sorted(set(WORDS) | {w for text in TEXTS for w in text.split()}):
        nlp.vocab.set_vector(word, rng.standard_normal(width).astype("float32"))
    nlp.to_disk(path)
    return path


def kill_on_chunk(marker: Path, chunk: int, times: int, index: int) -> None:
    """A worker's `on_worker_chunk` hook: the process kills itself with SIGKILL
    (as the out-of-memory killer would) when it starts chunk `chunk`, the
    first `times` times (each kill is a line in `marker`)."""
    import os
    import signal

    if index != chunk:
        return
    kills = marker.read_text().count("\n") if marker.exists() else 0
    if kills < times:
        with marker.open("a") as file_:
            file_.write(f"{os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)
