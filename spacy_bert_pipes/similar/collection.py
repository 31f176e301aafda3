"""A collection against itself, as `bert-pipes similar-collection` searches it:
each row's nearest other rows and every near-duplicate pair
(`collection_neighbours`), with the predicted intents and the texts of the rows
(`similar_collection`), written beside the annotated collection
(`write_similar`).
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Collection,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy
from tqdm import tqdm

from ..convert import ConversionError
from .index import ADD_CHUNK, load_faiss
from .vectors import Neighbour, VectorCollection, read_vectors, row_location, unit_rows

# Queries per step of `collection_neighbours` (one step of its progress bar).
QUERY_BATCH = 2048
# What `write_similar` writes beside an annotated collection `<stem>.jsonl`.
DUPLICATES_SUFFIX = "_duplicates.jsonl"
NEIGHBOURS_SUFFIX = "_neighbours.jsonl"
SUMMARY_SUFFIX = "_similar.json"


@dataclass(frozen=True)
class DuplicatePair:
    """Two rows (first < second) whose cosine reaches the threshold."""

    first: int
    second: int
    cosine: float


@dataclass
class CollectionNeighbours:
    """What `collection_neighbours` found.

    neighbours (List[List[Neighbour]]): Per row, its k most similar other rows,
        most similar first (ties: the earlier row first); empty for a row
        without a vector.
    pairs (List[DuplicatePair]): Every pair with a cosine >= threshold, the most
        similar first (ties: in row order).
    threshold (float): The near-duplicate threshold.
    k (int): Neighbours asked per row.
    without_vector (List[int]): The rows whose vector is zero (an empty text):
        left out of the search.
    """

    neighbours: List[List[Neighbour]]
    pairs: List[DuplicatePair]
    threshold: float
    k: int
    without_vector: List[int] = field(default_factory=list)


def collection_neighbours(
    collection: VectorCollection,
    *,
    k: int = 5,
    threshold: float = 0.95,
    batch_size: int = QUERY_BATCH,
    progress: bool = False,
) -> CollectionNeighbours:
    """Search a collection against itself, exactly (faiss `IndexFlatIP` over
    unit-length vectors): each row's k nearest other rows, and all pairs with
    a cosine >= threshold.

    Queries go in batches of `batch_size` rows. A batch asks for k + 1 hits
    (the row itself among them); a row whose (k + 1)-th hit still reaches the
    threshold may have more near-duplicates, and gets a range search (every
    row above the threshold), so the pairs are complete however many there are.
    Zero vectors (empty texts) have no direction: they are left out.

    k (int): Neighbours per row.
    threshold (float): The cosine a near-duplicate pair reaches, in [-1, 1].
    batch_size (int): Queries per step.
    progress (bool): Show a progress bar over the rows.
    RETURNS (CollectionNeighbours): The neighbours and the pairs.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1: {k}")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a cosine, in [-1, 1]: {threshold}")
    faiss = load_faiss()
    n_rows = len(collection.ids)
    norms = numpy.linalg.norm(collection.vectors, axis=1)
    present = numpy.nonzero(norms > 0)[0]  # index position -> collection row
    without = [int(row) for row in numpy.nonzero(norms <= 0)[0]]
    neighbours: List[List[Neighbour]] = [[] for _ in range(n_rows)]
    found: Dict[Tuple[int, int], float] = {}
    index = faiss.IndexFlatIP(collection.width)
    for start in range(0, len(present), ADD_CHUNK):
        index.add(unit_rows(collection.vectors[present[start : start + ADD_CHUNK]]))
    n_hits = min(k + 1, len(present))
    # faiss's range search keeps scores above the radius: a hair below the
    # threshold, and the pairs are filtered with >= below
    radius = float(numpy.nextafter(numpy.float32(threshold), numpy.float32(-2.0)))
    bar = tqdm(total=len(present), desc="Searching", unit=" rows", disable=not progress)
    with bar:
        for start in range(0, len(present), batch_size):
            rows = present[start : start + batch_size]
            queries = unit_rows(collection.vectors[rows])
            scores, positions = index.search(queries, n_hits)
            # all rows returned: nothing more to find
            more = (scores[:, -1] >= threshold) & (n_hits < len(present))
            extra = _range_hits(index, queries[more], radius) if more.any() else {}
            more_rows = numpy.nonzero(more)[0].tolist()
            for q, row in enumerate(rows.tolist()):
                hits = [
                    (float(score), int(present[p]))
                    for score, p in zip(scores[q].tolist(), positions[q].tolist())
                    if p >= 0 and int(present[p]) != row
                ]
                hits.sort(key=lambda hit: (-hit[0], hit[1]))
                neighbours[row] = [
                    Neighbour(collection.ids[other], other, score) for score, other in hits[:k]
                ]
                for score, other in hits:
                    if score >= threshold:
                        _add_pair(found, row, other, score)
            for q, hits_of in extra.items():
                row = int(rows[more_rows[q]])
                for score, p in hits_of:
                    other = int(present[p])
                    if other != row and score >= threshold:
                        _add_pair(found, row, other, score)
            bar.update(len(rows))
    pairs = [DuplicatePair(a, b, cosine) for (a, b), cosine in found.items()]
    pairs.sort(key=lambda pair: (-pair.cosine, pair.first, pair.second))
    return CollectionNeighbours(neighbours, pairs, threshold, k, without)


