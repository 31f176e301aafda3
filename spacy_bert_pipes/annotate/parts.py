"""The parts folder, `OUTPUT.parts`: where a run commits its chunks, and how
it turns them into OUTPUT. Every engine goes through these steps:

1. `committed_chunks` (reads only): the chunks an unfinished run with the
   same manifest committed; `prepare_run` calls it.
2. `start_parts`: the folder as the run found it, or fresh with its manifest.
3. `commit_chunk`, once per chunk, in any order: the errors part, then the
   part, each written durably; the part, written last, marks the chunk done.
   `resumed_error_rows` counts the error rows of a chunk committed earlier.
4. `finish`: OUTPUT.errors.jsonl, then OUTPUT, from the parts; then the parts
   folder is renamed to `OUTPUT.parts.finished` and deleted; last, the run's
   timing, `<OUTPUT stem>_time.json` (see `timing`).

A process killed at any step leaves either a resumable parts folder or a
finished OUTPUT; the next run removes what a kill left half-written.
"""

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Set

from ..io import durable
from ..io.output import (
    ERRORS_SUFFIX,
    OutputColumns,
    concatenate,
    link_shards,
    write_records,
    write_rows,
)
from .manifest import MANIFEST_NAME, check_manifest, manifest_text
from .timing import timing_record, write_timing
from .types import PART_NAME, AnnotateError, AnnotateRun, AnnotateSummary

FINISHED_SUFFIX = ".finished"


def committed_chunks(
    parts_dir: Path, manifest: Dict[str, Any], output_format: str, overwrite: bool
) -> Set[int]:
    """The indices of the chunks an unfinished run with this manifest committed
    (none with `overwrite`). Reads only: `start_parts` changes the folder.

    parts_dir (Path): `OUTPUT.parts`.
    manifest (Dict[str, Any]): This run's manifest (see `make_manifest`).
    output_format (str): The output's format, that of the parts.
    overwrite (bool): Discard an unfinished run.
    RETURNS (Set[int]): The chunks done.
    """
    if overwrite or not parts_dir.exists():
        return set()
    if not (parts_dir / MANIFEST_NAME).exists():
        # A run killed before its manifest was written leaves at most .tmp files.
        if any(not p.name.endswith(durable.TMP_SUFFIX) for p in parts_dir.iterdir()):
            raise AnnotateError(
                f"{parts_dir} exists but has no {MANIFEST_NAME}, so it is not an "
                f"unfinished annotate run; remove it, or pass --overwrite"
            )
        return set()
    check_manifest(parts_dir, manifest)
    done = set()
    for path in parts_dir.iterdir():
        match = PART_NAME.fullmatch(path.name)
        if match and match[2] == output_format:
            index = int(match[1])
            if (parts_dir / f"part-{index:06d}{ERRORS_SUFFIX}").exists():
                done.add(index)
    return done


def locked_run(run: AnnotateRun) -> AnnotateRun:
    """The run with its committed chunks found again, once the engine holds
    the lock on OUTPUT: a run that held it before may have committed more
    since `prepare_run` looked (or finished: then the chunks are redone)."""
    done = committed_chunks(run.parts_dir, run.manifest, run.output_format, run.options.overwrite)
    return replace(run, done=frozenset(done))


def start_parts(run: AnnotateRun) -> None:
    """Set up `OUTPUT.parts` as `prepare_run` found it: fresh (with the
    manifest written first), or kept for resuming, less any half-written part.

    run (AnnotateRun): The prepared run.
    """
    run.output_path.parent.mkdir(parents=True, exist_ok=True)
    durable.remove_path(finished_dir(run.parts_dir))  # a run killed while deleting its parts
    if run.options.overwrite:
        durable.remove_path(run.parts_dir)
    run.parts_dir.mkdir(exist_ok=True)
    for leftover in run.parts_dir.glob(f"*{durable.TMP_SUFFIX}"):  # a kill while writing a part
        leftover.unlink()
    manifest_path = run.parts_dir / MANIFEST_NAME
    if not manifest_path.exists():
        durable.write_text(manifest_path, manifest_text(run.manifest))


