"""The `annotate` run on Ray Data: the same rows, from a pool of Ray actors.

Only where the docs are annotated changes. The driver (the process that
calls `run_annotation_ray`) reads and checks the input exactly as the local
engine does (`read_input`, the same chunks, duplicate ids and length limit),
so the error rows are the same, and it commits to the same `OUTPUT.parts`
folder and manifest, and writes OUTPUT the same way at the end (a folder
OUTPUT gets one Parquet shard per chunk). In between, each chunk's readable
rows become one block of a Ray Dataset, and `Dataset.map_batches` hands whole
chunks to a fixed pool of actors. Each actor builds the pipeline once, from
its config and `nlp.to_bytes()` sent through Ray's object store (worker
nodes need this package installed, not the pipeline's folder), and runs a
chunk as the local engine does (`nlp.pipe` with the same batch size, the same
isolation of docs that make the pipeline fail), so the rows are the same.

The driver commits each chunk when its rows come back, in whatever order the
actors finish. A run that stops (a crash, a kill, Ctrl-C) leaves the
committed chunks in `OUTPUT.parts`; rerunning the same command, with either
engine, annotates only the missing ones.

The driver reads the whole input once before the actors start (the checks
need the rows in order), and keeps the texts in Ray's object store until
their chunk is done; Ray spills the store to disk beyond its memory limit.
"""

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import spacy
from spacy.language import Language
from thinc.api import Config

from ..io.output import VectorColumn, error_row
from ..io.rows import InputRow
from ..memory import bound_kernel_caches
from .chunks import annotate_chunk, checked_chunks
from .columns import with_columns
from .lock import output_lock
from .parts import commit_chunk, finish, locked_run, resumed_error_rows, start_parts
from .prepare import load_pipeline, prepare_run
from .progress import progress_bar
from .types import AnnotateError, AnnotateOptions, AnnotateRun, AnnotateSummary

INSTALL_HINT = "pip install 'spacy-bert-pipes[ray]'"


@dataclass
class _Pending:
    """A chunk sent to the actors: its error records from reading, the number
    of rows still to come back, and the output rows back so far, by the row
    number where each piece starts (Ray hands an actor a whole chunk, but the
    pieces are put in order anyway)."""

    errors: List[Dict[str, Any]]
    remaining: int
    pieces: Dict[int, List[Dict[str, Any]]] = field(default_factory=dict)

    def outputs(self) -> List[Dict[str, Any]]:
        return [row for _, rows in sorted(self.pieces.items()) for row in rows]


