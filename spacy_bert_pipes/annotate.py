"""Annotate large collections with a trained pipeline, in restartable chunks.

`read_input` yields the rows of a CSV, JSONL or Parquet file, or of a folder
of `.txt` files or of Parquet files (shards), as `InputRow`s: a row that
cannot be annotated (null text, invalid UTF-8, a bad questions value...)
carries its reason instead of being dropped. `doc_to_row` turns an annotated
Doc into an output row:

    {"id": str, "cats": {label: probability} | None,
     "entities": [{"text", "label", "start", "end", "score"}, ...],
     "answers": doc._.answers or []}

`prepare_run` and `run_annotation` (or `annotate`, both in one call) read the
input in chunks of `chunk_size` rows. Each finished chunk is committed to
`OUTPUT.parts/part-{index:06d}.{format}` plus `part-{index:06d}.errors.jsonl`
(written to a temporary name, fsynced and renamed into place: the part file,
written last, marks the chunk done). `OUTPUT.parts/manifest.json` records the
input's size and mtime and the settings that change the results, so a rerun
resumes an unfinished run only if they match. When every chunk is done the
parts are concatenated into `OUTPUT.errors.jsonl` and then OUTPUT (again
through temporary files and renames; an OUTPUT folder gets the Parquet parts
themselves, one shard per chunk), then the parts folder is renamed away and
deleted. A process killed at any moment leaves either a resumable parts
folder or a finished output; rerunning the same command gives the same bytes
as an uninterrupted run (chunk boundaries do not depend on where a run
stopped, and processing is deterministic on the same device and batch size).
Like spaCy's own commands, a run replaces an existing OUTPUT.

Memory stays flat over any number of rows: the input is streamed, each chunk
runs in `nlp.memory_zone()` (strings that spaCy interns for a chunk are freed
with it), and only the ids seen so far are kept (to report duplicates).
"""

import codecs
import csv
import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Set,
    Tuple,
    Union,
)

import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span

from .convert import ConversionError
from .memory import bound_kernel_caches, trim
from .util import Precision
from .util import load_pipeline as load_with_precision

