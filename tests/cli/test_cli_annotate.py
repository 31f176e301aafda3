"""`bert-pipes annotate`: the command line, exit codes, and resuming after SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest
import spacy
import torch
from annotate_helpers import TEXTS, read_output, save_tiny_pipeline
from typer.testing import CliRunner

from spacy_bert_pipes.annotate import (
    AnnotateOptions,
    annotate,
    prepare_run,
    run_annotation,
)
from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    return str(save_tiny_pipeline(path, tiny_bert, qa=False))


def write_jsonl(path: Path, records: List[Dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    return path


def test_help_names_every_option() -> None:
    result = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--input-format",
        "--text-column",
        "--id-column",
        "--questions",
        "--questions-column",
        "--chunk-size",
        "--batch-size",
        "--n-process",
        "--gpu-id",
        "--workers",
        "--max-length",
        "--overwrite",
        "--strict",
    ):
        assert option in result.output
    assert "0-based row number" in result.output


def test_error_rows_warn_and_strict_fails(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(
        tmp_path / "in.jsonl", [{"text": "hello"}, {"text": None}, {"text": "world"}]
    )
    output = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(output)])
    assert result.exit_code == 0, result.output
    assert f"Input rows: 3 = output rows 2 ({output}) + error rows 1" in result.output
    assert "Warning: 1 rows could not be annotated" in result.output
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(output), "--strict"])
    assert result.exit_code == 1
    assert [row["id"] for row in read_output(output)] == ["0", "2"]


def test_the_report_shows_the_wall_time_and_docs_per_second(pipeline: str, tmp_path: Path) -> None:
    """annotate times itself in `<OUTPUT stem>_time.json`, which `bert-pipes
    report` reads beside OUTPUT."""
    records = [{"text": TEXTS[i % len(TEXTS)]} for i in range(7)] + [{"text": None}]
    input_path = write_jsonl(tmp_path / "in.jsonl", records)
    output = tmp_path / "out.jsonl"
    args = ["annotate", pipeline, str(input_path), str(output), "--chunk-size", "3"]
    result = runner.invoke(app, args + ["--workers", "1"])
    assert result.exit_code == 0, result.output
    timing_path = tmp_path / "out_time.json"
    assert "Wall time: " in result.output and f"({timing_path})" in result.output
    timing = json.loads(timing_path.read_text(encoding="utf8"))
    assert (
        timing["command"] == f"bert-pipes annotate {Path(pipeline).resolve()} {input_path} {output}"
    )
    assert (timing["docs"], timing["error_rows"], timing["chunks"]) == (7, 1, 3)
    assert timing["resumed_chunks"] == 0 and timing["seconds"] > 0
    reports = tmp_path / "reports"
    result = runner.invoke(app, ["report", "-a", str(output), "-o", str(reports), "--no-plots"])
    assert result.exit_code == 0, result.output
    markdown = (reports / "report.md").read_text(encoding="utf8")
    seconds = timing["seconds"]
    minutes, secs = divmod(int(round(seconds)), 60)
    assert f"| Wall time (h:mm:ss) | 0:{minutes:02d}:{secs:02d} |" in markdown
    assert f"| Docs/s (rows annotated / wall time) | {7 / seconds:.1f} |" in markdown
    assert "timed by `out_time.json`" in markdown and "No wall time" not in markdown


def test_missing_text_column_exits_1(pipeline: str, tmp_path: Path) -> None:
    input_path = tmp_path / "in.csv"
    input_path.write_text("id,body\n1,hello\n")
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1
    assert "no column 'text'; the columns are: 'id', 'body'" in result.output
    assert not (tmp_path / "o.jsonl.parts").exists()


def test_bad_output_type_and_pipeline_exit_1(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(tmp_path / "o.txt")])
    assert result.exit_code == 1 and "unknown output type '.txt'" in result.output
    missing = str(tmp_path / "no_such_pipeline")
    result = runner.invoke(app, ["annotate", missing, str(input_path), str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1 and "no_such_pipeline" in result.output
    assert not (tmp_path / "o.jsonl.parts").exists()  # a corrected rerun is not refused


class Interrupted(Exception):
    pass


def interrupt(rows_read: int) -> None:
    raise Interrupted


def test_other_settings_refuse_unless_overwrite(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    output = tmp_path / "out.jsonl"
    with pytest.raises(Interrupted):  # an unfinished run
        run_annotation(
            prepare_run(pipeline, input_path, output, AnnotateOptions(chunk_size=2)),
            spacy.load(pipeline),
            on_chunk=interrupt,
        )
    args = ["annotate", pipeline, str(input_path), str(output), "--chunk-size", "3"]
    args += ["--workers", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "holds an unfinished run" in result.output
    assert "options.chunk_size: was 2, now 3" in result.output
    result = runner.invoke(app, args + ["--overwrite"])
    assert result.exit_code == 0, result.output
    assert len(read_output(output)) == len(TEXTS)


# `bert-pipes annotate` with every durable write slowed down: it sleeps before
# renaming a written file into place (so OUTPUT.tmp exists a while) and after
# (so a committed part stays the newest a while), giving a test time to kill it
# at a known step. argv: SECONDS, then the command's arguments.
SLOW_ANNOTATE = """
import sys, time
from spacy_bert_pipes.io import durable
from spacy_bert_pipes.cli import app