def run_annotation_ray(
    run: AnnotateRun,
    pipeline: str,
    *,
    address: Optional[str] = None,
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    progress: bool = False,
    on_chunk: Optional[Callable[[int], None]] = None,
    on_worker_chunk: Optional[Callable[[int], None]] = None,
) -> AnnotateSummary:
    """Annotate the chunks not done yet on Ray, then write OUTPUT and
    OUTPUT.errors.jsonl from the parts and delete `OUTPUT.parts`: the output
    of `run_annotation`, from `workers` actors that each hold the pipeline.

    It attaches to a running Ray cluster: the address given ("auto",
    "ray://head:10001"...), else `RAY_ADDRESS`, else one started on this
    machine with `ray start`; without any, it starts a local Ray with
    `workers * cpus_per_worker` CPUs (the only case where it sets Ray's
    resources) and stops it at the end. A Ray that is already initialized in
    this process is used as it is.

    The driver holds the lock on OUTPUT (see `lock`) for the whole run. An
    actor that dies (its process killed, its node lost) is restarted by Ray
    and its chunk given to an actor again; a chunk's rows count once however
    often they come back, since the driver commits each chunk once.

    run (AnnotateRun): The prepared run (see `prepare_run`); its n_process
        must be 1.
    pipeline (str): A folder saved with `nlp.to_disk`, or a package name. The
        driver loads it once (the same checks as `load_pipeline`) and sends
        it to the actors.
    address (Optional[str]): The Ray cluster to connect to ("auto",
        "ray://head:10001"...), or None.
    workers (int): Actors in the pool, each with a copy of the pipeline.
    cpus_per_worker (float): CPUs each actor reserves; it annotates on
        `ANNOTATE_THREADS` intra-op threads, as every engine does.
    gpus_per_worker (float): GPUs each actor reserves; above 0, the pipeline
        runs on the GPU Ray gives the actor (a fraction shares a GPU).
    progress (bool): Show a progress bar (stderr) over the rows.
    on_chunk (Optional[Callable[[int], None]]): Called after each chunk it
        commits with the number of rows committed so far.
    on_worker_chunk (Optional[Callable[[int], None]]): Called in the actor,
        before it annotates a chunk, with the chunk's index (it must pickle;
        tests use it to find and kill an actor's process).
    RETURNS (AnnotateSummary): Row counts.
    """
    ray = _import_ray()
    options = run.options
    if options.n_process != 1:
        raise AnnotateError("n_process is for the local engine: the ray engine uses workers")
    if workers < 1 or cpus_per_worker <= 0 or gpus_per_worker < 0:
        raise AnnotateError("workers and cpus_per_worker must be positive, gpus_per_worker >= 0")
    with output_lock(run.output_path):
        run = locked_run(run)
        nlp = load_pipeline(pipeline, options)  # fails here, not in the actors
        run = with_columns(run, nlp)  # the columns; with --vectors their width, or an error
        config, data = nlp.config.to_str(), nlp.to_bytes()
        del nlp
        started = not ray.is_initialized()
        local = started and _init(ray, address, math.ceil(workers * cpus_per_worker))
        try:
            gpus = ray.cluster_resources().get("GPU", 0)
            if local and gpus < workers * gpus_per_worker:
                # A cluster may add GPUs as actors ask for them; a local Ray never does.
                raise AnnotateError(
                    f"{workers} workers with {gpus_per_worker} GPU each need "
                    f"{workers * gpus_per_worker:g} GPUs; this machine has {gpus:g}"
                )
            return _run(
                ray,
                run,
                _Pipeline(config, ray.put(data)),
                workers=workers,
                cpus_per_worker=cpus_per_worker,
                gpus_per_worker=gpus_per_worker,
                progress=progress,
                on_chunk=on_chunk,
                on_worker_chunk=on_worker_chunk,
            )
        finally:
            if started:
                ray.shutdown()


def _init(ray: Any, address: Optional[str], num_cpus: int) -> bool:
    """Connect to the Ray cluster at `address`, `RAY_ADDRESS` or started with
    `ray start` on this machine, or else start a local one with `num_cpus`
    CPUs. Ray refuses resources when it connects to a cluster, so they are
    passed only where no cluster is named: if Ray then finds one started with
    `ray start`, it is attached to without them.
    RETURNS (bool): Whether a local Ray was started for this run."""
    where = address or os.environ.get("RAY_ADDRESS")
    settings: Dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    try:
        if where is None:
            try:
                ray.init(num_cpus=num_cpus, **settings)
                return True
            except ValueError as err:  # a cluster from `ray start` was found
                if "must not be provided" not in str(err):
                    raise
                where = (
                    "the cluster started with `ray start` on this machine (if it is "
                    "gone, `ray stop` forgets it)"
                )
        ray.init(address=address, **settings)
        return False
    except ConnectionError as err:
        raise AnnotateError(f"cannot connect to the Ray cluster at {where}: {err}") from None