InputFormat = Literal["auto", "csv", "jsonl", "parquet", "txt"]
OutputFormat = Literal["jsonl", "csv", "parquet"]
INPUT_SUFFIXES: Dict[str, InputFormat] = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
OUTPUT_SUFFIXES: Dict[str, OutputFormat] = {
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
# The output columns, in order; in CSV and Parquet the last three hold JSON text.
OUTPUT_COLUMNS = ("id", "cats", "entities", "answers")
ERRORS_SUFFIX = ".errors.jsonl"
PARTS_SUFFIX = ".parts"
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1
# Without an id column, this is the field JSONL rows may carry their id in.
DEFAULT_ID_FIELD = "id"
# spaCy refuses texts over 1,000,000 characters by default (a guard for its own
# parser and NER); the BERT components read long texts window by window.
DEFAULT_MAX_LENGTH = 10_000_000
# Python's csv module stops at 131,072 characters per field by default.
_CSV_FIELD_LIMIT = 2**31 - 1
_PARQUET_BATCH_ROWS = 1024
# Test-only: seconds to sleep after each committed chunk and after each part
# copied into the final output, so that a test can kill the process at a known
# step (tests/cli/test_cli_annotate.py). Never set it otherwise.
TEST_SLEEP_ENV = "SPACY_BERT_PIPES_ANNOTATE_TEST_SLEEP"
_PART_NAME = re.compile(r"part-(\d+)\.(jsonl|csv|parquet)")


class AnnotateError(ValueError):
    """A problem with the settings or with an earlier, unfinished run."""


@dataclass(frozen=True)
class InputRow:
    """One input row, as read.

    number (int): Its position among the input rows, from 0 (blank lines are
        not rows).
    id (Optional[str]): Its id; None when it could not be read.
    text (Optional[str]): The text to annotate; None for an error row.
    context (Dict[str, Any]): The `nlp.pipe(..., as_tuples=True)` context: the
        row's own questions as `{"questions": {key: question}}`, or `{}`.
    source (str): Where it was read, e.g. "input.csv:12" (the line where it
        starts), "input.parquet:row 7" (0-based) or "docs/a.txt".
    error (Optional[str]): Why the row cannot be annotated, or None.
    """

    number: int
    id: Optional[str]
    text: Optional[str]
    context: Dict[str, Any]
    source: str
    error: Optional[str] = None


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
    chunk_size (int): Rows per committed part.
    max_length (int): Longest text in characters; longer ones are error rows.
    batch_size (int): `nlp.pipe` batch size.
    n_process (int): `nlp.pipe` processes (they start once per chunk).
    overwrite (bool): Discard an unfinished run in `OUTPUT.parts` and start over.
    precision (Optional[Precision]): Run every bert encoder of the pipeline at
        this precision ("bf16", "int8"...); None keeps the saved one.
    """

    input_format: InputFormat = "auto"
    text_column: str = "text"
    id_column: Optional[str] = None
    questions: Dict[str, str] = field(default_factory=dict)
    questions_column: Optional[str] = None
    chunk_size: int = 1000
    max_length: int = DEFAULT_MAX_LENGTH
    batch_size: int = 64
    n_process: int = 1
    overwrite: bool = False
    precision: Optional[Precision] = None


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

    @property
    def errors_path(self) -> Path:
        return errors_path_for(self.output_path)

    def part_path(self, index: int) -> Path:
        return self.parts_dir / f"part-{index:06d}.{self.output_format}"

    def part_errors_path(self, index: int) -> Path:
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
    """

    input_rows: int
    output_rows: int
    error_rows: int
    chunks: int
    resumed_chunks: int
    output_path: Path
    errors_path: Path


# --- reading ---------------------------------------------------------------------


def input_format_for(path: Path, input_format: InputFormat = "auto") -> InputFormat:
    """The format of an input: as given, else by suffix; a folder is "parquet"
    if it holds .parquet files and no .txt files, else "txt".

    path (Path): The input file or folder.
    input_format (InputFormat): "auto" or the format to use.
    RETURNS (InputFormat): "csv", "jsonl", "parquet" or "txt".
    """
    if input_format != "auto":
        return input_format
    if Path(path).is_dir():
        has = {suffix: any(Path(path).rglob(f"*{suffix}")) for suffix in (".txt", ".parquet")}
        return "parquet" if has[".parquet"] and not has[".txt"] else "txt"
    suffix = Path(path).suffix.lower()
    if suffix not in INPUT_SUFFIXES:
        raise ConversionError(
            str(path),
            f"unknown input type {suffix!r}: expected .csv, .jsonl, .parquet or a folder "
            "of .txt or .parquet files (or set the input format)",
        )
    return INPUT_SUFFIXES[suffix]


def read_input(
    path: Path,
    *,
    input_format: InputFormat = "auto",
    text_column: str = "text",
    id_column: Optional[str] = None,
    questions_column: Optional[str] = None,
) -> Iterator[InputRow]:
    """Read the rows of a CSV file (with a header row), a JSONL file (one object
    per line; blank lines are skipped), a Parquet file (in batches of rows), a
    folder of Parquet files (every `*.parquet` below it, sorted by relative
    path, read one after the other as one table) or a folder of `.txt` files
    (every `*.txt` below it, sorted by relative path; the id is that path, the
    text the whole file). Text is read as UTF-8; a leading byte order mark is
    dropped.

    Problems with the whole input (no such column, not a Parquet file, an empty
    CSV) raise a `ConversionError` at once, before any row is yielded. Problems
    with one row make it an error row: a null text, a JSONL row without the text
    field, invalid UTF-8 (reported with its byte offset in the file and its
    line), invalid JSON, a bad id or questions value. An empty text is a valid
    row.

    path (Path): The input file or folder.
    input_format (InputFormat): The format, or "auto" (see `input_format_for`).
    text_column (str): The column or field holding the text.
    id_column (Optional[str]): The column or field holding the id. None: "id"
        where the input has it, else the 0-based row number as a string.
    questions_column (Optional[str]): The column or field holding each row's
        questions, {key: question}; an empty or missing value means none.
    RETURNS (Iterator[InputRow]): The rows, in input order.
    """
    path = Path(path)
    fmt = input_format_for(path, input_format)
    if fmt == "csv":
        header = _csv_header(path)
        for column in (text_column, id_column, questions_column):
            if column is not None and column not in header:
                raise ConversionError(
                    str(path), f"no column {column!r}; the columns are: {_names(header)}"
                )
        use_id = id_column or (DEFAULT_ID_FIELD if DEFAULT_ID_FIELD in header else None)
        return _csv_rows(path, text_column, use_id, questions_column)
    if fmt == "jsonl":
        _check_first_record(path, text_column)
        return _jsonl_rows(path, text_column, id_column, questions_column)
    if fmt == "parquet":
        shards = _input_files(path, fmt)
        schemas = [(shard, _parquet_file(shard).schema_arrow.names) for shard in shards]
        use_id = id_column or (DEFAULT_ID_FIELD if DEFAULT_ID_FIELD in schemas[0][1] else None)
        for shard, names in schemas:
            for column in (text_column, use_id, questions_column):
                if column is not None and column not in names:
                    raise ConversionError(
                        str(shard), f"no column {column!r}; the columns are: {_names(names)}"
                    )
        return _parquet_rows(path, shards, text_column, use_id, questions_column)
    if not path.is_dir():
        raise ConversionError(str(path), "a .txt input must be a folder of .txt files")
    if id_column is not None or questions_column is not None:
        raise ConversionError(
            str(path),
            "a folder of .txt files has no columns: the id is the file's relative path "
            "(no id or questions column)",
        )
    return _txt_rows(path, _folder_files(path, ".txt"))


def read_questions_file(path: Path) -> Dict[str, str]:
    """Read a JSON object {key: question} of questions to ask of every doc.

    path (Path): The JSON file.
    RETURNS (Dict[str, str]): The questions, in file order.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConversionError(str(path), f"not a JSON file: {err}") from None
    try:
        return _as_questions(data)
    except _RowError as err:
        raise ConversionError(str(path), str(err)) from None


class _RowError(Exception):
    """Why one row cannot be annotated (becomes an error row, never escapes)."""


_MISSING = object()


def _make_row(
    number: int, source: str, id_value: Any, text_value: Any, questions_value: Any = None
) -> InputRow:
    """A row from its raw values, or an error row saying what is wrong."""
    try:
        doc_id = _as_id(id_value)
    except _RowError as err:
        return InputRow(number, None, None, {}, source, str(err))
    try:
        text = _as_text(text_value)
        questions = _as_questions(questions_value)
    except _RowError as err:
        return InputRow(number, doc_id, None, {}, source, str(err))
    return InputRow(number, doc_id, text, {"questions": questions} if questions else {}, source)


def _as_id(value: Any) -> str:
    if value is None:
        raise _RowError("id is null")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _RowError(f"id must be a string or an integer, found {_show(value)}")
    doc_id = str(value)
    _check_unicode(doc_id, "id")
    return doc_id


def _as_text(value: Any) -> str:
    if value is None:
        raise _RowError("text is null")
    if isinstance(value, bytes):  # a Parquet binary or string column, read as bytes
        try:
            return value.decode("utf8")
        except UnicodeDecodeError as err:
            raise _RowError(
                f"invalid UTF-8 in the text at byte {err.start}: {value[err.start : err.end]!r}"
            ) from None
    if not isinstance(value, str):
        raise _RowError(f"text must be a string, found {_show(value)}")
    _check_unicode(value, "text")
    return value


def _as_questions(value: Any) -> Dict[str, str]:
    if value is None or value == "":
        return {}
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise _RowError(f"questions are not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise _RowError(f"questions must be a JSON object {{key: question}}, found {_show(value)}")
    for key, question in value.items():
        if not isinstance(key, str) or not key:
            raise _RowError(f"question keys must be non-empty strings, found {key!r}")
        if not isinstance(question, str) or not question.strip():
            raise _RowError(f"the question for {key!r} is empty or not a string")
        _check_unicode(question, f"the question for {key!r}")
    return dict(value)


def _check_unicode(text: str, what: str) -> None:
    """JSON escapes can make lone surrogates, which no output can encode."""
    try:
        text.encode("utf8")
    except UnicodeEncodeError as err:
        raise _RowError(
            f"{what} is not valid Unicode: a lone surrogate {text[err.start]!r} "
            f"at character {err.start}"
        ) from None


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names) or "none"


def _invalid_utf8(raw: bytes, file_offset: int, line: int) -> Optional[str]:
    """The reason a line's bytes are not UTF-8, or None if they are."""
    try:
        raw.decode("utf8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.end]
        return f"invalid UTF-8 at byte offset {file_offset + err.start} (line {line}): {bad!r}"
    return None


def _lines(path: Path) -> Iterator[Tuple[int, int, bytes]]:
    """(line number from 1, byte offset in the file, bytes) of each line;
    a leading byte order mark is skipped."""
    with path.open("rb") as file_:
        offset = 0
        for number, raw in enumerate(file_, 1):
            start = offset
            offset += len(raw)
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, start = raw[len(codecs.BOM_UTF8) :], start + len(codecs.BOM_UTF8)
            yield number, start, raw


def _csv_reader(path: Path, consumed: List[Tuple[int, int, bytes]]) -> Iterator[List[str]]:
    """csv.reader over the file's lines decoded with surrogateescape, so that an
    invalid byte spoils only its row; `consumed` collects the raw lines read."""
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))

    def decoded() -> Iterator[str]:
        for line in _lines(path):
            consumed.append(line)
            yield line[2].decode("utf8", "surrogateescape")

    return csv.reader(decoded())