seconds = float(sys.argv[1])
write_file = durable.write_file

def slow_write_file(path, write):
    def write_slowly(tmp):
        write(tmp)
        time.sleep(seconds)
    write_file(path, write_slowly)
    time.sleep(seconds)

durable.write_file = slow_write_file
app(["annotate", *sys.argv[2:]], prog_name="bert-pipes")
"""


def start(args: List[str], log: Path, sleep: float = 0.0) -> "subprocess.Popen[bytes]":
    """Run `bert-pipes annotate ARGS` in a new process, each durable write
    slowed down by `sleep` seconds (see SLOW_ANNOTATE)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", SLOW_ANNOTATE, str(sleep), *args]
    with log.open("ab") as file_:
        return subprocess.Popen(command, env=env, stdout=file_, stderr=subprocess.STDOUT)


def kill_when(
    process: "subprocess.Popen[bytes]", ready: Callable[[], bool], log: Path, timeout: float = 180
) -> None:
    """SIGKILL the process as soon as `ready()` holds."""
    deadline = time.monotonic() + timeout
    try:
        while not ready():
            if process.poll() is not None:
                pytest.fail(f"finished before the kill point:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"kill point not reached in {timeout}s:\n{log.read_text()}")
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL


def test_killed_at_any_step_a_rerun_gives_the_same_bytes(pipeline: str, tmp_path: Path) -> None:
    """SIGKILL after the first committed chunk, after several, and while
    writing OUTPUT; each time the same command resumes. The final output
    equals (bytes) that of an uninterrupted run."""
    records = [{"id": f"doc{i}", "text": TEXTS[i % len(TEXTS)]} for i in range(13)]
    records[4]["text"] = None  # an error row
    records.append({"id": "doc2", "text": "a duplicate id"})  # another
    input_path = write_jsonl(tmp_path / "in.jsonl", records)
    # 5 chunks, in 2 spawned workers on any machine: the engine `--workers auto`
    # runs on a multi-core one (the lock and the vectors tests run in one process)
    options = ["--chunk-size", "3", "--batch-size", "2", "--workers", "2"]
    expected = tmp_path / "expected" / "out.jsonl"
    annotate(pipeline, input_path, expected, AnnotateOptions(chunk_size=3, batch_size=2))

    output = tmp_path / "out.jsonl"
    parts = tmp_path / "out.jsonl.parts"
    args = [pipeline, str(input_path), str(output), *options]
    log = tmp_path / "log.txt"

    kill_when(start(args, log, sleep=0.3), lambda: (parts / "part-000000.jsonl").exists(), log)
    assert not output.exists()
    kill_when(start(args, log, sleep=0.3), lambda: (parts / "part-000003.jsonl").exists(), log)
    assert "Resuming the unfinished run" in log.read_text()
    tmp_output = tmp_path / "out.jsonl.tmp"
    kill_when(start(args, log, sleep=0.3), tmp_output.exists, log)
    assert parts.exists() and not output.exists()
    assert (tmp_path / "out.jsonl.errors.jsonl").exists()  # written before OUTPUT

    finished = start(args, log)
    assert finished.wait(timeout=180) == 0, log.read_text()
    assert output.read_bytes() == expected.read_bytes()
    errors = tmp_path / "out.jsonl.errors.jsonl"
    assert errors.read_bytes() == (tmp_path / "expected" / "out.jsonl.errors.jsonl").read_bytes()
    ids = [row["id"] for row in read_output(output)]
    assert ids == [r["id"] for r in records[:13] if r["text"] is not None]
    assert [json.loads(line)["id"] for line in errors.read_text().splitlines()] == ["doc4", "doc2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "expected",
        "in.jsonl",
        "log.txt",
        "out.jsonl",
        "out.jsonl.errors.jsonl",
        "out_time.json",
    ]


def test_a_second_run_on_the_same_output_is_refused(pipeline: str, tmp_path: Path) -> None:
    """While a run writes OUTPUT, a second one is refused in one line naming
    OUTPUT and the first run's pid and host; once the first is killed with
    SIGKILL its lock is gone and the same command resumes to the same bytes."""
    records = [{"id": f"doc{i}", "text": TEXTS[i % len(TEXTS)]} for i in range(9)]
    input_path = write_jsonl(tmp_path / "in.jsonl", records)
    options = ["--chunk-size", "3", "--batch-size", "2", "--workers", "1"]
    expected = tmp_path / "expected" / "out.jsonl"
    annotate(pipeline, input_path, expected, AnnotateOptions(chunk_size=3, batch_size=2))
    output = tmp_path / "out.jsonl"
    args = [pipeline, str(input_path), str(output), *options]
    log = tmp_path / "log.txt"

    first = start(args, log, sleep=1.0)
    part = tmp_path / "out.jsonl.parts" / "part-000000.jsonl"

    def refused_while_running() -> bool:
        if not part.exists():
            return False
        result = runner.invoke(app, ["annotate", *args])
        assert result.exit_code == 1, result.output
        message = result.output.strip()
        assert "\n" not in message, message
        assert message.startswith(f"{output}: another annotate run (pid {first.pid} on host ")
        return True

    kill_when(first, refused_while_running, log)
    assert (tmp_path / "out.jsonl.lock").exists()  # left by the kill, held by no one
    result = runner.invoke(app, ["annotate", *args])
    assert result.exit_code == 0, result.output
    assert "Resuming the unfinished run" in result.output
    assert output.read_bytes() == expected.read_bytes()
    assert not (tmp_path / "out.jsonl.lock").exists()


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--n-process", "2", "--gpu-id", "0"], "CUDA does not survive a fork"),
        (["--workers", "two"], "--workers 'two': expected a number of at least 1, or auto"),
        (["--workers", "0"], "expected a number of at least 1"),
        (["--workers", "2", "--engine", "ray"], "are for the local engine"),
    ],
)
def test_processes_that_would_hang_or_clash_are_refused_at_once(
    pipeline: str, tmp_path: Path, flags: List[str], message: str
) -> None:
    """`--n-process` forks after CUDA starts, and would hang: it is refused in
    one line, on any machine, before the pipeline loads."""
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    output = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(output), *flags])
    assert result.exit_code == 1
    assert message in result.output
    assert not output.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_workers_on_a_missing_gpu_fail_in_one_line(pipeline: str, tmp_path: Path) -> None:
    input_path = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    output = tmp_path / "out.jsonl"
    flags = ["--workers", "2", "--gpu-id", "0"]
    result = runner.invoke(app, ["annotate", pipeline, str(input_path), str(output), *flags])
    assert result.exit_code == 1
    assert "a worker could not load the pipeline: a worker could not start: " in result.output
    assert "Traceback" not in result.output
    assert not output.exists()