def annotate_ray(
    pipeline: str,
    input_path: Path,
    output_path: Path,
    options: AnnotateOptions = AnnotateOptions(),
    *,
    address: Optional[str] = None,
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    progress: bool = False,
) -> AnnotateSummary:
    """`annotate` on Ray: `prepare_run` and `run_annotation_ray` in one call.
    Resumes an unfinished run of the same settings (by either engine).

    pipeline (str): A folder saved with `nlp.to_disk`, or a package name.
    input_path (Path): A .csv, .jsonl or .parquet file, or a folder of .txt
        or .parquet files.
    output_path (Path): A .jsonl, .csv or .parquet file, or a folder for
        Parquet shards.
    options (AnnotateOptions): The settings (n_process must be 1).
    address, workers, cpus_per_worker, gpus_per_worker, progress: See
        `run_annotation_ray`.
    RETURNS (AnnotateSummary): Row counts.
    """
    run = prepare_run(pipeline, input_path, output_path, options)
    return run_annotation_ray(
        run,
        pipeline,
        address=address,
        workers=workers,
        cpus_per_worker=cpus_per_worker,
        gpus_per_worker=gpus_per_worker,
        progress=progress,
    )


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise AnnotateError(f"the ray engine needs Ray Data: {INSTALL_HINT}") from None
    return ray


@dataclass(frozen=True)
class _Pipeline:
    """What an actor builds its pipeline from: the filled config, as text,
    and a reference to `nlp.to_bytes()` in the object store."""

    config: str
    data: Any  # ray.ObjectRef


def _run(
    ray: Any,
    run: AnnotateRun,
    pipeline: _Pipeline,
    *,
    workers: int,
    cpus_per_worker: float,
    gpus_per_worker: float,
    progress: bool,
    on_chunk: Optional[Callable[[int], None]],
    on_worker_chunk: Optional[Callable[[int], None]],
) -> AnnotateSummary:
    options = run.options
    input_rows = error_rows = resumed_rows = committed_rows = 0
    n_chunks = 0
    pending: Dict[int, _Pending] = {}
    blocks = []
    start_parts(run)

    def commit(index: int, outputs: List[Dict[str, Any]], errors: List[Dict[str, Any]]) -> None:
        nonlocal error_rows, committed_rows
        errors = sorted(errors, key=lambda error: error["row"])  # input order, as in a chunk
        commit_chunk(run, index, outputs, errors)
        error_rows += len(errors)
        committed_rows += len(outputs) + len(errors)
        if bar is not None:
            bar.update(len(outputs) + len(errors))
        if on_chunk is not None:
            on_chunk(committed_rows)

    # The driver reads and checks every row, as the local engine does; the
    # readable rows of each chunk go to the object store as one block.
    bar = None
    for index, chunk in checked_chunks(run.input_path, options):
        n_chunks = index + 1
        input_rows += len(chunk)
        if index in run.done:
            error_rows += resumed_error_rows(run, index)
            resumed_rows += len(chunk)
            continue
        good = [row for row in chunk if row.error is None]
        errors = [error_row(row) for row in chunk if row.error is not None]
        pending[index] = _Pending(errors, remaining=len(good))
        if good:
            blocks.append(ray.put(_block(index, good)))
    if progress:
        bar = progress_bar(input_rows, initial=resumed_rows)
    try:
        for index in [i for i, chunk in pending.items() if chunk.remaining == 0]:
            commit(index, [], pending.pop(index).errors)
        if blocks:
            annotated = ray.data.from_arrow_refs(blocks).map_batches(
                _ChunkAnnotator,
                fn_constructor_kwargs={
                    "pipeline": pipeline,
                    "options": options,
                    "on_chunk": on_worker_chunk,
                    "vectors": run.vectors,
                },
                batch_size=None,  # a whole block, that is, a whole chunk
                batch_format="pyarrow",
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=cpus_per_worker,
                num_gpus=gpus_per_worker or None,
                # Ray Data restarts a dead actor and retries its chunk without end
                # (max_restarts=-1, max_task_retries=-1 by default); a chunk that
                # comes back twice is committed once (see below).
            )
            context = ray.data.DataContext.get_current()
            ray_bars, context.enable_progress_bars = context.enable_progress_bars, False
            try:
                for batch in annotated.iter_batches(batch_size=None, batch_format="pyarrow"):
                    for index, first, outputs_json, errors_json in zip(
                        *(column.to_pylist() for column in batch.columns)
                    ):
                        found = pending.get(index)
                        if found is None or first in found.pieces:
                            continue  # a chunk (or piece) Ray ran again: committed once
                        outputs, errors = json.loads(outputs_json), json.loads(errors_json)
                        found.pieces[first] = outputs
                        found.errors.extend(errors)
                        found.remaining -= len(outputs) + len(errors)
                        if found.remaining == 0:
                            del pending[index]
                            commit(index, found.outputs(), found.errors)
            finally:
                context.enable_progress_bars = ray_bars
        if pending:
            raise RuntimeError(f"Ray returned no rows for the chunks {sorted(pending)}")
    finally:
        if bar is not None:
            bar.close()
    return finish(run, n_chunks, input_rows, error_rows, resumed_rows)