def _csv_header(path: Path) -> List[str]:
    consumed: List[Tuple[int, int, bytes]] = []
    try:
        header = next(_csv_reader(path, consumed), None)
    except csv.Error as err:
        raise ConversionError(f"{path}:1", f"unreadable header row: {err}") from None
    if header is None:
        raise ConversionError(str(path), "empty file: expected a header row")
    for number, offset, raw in consumed:
        reason = _invalid_utf8(raw, offset, number)
        if reason is not None:
            raise ConversionError(f"{path}:{number}", f"header row: {reason}")
    return header


def _csv_rows(
    path: Path, text_column: str, id_column: Optional[str], questions_column: Optional[str]
) -> Iterator[InputRow]:
    consumed: List[Tuple[int, int, bytes]] = []
    reader = _csv_reader(path, consumed)
    header = next(reader)
    column = {name: i for i, name in reversed(list(enumerate(header)))}  # first one wins
    number = 0
    while True:
        consumed.clear()
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            source = f"{path.name}:{consumed[0][0] if consumed else '?'}"
            yield InputRow(number, None, None, {}, source, f"unreadable CSV: {err}")
            number += 1
            continue
        if not record:  # a blank line
            continue
        source = f"{path.name}:{consumed[0][0]}"
        values = {name: record[i] for name, i in column.items() if i < len(record)}
        raw_id = values.get(id_column) if id_column is not None else str(number)
        reason: Optional[str]
        if len(record) != len(header):
            reason = f"expected {len(header)} fields as in the header, found {len(record)}"
        else:
            reason = next(filter(None, (_invalid_utf8(r, o, n) for n, o, r in consumed)), None)
        if reason is not None:
            yield InputRow(number, _readable(raw_id), None, {}, source, reason)
        else:
            questions = values[questions_column] if questions_column is not None else None
            yield _make_row(number, source, raw_id, values[text_column], questions)
        number += 1


