"""The readers of the format `annotate` writes (`output.py`): they read any
OUTPUT back (`read_output_rows`: a .jsonl, .csv or .parquet file, or a folder
of Parquet shards) as rows of `doc_to_row`'s shape, name its id column
(`output_id_column`) and read its errors file (`read_error_records`), raising
a `ConversionError` that names the file and line (or row) of a row that is not
in this format.
"""

import copy
import csv
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import ConversionError
from .output import EMPTY_TEXT_COLUMN, OMITTED_VALUES, VECTOR_COLUMN, is_sharded_output
from .readers import CSV_FIELD_LIMIT, PARQUET_BATCH_ROWS


def read_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Stream the rows of an OUTPUT, with CSV and Parquet cells parsed from JSON.

    path (Path): A .jsonl, .csv or .parquet file, or a folder of Parquet shards.
    RETURNS (Iterator[Tuple[str, Dict[str, Any]]]): ("file:line" or "file:row
        n", row) per row, in order. A row has the keys of `doc_to_row`: "id"
        (from the first column, whatever its name), then the annotations
        (`OMITTED_VALUES` for the columns the OUTPUT omits) and "empty_text"
        (None in outputs written before it), then the kept columns (strings
        in CSV and Parquet) and, in JSONL, the vector. A row's values are
        not checked beyond the JSON of its cells; a row without an id is
        passed on with "id" None.
    """
    path = Path(path)
    if is_sharded_output(path):
        return _parquet_output_rows(path, sorted(path.rglob("*.parquet")))
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl_output_rows(path)
    if suffix == ".csv":
        return _csv_output_rows(path)
    if suffix == ".parquet":
        return _parquet_output_rows(path, [path])
    raise ConversionError(
        str(path),
        "not an output of bert-pipes annotate (expected .jsonl, .csv, "
        ".parquet or a folder of Parquet shards)",
    )


def output_id_column(path: Path) -> str:
    """The name of an OUTPUT's id column, its first column (`--id-column`
    keeps the input's name), for readers that take a column name, such as
    `similar.read_vectors`.

    path (Path): A .jsonl, .csv or .parquet file, or a folder of Parquet shards.
    RETURNS (str): The name; a `ConversionError` if it is not an OUTPUT.
    """
    path = Path(path)
    if is_sharded_output(path) or path.suffix.lower() == ".parquet":
        import pyarrow
        import pyarrow.parquet as pq

        shards = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
        if not shards:
            raise ConversionError(str(path), "no .parquet files")
        try:
            names = pq.read_schema(shards[0]).names
        except (pyarrow.ArrowException, OSError) as err:
            raise ConversionError(str(shards[0]), f"not a readable Parquet file ({err})") from err
        where = str(shards[0])
    elif path.suffix.lower() == ".csv":
        with path.open(encoding="utf8", newline="") as file_:
            names = next((cells for cells in csv.reader(file_) if cells), [])
        where = f"{path}:1"
    else:
        where, record = next(read_jsonl_records(path), (str(path), {}))
        names = list(record) if isinstance(record, dict) else []
    _check_columns(where, names)
    id_name = _id_name(names)
    if id_name is None:
        raise ConversionError(where, f"no id column: the first column is {names[0]!r}")
    return id_name


def read_error_records(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Stream the records of an OUTPUT.errors.jsonl file.

    path (Path): The errors file.
    RETURNS (Iterator[Tuple[str, Dict[str, Any]]]): ("file:line", record) per
        non-blank line, each an object with a "reason".
    """
    for where, record in read_jsonl_records(path):
        if not isinstance(record, dict) or "reason" not in record:
            raise ConversionError(where, "not an error record of bert-pipes annotate")
        yield where, record


def read_jsonl_records(path: Path) -> Iterator[Tuple[str, Any]]:
    """("file:line", record) per non-blank line of a JSONL file, one at a time."""
    try:
        with path.open("rb") as file_:
            for number, line in enumerate(file_, 1):
                if line.strip():
                    try:
                        yield f"{path}:{number}", json.loads(line)
                    except ValueError as err:  # not JSON, or not UTF-8
                        raise ConversionError(f"{path}:{number}", f"not JSON ({err})") from err
    except OSError as err:
        raise ConversionError(str(path), str(err)) from err


def _jsonl_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    names: Optional[List[str]] = None  # the first row's keys
    for where, record in read_jsonl_records(path):
        if not isinstance(record, dict):
            raise ConversionError(where, f"not a JSON object: {_show(record)}")
        if names is None:
            names = list(record)
            _check_columns(where, names, row=True)
        missing = [name for name in names if name not in record]
        if missing:
            raise ConversionError(
                where,
                f"a row without {', '.join(map(json.dumps, missing))} (the first row "
                f"has {', '.join(map(json.dumps, names))})",
            )
        yield where, _row(record, _id_name(names))


def _csv_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    try:
        with path.open(encoding="utf8", newline="") as file_:
            reader = csv.reader(file_)
            header: Optional[List[str]] = None
            while True:
                number = reader.line_num + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    break
                except (csv.Error, UnicodeDecodeError) as err:
                    raise ConversionError(f"{path}:{number}", str(err)) from err
                if not cells:
                    continue
                where = f"{path}:{number}"
                if header is None:
                    header = cells
                    _check_columns(where, header)
                    continue
                if len(cells) != len(header):
                    raise ConversionError(
                        where, f"{len(cells)} cells, the header has {len(header)}"
                    )
                row = _parse_cells(dict(zip(header, cells)), where)
                yield where, _row(row, _id_name(header))
    except OSError as err:
        raise ConversionError(str(path), str(err)) from err


def _parquet_output_rows(path: Path, shards: List[Path]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    import pyarrow
    import pyarrow.parquet as pq

    if not shards:
        raise ConversionError(
            str(path), "no .parquet files (expected the shards of bert-pipes annotate)"
        )
    for shard in shards:
        try:
            file_ = pq.ParquetFile(shard)
            names = file_.schema_arrow.names
            _check_columns(str(shard), names)
            number = 0
            batches = file_.iter_batches(
                batch_size=PARQUET_BATCH_ROWS,
                columns=[name for name in names if name != VECTOR_COLUMN],
            )
            for batch in batches:
                for row in batch.to_pylist():
                    where = f"{shard}:row {number}"
                    number += 1
                    yield where, _row(_parse_cells(row, where), _id_name(names))
        except (pyarrow.ArrowException, OSError) as err:
            raise ConversionError(str(shard), f"not a readable Parquet file ({err})") from err


def _check_columns(where: str, names: List[str], row: bool = False) -> None:
    """An OUTPUT has at least one of the columns annotate writes besides the
    id (`row`: say it of a JSONL row)."""
    if not any(name in OMITTED_VALUES for name in names):
        wanted = ", ".join(map(json.dumps, OMITTED_VALUES))
        found = ", ".join(map(repr, names)) or "none"
        if row:
            missing = ", ".join(map(json.dumps, list(OMITTED_VALUES)[:-1]))
            raise ConversionError(
                where,
                f'a row without {missing} or "{EMPTY_TEXT_COLUMN}" (not an output of '
                f"bert-pipes annotate, whose rows have an id, then some of {wanted}; "
                f"its fields: {found})",
            )
        missing = ", ".join(map(repr, list(OMITTED_VALUES)[:-1]))
        raise ConversionError(
            where,
            f"no column {missing} or {EMPTY_TEXT_COLUMN!r}: not an output of bert-pipes "
            f"annotate, whose first column is the id, then the kept input columns and "
            f"some of {wanted} (found {found})",
        )


def _id_name(names: List[str]) -> Optional[str]:
    """The id column: the first, unless an output without one starts with an
    annotation (its rows are passed on with "id" None)."""
    return names[0] if names[0] not in OMITTED_VALUES else None


def _parse_cells(row: Dict[str, Any], where: str) -> Dict[str, Any]:
    """A CSV or Parquet row with its JSON text cells (the annotations and, in
    CSV, "empty_text") parsed."""
    for column in OMITTED_VALUES:
        if column not in row or (column == EMPTY_TEXT_COLUMN and isinstance(row[column], bool)):
            continue
        try:
            row[column] = json.loads(row[column])
        except (TypeError, ValueError) as err:
            raise ConversionError(
                where, f"{column} is not JSON text ({err}): {_show(row[column])}"
            ) from err
    return row


def _row(record: Dict[str, Any], id_name: Optional[str]) -> Dict[str, Any]:
    """A row as written, in the shape of `doc_to_row` (see `read_output_rows`)."""
    row = {"id": record.get(id_name) if id_name is not None else None}
    for column, omitted in OMITTED_VALUES.items():
        row[column] = record[column] if column in record else copy.copy(omitted)
    for name, value in record.items():
        if name != id_name and name not in OMITTED_VALUES:
            row[name] = value
    return row


def _show(value: Any, n: int = 80) -> str:
    """A value in a message: its JSON on one line, cut to n characters."""
    text = " ".join(json.dumps(value, ensure_ascii=False, default=str).split())
    return text if len(text) <= n else text[: n - 1] + "…"
