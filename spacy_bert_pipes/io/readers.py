"""The input readers: the rows of a CSV, JSONL or Parquet file, or of a folder
of `.txt` files or of Parquet files (shards), as `InputRow`s.

`read_input` dispatches on the format (`input_format_for`). Problems with the
whole input raise a `ConversionError` before any row is yielded; a problem
with one row makes it an error row (see `rows`), located by its line (CSV,
JSONL), its row in a shard (Parquet) or its file (.txt).
"""

import codecs
import csv
import json
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Literal, Optional, Sequence, Tuple

from .errors import ConversionError
from .rows import (
    InputRow,
    RowError,
    as_id,
    as_optional_id,
    as_questions,
    make_row,
    names,
    show,
)

InputFormat = Literal["auto", "csv", "jsonl", "parquet", "txt"]
INPUT_SUFFIXES: Dict[str, InputFormat] = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
# Without an id column, this is the field JSONL rows may carry their id in.
DEFAULT_ID_FIELD = "id"
# Python's csv module stops at 131,072 characters per field by default.
CSV_FIELD_LIMIT = 2**31 - 1
PARQUET_BATCH_ROWS = 1024
# A JSONL field without a value (`record.get(field, MISSING)`).
_MISSING = object()


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
    keep_columns: Sequence[str] = (),
) -> Iterator[InputRow]:
    """Read the rows of a CSV file (with a header row), a JSONL file (one object
    per line; blank lines are skipped), a Parquet file (in batches of rows), a
    folder of Parquet files (every `*.parquet` below it, sorted by relative
    path, read one after the other as one table) or a folder of `.txt` files
    (every `*.txt` below it, sorted by relative path; the id is that path, the
    text the whole file). Text is read as UTF-8; a leading byte order mark is
    dropped.

    Problems with the whole input (no such column, not a Parquet file, an empty
    CSV, a kept column that the CSV header, the first JSONL object or a Parquet
    shard lacks) raise a `ConversionError` at once, naming the file and the
    column, before any row is yielded. Problems with one row make it an error
    row: a null text, a JSONL row without the text field (or a kept field),
    invalid UTF-8 (reported with its byte offset in the file and its line),
    invalid JSON, a bad id or questions value. An empty text is a valid row.

    path (Path): The input file or folder.
    input_format (InputFormat): The format, or "auto" (see `input_format_for`).
    text_column (str): The column or field holding the text.
    id_column (Optional[str]): The column or field holding the id. None: "id"
        where the input has it, else the 0-based row number as a string.
    questions_column (Optional[str]): The column or field holding each row's
        questions, {key: question}; an empty or missing value means none.
    keep_columns (Sequence[str]): Columns or fields whose values each row
        carries in `InputRow.kept` (the text column may be one of them). A
        folder of .txt files has only its text: `text_column` alone may be kept.
    RETURNS (Iterator[InputRow]): The rows, in input order.
    """
    path = Path(path)
    fmt = input_format_for(path, input_format)
    keep = list(keep_columns)
    if fmt == "csv":
        header = _csv_header(path)
        for column in (text_column, id_column, questions_column):
            if column is not None and column not in header:
                raise ConversionError(
                    str(path), f"no column {column!r}; the columns are: {names(header)}"
                )
        _check_kept(str(path), keep, header)
        use_id = id_column or (DEFAULT_ID_FIELD if DEFAULT_ID_FIELD in header else None)
        return _csv_rows(path, text_column, use_id, questions_column, keep)
    if fmt == "jsonl":
        _check_first_record(path, text_column, keep)
        return _jsonl_rows(path, text_column, id_column, questions_column, keep)
    if fmt == "parquet":
        shards = input_files(path, fmt)
        schemas = [(shard, parquet_file(shard).schema_arrow.names) for shard in shards]
        use_id = id_column or (DEFAULT_ID_FIELD if DEFAULT_ID_FIELD in schemas[0][1] else None)
        for shard, found in schemas:
            for column in (text_column, use_id, questions_column):
                if column is not None and column not in found:
                    raise ConversionError(
                        str(shard), f"no column {column!r}; the columns are: {names(found)}"
                    )
            _check_kept(str(shard), keep, found)
        return _parquet_rows(path, shards, text_column, use_id, questions_column, keep)
    if not path.is_dir():
        raise ConversionError(str(path), "a .txt input must be a folder of .txt files")
    if id_column is not None or questions_column is not None:
        raise ConversionError(
            str(path),
            "a folder of .txt files has no columns: the id is the file's relative path "
            "(no id or questions column)",
        )
    _check_kept(str(path), keep, [text_column], "a folder of .txt files has only its text")
    return _txt_rows(path, _folder_files(path, ".txt"), keep)


def texts_by_id(
    path: Path,
    ids: Iterable[str],
    *,
    text_column: str = "text",
    id_column: Optional[str] = None,
) -> Dict[str, str]:
    """The texts of the rows of an input (anything `read_input` reads) whose id
    is one of `ids`, by id: what an OUTPUT of `bert-pipes annotate` that did not
    keep its texts was annotated from. An id the input lacks is not a key."""
    wanted = set(ids)
    found: Dict[str, str] = {}
    for row in read_input(path, text_column=text_column, id_column=id_column):
        if row.id in wanted and row.text is not None:
            found[row.id] = row.text
    return found