def _readable(value: Optional[str]) -> Optional[str]:
    """An id from a row with invalid bytes, shown with replacement characters."""
    if value is None:
        return None
    return value.encode("utf8", "surrogateescape").decode("utf8", "replace")


def _check_first_record(path: Path, text_column: str) -> None:
    """A wrong --text-column fails at once: the first JSONL object must have it."""
    for number, _, raw in _lines(path):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return  # an error row; the next rows may be fine
        if isinstance(record, dict) and text_column not in record:
            raise ConversionError(
                f"{path}:{number}",
                f"no field {text_column!r} in the first object; its fields are: {_names(record)}",
            )
        return


def _jsonl_rows(
    path: Path, text_column: str, id_column: Optional[str], questions_column: Optional[str]
) -> Iterator[InputRow]:
    number = 0
    for line, offset, raw in _lines(path):
        if not raw.strip():
            continue
        source = f"{path.name}:{line}"
        reason = _invalid_utf8(raw, offset, line)
        if reason is not None:
            # The row's id, if the rest of the line reads, helps to find it.
            try:
                record = json.loads(raw.decode("utf8", "replace"))
                raw_id = _jsonl_id(record, id_column, number)
                doc_id = _as_id(raw_id) if raw_id is not _MISSING else None
            except (ValueError, _RowError):
                doc_id = None
            yield InputRow(number, doc_id, None, {}, source, reason)
            number += 1
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as err:
            reason = f"invalid JSON: {err.msg} (column {err.colno})"
            yield InputRow(number, None, None, {}, source, reason)
            number += 1
            continue
        if not isinstance(record, dict):
            reason = f"expected a JSON object, found {_show(record)}"
            yield InputRow(number, None, None, {}, source, reason)
        else:
            raw_id = _jsonl_id(record, id_column, number)
            text = record.get(text_column, _MISSING)
            if raw_id is _MISSING or text is _MISSING:
                name = text_column if text is _MISSING else id_column
                reason = f"no field {name!r}; the fields are: {_names(record)}"
                doc_id = None if raw_id is _MISSING else _as_optional_id(raw_id)
                yield InputRow(number, doc_id, None, {}, source, reason)
            else:
                questions = record.get(questions_column) if questions_column else None
                yield _make_row(number, source, raw_id, text, questions)
        number += 1


def _jsonl_id(record: Any, id_column: Optional[str], number: int) -> Any:
    if not isinstance(record, dict):
        return _MISSING
    if id_column is None:
        return record.get(DEFAULT_ID_FIELD, str(number))
    return record.get(id_column, _MISSING)


def _as_optional_id(value: Any) -> Optional[str]:
    try:
        return _as_id(value)
    except _RowError:
        return None


def _parquet_file(path: Path) -> Any:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pyarrow.ArrowException, OSError) as err:
        raise ConversionError(str(path), f"not a readable Parquet file: {err}") from None


def _parquet_rows(
    path: Path,
    shards: List[Path],
    text_column: str,
    id_column: Optional[str],
    questions_column: Optional[str],
) -> Iterator[InputRow]:
    """The rows of each shard in turn (`[path]` for a file); a row's source is
    its shard's path (relative to a folder) and its 0-based row in the shard."""
    import pyarrow as pa

    columns = [c for c in (text_column, id_column, questions_column) if c is not None]
    number = 0
    for shard in shards:
        name = shard.relative_to(path).as_posix() if shard != path else path.name
        batches = _parquet_file(shard).iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=columns)
        shard_row = 0
        for batch in batches:
            texts = batch.column(text_column)
            # Strings are read as bytes and decoded here, so that invalid UTF-8
            # is an error row instead of an exception for the whole batch.
            if pa.types.is_string(texts.type):
                texts = texts.cast(pa.binary())
            elif pa.types.is_large_string(texts.type):
                texts = texts.cast(pa.large_binary())
            text_values = texts.to_pylist()
            ids = batch.column(id_column).to_pylist() if id_column is not None else None
            questions = (
                batch.column(questions_column).to_pylist() if questions_column is not None else None
            )
            for i, text in enumerate(text_values):
                raw_id = ids[i] if ids is not None else str(number)
                row_questions = questions[i] if questions is not None else None
                source = f"{name}:row {shard_row}"
                yield _make_row(number, source, raw_id, text, row_questions)
                number += 1
                shard_row += 1


def _folder_files(folder: Path, suffix: str) -> List[str]:
    """The relative paths of the files named *suffix in a folder and below, sorted."""
    files = sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob(f"*{suffix}") if p.is_file()
    )
    if not files:
        raise ConversionError(str(folder), f"no {suffix} files in this folder or below it")
    return files


