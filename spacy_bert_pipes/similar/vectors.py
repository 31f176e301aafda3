"""Reading a collection of exported vectors: a Parquet or JSONL file with an
`id` column and a `vector` column (a fixed-size list of float32 or float16 in
Parquet, a list of numbers in JSONL), as `bert-pipes annotate --vectors` writes
it, checked row by row, and the rows scaled to unit length for cosine search.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any,
    Dict,
    List,
    Optional,
    Union,
)

import numpy
from tqdm import tqdm

from ..convert import ConversionError


@dataclass
class VectorCollection:
    """The rows of a vectors file.

    path (str): Where they were read.
    ids (List[str]): Each row's id, as text.
    vectors (numpy.ndarray): One float32 vector per row. (n_rows, width)
    """

    path: str
    ids: List[str]
    vectors: numpy.ndarray

    @property
    def width(self) -> int:
        return int(self.vectors.shape[1])


@dataclass(frozen=True)
class Neighbour:
    """A search hit: the row's id and index, and its cosine to the query."""

    id: str
    row: int
    cosine: float


def read_vectors(
    path: Union[str, Path],
    *,
    id_column: str = "id",
    vector_column: str = "vector",
    progress: bool = False,
) -> VectorCollection:
    """Read a collection of vectors from a .parquet or .jsonl file.

    RAISES (ConversionError): The file cannot be read, lacks a column, or a row
        has no vector, a vector of the wrong width, a non-finite value or a
        repeated id; the error names the file and the row (JSONL: the line).
    """
    path = Path(path)
    if not path.exists():
        raise ConversionError(str(path), "no such file")
    suffix = path.suffix.lower()
    if suffix == ".parquet" or path.is_dir():
        ids, vectors = _read_parquet(path, id_column, vector_column)
    elif suffix in (".jsonl", ".ndjson"):
        ids, vectors = _read_jsonl(path, id_column, vector_column, progress)
    else:
        raise ConversionError(
            str(path),
            f"expected a .parquet or .jsonl file (or a folder of Parquet shards), not {suffix!r}",
        )
    if len(ids) == 0:
        raise ConversionError(str(path), "the file has no rows")
    bad = ~numpy.isfinite(vectors).all(axis=1)
    if bad.any():
        row = int(numpy.nonzero(bad)[0][0])
        raise ConversionError(
            row_location(path, row), f"the vector of id {ids[row]!r} is not finite"
        )
    seen: Dict[str, int] = {}
    for row, row_id in enumerate(ids):
        if row_id in seen:
            raise ConversionError(
                row_location(path, row), f"id {row_id!r} repeats the id of row {seen[row_id]}"
            )
        seen[row_id] = row
    return VectorCollection(str(path), ids, vectors)


def has_vectors(path: Union[str, Path], vector_column: str = "vector") -> bool:
    """Whether a .jsonl or Parquet file (or folder of shards) has a vector
    column: in JSONL, whether its first row has the field."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        with path.open(encoding="utf8") as file_:
            for line in file_:
                if line.strip():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        return False
                    return isinstance(record, dict) and vector_column in record
        return False
    if path.suffix.lower() == ".parquet" or path.is_dir():
        import pyarrow.dataset as ds

        try:
            return vector_column in ds.dataset(path, format="parquet").schema.names
        except (OSError, ValueError):
            return False
    return False


def row_location(path: Union[str, Path], row: int) -> str:
    # JSONL rows are lines (1-based); Parquet rows are 0-based row numbers
    path = Path(path)
    jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
    return f"{path}:{row + 1}" if jsonl else f"{path}:row {row}"


def _read_parquet(path: Path, id_column: str, vector_column: str) -> "tuple[List[str], Any]":
    import pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        schema = pq.ParquetDataset(path).schema if path.is_dir() else pq.read_schema(path)
        for column in (id_column, vector_column):
            if column not in schema.names:
                raise ConversionError(
                    str(path), f"no column {column!r} (columns: {', '.join(schema.names)})"
                )
        # only the two columns: an annotated collection's other columns (cats
        # of every label, texts) would more than double the memory of a read
        table = pq.read_table(path, columns=[id_column, vector_column])
    except (OSError, pyarrow.ArrowException) as error:
        raise ConversionError(str(path), f"cannot read it as Parquet: {error}") from error
    ids_col = table.column(id_column)
    if ids_col.null_count:
        row = int(numpy.nonzero(ids_col.is_null().to_numpy(zero_copy_only=False))[0][0])
        raise ConversionError(row_location(path, row), "the id is missing")
    ids = [str(value) for value in ids_col.to_pylist()]
    column = table.column(vector_column).combine_chunks()
    if not (pyarrow.types.is_list(column.type) or pyarrow.types.is_fixed_size_list(column.type)):
        raise ConversionError(
            str(path), f"column {vector_column!r} must hold lists of floats, not {column.type}"
        )
    if column.null_count:
        row = int(numpy.nonzero(column.is_null().to_numpy(zero_copy_only=False))[0][0])
        raise ConversionError(row_location(path, row), f"id {ids[row]!r} has no vector")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    width = int(lengths[0])
    wrong = numpy.nonzero(lengths != width)[0]
    if len(wrong):
        row = int(wrong[0])
        raise ConversionError(
            row_location(path, row),
            f"the vector of id {ids[row]!r} has {int(lengths[row])} values, row 0 has {width}",
        )
    if not pyarrow.types.is_floating(column.type.value_type):
        raise ConversionError(
            str(path), f"column {vector_column!r} must hold floats, not {column.type.value_type}"
        )
    values = pc.list_flatten(column).to_numpy(zero_copy_only=False)
    return ids, numpy.asarray(values, dtype="float32").reshape((len(ids), width))


def _read_jsonl(
    path: Path, id_column: str, vector_column: str, progress: bool
) -> "tuple[List[str], Any]":
    ids: List[str] = []
    rows: List[Any] = []
    width: Optional[int] = None
    with path.open(encoding="utf8") as file:
        lines = tqdm(file, desc=f"Reading {path.name}", unit=" rows", disable=not progress)
        for line_no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except ValueError as error:
                raise ConversionError(where, f"not a JSON object: {error}") from error
            if not isinstance(record, dict):
                raise ConversionError(where, "not a JSON object")
            for column in (id_column, vector_column):
                if record.get(column) is None:
                    raise ConversionError(where, f"no {column!r} field")
            vector = record[vector_column]
            if not isinstance(vector, list):
                raise ConversionError(where, f"{vector_column!r} must be a list of numbers")
            try:
                array = numpy.asarray(vector, dtype="float32")
            except (TypeError, ValueError) as error:
                raise ConversionError(
                    where, f"{vector_column!r} must be a list of numbers: {error}"
                ) from error
            if array.ndim != 1:
                raise ConversionError(where, f"{vector_column!r} must be a flat list of numbers")
            if width is None:
                width = len(array)
            elif len(array) != width:
                raise ConversionError(
                    where, f"the vector has {len(array)} values, the first row has {width}"
                )
            ids.append(str(record[id_column]))
            rows.append(array)
    if not rows:
        return ids, numpy.zeros((0, 0), dtype="float32")
    return ids, numpy.stack(rows)


def unit_rows(vectors: Any) -> numpy.ndarray:
    """Rows scaled to unit length (a zero row stays zero: cosine 0 with all)."""
    array = numpy.ascontiguousarray(vectors, dtype="float32")
    norms = numpy.linalg.norm(array, axis=1, keepdims=True)
    return numpy.ascontiguousarray(array / numpy.maximum(norms, 1e-12), dtype="float32")