def _check_kept(
    location: str, keep: List[str], found: Sequence[str], what: str = "the columns are"
) -> None:
    """A kept column the input lacks fails the run at once."""
    for column in keep:
        if column not in found:
            raise ConversionError(
                location, f"no column {column!r} to keep (--keep-columns); {what}: {names(found)}"
            )


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
        return as_questions(data)
    except RowError as err:
        raise ConversionError(str(path), str(err)) from None


def input_files(path: Path, input_format: str) -> List[Path]:
    """The files of an input: a folder's .txt or .parquet files, or the file.

    path (Path): The input file or folder.
    input_format (str): Its format (see `input_format_for`).
    RETURNS (List[Path]): The files, in reading order.
    """
    if not path.is_dir():
        return [path]
    suffix = ".parquet" if input_format == "parquet" else ".txt"
    return [path / name for name in _folder_files(path, suffix)]


def count_rows(path: Path, input_format: str) -> Optional[int]:
    """The number of rows of an input where it is known without reading them
    all (Parquet metadata, a folder's .txt files), else None."""
    if input_format == "parquet":
        return sum(parquet_file(shard).metadata.num_rows for shard in input_files(path, "parquet"))
    if input_format == "txt":
        return len(input_files(path, "txt"))
    return None


def parquet_file(path: Path) -> Any:
    """A `pyarrow.parquet.ParquetFile`; a `ConversionError` if it cannot be read."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pyarrow.ArrowException, OSError) as err:
        raise ConversionError(str(path), f"not a readable Parquet file: {err}") from None


# --- CSV and JSONL: line by line ---------------------------------------------------


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
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))

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
    path: Path,
    text_column: str,
    id_column: Optional[str],
    questions_column: Optional[str],
    keep: List[str],
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
            kept = {name: values[name] for name in keep}
            yield make_row(number, source, raw_id, values[text_column], questions, kept)
        number += 1


def _readable(value: Optional[str]) -> Optional[str]:
    """An id from a row with invalid bytes, shown with replacement characters."""
    if value is None:
        return None
    return value.encode("utf8", "surrogateescape").decode("utf8", "replace")


def _check_first_record(path: Path, text_column: str, keep: List[str]) -> None:
    """A wrong --text-column (or a kept field that is not there) fails at once:
    the first JSONL object must have them."""
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
                f"no field {text_column!r} in the first object; its fields are: {names(record)}",
            )
        if isinstance(record, dict):
            _check_kept(f"{path}:{number}", keep, list(record), "the first object's fields are")
        return


def _jsonl_rows(
    path: Path,
    text_column: str,
    id_column: Optional[str],
    questions_column: Optional[str],
    keep: List[str],
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
                doc_id = as_id(raw_id) if raw_id is not _MISSING else None
            except (ValueError, RowError):
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
            reason = f"expected a JSON object, found {show(record)}"
            yield InputRow(number, None, None, {}, source, reason)
        else:
            raw_id = _jsonl_id(record, id_column, number)
            text = record.get(text_column, _MISSING)
            missing = [name for name in keep if name not in record]
            if raw_id is _MISSING or text is _MISSING or missing:
                if raw_id is _MISSING or text is _MISSING:
                    name = text_column if text is _MISSING else id_column
                    reason = f"no field {name!r}; the fields are: {names(record)}"
                else:
                    reason = (
                        f"no field {missing[0]!r} to keep (--keep-columns); the fields "
                        f"are: {names(record)}"
                    )
                doc_id = None if raw_id is _MISSING else as_optional_id(raw_id)
                yield InputRow(number, doc_id, None, {}, source, reason)
            else:
                questions = record.get(questions_column) if questions_column else None
                kept = {name: record[name] for name in keep}
                yield make_row(number, source, raw_id, text, questions, kept)
        number += 1


def _jsonl_id(record: Any, id_column: Optional[str], number: int) -> Any:
    if not isinstance(record, dict):
        return _MISSING
    if id_column is None:
        return record.get(DEFAULT_ID_FIELD, str(number))
    return record.get(id_column, _MISSING)


# --- Parquet and folders of .txt files ---------------------------------------------


def _parquet_rows(
    path: Path,
    shards: List[Path],
    text_column: str,
    id_column: Optional[str],
    questions_column: Optional[str],
    keep: List[str],
) -> Iterator[InputRow]:
    """The rows of each shard in turn (`[path]` for a file); a row's source is
    its shard's path (relative to a folder) and its 0-based row in the shard."""
    import pyarrow as pa

    read = [c for c in (text_column, id_column, questions_column) if c is not None]
    columns = list(dict.fromkeys(read + keep))
    number = 0
    for shard in shards:
        name = shard.relative_to(path).as_posix() if shard != path else path.name
        batches = parquet_file(shard).iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns)
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
            # The text column kept: its bytes, decoded (or refused) as the text is.
            kept = {c: texts if c == text_column else batch.column(c) for c in keep}
            kept_values = {c: values.to_pylist() for c, values in kept.items()}
            for i, text in enumerate(text_values):
                raw_id = ids[i] if ids is not None else str(number)
                row_questions = questions[i] if questions is not None else None
                source = f"{name}:row {shard_row}"
                row_kept = {c: values[i] for c, values in kept_values.items()}
                yield make_row(number, source, raw_id, text, row_questions, row_kept)
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


def _txt_rows(folder: Path, files: List[str], keep: List[str]) -> Iterator[InputRow]:
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
        yield InputRow(number, name, text, {}, source, kept={column: text for column in keep})
