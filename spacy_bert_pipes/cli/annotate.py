"""`bert-pipes annotate ...`: annotate a large collection with a trained pipeline."""

from pathlib import Path
from typing import Literal, Optional, Tuple

import spacy
import typer

from ..annotate import (
    DEFAULT_MAX_LENGTH,
    AnnotateError,
    AnnotateOptions,
    AnnotateRun,
    AnnotateSummary,
    check_output_location,
    load_pipeline,
    prepare_run,
    run_annotation,
)
from ..annotate.lock import output_lock
from ..annotate.workers import run_annotation_workers
from ..io.errors import ConversionError
from ..io.readers import InputFormat, read_questions_file
from ..loading import Precision
from ..runtime.plan import auto_workers
from .common import app, fail, input_format_option, text_column_option


@app.command("annotate")
def annotate_cli(
    pipeline: str = typer.Argument(
        ...,
        help="A trained pipeline: a folder saved with nlp.to_disk, or a package name",
        metavar="PIPELINE",
    ),
    input_path: Path = typer.Argument(
        ...,
        help="A .csv file with a header row, a .jsonl file of JSON objects, a .parquet "
        "file, or a folder of .txt files (one doc per file) or of .parquet files (shards, "
        "read in order of their paths)",
        metavar="INPUT",
        exists=True,
    ),
    output_path: Path = typer.Argument(
        ...,
        help="The .jsonl, .csv or .parquet file to write, or a folder (a path without a "
        "suffix) to write as Parquet shards, one per chunk",
        metavar="OUTPUT",
    ),
    input_format: InputFormat = input_format_option(),
    text_column: str = text_column_option(),
    id_column: Optional[str] = typer.Option(
        None,
        "--id-column",
        help="The column or field of each row's id, which OUTPUT's first column keeps "
        "the name of (default: 'id' where the input has it, else the 0-based row number "
        "as a string; a .txt file's id is its path relative to INPUT)",
        show_default=False,
    ),
    keep_columns: Optional[str] = typer.Option(
        None,
        "--keep-columns",
        help="Input columns or fields to copy into each output row after the id, comma "
        "separated, e.g. text,customer (the text column may be one); a missing one "
        "fails the run at once",
        show_default=False,
    ),
    questions_path: Optional[Path] = typer.Option(
        None,
        "--questions",
        help="A JSON object {key: question} of questions asked of every doc, besides "
        "the pipeline's own (needs a bert_qa component)",
        exists=True,
        dir_okay=False,
    ),
    questions_column: Optional[str] = typer.Option(
        None,
        "--questions-column",
        help="A column or field of each row's own questions: a JSON object "
        "{key: question} (or an object in JSONL and Parquet)",
    ),
    chunk_size: int = typer.Option(
        1000,
        "--chunk-size",
        min=1,
        help="Rows per chunk: each finished chunk is saved, and a rerun after a crash "
        "resumes after the last saved one",
    ),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Docs per nlp.pipe batch"),
    n_process: int = typer.Option(
        1, "--n-process", min=1, help="Processes for nlp.pipe (they start once per chunk)"
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="The GPU to use; -1 runs on the CPU"),
    workers: str = typer.Option(
        "auto",
        "--workers",
        help="Worker processes that each load the pipeline (onto the GPU with --gpu-id) "
        "and annotate whole chunks on one thread each; auto: one per core on the CPU, one "
        "per 2 cores with a GPU (at most 8); 1: this process, as is a last chunk on the "
        "CPU. OUTPUT is the same bytes for any number",
    ),
    max_length: int = typer.Option(
        DEFAULT_MAX_LENGTH,
        "--max-length",
        min=1,
        help="The longest text in characters; a longer one is an error row",
    ),
    precision: Optional[Precision] = typer.Option(
        None,
        "--precision",
        help="Run the pipeline's bert encoders at this precision (bf16: CPUs with AMX / "
        "AVX-512 BF16 and GPUs; int8: CPU; default: as saved)",
        show_default=False,
    ),
    reproducible: bool = typer.Option(
        False,
        "--reproducible",
        help="Batch so that each doc's output does not depend on the other docs of its "
        "batch: the same doc gives the same row in any collection (a little slower; "
        "see docs/annotate.md)",
    ),
    vectors: bool = typer.Option(
        False,
        "--vectors",
        help="Add a 'vector' column: each doc's doc.vector (JSONL: a list of floats; "
        "Parquet: a fixed-size list; not CSV). Needs a pipeline whose docs have vectors, "
        "e.g. with a bert_vectors component; an empty text gets zeros",
    ),
    vectors_dtype: Literal["float32", "float16"] = typer.Option(
        "float32",
        "--vectors-dtype",
        help="The vectors' type: float16 halves a Parquet column (JSONL: values rounded "
        "through float16)",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Discard an unfinished run (OUTPUT.parts) even if its input or settings differ",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Exit with code 1 if any row could not be annotated"
    ),
    engine: Literal["local", "ray"] = typer.Option(
        "local",
        "--engine",
        help="local: this process (--n-process, --gpu-id); ray: a pool of Ray actors "
        "that each load the pipeline once (needs spacy-bert-pipes[ray])",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray-address",
        help="The Ray cluster to run on, e.g. auto or ray://head:10001 (default: "
        "$RAY_ADDRESS, else a local Ray started for this run and stopped after it)",
    ),
    ray_workers: int = typer.Option(
        2, "--ray-workers", min=1, help="Ray actors, each with its own copy of the pipeline"
    ),
    cpus_per_worker: float = typer.Option(
        1.0,
        "--cpus-per-worker",
        min=0.01,
        help="CPUs each Ray actor reserves (its pipeline computes on one thread)",
    ),
    gpu_per_worker: float = typer.Option(
        0.0,
        "--gpu-per-worker",
        min=0.0,
        help="GPUs per Ray actor, e.g. 1, or 0.5 for two actors per GPU; 0 runs on CPUs",
    ),
) -> None:
    """Annotate a collection with a trained pipeline, in restartable chunks.

    OUTPUT gets exactly one row per annotated input row, in input order, with
    these columns: the id (named as --id-column, else "id"); the
    --keep-columns, as in the input; "cats" ({label: probability}, from a
    text classifier); "entities" ([{"text", "label", "start", "end",
    "score"}] from doc.ents, character offsets); "answers" (bert_qa's
    doc._.answers); "route" (an exclusive bert_textcat's decision: {"label",
    "top", "confidence", "decision"}); "empty_text" (true for an empty or
    whitespace-only text, which is annotated all the same). Of cats, entities,
    answers and route, only those the pipeline can fill are written. In CSV
    and Parquet they are JSON strings. With --vectors, a last "vector" column
    holds each doc's doc.vector (see docs/annotate-vectors.md).

    A row that cannot be annotated (null text, invalid UTF-8, a duplicate id,
    ...) goes to OUTPUT.errors.jsonl with its id, row number, source line and
    reason; the summary shows input rows = output rows + error rows.

    Finished chunks are kept in OUTPUT.parts until the end: after a crash or a
    kill, run the same command again to resume; the result is the same as
    that of an uninterrupted run.

    With --engine ray, this process reads and checks the input as the local
    engine does, Ray actors annotate whole chunks, and each chunk is saved to
    OUTPUT.parts when it comes back: the rows, the errors file and resuming
    are the same as with the local engine (a run started with one engine can
    be finished with the other).
    """
    if engine == "ray" and (gpu_id >= 0 or n_process > 1 or workers != "auto"):
        fail(
            "--gpu-id, --n-process and --workers are for the local engine; with --engine "
            "ray, use --gpu-per-worker and --ray-workers"
        )
    n_workers = _workers(workers, gpu_id, n_process) if engine == "local" else 1
    ray_only = {
        "--ray-address": ray_address is not None,
        "--ray-workers": ray_workers != 2,
        "--cpus-per-worker": cpus_per_worker != 1.0,
        "--gpu-per-worker": gpu_per_worker != 0.0,
    }
    if engine == "local" and any(ray_only.values()):
        given = ", ".join(name for name, set_ in ray_only.items() if set_)
        fail(f"{given}: for --engine ray only; the local engine uses --n-process and --gpu-id")
    try:
        questions = read_questions_file(questions_path) if questions_path else {}
        options = AnnotateOptions(
            input_format=input_format,
            text_column=text_column,
            id_column=id_column,
            questions=questions,
            questions_column=questions_column,
            keep_columns=_column_names(keep_columns),
            chunk_size=chunk_size,
            max_length=max_length,
            batch_size=batch_size,
            n_process=n_process,
            workers=n_workers,
            gpu_id=gpu_id if engine == "local" else -1,
            overwrite=overwrite,
            precision=precision,
            reproducible=reproducible,
            vectors=vectors,
            vectors_dtype=vectors_dtype,
        )
        # Input, output and options are checked before the pipeline loads; the
        # lock on OUTPUT refuses a second run on it before it reads OUTPUT.parts.
        check_output_location(input_path, output_path)
        with output_lock(output_path):
            run = prepare_run(pipeline, input_path, output_path, options)
            summary = _run(
                run,
                pipeline,
                engine,
                gpu_id,
                ray_address,
                ray_workers,
                cpus_per_worker,
                gpu_per_worker,
            )
    except (ConversionError, AnnotateError) as err:
        fail(str(err))
    except OSError as err:  # writing OUTPUT or its parts (a full disk...)
        fail(f"{err.filename or output_path}: {err.strerror or err}")
    typer.secho(
        f"Input rows: {summary.input_rows} = output rows {summary.output_rows} "
        f"({summary.output_path}) + error rows {summary.error_rows} ({summary.errors_path})",
        fg="green",
    )
    typer.echo(f"Wall time: {summary.seconds:.1f} s ({summary.timing_path})")
    if summary.error_rows:
        typer.secho(
            f"Warning: {summary.error_rows} rows could not be annotated; their reasons are "
            f"in {summary.errors_path}",
            fg="yellow",
            err=True,
        )
        if strict:
            raise typer.Exit(code=1)


