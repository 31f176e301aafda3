"""Preparing a run, before anything is written: the settings and input are
checked, the committed chunks of an unfinished run found (`prepare_run`),
and the pipeline loaded and checked against the settings (`load_pipeline`)."""

import os
import tempfile
import time
from pathlib import Path

from spacy.language import Language

from ..io import durable
from ..io.output import (
    OUTPUT_SUFFIXES,
    OutputFormat,
    errors_path_for,
    is_sharded_output,
    timing_path_for,
)
from ..io.readers import count_rows, input_format_for
from ..loading import load_pipeline as load_with_precision
from ..memory import bound_kernel_caches
from .chunks import read_rows
from .columns import check_columns
from .lock import lock_path_for
from .manifest import make_manifest
from .parts import committed_chunks
from .types import PARTS_SUFFIX, VECTORS_DTYPES, AnnotateError, AnnotateOptions, AnnotateRun


def output_format_for(path: Path) -> OutputFormat:
    """The output format, by the output file's suffix (.jsonl, .csv, .parquet);
    a folder of Parquet shards (see `is_sharded_output`) is "parquet"."""
    if is_sharded_output(path):
        return "parquet"
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise AnnotateError(
            f"{path}: unknown output type {suffix!r}: expected .jsonl, .csv or .parquet, "
            "or a folder (a path without a suffix) for Parquet shards"
        )
    return OUTPUT_SUFFIXES[suffix]


def prepare_run(
    pipeline: str, input_path: Path, output_path: Path, options: AnnotateOptions
) -> AnnotateRun:
    """Check the input and the settings, and find the chunks that an unfinished
    run with the same input and settings committed to `OUTPUT.parts`. Fails
    fast, before a pipeline is loaded and before anything is written: a
    missing column, an unknown format or an unfinished run with other settings
    (unless `options.overwrite`) raise.

    pipeline (str): The pipeline's folder or package name (for the manifest).
    input_path (Path): The input file or folder.
    output_path (Path): The output file (.jsonl, .csv or .parquet), or a folder
        for Parquet shards.
    options (AnnotateOptions): The settings.
    RETURNS (AnnotateRun): The run, ready for an engine (`run_annotation`).
    """
    started = time.perf_counter()
    input_path, output_path = Path(input_path), Path(output_path)
    if min(options.chunk_size, options.batch_size, options.max_length, options.workers) < 1:
        raise AnnotateError("chunk_size, batch_size, max_length and workers must be at least 1")
    check_processes(options)
    output_format = output_format_for(output_path)
    check_vectors_options(options, output_path, output_format)
    check_columns(options)
    input_format = input_format_for(input_path, options.input_format)
    check_output_location(input_path, output_path)
    read_rows(input_path, options)  # checks the columns (text, id, kept...) now
    total_rows = count_rows(input_path, input_format)
    manifest = make_manifest(pipeline, input_path, input_format, output_format, options)
    parts_dir = durable.sibling(output_path, PARTS_SUFFIX)
    done = committed_chunks(parts_dir, manifest, output_format, options.overwrite)
    return AnnotateRun(
        input_path=input_path,
        input_format=input_format,
        output_path=output_path,
        output_format=output_format,
        parts_dir=parts_dir,
        options=options,
        manifest=manifest,
        done=frozenset(done),
        total_rows=total_rows,
        # A folder left as OUTPUT.tmp: a run killed while swapping its OUTPUT folder.
        sharded=is_sharded_output(output_path)
        or durable.sibling(output_path, durable.TMP_SUFFIX).is_dir(),
        started=started,
    )