def _range_hits(index: Any, queries: numpy.ndarray, radius: float) -> Dict[int, List[Any]]:
    """Every (score, position) above `radius`, per query (its place in `queries`)."""
    lims, scores, positions = index.range_search(numpy.ascontiguousarray(queries), radius)
    return {
        q: list(zip(scores[lims[q] : lims[q + 1]].tolist(), positions[lims[q] : lims[q + 1]]))
        for q in range(len(queries))
    }


def _add_pair(found: Dict[Tuple[int, int], float], row: int, other: int, score: float) -> None:
    # each pair is found from both of its rows; its cosine is the higher of the
    # two (the same up to float rounding)
    key = (row, other) if row < other else (other, row)
    found[key] = max(found.get(key, score), score)


def top_intent(
    cats: Optional[Dict[str, float]], labels: Optional[Collection[str]] = None
) -> Optional[str]:
    """The most probable category among `labels` (all when None), or None
    when the row has no categories (or none of the labels). Ties: the first."""
    if not cats:
        return None
    best: Optional[str] = None
    best_p = -math.inf
    for label, p in cats.items():
        if (labels is None or label in labels) and p > best_p:
            best, best_p = label, p
    return best


def read_labels(path: Union[str, Path]) -> List[str]:
    """Intent labels: a JSON list of strings (as Banking77's categories.json), or
    a text file with one label a line.

    RAISES (ConversionError): The file cannot be read or holds no labels.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConversionError(str(path), f"cannot read it: {error}") from error
    if path.suffix.lower() == ".json":
        try:
            labels = json.loads(text)
        except ValueError as error:
            raise ConversionError(str(path), f"not JSON: {error}") from error
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ConversionError(str(path), "expected a JSON list of label strings")
    else:
        labels = [line.strip() for line in text.splitlines() if line.strip()]
    if not labels:
        raise ConversionError(str(path), "no labels")
    return labels


def read_intents(
    path: Union[str, Path], ids: Sequence[str], labels: Optional[Collection[str]] = None
) -> List[Optional[str]]:
    """The predicted intent (`top_intent` of "cats") of each row of a
    `bert-pipes annotate` OUTPUT, checked against the ids of its vectors."""
    from ..io.output_readers import read_output_rows

    intents: List[Optional[str]] = []
    for row, (where, record) in enumerate(read_output_rows(Path(path))):
        if row >= len(ids) or str(record.get("id")) != ids[row]:
            expected = repr(ids[row]) if row < len(ids) else "no row"
            raise ConversionError(
                where, f"id {record.get('id')!r}, but its vectors have {expected} here"
            )
        cats = record.get("cats")
        intents.append(top_intent(cats if isinstance(cats, dict) else None, labels))
    if len(intents) != len(ids):
        raise ConversionError(
            str(path), f"{len(intents)} rows of categories, but {len(ids)} vectors"
        )
    return intents


def read_texts(
    input_path: Union[str, Path],
    collection: VectorCollection,
    *,
    text_column: str = "text",
    id_column: Optional[str] = None,
) -> List[str]:
    """The text of each row of `collection`, from the input it was annotated
    from (any input of `bert-pipes annotate`), matched by id.

    RAISES (ConversionError): A row of the collection whose id the input does
        not have; the error names the collection's file and row.
    """
    from ..io.readers import texts_by_id

    texts = texts_by_id(
        Path(input_path), collection.ids, text_column=text_column, id_column=id_column
    )
    for row_number, row_id in enumerate(collection.ids):
        if row_id not in texts:
            raise ConversionError(
                row_location(collection.path, row_number),
                f"id {row_id!r} has no text in {input_path} (is it the input this "
                "collection was annotated from?)",
            )
    return [texts[row_id] for row_id in collection.ids]


@dataclass
class SimilarCollection:
    """A collection searched against itself, with what the files show.

    collection (VectorCollection): Its ids and vectors.
    found (CollectionNeighbours): The neighbours and near-duplicate pairs.
    intents (List[Optional[str]]): Each row's predicted intent.
    texts (Optional[List[str]]): Each row's text, when the input was given.
    intent_labels (Optional[List[str]]): The labels an intent is chosen from
        (None: all categories).
    """

    collection: VectorCollection
    found: CollectionNeighbours
    intents: List[Optional[str]]
    texts: Optional[List[str]] = None
    intent_labels: Optional[List[str]] = None

    def pair_records(self) -> Iterable[Dict[str, Any]]:
        """The near-duplicate pairs as JSON records, the most similar first."""
        ids, intents, texts = self.collection.ids, self.intents, self.texts
        for pair in self.found.pairs:
            a, b = pair.first, pair.second
            record: Dict[str, Any] = {
                "cosine": round(pair.cosine, 6),
                "id_a": ids[a],
                "id_b": ids[b],
                "intent_a": intents[a],
                "intent_b": intents[b],
            }
            if texts is not None:
                record.update(text_a=texts[a], text_b=texts[b])
            yield record

    def neighbour_records(self) -> Iterable[Dict[str, Any]]:
        """Each row's k most similar other rows, as JSON records, in row order."""
        for row, hits in enumerate(self.found.neighbours):
            yield {
                "id": self.collection.ids[row],
                "intent": self.intents[row],
                "neighbours": [
                    {"id": h.id, "cosine": round(h.cosine, 6), "intent": self.intents[h.row]}
                    for h in hits
                ],
            }

    def summary(self) -> Dict[str, Any]:
        """Counts and settings, for `<stem>_similar.json` and the report."""
        pairs = self.found.pairs
        in_pairs = {row for pair in pairs for row in (pair.first, pair.second)}
        searched = [hits for hits in self.found.neighbours if hits]
        same_nearest = sum(
            self.intents[hits[0].row] is not None and self.intents[hits[0].row] == self.intents[row]
            for row, hits in enumerate(self.found.neighbours)
            if hits
        )
        return {
            "annotations": self.collection.path,
            "rows": len(self.collection.ids),
            "rows_without_vector": len(self.found.without_vector),
            "width": self.collection.width,
            "threshold": self.found.threshold,
            "k": self.found.k,
            "intent_labels": len(self.intent_labels) if self.intent_labels else None,
            "pairs": len(pairs),
            "rows_in_pairs": len(in_pairs),
            "pairs_same_intent": sum(
                self.intents[p.first] is not None
                and self.intents[p.first] == self.intents[p.second]
                for p in pairs
            ),
            "nearest_same_intent": same_nearest / len(searched) if searched else None,
        }


