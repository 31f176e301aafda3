"""The plain data of an annotation run: its settings, the prepared run (with
the names of its part files) and its summary. No I/O here."""

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, FrozenSet, Literal, Optional, Tuple

from ..io.output import (
    ERRORS_SUFFIX,
    OutputColumns,
    VectorColumn,
    errors_path_for,
    timing_path_for,
)
from ..io.readers import InputFormat
from ..loading import Precision

# spaCy refuses texts over 1,000,000 characters by default (a guard for its own
# parser and NER); the BERT components read long texts window by window.
DEFAULT_MAX_LENGTH = 10_000_000
PARTS_SUFFIX = ".parts"
# A committed part: `part-{index:06d}.{format}`, beside its errors part.
PART_NAME = re.compile(r"part-(\d+)\.(jsonl|csv|parquet)")
VectorsDtype = Literal["float32", "float16"]
VECTORS_DTYPES = ("float32", "float16")


class AnnotateError(ValueError):
    """A problem with the settings or with an earlier, unfinished run."""


@dataclass(frozen=True)
class AnnotateOptions:
    """The settings of an annotation run.

    input_format (InputFormat): "auto" infers it from the suffix (a folder is
        "parquet" if it holds .parquet files and no .txt files, else "txt").
    text_column (str): The column or field holding the text.
    id_column (Optional[str]): The column or field holding the id. None: "id"
        where the input has it, else the 0-based row number as a string.
    questions (Dict[str, str]): Questions asked of every doc besides the
        pipeline's own, {key: question}.
    questions_column (Optional[str]): A column or field holding each row's
        own questions: a JSON object (or, in JSONL and Parquet, an object).
    keep_columns (Tuple[str, ...]): Input columns or fields carried into each
        output row, after the id, in this order (the text column may be one).
    chunk_size (int): Rows per committed part.
    max_length (int): Longest text in characters; longer ones are error rows.
    batch_size (int): `nlp.pipe` batch size.
    n_process (int): `nlp.pipe` processes (they start once per chunk; forked,
        so CPU only).
    workers (int): Worker processes that each load the pipeline and annotate
        whole chunks (see `annotate.workers`); 1 annotates in this process.
        `runtime.auto_workers` gives a number for the machine.
    gpu_id (int): The GPU to run on, -1 for the CPU. Workers each load the
        pipeline onto it; with one worker, `annotate` calls
        `spacy.require_gpu(gpu_id)` in this process.
    overwrite (bool): Discard an unfinished run in `OUTPUT.parts` and start over.
    precision (Optional[Precision]): Run every bert encoder of the pipeline at
        this precision ("bf16", "int8"...); None keeps the saved one.
    reproducible (bool): Batch so that a doc's output does not depend on the
        other docs of its batch or chunk (see `loading.set_reproducible`).
    vectors (bool): Add a "vector" column: every doc's `doc.vector` (see
        `annotate.vectors`; JSONL and Parquet only).
    vectors_dtype (VectorsDtype): "float32", or "float16" (Parquet: a float16
        column; JSONL: values rounded through float16).
    """

    input_format: InputFormat = "auto"
    text_column: str = "text"
    id_column: Optional[str] = None
    questions: Dict[str, str] = field(default_factory=dict)
    questions_column: Optional[str] = None
    keep_columns: Tuple[str, ...] = ()
    chunk_size: int = 1000
    max_length: int = DEFAULT_MAX_LENGTH
    batch_size: int = 64
    n_process: int = 1
    workers: int = 1
    gpu_id: int = -1
    overwrite: bool = False
    precision: Optional[Precision] = None
    reproducible: bool = False
    vectors: bool = False
    vectors_dtype: VectorsDtype = "float32"


@dataclass(frozen=True)
class AnnotateRun:
    """A prepared run: its paths, settings and the chunks already done.

    input_path (Path): The input file or folder.
    input_format (str): "csv", "jsonl", "parquet" or "txt".
    output_path (Path): The output file, or folder of Parquet shards.
    output_format (str): "jsonl", "csv" or "parquet".
    parts_dir (Path): `OUTPUT.parts`, holding the manifest and committed chunks.
    options (AnnotateOptions): The settings.
    manifest (Dict[str, Any]): What the output depends on: the input's path,
        size and mtime, the pipeline and the settings that change results.
    done (FrozenSet[int]): Indices of the chunks committed by an earlier run.
    total_rows (Optional[int]): The number of rows, where known without reading
        them all (Parquet, .txt folders).
    sharded (bool): OUTPUT is a folder of Parquet shards, one per chunk.
    columns (Optional[OutputColumns]): OUTPUT's columns: set by the engine
        from the loaded pipeline (`columns.with_columns`) before any chunk;
        None until then.
    started (float): `time.perf_counter()` when `prepare_run` began: the run's
        wall time (`timing_path`) counts from it, the pipeline's loading included.
    """

    input_path: Path
    input_format: str
    output_path: Path
    output_format: str
    parts_dir: Path
    options: AnnotateOptions
    manifest: Dict[str, Any]
    done: FrozenSet[int]
    total_rows: Optional[int] = None
    sharded: bool = False
    columns: Optional[OutputColumns] = None
    started: float = field(default_factory=time.perf_counter)

    @property
    def vectors(self) -> Optional[VectorColumn]:
        """The "vector" column, with its width, or None."""
        return self.columns.vectors if self.columns is not None else None

    @property
    def errors_path(self) -> Path:
        return errors_path_for(self.output_path)

    @property
    def timing_path(self) -> Path:
        """`<OUTPUT stem>_time.json`, written when the run finishes (see
        `annotate.timing`)."""
        return timing_path_for(self.output_path)

    def part_path(self, index: int) -> Path:
        """The part of chunk `index`: its output rows (written last: it marks
        the chunk done)."""
        return self.parts_dir / f"part-{index:06d}.{self.output_format}"

    def part_errors_path(self, index: int) -> Path:
        """The errors part of chunk `index`: its error records."""
        return self.parts_dir / f"part-{index:06d}{ERRORS_SUFFIX}"


@dataclass(frozen=True)
class AnnotateSummary:
    """What a run did. `input_rows == output_rows + error_rows` always.

    input_rows (int): Rows read from the input.
    output_rows (int): Rows written to the output.
    error_rows (int): Rows written to the errors file.
    chunks (int): Chunks in the input.
    resumed_chunks (int): Chunks committed by an earlier run and not redone.
    output_path (Path): The output file.
    errors_path (Path): The errors file (always written, maybe empty).
    timing_path (Path): The timing file (see `annotate.timing`).
    seconds (float): This run's wall time, from `prepare_run` to OUTPUT
        written (a resumed run: its own chunks only).
    """

    input_rows: int
    output_rows: int
    error_rows: int
    chunks: int
    resumed_chunks: int
    output_path: Path
    errors_path: Path
    timing_path: Path
    seconds: float