def check_output_location(input_path: Path, output_path: Path) -> None:
    """Check, before a pipeline is loaded, that the run can write OUTPUT and
    the files beside it (OUTPUT.errors.jsonl, OUTPUT.parts, OUTPUT.lock and
    `<OUTPUT stem>_time.json`):
    raise `AnnotateError` naming the path and what is wrong. Only a probe
    file is created (and removed) in OUTPUT's folder, where it exists.

    input_path (Path): The input file or folder.
    output_path (Path): The output file, or folder for Parquet shards.
    """
    output, source = output_path.resolve(), input_path.resolve()
    if output == source:
        raise AnnotateError(f"{output_path}: the output would overwrite the input")
    if source.is_dir() and output.is_relative_to(source):
        raise AnnotateError(
            f"{output_path}: the output would be written inside the input folder {input_path}"
        )
    if source.is_relative_to(output):
        raise AnnotateError(
            f"{output_path}: the output folder would replace the input {input_path} inside it"
        )
    sharded = is_sharded_output(output_path)
    if sharded and output_path.exists() and not output_path.is_dir():
        raise AnnotateError(
            f"{output_path}: is a file; a path without a suffix is a folder of Parquet shards"
        )
    parts_dir = durable.sibling(output_path, PARTS_SUFFIX)
    if parts_dir.exists() and not parts_dir.is_dir():
        raise AnnotateError(f"{parts_dir}: is a file, where the run keeps its parts folder")
    for path, what in (
        (errors_path_for(output_path), "errors file"),
        (lock_path_for(output_path), "lock file"),
        (timing_path_for(output_path), "timing file"),
    ):
        if path.is_dir():
            raise AnnotateError(f"{path}: is a folder, where the run writes its {what}")
    folder = Path(os.path.abspath(output_path)).parent
    while not folder.exists() and not folder.is_symlink():
        folder = folder.parent
    if not folder.is_dir():
        raise AnnotateError(
            f"{output_path}: cannot create the output's folder: {folder} is a file, not a folder"
        )
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".bert-pipes-probe-")
    except OSError as err:
        raise AnnotateError(
            f"{output_path}: cannot write in {folder}: {err.strerror or err}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def check_processes(options: AnnotateOptions) -> None:
    """`n_process` forks spaCy's workers: refused with a GPU (CUDA does not
    survive a fork; the workers would hang) and beside `workers`."""
    if options.n_process > 1 and options.gpu_id >= 0:
        raise AnnotateError(
            f"--n-process {options.n_process} with --gpu-id {options.gpu_id}: spaCy forks its "
            "processes, and CUDA does not survive a fork (they would hang); use "
            f"--workers {options.n_process} instead: spawned processes that each load the "
            "pipeline onto the GPU"
        )
    if options.n_process > 1 and options.workers > 1:
        raise AnnotateError(
            f"--n-process {options.n_process} and --workers {options.workers}: choose one; "
            "--workers runs the whole pipeline in each process"
        )


def check_vectors_options(options: AnnotateOptions, output_path: Path, output_format: str) -> None:
    """Vectors go to JSONL or Parquet, as float32 or float16, from one process
    per pipeline (spaCy's `n_process` workers send docs back without their
    `user_hooks`, so `doc.vector` would silently fall back to another vector)."""
    if options.vectors_dtype not in VECTORS_DTYPES:
        raise AnnotateError(
            f"unknown vectors dtype {options.vectors_dtype!r}: expected "
            + " or ".join(VECTORS_DTYPES)
        )
    if options.vectors and output_format == "csv":
        raise AnnotateError(
            f"{output_path}: --vectors needs a .jsonl or .parquet OUTPUT (or a folder "
            "of Parquet shards): a CSV cell cannot hold a vector but as text hundreds "
            "of numbers long"
        )
    if options.vectors and options.n_process > 1:
        raise AnnotateError(
            "--vectors needs --n-process 1: spaCy's worker processes send docs back "
            "without doc.user_hooks, so doc.vector would not be the pipeline's; for "
            "parallel runs use --engine ray (each actor runs the whole pipeline)"
        )


def load_pipeline(pipeline: str, options: AnnotateOptions) -> Language:
    """Load a pipeline and check that it can do what the options ask.

    pipeline (str): A folder saved with `nlp.to_disk`, or a package name.
    options (AnnotateOptions): The settings (questions need a bert_qa; a
        precision needs a bert encoder).
    RETURNS (Language): The pipeline, its max_length set to the options'.
    """
    # Before any kernel runs: a collection's many batch shapes would otherwise
    # fill the CPU kernel caches, growing RSS by hundreds of MB (see `memory`).
    bound_kernel_caches()
    try:
        nlp = load_with_precision(
            pipeline, precision=options.precision, reproducible=options.reproducible
        )
    except ValueError as err:  # a precision (reproducible), but no bert encoder
        raise AnnotateError(str(err)) from None
    except OSError as err:  # no such folder or package, or an unreadable file in it
        raise AnnotateError(f"{pipeline}: cannot load the pipeline: {err}") from None
    if (options.questions or options.questions_column) and "bert_qa" not in set(
        nlp.pipe_factories.values()
    ):
        raise AnnotateError(
            f"questions were given, but the pipeline {pipeline} has no bert_qa component "
            f"to answer them (its components: {', '.join(nlp.pipe_names) or 'none'})"
        )
    # Long texts are checked against options.max_length in the run, as error rows.
    nlp.max_length = max(nlp.max_length, options.max_length)
    return nlp
