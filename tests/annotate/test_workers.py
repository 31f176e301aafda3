"""The workers engine of batch annotation (spacy_bert_pipes.annotate.workers):
spawned processes, the same bytes as one process, and chunks that survive a
killed worker."""

import functools
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest
from annotate_helpers import (
    kill_on_chunk,
    read_output,
    run,
    save_tiny_pipeline,
    word_rows,
    write_input,
)

from spacy_bert_pipes.annotate import AnnotateError, AnnotateOptions, annotate, prepare_run
from spacy_bert_pipes.annotate.workers import lost_rows, run_annotation_workers
from spacy_bert_pipes.io.rows import InputRow
from spacy_bert_pipes.runtime import WorkerLost, WorkerPool

N_ROWS = 60
CHUNK = 10
# The id column keeps its name and two input columns are carried: the same bytes too.
COLUMNS = {"chunk_size": CHUNK, "id_column": "ticket_id", "keep_columns": ("text", "customer")}


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


@pytest.fixture(scope="module")
def input_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    records = [
        {"ticket_id": r["id"], "text": r["text"], "customer": f"c{i % 7}" if i % 5 else None}
        for i, r in enumerate(word_rows(N_ROWS, step=7, shortest=3, spread=17))
    ]
    records[13]["text"] = ""
    records.append({"ticket_id": "r5", "text": "a duplicate id", "customer": "x"})  # an error row
    return write_input(tmp_path_factory.mktemp("input"), "jsonl", records)


@pytest.fixture(scope="module")
def one_worker(pipeline: str, input_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("one") / "out.jsonl"
    run(pipeline, input_path, output, batch_size=4, workers=1, **COLUMNS)
    return output


def test_two_workers_finish_a_stopped_run_with_the_bytes_of_one_despite_a_kill(
    pipeline: str, input_path: Path, one_worker: Path, tmp_path: Path
) -> None:
    """One process stops after 2 chunks; two workers finish the run, one of
    them killed (SIGKILL, as the out-of-memory killer does) when it starts
    chunk 3, which a fresh worker redoes: no row is lost or repeated, and the
    bytes are those of one process."""
    output = tmp_path / "out.jsonl"

    def stop(read: int) -> None:
        if read >= 2 * CHUNK:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        annotate(
            pipeline,
            input_path,
            output,
            AnnotateOptions(batch_size=4, **COLUMNS),  # type: ignore[arg-type]
            on_chunk=stop,
        )
    marker = tmp_path / "kills"
    options = AnnotateOptions(batch_size=4, workers=2, **COLUMNS)  # type: ignore[arg-type]
    summary = run_annotation_workers(
        prepare_run(pipeline, input_path, output, options),
        pipeline,
        on_worker_chunk=functools.partial(kill_on_chunk, marker, 3, 1),
    )
    assert len(marker.read_text().splitlines()) == 1
    assert (summary.input_rows, summary.error_rows, summary.resumed_chunks) == (N_ROWS + 1, 1, 2)
    assert output.read_bytes() == one_worker.read_bytes()
    rows = read_output(output)
    assert list(rows[0])[:3] == ["ticket_id", "text", "customer"]
    assert rows[13]["empty_text"] is True and rows[0]["customer"] is None
    errors = output.with_name(output.name + ".errors.jsonl").read_bytes()
    assert errors == one_worker.with_name(one_worker.name + ".errors.jsonl").read_bytes()
    assert not output.with_name(output.name + ".parts").exists()


def test_one_chunk_left_is_annotated_here_without_a_worker(
    pipeline: str,
    input_path: Path,
    one_worker: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the CPU, a run with one chunk left is annotated by the process that
    loaded the pipeline to check it: no worker starts, and the bytes are those
    of one process. With two chunks left, a worker is started."""

    class Started(Exception):
        pass

    def start(pool: WorkerPool) -> None:  # a worker would start: stop there
        raise Started

    monkeypatch.setattr(WorkerPool, "_start", start)
    output = tmp_path / "out.jsonl"

    def stop_at(rows: int) -> Callable[[int], None]:
        def stop(read: int) -> None:
            if read >= rows:
                raise KeyboardInterrupt

        return stop

    options = AnnotateOptions(batch_size=4, **COLUMNS)  # type: ignore[arg-type]
    two = replace(options, workers=2)
    with pytest.raises(KeyboardInterrupt):  # 61 rows: 5 chunks committed, 2 left
        annotate(pipeline, input_path, output, options, on_chunk=stop_at(N_ROWS - CHUNK))
    with pytest.raises(Started):
        run_annotation_workers(prepare_run(pipeline, input_path, output, two), pipeline)
    with pytest.raises(KeyboardInterrupt):  # one more: 1 left
        annotate(pipeline, input_path, output, options, on_chunk=stop_at(N_ROWS))
    summary = run_annotation_workers(prepare_run(pipeline, input_path, output, two), pipeline)
    assert summary.resumed_chunks == N_ROWS // CHUNK
    assert output.read_bytes() == one_worker.read_bytes()
    errors = output.with_name(output.name + ".errors.jsonl").read_bytes()
    assert errors == one_worker.with_name(one_worker.name + ".errors.jsonl").read_bytes()
    small = tmp_path / "small.jsonl"  # 61 rows in one chunk
    run(pipeline, input_path, small, batch_size=4, workers=2, **{**COLUMNS, "chunk_size": 100})


def test_the_rows_of_a_lost_chunk_become_error_rows() -> None:
    lost = WorkerLost("the worker process died on each of 2 attempts (killed by SIGKILL)")
    rows = [
        InputRow(0, "a", "some text", {}, "line 1"),
        InputRow(1, "b", None, {}, "line 2", "bad"),
    ]
    errors = lost_rows(rows, lost)
    assert [e["id"] for e in errors] == ["a", "b"]
    assert errors[0]["reason"] == f"not annotated: {lost.reason}"
    assert errors[1]["reason"] == "bad"  # an error row keeps its own reason


def test_a_pipeline_that_does_not_load_is_named(input_path: Path, tmp_path: Path) -> None:
    with pytest.raises(AnnotateError, match="(?i)cannot load the pipeline"):
        run(str(tmp_path / "missing"), input_path, tmp_path / "out.jsonl", workers=2)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"n_process": 2, "gpu_id": 0}, "CUDA does not survive a fork"),
        ({"n_process": 2, "workers": 2}, "choose one"),
        ({"workers": 0}, "at least 1"),
    ],
)
def test_settings_that_would_hang_or_clash_are_refused(
    pipeline: str, input_path: Path, tmp_path: Path, settings: dict, message: str
) -> None:
    with pytest.raises(AnnotateError, match=message):
        prepare_run(pipeline, input_path, tmp_path / "out.jsonl", AnnotateOptions(**settings))


@pytest.mark.gpu
def test_workers_on_the_gpu_write_the_bytes_of_one_gpu_process(
    pipeline: str, input_path: Path, tmp_path: Path
) -> None:
    """Spawned workers load the pipeline onto the GPU themselves (a forked
    process would hang there), and write what one process on the GPU writes."""
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    options = {"chunk_size": CHUNK, "batch_size": 4, "gpu_id": 0}
    run(pipeline, input_path, two, workers=2, **options)
    run(pipeline, input_path, one, workers=1, **options)
    assert two.read_bytes() == one.read_bytes()