def _run(
    run: AnnotateRun,
    pipeline: str,
    engine: str,
    gpu_id: int,
    ray_address: Optional[str],
    ray_workers: int,
    cpus_per_worker: float,
    gpu_per_worker: float,
) -> AnnotateSummary:
    if run.done:
        n_done = len(run.done)
        typer.echo(
            f"Resuming the unfinished run in {run.parts_dir}: {n_done} "
            f"chunk{'s' if n_done != 1 else ''} of {run.options.chunk_size} rows already done"
        )
    if engine == "ray":
        from ..annotate.ray import run_annotation_ray

        return run_annotation_ray(
            run,
            pipeline,
            address=ray_address,
            workers=ray_workers,
            cpus_per_worker=cpus_per_worker,
            gpus_per_worker=gpu_per_worker,
            progress=True,
        )
    if run.options.workers > 1:
        return run_annotation_workers(run, pipeline, progress=True)
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    return run_annotation(run, load_pipeline(pipeline, run.options), progress=True)


def _column_names(value: Optional[str]) -> Tuple[str, ...]:
    """--keep-columns as names: "text, customer" is ("text", "customer")."""
    if value is None:
        return ()
    return tuple(name.strip() for name in value.split(","))


def _workers(value: str, gpu_id: int, n_process: int) -> int:
    """--workers as a number: "auto" is `auto_workers` (1 beside --n-process)."""
    if value == "auto":
        return 1 if n_process > 1 else auto_workers(gpu_id)
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        fail(f"--workers {value!r}: expected a number of at least 1, or auto")
    return number