def _txt_rows(folder: Path, files: List[str]) -> Iterator[InputRow]:
    for number, name in enumerate(files):
        source = f"{folder.name}/{name}"
        try:
            raw = (folder / name).read_bytes()
        except OSError as err:
            yield InputRow(number, name, None, {}, source, f"cannot read the file: {err}")
            continue
        start = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
        try:
            text = raw[start:].decode("utf8")
        except UnicodeDecodeError as err:
            offset = start + err.start
            line = raw.count(b"\n", 0, offset) + 1
            bad = raw[offset : start + err.end]
            reason = f"invalid UTF-8 at byte offset {offset} (line {line}): {bad!r}"
            yield InputRow(number, name, None, {}, f"{source}:{line}", reason)
            continue
        yield InputRow(number, name, text, {}, source)


# --- output rows -------------------------------------------------------------------


def doc_to_row(doc: Doc, doc_id: Optional[str] = None) -> Dict[str, Any]:
    """The output row of an annotated Doc (keys in `OUTPUT_COLUMNS` order).

    doc (Doc): The annotated Doc.
    doc_id (Optional[str]): The row's id.
    RETURNS (Dict[str, Any]): "id"; "cats": {label: probability}, or None when
        no text classifier set `doc.cats`; "entities": one {"text", "label",
        "start", "end", "score"} per entity of `doc.ents` (character offsets,
        end exclusive; the score is `span._.bert_ner_score`, None when the
        entity has none); "answers": `doc._.answers` (see bert_qa), or [].
    """
    has_score = Span.has_extension("bert_ner_score")
    entities = [
        {
            "text": ent.text,
            "label": ent.label_,
            "start": ent.start_char,
            "end": ent.end_char,
            "score": _plain(ent._.bert_ner_score) if has_score else None,
        }
        for ent in doc.ents
    ]
    answers = doc._.get("answers") if Doc.has_extension("answers") else None
    return {
        "id": doc_id,
        "cats": {label: float(score) for label, score in doc.cats.items()} or None,
        "entities": entities,
        "answers": _plain(answers or []),
    }


def _plain(value: Any) -> Any:
    """Plain Python values for JSON: numpy scalars become floats and ints."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def error_row(row: InputRow) -> Dict[str, Any]:
    """The errors-file record of an error row."""
    return {"id": row.id, "row": row.number, "source": row.source, "reason": row.error}


def _json_line(record: Dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf8")


def _write_rows(path: Path, rows: List[Dict[str, Any]], fmt: str) -> None:
    """A part: JSONL lines, CSV rows without the header, or a Parquet file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(_arrow_table(rows), path)
        return
    with path.open("wb") as file_:
        if fmt == "jsonl":
            file_.writelines(_json_line(row) for row in rows)
        else:
            file_.write(_csv_lines([_cells(row) for row in rows]))


def _cells(row: Dict[str, Any]) -> List[str]:
    """A row for CSV and Parquet: the id, then the other fields as JSON text
    ("null" for the cats of a pipeline without a text classifier)."""
    return [row["id"]] + [json.dumps(row[c], ensure_ascii=False) for c in OUTPUT_COLUMNS[1:]]


def _csv_lines(records: List[List[str]]) -> bytes:
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(records)
    return buffer.getvalue().encode("utf8")


def _arrow_table(rows: List[Dict[str, Any]]) -> Any:
    import pyarrow as pa

    schema = pa.schema([(c, pa.string()) for c in OUTPUT_COLUMNS])
    cells = [_cells(row) for row in rows]
    return pa.table([[r[i] for r in cells] for i in range(len(OUTPUT_COLUMNS))], schema=schema)


# --- the chunked run ---------------------------------------------------------------


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


def is_sharded_output(path: Path) -> bool:
    """Whether OUTPUT is a folder of Parquet shards: it is an existing folder,
    or a path without a suffix."""
    return Path(path).is_dir() or not Path(path).suffix


