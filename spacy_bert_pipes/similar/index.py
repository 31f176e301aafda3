"""The index and search of `bert-pipes similar`: faiss (the `similar` extra), an
exact inner-product search over unit-length vectors by default ("flat"), or an
HNSW graph ("hnsw"); queries are texts embedded with a pipeline's `doc.vector`
(a `bert_vectors` component) or rows of the collection itself.

An HNSW graph is slow to build (minutes for 10^5 rows), so `bert-pipes similar`
keeps it beside the vectors file (`saved_index_paths`) with a JSON sidecar that
fingerprints what it was built from; `load_saved_index` reuses it only when the
fingerprint matches the collection just read and the saved bytes their checksum.
A flat index is not saved: building it (a copy of the unit vectors) is faster
than reading and checking a saved one.
"""

import hashlib
import json
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy
from tqdm import tqdm

from .vectors import Neighbour, VectorCollection, unit_rows

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
# The index kinds worth saving. On 2 shared cores, 100,000 384-d rows: flat builds
# in 0.6 s and loads (read, checksums, deserialize) in 1.0 s; 10,000 such rows:
# HNSW builds in 4.6 s and loads in 0.05 s.
SAVED_KINDS = ("hnsw",)
# The layout of a saved index's sidecar; another layout is not read.
SAVED_FORMAT = 1


def load_faiss() -> Any:
    try:
        import faiss
    except ImportError as error:
        raise ImportError(
            "bert-pipes similar needs faiss: pip install 'spacy-bert-pipes[similar]'"
        ) from error
    return faiss


def build_faiss_index(
    collection: VectorCollection, kind: IndexKind, *, hnsw_m: int = 32, progress: bool = False
) -> Any:
    """A faiss index of the collection's unit vectors (see `VectorIndex`)."""
    faiss = load_faiss()
    width = collection.width
    if kind == "flat":
        index = faiss.IndexFlatIP(width)
    else:
        index = faiss.IndexHNSWFlat(width, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    vectors = collection.vectors
    bar = tqdm(total=len(vectors), desc=f"Indexing ({kind})", unit=" rows", disable=not progress)
    with bar:
        for start in range(0, len(vectors), ADD_CHUNK):
            chunk = unit_rows(vectors[start : start + ADD_CHUNK])
            index.add(chunk)
            bar.update(len(chunk))
    return index


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
        faiss_index: Any = None,
    ) -> None:
        """Build the index, or wrap one built before.

        kind (str): "flat": exact inner-product search over unit vectors; "hnsw":
            an approximate HNSW graph (faster queries on big collections, slower
            to build).
        hnsw_m (int): HNSW: neighbours per node.
        ef_search (int): HNSW: candidates kept while searching (recall vs speed).
        progress (bool): Show a progress bar while rows are added.
        faiss_index (Any): The faiss index of this collection, kind and hnsw_m,
            as `load_saved_index` loads it; None: build it.
        """
        if kind not in INDEX_KINDS:
            raise ValueError(f"kind must be one of {', '.join(INDEX_KINDS)}: {kind!r}")
        self.collection = collection
        self.kind = kind
        self.hnsw_m = hnsw_m
        self._rows = {row_id: row for row, row_id in enumerate(collection.ids)}
        if faiss_index is None:
            faiss_index = build_faiss_index(collection, kind, hnsw_m=hnsw_m, progress=progress)
        self._index = faiss_index
        if kind == "hnsw":
            self._index.hnsw.efSearch = ef_search

    def save(self) -> Path:
        """Save the index beside the collection's file (`saved_index_paths`),
        replacing what is there: the index, then its sidecar, each atomically.
        RETURNS (Path): The index file. RAISES (OSError): It cannot be written."""
        from ..io.durable import write_file, write_text

        index_path, sidecar_path = saved_index_paths(self.collection.path, self.kind)
        data = load_faiss().serialize_index(self._index)  # uint8 (n_bytes,)
        write_file(index_path, lambda tmp: data.tofile(str(tmp)))
        sidecar = {
            **_fingerprint(self.collection, self.kind, self.hnsw_m),
            "index_sha256": hashlib.sha256(data).hexdigest(),
        }
        write_text(sidecar_path, json.dumps(sidecar, indent=2) + "\n")
        return index_path

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
        faiss = load_faiss()
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


def saved_index_paths(vectors: Union[str, Path], kind: IndexKind) -> Tuple[Path, Path]:
    """Where the index of a vectors file (or folder of shards) is saved: beside
    it, `VECTORS.<kind>.faiss`, and its sidecar `VECTORS.<kind>.faiss.json`."""
    vectors = Path(vectors)
    index_path = vectors.with_name(f"{vectors.name}.{kind}.faiss")
    return index_path, index_path.with_name(index_path.name + ".json")


def load_saved_index(
    collection: VectorCollection, *, kind: IndexKind, hnsw_m: int = 32, ef_search: int = 128
) -> Optional[VectorIndex]:
    """The index saved beside the collection's file, if it is this collection's.

    A saved index is untrusted input: it is used only when its sidecar records
    this kind, hnsw_m, row count, width and the sha256 of the collection's ids
    (in order) and vectors, when the index file has the sidecar's sha256, and
    when faiss reads it as an inner-product index of the kind with as many rows
    and dimensions. Anything else (a missing, stale or damaged file) gives None.
    """
    faiss = load_faiss()
    index_path, sidecar_path = saved_index_paths(collection.path, kind)
    try:
        sidecar = json.loads(sidecar_path.read_text(encoding="utf8"))
        data = index_path.read_bytes()
    except (OSError, ValueError):
        return None
    want = _fingerprint(collection, kind, hnsw_m)
    if not isinstance(sidecar, dict) or {key: sidecar.get(key) for key in want} != want:
        return None
    if hashlib.sha256(data).hexdigest() != sidecar.get("index_sha256"):
        return None
    try:
        index = faiss.deserialize_index(numpy.frombuffer(data, dtype="uint8"))
    except RuntimeError:
        return None
    index_type = faiss.IndexHNSWFlat if kind == "hnsw" else faiss.IndexFlatIP
    if (
        type(index) is not index_type
        or index.metric_type != faiss.METRIC_INNER_PRODUCT
        or index.ntotal != len(collection.ids)
        or index.d != collection.width
        or (kind == "hnsw" and index.hnsw.nb_neighbors(1) != hnsw_m)
    ):
        return None
    return VectorIndex(collection, kind=kind, hnsw_m=hnsw_m, ef_search=ef_search, faiss_index=index)


def _fingerprint(collection: VectorCollection, kind: IndexKind, hnsw_m: int) -> Dict[str, Any]:
    """What a saved index was built from: the sidecar's fields, but its checksum."""
    digest = hashlib.sha256(json.dumps(collection.ids, ensure_ascii=False).encode("utf8"))
    digest.update(numpy.ascontiguousarray(collection.vectors, dtype="float32").data)
    return {
        "format": SAVED_FORMAT,
        "kind": kind,
        "hnsw_m": hnsw_m if kind == "hnsw" else None,
        "rows": len(collection.ids),
        "dimension": collection.width,
        "vectors_sha256": digest.hexdigest(),
    }


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
