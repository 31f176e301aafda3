"""`bert-pipes annotate --vectors`: the options, the refusals, and resuming
after SIGKILL at random points with the same bytes."""

import json
import random
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from annotate_helpers import TEXTS, VECTOR_WIDTH, save_vectors_pipeline
from test_cli_annotate import kill_when, start
from typer.testing import CliRunner

from spacy_bert_pipes.annotate import AnnotateOptions, annotate
from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_vectors_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


def write_jsonl(path: Path, records: List[Dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    return path


def test_help_names_the_vectors_options() -> None:
    result = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--vectors " in result.output and "--vectors-dtype" in result.output


def test_vectors_to_csv_and_without_doc_vectors_exit_1(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    output = tmp_path / "out.csv"
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(output), "--vectors"])
    assert result.exit_code == 1
    assert "--vectors needs a .jsonl or .parquet OUTPUT" in result.output
    blank = tmp_path / "blank"
    import spacy

    spacy.blank("en").to_disk(blank)
    output = tmp_path / "out.parquet"
    result = runner.invoke(app, ["annotate", str(blank), str(input_path), str(output), "--vectors"])
    assert result.exit_code == 1
    assert "the pipeline gives no doc vectors" in result.output
    assert "bert_vectors" in result.output
    assert not output.exists() and not Path(f"{output}.parts").exists()


def test_the_cli_writes_float16_parquet(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    output = tmp_path / "out.parquet"
    args = ["annotate", pipeline, str(input_path), str(output), "--vectors"]
    result = runner.invoke(app, args + ["--vectors-dtype", "float16"])
    assert result.exit_code == 0, result.output
    assert "Input rows: 5 = output rows 5" in result.output
    table = pq.read_table(output)
    assert table.schema.field("vector").type == pa.list_(pa.float16(), VECTOR_WIDTH)
    assert numpy.stack(table.column("vector").to_pandas()).shape == (5, VECTOR_WIDTH)


def test_killed_at_random_points_a_rerun_gives_the_same_bytes(
    pipeline: str, tmp_path: Path
) -> None:
    """SIGKILL `annotate --vectors` (Parquet) after a random committed chunk,
    after a later one, and while writing OUTPUT, each a random moment after
    the step; each time the same command resumes (another --vectors-dtype is
    refused). The final output equals (bytes) that of an uninterrupted run."""
    rng = random.Random(17)
    records = [{"id": f"doc{i}", "text": TEXTS[i % len(TEXTS)]} for i in range(16)]
    records[5]["text"] = "xyzzy plugh"  # unknown words: no vector, an error row
    input_path = write_jsonl(tmp_path / "in.jsonl", records)
    # 8 chunks, in this process (workers are killed and resumed in test_cli_annotate.py)
    options = ["--chunk-size", "2", "--batch-size", "2", "--vectors", "--workers", "1"]
    expected = tmp_path / "expected" / "out.parquet"
    annotate(pipeline, input_path, expected, AnnotateOptions(chunk_size=2, vectors=True))

    output = tmp_path / "out.parquet"
    parts = tmp_path / "out.parquet.parts"
    args = [pipeline, str(input_path), str(output), *options]
    log = tmp_path / "log.txt"
    first = rng.randrange(0, 4)
    second = rng.randrange(first + 1, 7)

    def after(ready: Any, delay: float) -> Any:
        """ready(), then `delay` seconds later."""
        since: List[float] = []

        def check() -> bool:
            if not since and ready():
                since.append(time.monotonic())
            return bool(since) and time.monotonic() - since[0] >= delay

        return check

    for index in (first, second):
        part = parts / f"part-{index:06d}.parquet"
        kill_when(start(args, log, sleep=0.3), after(part.exists, rng.uniform(0, 0.5)), log)
        assert not output.exists()
    assert "Resuming the unfinished run" in log.read_text()
    result = runner.invoke(app, ["annotate", *args, "--vectors-dtype", "float16"])
    assert result.exit_code == 1
    assert 'options.vectors: was "float32", now "float16"' in result.output
    tmp_output = tmp_path / "out.parquet.tmp"
    kill_when(start(args, log, sleep=0.3), after(tmp_output.exists, rng.uniform(0, 0.15)), log)
    assert parts.exists() and not output.exists()

    finished = start(args, log)
    assert finished.wait(timeout=180) == 0, log.read_text()
    assert output.read_bytes() == expected.read_bytes()
    errors = tmp_path / "out.parquet.errors.jsonl"
    assert errors.read_bytes() == (tmp_path / "expected" / "out.parquet.errors.jsonl").read_bytes()
    assert [json.loads(line)["id"] for line in errors.read_text().splitlines()] == ["doc5"]
    table = pq.read_table(output)
    assert table.schema.field("vector").type == pa.list_(pa.float32(), VECTOR_WIDTH)
    assert table.num_rows == 15
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "expected",
        "in.jsonl",
        "log.txt",
        "out.parquet",
        "out.parquet.errors.jsonl",
        "out_time.json",
    ]
