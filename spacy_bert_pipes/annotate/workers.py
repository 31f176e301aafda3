"""The workers engine: chunks annotated by worker processes that each load the
pipeline (onto the GPU with `options.gpu_id`), committed in input order.

This process reads and checks the input as the local engine does (the same
chunks, duplicate ids and length limit) and commits each chunk to the same
`OUTPUT.parts` folder and manifest; a pool of worker processes
(`runtime.pool`) annotates whole chunks with `annotate_chunk`, as the local
engine does, so OUTPUT is byte-identical for any number of workers (and a run
started with one engine can be finished with another). A worker that dies has
its chunk retried once in a fresh worker; if that one dies too, the chunk's
rows go to the errors file with how the process ended. On the CPU, a run with
one chunk left is annotated in this process, which has the pipeline loaded
already: no worker starts.
"""

import functools
from collections import deque
from dataclasses import dataclass, replace
from itertools import chain, islice
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Tuple, Union

import spacy
from spacy.language import Language

from ..io.output import VectorColumn, error_row
from ..io.rows import InputRow
from ..runtime.pool import WorkerLost, WorkerPool, WorkerSetupError, start_fork_server
from ..runtime.threads import ANNOTATE_THREADS
from .chunks import annotate_chunk, checked_chunks
from .columns import with_columns
from .lock import output_lock
from .parts import commit_chunk, finish, locked_run, resumed_error_rows, start_parts
from .prepare import load_pipeline
from .progress import progress_bar
from .types import AnnotateError, AnnotateOptions, AnnotateRun, AnnotateSummary

Chunk = Tuple[int, List[InputRow]]
Annotated = Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]


@dataclass
class _Worker:
    """What a worker holds: its pipeline and the run's settings."""

    nlp: Language
    options: AnnotateOptions
    vectors: Optional[VectorColumn]
    on_chunk: Optional[Callable[[int], None]]


def _setup(
    pipeline: str,
    options: AnnotateOptions,
    vectors: Optional[VectorColumn],
    on_chunk: Optional[Callable[[int], None]],
) -> _Worker:
    if options.gpu_id >= 0:
        spacy.require_gpu(options.gpu_id)
    return _Worker(load_pipeline(pipeline, options), options, vectors, on_chunk)


def _annotate(worker: _Worker, chunk: Chunk) -> Annotated:
    index, rows = chunk
    if worker.on_chunk is not None:
        worker.on_chunk(index)
    return annotate_chunk(worker.nlp, rows, worker.options, worker.vectors)


def run_annotation_workers(
    run: AnnotateRun,
    pipeline: str,
    *,
    progress: bool = False,
    on_chunk: Optional[Callable[[int], None]] = None,
    on_worker_chunk: Optional[Callable[[int], None]] = None,
) -> AnnotateSummary:
    """Annotate the chunks not done yet in `run.options.workers` worker
    processes, then write OUTPUT and OUTPUT.errors.jsonl from the parts and
    delete `OUTPUT.parts`: the output of `run_annotation`, holding the lock
    on OUTPUT the whole time.

    This process loads the pipeline once on the CPU first, to check it
    against the settings (and find the width of its vectors); then each
    worker loads it, onto the GPU `run.options.gpu_id` if that is >= 0, and
    computes on `ANNOTATE_THREADS` intra-op threads, as every engine does
    (see `runtime.threads`): the machine's cores go to more workers. On the
    CPU, a run with one chunk left to annotate (a small collection, or the
    end of a resumed run) is annotated here with the pipeline already
    loaded: a worker would only load it again, for the same bytes.

    run (AnnotateRun): The prepared run (see `prepare_run`).
    pipeline (str): A folder saved with `nlp.to_disk`, or a package name.
    progress (bool): Show a progress bar (stderr) over the rows.
    on_chunk (Optional[Callable[[int], None]]): Called after each chunk it
        commits with the number of input rows read so far.
    on_worker_chunk (Optional[Callable[[int], None]]): Called in the worker,
        before it annotates a chunk, with the chunk's index (it must pickle).
    RETURNS (AnnotateSummary): Row counts.
    """
    options = run.options
    if options.workers < 1:
        raise AnnotateError(f"workers must be at least 1: {options.workers}")
    with output_lock(run.output_path):
        run = locked_run(run)
        if _workers_ahead(run):
            start_fork_server()  # its imports beside this process's loading
        nlp = load_pipeline(pipeline, options)  # fails here, not in the workers
        run = with_columns(run, nlp)
        # on the CPU (and with no hook to call in a worker), this process may
        # annotate a last chunk itself (see `_run`)
        here = [nlp] if options.gpu_id < 0 and on_worker_chunk is None else []
        del nlp
        setup = functools.partial(_setup, pipeline, options, run.vectors, on_worker_chunk)
        try:
            with WorkerPool(
                options.workers,
                setup,
                _annotate,
                threads=ANNOTATE_THREADS,
                fork_server=options.gpu_id < 0,  # a GPU's workers are spawned
            ) as pool:
                return _run(run, pool, progress=progress, on_chunk=on_chunk, here=here)
        except WorkerSetupError as err:
            raise AnnotateError(
                f"{pipeline}: a worker could not load the pipeline: {err}"
            ) from None