def _block(index: int, rows: List[InputRow]) -> Any:
    """The readable rows of a chunk as an Arrow table (texts as large strings:
    a chunk's texts can pass 2 GB)."""
    import pyarrow as pa

    return pa.table(
        {
            "chunk": pa.array([index] * len(rows), pa.int64()),
            "number": pa.array([row.number for row in rows], pa.int64()),
            "id": pa.array([row.id for row in rows], pa.string()),
            "text": pa.array([row.text for row in rows], pa.large_string()),
            "context": pa.array([json.dumps(row.context) for row in rows], pa.large_string()),
            "source": pa.array([row.source for row in rows], pa.string()),
            # JSON keeps a kept value exactly (floats included): the local rows' bytes
            "kept": pa.array(
                [json.dumps(row.kept, ensure_ascii=False) for row in rows], pa.large_string()
            ),
        }
    )


class _ChunkAnnotator:
    """A Ray actor's callable: builds the pipeline once, then annotates
    batches of rows, chunk by chunk, into one row per chunk: its index, the
    number of its first row, and the JSON of its output rows and of its error
    records."""

    def __init__(
        self,
        pipeline: _Pipeline,
        options: AnnotateOptions,
        on_chunk: Optional[Callable[[int], None]] = None,
        vectors: Optional[VectorColumn] = None,
    ) -> None:
        import ray

        # An actor on a cluster does not inherit the driver's environment.
        bound_kernel_caches()
        # Ray sets CUDA_VISIBLE_DEVICES to the actor's GPUs: its first is 0.
        if ray.get_gpu_ids():
            spacy.require_gpu(0)
        config = Config().from_str(pipeline.config)
        nlp: Language = spacy.util.load_model_from_config(config, auto_fill=False)
        self.nlp = nlp.from_bytes(ray.get(pipeline.data))
        self.nlp.max_length = max(self.nlp.max_length, options.max_length)
        self.options = options
        self.on_chunk = on_chunk
        self.vectors = vectors

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        rows: Dict[int, List[InputRow]] = {}
        for chunk, number, doc_id, text, context, source, kept in zip(
            *(batch.column(i).to_pylist() for i in range(7))
        ):
            row = InputRow(number, doc_id, text, json.loads(context), source, kept=json.loads(kept))
            rows.setdefault(chunk, []).append(row)
        indices, firsts, outputs, errors = [], [], [], []
        for index, chunk_rows in rows.items():
            if self.on_chunk is not None:
                self.on_chunk(index)
            chunk_outputs, chunk_errors = annotate_chunk(
                self.nlp, chunk_rows, self.options, self.vectors
            )
            indices.append(index)
            firsts.append(chunk_rows[0].number)
            outputs.append(json.dumps(chunk_outputs, ensure_ascii=False))
            errors.append(json.dumps(chunk_errors, ensure_ascii=False))
        return pa.table(
            {
                "chunk": pa.array(indices, pa.int64()),
                "first": pa.array(firsts, pa.int64()),
                "outputs": pa.array(outputs, pa.large_string()),
                "errors": pa.array(errors, pa.large_string()),
            }
        )
