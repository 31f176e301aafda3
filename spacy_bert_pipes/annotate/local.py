"""The local engine: the chunks annotated one after the other in this process
(`nlp.pipe`, with `n_process` processes per chunk), each committed as it is
done (see `parts`)."""

from pathlib import Path
from typing import Callable, Optional

import spacy
from spacy.language import Language

from .chunks import annotate_chunk, checked_chunks
from .columns import with_columns
from .lock import output_lock
from .parts import commit_chunk, finish, locked_run, resumed_error_rows, start_parts
from .prepare import load_pipeline, prepare_run
from .progress import progress_bar
from .types import AnnotateOptions, AnnotateRun, AnnotateSummary


def run_annotation(
    run: AnnotateRun,
    nlp: Language,
    *,
    progress: bool = False,
    on_chunk: Optional[Callable[[int], None]] = None,
) -> AnnotateSummary:
    """Annotate the chunks not done yet, then write OUTPUT and
    OUTPUT.errors.jsonl from the parts and delete `OUTPUT.parts`, holding
    the lock on OUTPUT (see `lock`): a second run on the same OUTPUT is refused.

    run (AnnotateRun): The prepared run (see `prepare_run`).
    nlp (Language): The pipeline (see `load_pipeline`).
    progress (bool): Show a progress bar (stderr) over the rows.
    on_chunk (Optional[Callable[[int], None]]): Called after each chunk it
        annotates with the number of input rows read so far.
    RETURNS (AnnotateSummary): Row counts.
    """
    with output_lock(run.output_path):
        return _run(locked_run(run), nlp, progress=progress, on_chunk=on_chunk)


def _run(
    run: AnnotateRun,
    nlp: Language,
    *,
    progress: bool,
    on_chunk: Optional[Callable[[int], None]],
) -> AnnotateSummary:
    bar = None
    input_rows = error_rows = resumed_rows = 0
    n_chunks = 0
    run = with_columns(run, nlp)  # fails here if --vectors and the docs have none
    start_parts(run)
    try:
        for index, chunk in checked_chunks(run.input_path, run.options):
            n_chunks = index + 1
            input_rows += len(chunk)
            if index in run.done:
                error_rows += resumed_error_rows(run, index)
                resumed_rows += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                continue
            if bar is None and progress:
                bar = progress_bar(run.total_rows, initial=resumed_rows)
            outputs, errors = annotate_chunk(nlp, chunk, run.options, run.vectors)
            commit_chunk(run, index, outputs, errors)
            error_rows += len(errors)
            if bar is not None:
                bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(input_rows)
    finally:
        if bar is not None:
            bar.close()
    return finish(run, n_chunks, input_rows, error_rows, resumed_rows)


def annotate(
    pipeline: str,
    input_path: Path,
    output_path: Path,
    options: AnnotateOptions = AnnotateOptions(),
    *,
    progress: bool = False,
    on_chunk: Optional[Callable[[int], None]] = None,
) -> AnnotateSummary:
    """Annotate a collection with a pipeline: `prepare_run`, `load_pipeline`
    and `run_annotation` in one call, or with `options.workers` above 1,
    `prepare_run` and `run_annotation_workers` (see `annotate.workers`).
    Resumes an unfinished run of the same settings.

    pipeline (str): A folder saved with `nlp.to_disk`, or a package name.
    input_path (Path): A .csv, .jsonl or .parquet file, or a folder of .txt files.
    output_path (Path): A .jsonl, .csv or .parquet file to write.
    options (AnnotateOptions): The settings.
    progress (bool): Show a progress bar.
    on_chunk (Optional[Callable[[int], None]]): See `run_annotation`.
    RETURNS (AnnotateSummary): Row counts.
    """
    run = prepare_run(pipeline, input_path, output_path, options)
    if options.workers > 1:
        from .workers import run_annotation_workers

        return run_annotation_workers(run, pipeline, progress=progress, on_chunk=on_chunk)
    if options.gpu_id >= 0:
        spacy.require_gpu(options.gpu_id)
    return run_annotation(
        run, load_pipeline(pipeline, options), progress=progress, on_chunk=on_chunk
    )