def similar_collection(
    annotations: Union[str, Path],
    *,
    texts: Optional[Union[str, Path]] = None,
    intent_labels: Optional[Sequence[str]] = None,
    k: int = 5,
    threshold: float = 0.95,
    text_column: str = "text",
    id_column: Optional[str] = None,
    progress: bool = False,
) -> SimilarCollection:
    """Near-duplicates and most similar rows of an annotated collection.

    annotations (Union[str, Path]): An OUTPUT of `bert-pipes annotate --vectors`
        (.jsonl, .parquet or a folder of Parquet shards).
    texts (Optional[Union[str, Path]]): The input it was annotated from, for the
        texts of the pairs (matched by id); None: no texts.
    intent_labels (Optional[Sequence[str]]): The categories a row's intent is
        chosen from (e.g. one classifier's labels in a pipeline with two); None: all.
    k (int): Most similar rows kept per row.
    threshold (float): The cosine of a near-duplicate pair.
    text_column, id_column: The input's columns (as `bert-pipes annotate`).
    RETURNS (SimilarCollection): The search's results.
    """
    from ..io.output_readers import output_id_column

    # the id column keeps the input's name (annotate --id-column)
    collection = read_vectors(
        annotations, id_column=output_id_column(Path(annotations)), progress=progress
    )
    labels = set(intent_labels) if intent_labels is not None else None
    intents = read_intents(annotations, collection.ids, labels)
    row_texts = (
        read_texts(texts, collection, text_column=text_column, id_column=id_column)
        if texts is not None
        else None
    )
    found = collection_neighbours(collection, k=k, threshold=threshold, progress=progress)
    labels_list = list(intent_labels) if intent_labels is not None else None
    return SimilarCollection(collection, found, intents, row_texts, labels_list)


def similar_paths(
    annotations: Union[str, Path], output_dir: Optional[Union[str, Path]] = None
) -> Tuple[Path, Path, Path]:
    """Where `write_similar` writes for an annotations file: `<stem>_duplicates.jsonl`,
    `<stem>_neighbours.jsonl` and `<stem>_similar.json`, in `output_dir` (default:
    the annotations' folder), as (duplicates, neighbours, summary)."""
    path = Path(annotations)
    folder = Path(output_dir) if output_dir is not None else path.parent
    stem = path.stem if path.suffix else path.name
    return (
        folder / f"{stem}{DUPLICATES_SUFFIX}",
        folder / f"{stem}{NEIGHBOURS_SUFFIX}",
        folder / f"{stem}{SUMMARY_SUFFIX}",
    )


def write_similar(
    result: SimilarCollection, output_dir: Optional[Union[str, Path]] = None
) -> Tuple[Path, Path, Path]:
    """Write the pairs, the neighbours and the summary (see `similar_paths`);
    each file is replaced atomically. RETURNS the three paths."""
    from ..io.durable import write_text

    duplicates, neighbours, summary = similar_paths(result.collection.path, output_dir)
    duplicates.parent.mkdir(parents=True, exist_ok=True)
    write_text(duplicates, _jsonl(result.pair_records()))
    write_text(neighbours, _jsonl(result.neighbour_records()))
    data = {**result.summary(), "duplicates": duplicates.name, "neighbours": neighbours.name}
    write_text(summary, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return duplicates, neighbours, summary


def _jsonl(records: Iterable[Dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