def errors_path_for(output_path: Path) -> Path:
    """OUTPUT.errors.jsonl: one JSON object per row that could not be annotated."""
    return output_path.with_name(output_path.name + ERRORS_SUFFIX)


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
    RETURNS (AnnotateRun): The run, ready for `run_annotation`.
    """
    input_path, output_path = Path(input_path), Path(output_path)
    if options.chunk_size < 1 or options.batch_size < 1 or options.max_length < 1:
        raise AnnotateError("chunk_size, batch_size and max_length must be at least 1")
    output_format = output_format_for(output_path)
    input_format = input_format_for(input_path, options.input_format)
    if output_path.resolve() == input_path.resolve():
        raise AnnotateError(f"{output_path}: the output would overwrite the input")
    _read(input_path, options)  # checks the columns now
    total_rows = None
    if input_format == "parquet":
        shards = _input_files(input_path, input_format)
        total_rows = sum(_parquet_file(shard).metadata.num_rows for shard in shards)
    elif input_format == "txt":
        total_rows = len(_input_files(input_path, input_format))
    manifest = _manifest(pipeline, input_path, input_format, output_format, options)
    parts_dir = output_path.with_name(output_path.name + PARTS_SUFFIX)
    done = _committed_chunks(parts_dir, manifest, output_format, options.overwrite)
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
        sharded=is_sharded_output(output_path) or _sibling(output_path, ".tmp").is_dir(),
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
        nlp = load_with_precision(pipeline, precision=options.precision)
    except ValueError as err:  # a precision, but no bert encoder to set it on
        raise AnnotateError(str(err)) from None
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


def run_annotation(
    run: AnnotateRun,
    nlp: Language,
    *,
    progress: bool = False,
    on_chunk: Optional[Callable[[int], None]] = None,
) -> AnnotateSummary:
    """Annotate the chunks not done yet, then write OUTPUT and
    OUTPUT.errors.jsonl from the parts and delete `OUTPUT.parts`.

    run (AnnotateRun): The prepared run (see `prepare_run`).
    nlp (Language): The pipeline (see `load_pipeline`).
    progress (bool): Show a progress bar (stderr) over the rows.
    on_chunk (Optional[Callable[[int], None]]): Called after each chunk it
        annotates with the number of input rows read so far.
    RETURNS (AnnotateSummary): Row counts.
    """
    options = run.options
    bar = None
    input_rows = error_rows = resumed_rows = 0
    n_chunks = 0
    _start_parts(run)
    try:
        for index, chunk in _checked_chunks(run):
            n_chunks = index + 1
            input_rows += len(chunk)
            if index in run.done:
                error_rows += _count_lines(run.part_errors_path(index))
                resumed_rows += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                continue
            if bar is None and progress:
                bar = _progress_bar(run, initial=resumed_rows)
            outputs, errors = _annotate_chunk(nlp, chunk, options)
            # The errors first: the part file, committed last, marks the chunk done.
            _commit_rows(run.part_errors_path(index), errors, "jsonl")
            _commit_rows(run.part_path(index), outputs, run.output_format)
            error_rows += len(errors)
            if bar is not None:
                bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(input_rows)
            _test_pause()
    finally:
        if bar is not None:
            bar.close()
    return _finish(run, n_chunks, input_rows, error_rows)


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
    and `run_annotation` in one call. Resumes an unfinished run of the same
    settings.

    pipeline (str): A folder saved with `nlp.to_disk`, or a package name.
    input_path (Path): A .csv, .jsonl or .parquet file, or a folder of .txt files.
    output_path (Path): A .jsonl, .csv or .parquet file to write.
    options (AnnotateOptions): The settings.
    progress (bool): Show a progress bar.
    on_chunk (Optional[Callable[[int], None]]): See `run_annotation`.
    RETURNS (AnnotateSummary): Row counts.
    """
    run = prepare_run(pipeline, input_path, output_path, options)
    return run_annotation(
        run, load_pipeline(pipeline, options), progress=progress, on_chunk=on_chunk
    )


def _input_files(path: Path, input_format: str) -> List[Path]:
    """The files of an input: a folder's .txt or .parquet files, or the file."""
    if not path.is_dir():
        return [path]
    suffix = ".parquet" if input_format == "parquet" else ".txt"
    return [path / name for name in _folder_files(path, suffix)]


def _read(path: Path, options: AnnotateOptions) -> Iterator[InputRow]:
    return read_input(
        path,
        input_format=options.input_format,
        text_column=options.text_column,
        id_column=options.id_column,
        questions_column=options.questions_column,
    )


def _chunks(rows: Iterator[InputRow], size: int) -> Iterator[List[InputRow]]:
    while True:
        chunk = list(itertools.islice(rows, size))
        if not chunk:
            return
        yield chunk


def _checked_chunks(run: AnnotateRun) -> Iterator[Tuple[int, List[InputRow]]]:
    """The input's chunks, numbered from 0, each row checked (`_check_row`), as
    both engines read them."""
    seen: Set[str] = set()
    options = run.options
    for index, chunk in enumerate(_chunks(_read(run.input_path, options), options.chunk_size)):
        yield index, [_check_row(row, seen, options.max_length) for row in chunk]


def _check_row(row: InputRow, seen: Set[str], max_length: int) -> InputRow:
    """Checks that need the rows before this one (or the settings)."""
    if row.id is not None:
        if row.id in seen:
            return replace(
                row, text=None, context={}, error=f"duplicate id {row.id!r}: an earlier row has it"
            )
        seen.add(row.id)
    if row.error is None and row.text is not None and len(row.text) > max_length:
        error = f"the text has {len(row.text)} characters, more than the limit ({max_length})"
        return replace(row, text=None, context={}, error=error)
    return row


