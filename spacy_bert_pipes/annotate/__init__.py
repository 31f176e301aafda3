"""Annotate large collections with a trained pipeline, in restartable chunks.

The run protocol, shared by every engine (docs/annotate-internals.md says more):

types.py     the plain data: `AnnotateOptions`, `AnnotateRun` (and the names of
             its part files), `AnnotateSummary`, `AnnotateError`.
prepare.py   `prepare_run` (checks, manifest, the chunks already committed;
             writes nothing) and `load_pipeline`.
manifest.py  what the output depends on; a rerun resumes only the same.
columns.py   OUTPUT's columns: the id's name, kept input columns, the
             annotations the pipeline can fill, "empty_text", the vector.
chunks.py    the input in numbered, checked chunks, and a chunk annotated.
parts.py     `OUTPUT.parts`: start, commit a chunk, finish into OUTPUT.
timing.py    `<OUTPUT stem>_time.json`: a finished run's wall time and docs.
vectors.py   `--vectors`: the width of the pipeline's doc vectors, a doc's vector.
progress.py  the progress bar.
local.py     the local engine: `run_annotation`, and `annotate` (all in one).
ray.py       the Ray engine: `run_annotation_ray`, `annotate_ray` (imported
             on its own: `from spacy_bert_pipes.annotate.ray import ...`).

The input formats and the output format live in `spacy_bert_pipes.io`.

Memory stays flat over any number of rows: the input is streamed, each chunk
runs in `nlp.memory_zone()` (strings that spaCy interns for a chunk are freed
with it), and only the ids seen so far are kept (to report duplicates).
"""

from ..io.output import (
    OUTPUT_COLUMNS,
    OUTPUT_SUFFIXES,
    OutputFormat,
    doc_to_row,
    error_row,
    errors_path_for,
    is_sharded_output,
)
from ..io.readers import (
    INPUT_SUFFIXES,
    InputFormat,
    input_format_for,
    read_input,
    read_questions_file,
)
from ..io.rows import InputRow
from .local import annotate, run_annotation
from .prepare import check_output_location, load_pipeline, output_format_for, prepare_run
from .types import (
    DEFAULT_MAX_LENGTH,
    AnnotateError,
    AnnotateOptions,
    AnnotateRun,
    AnnotateSummary,
)

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "INPUT_SUFFIXES",
    "OUTPUT_COLUMNS",
    "OUTPUT_SUFFIXES",
    "AnnotateError",
    "AnnotateOptions",
    "AnnotateRun",
    "AnnotateSummary",
    "InputFormat",
    "InputRow",
    "OutputFormat",
    "annotate",
    "check_output_location",
    "doc_to_row",
    "error_row",
    "errors_path_for",
    "input_format_for",
    "is_sharded_output",
    "load_pipeline",
    "output_format_for",
    "prepare_run",
    "read_input",
    "read_questions_file",
    "run_annotation",
]
