"""The index and search of `bert-pipes similar`: faiss (the `similar` extra), an
exact inner-product search over unit-length vectors by default ("flat"), or an
HNSW graph ("hnsw"); queries are texts embedded with a pipeline's `doc.vector`
(a `bert_vectors` component) or rows of the collection itself.
"""

from typing import (
    TYPE_CHECKING,
    Any,
    Iterable,
    List,
    Literal,
    Optional,
    Sequence,
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


def load_faiss() -> Any:
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
        faiss = load_faiss()
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