def _annotate_chunk(
    nlp: Language, rows: List[InputRow], options: AnnotateOptions
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The output rows and error records of a chunk, each in input order."""
    good = [row for row in rows if row.error is None]
    inputs = [(row.text, _context(row, options.questions)) for row in good]
    # Strings interned for this chunk are freed with it: memory stays flat.
    with nlp.memory_zone():
        results = _pipe(nlp, inputs, options.batch_size, options.n_process)
        outputs: List[Dict[str, Any]] = []
        errors: List[Dict[str, Any]] = []
        found = iter(zip(good, results))
        for row in rows:
            if row.error is not None:
                errors.append(error_row(row))
                continue
            _, result = next(found)
            if isinstance(result, str):
                errors.append(error_row(replace(row, error=result)))
            else:
                outputs.append(doc_to_row(result, row.id))
    del results
    trim()  # the chunk's tensors and docs are gone: hand their memory back (see `memory`)
    return outputs, errors


def _context(row: InputRow, questions: Dict[str, str]) -> Dict[str, Any]:
    if not questions:
        return row.context
    return {"questions": {**questions, **row.context.get("questions", {})}}


def _pipe(
    nlp: Language, inputs: List[Tuple[Any, Dict[str, Any]]], batch_size: int, n_process: int
) -> List[Union[Doc, str]]:
    """The Docs of a chunk. If the pipeline fails on the chunk, each doc is run
    alone, and those that fail alone become error rows (a string, the reason);
    if every doc fails, the pipeline is broken, not the data: it raises."""
    try:
        docs = nlp.pipe(inputs, as_tuples=True, batch_size=batch_size, n_process=n_process)
        return [doc for doc, _ in docs]
    except Exception as err:  # isolated below, per doc; re-raised if every doc fails
        first_error = err
    results: List[Union[Doc, str]] = []
    for item in inputs:
        try:
            results.append(next(iter(nlp.pipe([item], as_tuples=True)))[0])
        except Exception as err:  # the reason goes to the errors file
            results.append(f"the pipeline failed on this text: {type(err).__name__}: {err}")
    if all(isinstance(result, str) for result in results):
        raise first_error
    return results


def _progress_bar(run: AnnotateRun, initial: int) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=run.total_rows,
        initial=initial,
        unit=" docs",
        desc="Annotating",
        file=sys.stderr,
        dynamic_ncols=True,
    )


# --- parts, manifest and the final output ---------------------------------------


def _manifest(
    pipeline: str,
    input_path: Path,
    input_format: str,
    output_format: str,
    options: AnnotateOptions,
) -> Dict[str, Any]:
    """What the output depends on: the input's identity and the settings that
    change results (not batch_size or n_process)."""
    if input_path.is_dir():
        stats = [path.stat() for path in _input_files(input_path, input_format)]
        input_id: Dict[str, Any] = {
            "files": len(stats),
            "size": sum(s.st_size for s in stats),
            "mtime_ns": max(s.st_mtime_ns for s in stats),
        }
    else:
        stat = input_path.stat()
        input_id = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {
        "version": MANIFEST_VERSION,
        "input": {"path": str(input_path.resolve()), "format": input_format, **input_id},
        "pipeline": _pipeline_id(pipeline),
        "options": {
            "text_column": options.text_column,
            "id_column": options.id_column,
            "questions": options.questions,
            "questions_column": options.questions_column,
            "chunk_size": options.chunk_size,
            "max_length": options.max_length,
            "precision": options.precision,
            "output_format": output_format,
        },
    }


def _pipeline_id(pipeline: str) -> Dict[str, Any]:
    """A folder's path and a digest of its files' sizes and mtimes (a retrained
    pipeline differs), or a package's name and version."""
    path = Path(pipeline)
    if not path.exists():
        return {"package": pipeline, "version": spacy.util.get_package_version(pipeline)}
    files = sorted(p for p in path.rglob("*") if p.is_file())
    listing = [
        (p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    ]
    digest = hashlib.sha256(json.dumps(listing).encode("utf8")).hexdigest()
    return {"path": str(path.resolve()), "files_digest": digest}


def _committed_chunks(
    parts_dir: Path, manifest: Dict[str, Any], output_format: str, overwrite: bool
) -> Set[int]:
    """The indices of the chunks an unfinished run with this manifest committed
    (none with `overwrite`). Reads only: `_start_parts` changes the folder."""
    manifest_path = parts_dir / MANIFEST_NAME
    if overwrite or not parts_dir.exists():
        return set()
    if not manifest_path.exists():
        # A run killed before its manifest was written leaves at most .tmp files.
        if any(not p.name.endswith(".tmp") for p in parts_dir.iterdir()):
            raise AnnotateError(
                f"{parts_dir} exists but has no {MANIFEST_NAME}, so it is not an "
                f"unfinished annotate run; remove it, or pass --overwrite"
            )
        return set()
    try:
        found = json.loads(manifest_path.read_text(encoding="utf8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AnnotateError(f"{manifest_path}: unreadable ({err}); pass --overwrite") from None
    differences = _differences(found, manifest)
    if differences:
        raise AnnotateError(
            f"{parts_dir} holds an unfinished run with other settings or input:\n  "
            + "\n  ".join(differences)
            + "\nRerun with the same input and settings to resume it, or pass "
            "--overwrite to discard it and start over."
        )
    done = set()
    for path in parts_dir.iterdir():
        match = _PART_NAME.fullmatch(path.name)
        if match and match[2] == output_format:
            index = int(match[1])
            if (parts_dir / f"part-{index:06d}{ERRORS_SUFFIX}").exists():
                done.add(index)
    return done


def _start_parts(run: AnnotateRun) -> None:
    """Set up `OUTPUT.parts` as `prepare_run` found it: fresh (with the
    manifest written first), or kept for resuming, less any half-written part."""
    run.output_path.parent.mkdir(parents=True, exist_ok=True)
    _remove_tree(_finished_dir(run.parts_dir))  # a run killed while deleting its parts
    if run.options.overwrite:
        _remove_tree(run.parts_dir)
    run.parts_dir.mkdir(exist_ok=True)
    for leftover in run.parts_dir.glob("*.tmp"):  # a kill while writing a part
        leftover.unlink()
    manifest_path = run.parts_dir / MANIFEST_NAME
    if not manifest_path.exists():
        text = json.dumps(run.manifest, indent=2) + "\n"
        _commit(manifest_path, lambda p: p.write_text(text, encoding="utf8"))


def _differences(found: Any, expected: Any, prefix: str = "") -> List[str]:
    if isinstance(found, dict) and isinstance(expected, dict):
        out = []
        for key in sorted(set(found) | set(expected), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            out.extend(_differences(found.get(key), expected.get(key), name))
        return out
    if found != expected:
        return [f"{prefix}: was {json.dumps(found)}, now {json.dumps(expected)}"]
    return []


def _finish(run: AnnotateRun, n_chunks: int, input_rows: int, error_rows: int) -> AnnotateSummary:
    """Concatenate the parts into OUTPUT.errors.jsonl, then OUTPUT (so a new
    OUTPUT comes with its errors file; an OUTPUT folder gets the parts), then
    remove the parts folder: renamed first, so that a kill while deleting it
    leaves no half-deleted run to resume (the next run removes the leftover).
    Both engines end here."""
    parts = [run.part_path(i) for i in range(n_chunks)]
    errors = [run.part_errors_path(i) for i in range(n_chunks)]
    _commit(run.errors_path, lambda p: _concatenate(errors, p, "jsonl"))
    if run.sharded:
        _commit_shards(run.output_path, parts)
    else:
        _commit(run.output_path, lambda p: _concatenate(parts, p, run.output_format))
    finished = _finished_dir(run.parts_dir)
    _remove_tree(finished)
    os.replace(run.parts_dir, finished)
    _fsync_dir(run.parts_dir.parent)
    _remove_tree(finished)
    return AnnotateSummary(
        input_rows=input_rows,
        output_rows=input_rows - error_rows,
        error_rows=error_rows,
        chunks=n_chunks,
        resumed_chunks=len(run.done),
        output_path=run.output_path,
        errors_path=run.errors_path,
    )


def _concatenate(parts: List[Path], path: Path, fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with pq.ParquetWriter(path, _arrow_table([]).schema) as writer:
            for part in parts:
                table = pq.read_table(part)
                if table.num_rows:
                    writer.write_table(table)
                _test_pause()
        return
    with path.open("wb") as out:
        if fmt == "csv":
            out.write(_csv_lines([list(OUTPUT_COLUMNS)]))
        for part in parts:
            with part.open("rb") as file_:
                shutil.copyfileobj(file_, out)
            _test_pause()


def _commit_shards(path: Path, parts: List[Path]) -> None:
    """Replace OUTPUT with a folder of the Parquet parts, one shard per chunk
    (hard links to the parts, or copies across file systems). The folder is
    built as OUTPUT.tmp; the old OUTPUT is renamed to OUTPUT.old, the new one
    renamed in, and the old one deleted. A kill in between leaves the parts
    folder, and the rerun does this step again."""
    tmp, old = _sibling(path, ".tmp"), _sibling(path, ".old")
    _remove_path(tmp)
    tmp.mkdir()
    for part in parts:
        try:
            os.link(part, tmp / part.name)
        except OSError:  # another file system, or no hard links
            _commit(tmp / part.name, functools.partial(shutil.copyfile, part))
        _test_pause()
    _fsync_dir(tmp)
    _remove_path(old)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    _remove_path(old)


def _commit_rows(path: Path, rows: List[Dict[str, Any]], fmt: str) -> None:
    _commit(path, lambda tmp: _write_rows(tmp, rows, fmt))


def _commit(path: Path, write: Callable[[Path], Any]) -> None:
    """Write a file atomically: to a temporary name in the same folder, fsync,
    then rename over `path` (and fsync the folder, so the rename is durable)."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    with tmp.open("rb") as file_:
        os.fsync(file_.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _finished_dir(parts_dir: Path) -> Path:
    return parts_dir.with_name(parts_dir.name + ".finished")


def _remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _remove_path(path: Path) -> None:
    """Remove a file or a folder, if there is one."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _count_lines(path: Path) -> int:
    with path.open("rb") as file_:
        return sum(1 for _ in file_)


def _test_pause() -> None:
    seconds = os.environ.get(TEST_SLEEP_ENV)
    if seconds:
        time.sleep(float(seconds))