def _workers_ahead(run: AnnotateRun) -> bool:
    """Whether this run will most likely fork CPU workers: more than one chunk
    left (or a count not known yet), on the CPU (a GPU's workers are spawned)."""
    if run.options.gpu_id >= 0:
        return False
    if run.total_rows is None:
        return True
    chunks = -(-run.total_rows // run.options.chunk_size)
    return chunks - len(run.done) > 1


def _run(
    run: AnnotateRun,
    pool: "WorkerPool[_Worker, Chunk, Annotated]",
    *,
    progress: bool,
    on_chunk: Optional[Callable[[int], None]],
    here: List[Language],
) -> AnnotateSummary:
    """Commit the chunks not done yet, in order, annotated by the pool's
    workers; or, when `here` holds this process's pipeline and one chunk at
    most is left, annotated here with it (`here` is emptied either way, so
    that the pipeline is freed before workers start)."""
    counts = {"input": 0, "errors": 0, "resumed": 0, "chunks": 0}
    # the chunks handed to the pool, in order, with the input rows read through each
    handed: Deque[Tuple[int, List[InputRow], int]] = deque()
    bar = None
    if progress:
        bar = progress_bar(run.total_rows, initial=0, workers=run.options.workers)

    def chunks() -> Iterator[Chunk]:
        for index, chunk in checked_chunks(run.input_path, run.options):
            counts["chunks"] = index + 1
            counts["input"] += len(chunk)
            if index in run.done:
                counts["errors"] += resumed_error_rows(run, index)
                counts["resumed"] += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                continue
            handed.append((index, chunk, counts["input"]))
            yield index, chunk

    start_parts(run)
    tasks = chunks()
    first = list(islice(tasks, 2))  # reads up to the second chunk left to annotate
    nlp = here.pop() if here else None
    results: Iterator[Union[Annotated, WorkerLost]]
    if nlp is not None and len(first) <= 1:
        results = (annotate_chunk(nlp, rows, run.options, run.vectors) for _, rows in first)
    else:
        nlp = None
        results = pool.map(chain(first, tasks))
    try:
        for result in results:
            index, rows, read = handed.popleft()
            if isinstance(result, WorkerLost):
                outputs: List[Dict[str, Any]] = []
                errors = lost_rows(rows, result)
            else:
                outputs, errors = result
            commit_chunk(run, index, outputs, errors)
            counts["errors"] += len(errors)
            if bar is not None:
                bar.update(len(rows))
            if on_chunk is not None:
                on_chunk(read)
    finally:
        if bar is not None:
            bar.close()
    return finish(run, counts["chunks"], counts["input"], counts["errors"], counts["resumed"])


def lost_rows(rows: List[InputRow], lost: WorkerLost) -> List[Dict[str, Any]]:
    """The error records of a chunk whose worker died on each attempt: every
    row with why (an error row keeps its own reason)."""
    return [
        error_row(
            row if row.error is not None else replace(row, error=f"not annotated: {lost.reason}")
        )
        for row in rows
    ]
