"""Nearest-neighbour search over a collection of exported vectors (cosine).

A collection is a Parquet or JSONL file with an `id` column and a `vector` column
(a fixed-size list of float32 or float16 in Parquet, a list of numbers in JSONL),
as `bert-pipes annotate --vectors` writes it. The index is faiss (the `similar`
extra): an exact inner-product search over unit-length vectors by default
("flat", milliseconds for 10^5 rows), or an HNSW graph ("hnsw") for collections
where an exact scan is too slow. Queries are texts embedded with a pipeline's
`doc.vector` (a `bert_vectors` component) or rows of the collection itself.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Literal, Optional, Sequence, Union

import numpy
from tqdm import tqdm

from .convert import ConversionError

if TYPE_CHECKING:
    from spacy.language import Language

IndexKind = Literal["flat", "hnsw"]
INDEX_KINDS = ("flat", "hnsw")
# Rows added to the index per step of the progress bar.
ADD_CHUNK = 16384
# Fewer queries than this run on one OpenMP thread: measured on 2 shared cores, a
# single query over 100k rows took 21 ms on one thread and 92 ms on two (the
# threads wait on each other when other processes hold the cores).
SMALL_BATCH = 16


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
    if suffix == ".parquet":
        ids, vectors = _read_parquet(path, id_column, vector_column)
    elif suffix in (".jsonl", ".ndjson"):
        ids, vectors = _read_jsonl(path, id_column, vector_column, progress)
    else:
        raise ConversionError(str(path), f"expected a .parquet or .jsonl file, not {suffix!r}")
    if len(ids) == 0:
        raise ConversionError(str(path), "the file has no rows")
    bad = ~numpy.isfinite(vectors).all(axis=1)
    if bad.any():
        row = int(numpy.nonzero(bad)[0][0])
        raise ConversionError(_where(path, row), f"the vector of id {ids[row]!r} is not finite")
    seen: Dict[str, int] = {}
    for row, row_id in enumerate(ids):
        if row_id in seen:
            raise ConversionError(
                _where(path, row), f"id {row_id!r} repeats the id of row {seen[row_id]}"
            )
        seen[row_id] = row
    return VectorCollection(str(path), ids, vectors)


def _where(path: Path, row: int) -> str:
    # JSONL rows are lines (1-based); Parquet rows are 0-based row numbers
    return f"{path}:{row + 1}" if path.suffix.lower() != ".parquet" else f"{path}:row {row}"


def _read_parquet(path: Path, id_column: str, vector_column: str) -> "tuple[List[str], Any]":
    import pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pyarrow.ArrowException) as error:
        raise ConversionError(str(path), f"cannot read it as Parquet: {error}") from error
    for column in (id_column, vector_column):
        if column not in table.column_names:
            raise ConversionError(
                str(path), f"no column {column!r} (columns: {', '.join(table.column_names)})"
            )
    ids_col = table.column(id_column)
    if ids_col.null_count:
        row = int(numpy.nonzero(ids_col.is_null().to_numpy(zero_copy_only=False))[0][0])
        raise ConversionError(_where(path, row), "the id is missing")
    ids = [str(value) for value in ids_col.to_pylist()]
    column = table.column(vector_column).combine_chunks()
    if not (pyarrow.types.is_list(column.type) or pyarrow.types.is_fixed_size_list(column.type)):
        raise ConversionError(
            str(path), f"column {vector_column!r} must hold lists of floats, not {column.type}"
        )
    if column.null_count:
        row = int(numpy.nonzero(column.is_null().to_numpy(zero_copy_only=False))[0][0])
        raise ConversionError(_where(path, row), f"id {ids[row]!r} has no vector")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    width = int(lengths[0])
    wrong = numpy.nonzero(lengths != width)[0]
    if len(wrong):
        row = int(wrong[0])
        raise ConversionError(
            _where(path, row),
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


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as error:
        raise ImportError(
            "bert-pipes similar needs faiss: pip install 'spacy-bert-pipes[similar]'"
        ) from error
    return faiss


class VectorIndex:
    """A cosine nearest-neighbour index over a collection's vectors."""

    def __init__(
        self,
        collection: VectorCollection,
        *,
        kind: IndexKind = "flat",
        hnsw_m: int = 32,
        ef_search: int = 128,
        progress: bool = False,
    ) -> None:
        """Build the index.

        kind (str): "flat": exact inner-product search over unit vectors; "hnsw":
            an approximate HNSW graph (faster queries on big collections, slower
            to build).
        hnsw_m (int): HNSW: neighbours per node.
        ef_search (int): HNSW: candidates kept while searching (recall vs speed).
        progress (bool): Show a progress bar while rows are added.
        """
        if kind not in INDEX_KINDS:
            raise ValueError(f"kind must be one of {', '.join(INDEX_KINDS)}: {kind!r}")
        faiss = _faiss()
        self.collection = collection
        self.kind = kind
        self._rows = {row_id: row for row, row_id in enumerate(collection.ids)}
        width = collection.width
        if kind == "flat":
            self._index = faiss.IndexFlatIP(width)
        else:
            self._index = faiss.IndexHNSWFlat(width, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self._index.hnsw.efSearch = ef_search
        vectors = collection.vectors
        bar = tqdm(
            total=len(vectors), desc=f"Indexing ({kind})", unit=" rows", disable=not progress
        )
        with bar:
            for start in range(0, len(vectors), ADD_CHUNK):
                chunk = unit_rows(vectors[start : start + ADD_CHUNK])
                self._index.add(chunk)
                bar.update(len(chunk))

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def row(self, row_id: str) -> int:
        """The row of an id; a KeyError names the file when it is not there."""
        if row_id not in self._rows:
            raise KeyError(f"{self.collection.path}: no row has id {row_id!r}")
        return self._rows[row_id]

    def search(
        self, queries: Any, k: int = 10, *, exclude: Optional[Sequence[int]] = None
    ) -> List[List[Neighbour]]:
        """The k nearest rows of each query, most similar first.

        queries (array): Query vectors. (n_queries, width)
        exclude (Optional[Sequence[int]]): A row to leave out per query (the query's
            own row when it comes from the collection), or None.
        """
        queries = numpy.atleast_2d(numpy.asarray(queries, dtype="float32"))
        if queries.shape[1] != self.collection.width:
            raise ValueError(
                f"Query vectors have width {queries.shape[1]}, the vectors of "
                f"{self.collection.path} have {self.collection.width}: were they made "
                "with the same encoder and pooling?"
            )
        extra = 1 if exclude is not None else 0
        n = min(k + extra, len(self))
        faiss = _faiss()
        threads = faiss.omp_get_max_threads()
        if len(queries) < SMALL_BATCH:
            faiss.omp_set_num_threads(1)
        try:
            scores, rows = self._index.search(unit_rows(queries), n)
        finally:
            faiss.omp_set_num_threads(threads)
        out = []
        for q in range(len(queries)):
            hits = []
            for score, row in zip(scores[q].tolist(), rows[q].tolist()):
                if row < 0 or (exclude is not None and row == exclude[q]):
                    continue
                hits.append(Neighbour(self.collection.ids[row], int(row), float(score)))
            out.append(hits[:k])
        return out


def embed_texts(nlp: "Language", texts: Iterable[str], *, batch_size: int = 64) -> numpy.ndarray:
    """`doc.vector` of each text, as one float32 array (n_texts, width).

    RAISES (ValueError): The pipeline gives no contextual vectors (no
        `bert_vectors` component).
    """
    if "bert_vectors" not in {nlp.get_pipe_meta(name).factory for name in nlp.pipe_names}:
        raise ValueError(
            "The pipeline has no bert_vectors component, so its doc.vector is not the "
            "encoder's: add one (see docs/vectors.md)"
        )
    docs = nlp.pipe(texts, batch_size=batch_size)
    vectors = [numpy.asarray(doc.vector, dtype="float32") for doc in docs]
    return numpy.stack(vectors) if vectors else numpy.zeros((0, 0), dtype="float32")