def commit_chunk(
    run: AnnotateRun, index: int, outputs: List[Dict[str, Any]], errors: List[Dict[str, Any]]
) -> None:
    """Commit a chunk: its error records, then its output rows (the part,
    committed last, marks the chunk done).

    run (AnnotateRun): The run.
    index (int): The chunk's index, from 0.
    outputs (List[Dict[str, Any]]): Its output rows, in input order.
    errors (List[Dict[str, Any]]): Its error records, in input order.
    """
    columns = _columns(run)
    durable.write_file(run.part_errors_path(index), lambda p: write_records(p, errors))
    durable.write_file(
        run.part_path(index), lambda p: write_rows(p, outputs, run.output_format, columns)
    )


def resumed_error_rows(run: AnnotateRun, index: int) -> int:
    """The error rows of a chunk an earlier run committed."""
    with run.part_errors_path(index).open("rb") as file_:
        return sum(1 for _ in file_)


def finish(
    run: AnnotateRun, n_chunks: int, input_rows: int, error_rows: int, resumed_rows: int
) -> AnnotateSummary:
    """Concatenate the parts into OUTPUT.errors.jsonl, then OUTPUT (so a new
    OUTPUT comes with its errors file; an OUTPUT folder gets the parts as
    shards), then remove the parts folder: renamed first, so that a kill while
    deleting it leaves no half-deleted run to resume (the next run removes the
    leftover); then write the run's timing beside OUTPUT.

    run (AnnotateRun): The run, every chunk committed.
    n_chunks (int): The chunks of the input.
    input_rows (int): The rows of the input.
    error_rows (int): The error records in the errors parts.
    resumed_rows (int): The input rows of the chunks an earlier run committed
        (`run.done`).
    RETURNS (AnnotateSummary): Row counts.
    """
    # this run's rows: the error parts of the resumed chunks are read before they go
    resumed_errors = sum(resumed_error_rows(run, i) for i in run.done)
    parts = [run.part_path(i) for i in range(n_chunks)]
    errors = [run.part_errors_path(i) for i in range(n_chunks)]
    durable.write_file(run.errors_path, lambda p: concatenate(errors, p, "jsonl"))
    if run.sharded:
        durable.replace_dir(run.output_path, lambda p: link_shards(p, parts))
    else:
        durable.write_file(
            run.output_path, lambda p: concatenate(parts, p, run.output_format, _columns(run))
        )
    finished = finished_dir(run.parts_dir)
    durable.remove_path(finished)
    durable.rename(run.parts_dir, finished)
    durable.remove_path(finished)
    seconds = time.perf_counter() - run.started
    new_errors = error_rows - resumed_errors
    timing = timing_record(
        run,
        seconds,
        chunks=n_chunks,
        docs=input_rows - resumed_rows - new_errors,
        error_rows=new_errors,
        resumed_rows=resumed_rows,
    )
    write_timing(run, timing)
    return AnnotateSummary(
        input_rows=input_rows,
        output_rows=input_rows - error_rows,
        error_rows=error_rows,
        chunks=n_chunks,
        resumed_chunks=len(run.done),
        output_path=run.output_path,
        errors_path=run.errors_path,
        timing_path=run.timing_path,
        seconds=seconds,
    )


def _columns(run: AnnotateRun) -> OutputColumns:
    """The run's columns, which the engine sets from the pipeline."""
    if run.columns is None:
        raise AnnotateError("a run writes its rows once it has its columns: see with_columns")
    return run.columns


def finished_dir(parts_dir: Path) -> Path:
    """Where a finished run's parts folder is renamed before it is deleted."""
    return durable.sibling(parts_dir, FINISHED_SUFFIX)
