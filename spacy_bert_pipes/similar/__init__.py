"""Nearest-neighbour search over a collection of exported vectors (cosine).

A collection is a Parquet or JSONL file with an `id` column and a `vector` column
(a fixed-size list of float32 or float16 in Parquet, a list of numbers in JSONL),
as `bert-pipes annotate --vectors` writes it. The index is faiss (the `similar`
extra): an exact inner-product search over unit-length vectors by default
("flat", milliseconds for 10^5 rows), or an HNSW graph ("hnsw") for collections
where an exact scan is too slow. Queries are texts embedded with a pipeline's
`doc.vector` (a `bert_vectors` component) or rows of the collection itself.

`collection_neighbours` searches a whole collection against itself, exactly:
each row's k most similar other rows and every pair of rows whose cosine
reaches a threshold (near-duplicates). `similar_collection` adds to it what
`bert-pipes similar-collection` writes beside an annotated collection: the
predicted intent of each row (its most probable category) and, from the
collection's input, the texts of the pairs.

The package: `vectors` reads and checks a collection, `index` builds (and saves
and loads) the index of `bert-pipes similar`, `collection` searches a collection
against itself.
"""

from .collection import (
    DUPLICATES_SUFFIX,
    NEIGHBOURS_SUFFIX,
    QUERY_BATCH,
    SUMMARY_SUFFIX,
    CollectionNeighbours,
    DuplicatePair,
    SimilarCollection,
    collection_neighbours,
    read_intents,
    read_labels,
    read_texts,
    similar_collection,
    similar_paths,
    top_intent,
    write_similar,
)
from .index import (
    ADD_CHUNK,
    INDEX_KINDS,
    SAVED_KINDS,
    SMALL_BATCH,
    IndexKind,
    VectorIndex,
    embed_texts,
    load_faiss,
    load_saved_index,
    saved_index_paths,
)
from .vectors import (
    Neighbour,
    VectorCollection,
    has_vectors,
    read_vectors,
    row_location,
    unit_rows,
)

__all__ = [
    "ADD_CHUNK",
    "CollectionNeighbours",
    "DUPLICATES_SUFFIX",
    "DuplicatePair",
    "INDEX_KINDS",
    "IndexKind",
    "NEIGHBOURS_SUFFIX",
    "Neighbour",
    "QUERY_BATCH",
    "SAVED_KINDS",
    "SMALL_BATCH",
    "SUMMARY_SUFFIX",
    "SimilarCollection",
    "VectorCollection",
    "VectorIndex",
    "collection_neighbours",
    "embed_texts",
    "has_vectors",
    "load_faiss",
    "load_saved_index",
    "read_intents",
    "read_labels",
    "read_texts",
    "read_vectors",
    "row_location",
    "saved_index_paths",
    "similar_collection",
    "similar_paths",
    "top_intent",
    "unit_rows",
    "write_similar",
]
