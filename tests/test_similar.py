"""Nearest-neighbour search over exported vectors: reading, errors, exactness."""

import hashlib
import json
from pathlib import Path
from typing import Any, List

import numpy
import pyarrow
import pyarrow.parquet as pq
import pytest

from spacy_bert_pipes.convert import ConversionError
from spacy_bert_pipes.similar import (
    VectorCollection,
    VectorIndex,
    collection_neighbours,
    load_saved_index,
    read_labels,
    read_vectors,
    saved_index_paths,
    similar_collection,
    top_intent,
    unit_rows,
    write_similar,
)
from spacy_bert_pipes.similar import index as index_module


def write_parquet(
    path: Path, ids: List[str], vectors: numpy.ndarray, dtype: str = "float32"
) -> Path:
    values = pyarrow.array(vectors.astype(dtype).ravel())
    column = pyarrow.FixedSizeListArray.from_arrays(values, vectors.shape[1])
    pq.write_table(pyarrow.table({"id": ids, "vector": column}), path)
    return path


def write_jsonl(path: Path, rows: List[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    return path


@pytest.fixture
def collection() -> numpy.ndarray:
    return numpy.random.default_rng(0).normal(size=(500, 24)).astype("f")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_parquet_roundtrip(tmp_path: Path, collection: numpy.ndarray, dtype: str) -> None:
    ids = [f"doc{i}" for i in range(len(collection))]
    got = read_vectors(write_parquet(tmp_path / "v.parquet", ids, collection, dtype))
    assert got.ids == ids and got.vectors.dtype == numpy.float32
    numpy.testing.assert_allclose(got.vectors, collection, rtol=1e-2 if dtype == "float16" else 0)


def test_parquet_variable_lists_are_checked(tmp_path: Path) -> None:
    table = pyarrow.table({"id": [1, 2, 3], "vector": [[1.0, 2.0], [3.0, 4.0], [5.0]]})
    pq.write_table(table, tmp_path / "v.parquet")
    with pytest.raises(ConversionError, match=r"v.parquet:row 2: .*'3' has 1 values, row 0 has 2"):
        read_vectors(tmp_path / "v.parquet")


def test_parquet_errors(tmp_path: Path) -> None:
    pq.write_table(pyarrow.table({"key": [1], "vector": [[1.0]]}), tmp_path / "a.parquet")
    with pytest.raises(ConversionError, match="no column 'id'"):
        read_vectors(tmp_path / "a.parquet")
    pq.write_table(pyarrow.table({"id": [1, 2], "vector": [[1.0], None]}), tmp_path / "b.parquet")
    with pytest.raises(ConversionError, match="row 1: id '2' has no vector"):
        read_vectors(tmp_path / "b.parquet")
    (tmp_path / "c.parquet").write_text("not parquet")
    with pytest.raises(ConversionError, match="cannot read it as Parquet"):
        read_vectors(tmp_path / "c.parquet")
    with pytest.raises(ConversionError, match="expected a .parquet or .jsonl"):
        read_vectors(write_jsonl(tmp_path / "d.csv", []))


def test_parquet_reads_only_the_id_and_vector_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An annotated collection's other columns (a score per label, texts) are
    never read: they would more than double the memory of a large read."""
    table = pyarrow.table({"id": ["a"], "cats": ['{"x": 1.0}'], "vector": [[1.0, 0.0]]})
    pq.write_table(table, tmp_path / "v.parquet")
    read = pq.read_table
    asked: List[Any] = []
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: asked.append(k) or read(*a, **k))
    (tmp_path / "shards").mkdir()
    pq.write_table(table, tmp_path / "shards" / "part-0.parquet")
    for path in (tmp_path / "v.parquet", tmp_path / "shards"):
        assert read_vectors(path).ids == ["a"]
    assert [k.get("columns") for k in asked] == [["id", "vector"]] * 2


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    good = {"id": "a", "vector": [1.0, 0.0]}
    cases = [
        ({"id": "b", "vector": [1.0]}, r"x.jsonl:2: the vector has 1 values, the first row has 2"),
        ({"id": "b"}, r"x.jsonl:2: no 'vector' field"),
        ({"id": "b", "vector": ["x", 1]}, r"x.jsonl:2: 'vector' must be a list of numbers"),
        ({"id": "a", "vector": [0.0, 1.0]}, r"x.jsonl:2: id 'a' repeats the id of row 0"),
        ({"id": "b", "vector": [float("nan"), 1.0]}, r"x.jsonl:2: .* not finite"),
    ]
    for bad, message in cases:
        write_jsonl(tmp_path / "x.jsonl", [good, bad])
        with pytest.raises(ConversionError, match=message):
            read_vectors(tmp_path / "x.jsonl")
    (tmp_path / "x.jsonl").write_text('{"id": "a", "vector": [1.0]}\n{oops\n')
    with pytest.raises(ConversionError, match="x.jsonl:2: not a JSON object"):
        read_vectors(tmp_path / "x.jsonl")


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_search_matches_brute_force_cosine(
    tmp_path: Path, collection: numpy.ndarray, kind: str
) -> None:
    rows = [{"id": i, "vector": v.tolist()} for i, v in enumerate(collection)]
    index = VectorIndex(read_vectors(write_jsonl(tmp_path / "v.jsonl", rows)), kind=kind)  # type: ignore[arg-type]
    assert len(index) == len(collection)
    queries = numpy.random.default_rng(1).normal(size=(5, 24)).astype("f")
    cosines = unit_rows(queries) @ unit_rows(collection).T
    for q, hits in enumerate(index.search(queries, k=5)):
        want = numpy.argsort(-cosines[q])[:5]
        assert [h.row for h in hits] == want.tolist()
        assert [h.id for h in hits] == [str(r) for r in want]
        numpy.testing.assert_allclose([h.cosine for h in hits], cosines[q][want], atol=1e-5)


def test_search_by_row_leaves_the_row_out(tmp_path: Path, collection: numpy.ndarray) -> None:
    ids = [f"doc{i}" for i in range(len(collection))]
    index = VectorIndex(read_vectors(write_parquet(tmp_path / "v.parquet", ids, collection)))
    row = index.row("doc7")
    hits = index.search(collection[row : row + 1], k=3, exclude=[row])[0]
    assert len(hits) == 3 and all(h.id != "doc7" for h in hits)
    with pytest.raises(KeyError, match="no row has id 'nope'"):
        index.row("nope")
    with pytest.raises(ValueError, match="width 3, the vectors of .* have 24"):
        index.search(numpy.ones((1, 3), "f"))


def test_search_leaves_faiss_threads_as_they_were(
    tmp_path: Path, collection: numpy.ndarray
) -> None:
    import faiss

    ids = [f"doc{i}" for i in range(len(collection))]
    index = VectorIndex(read_vectors(write_parquet(tmp_path / "v.parquet", ids, collection)))
    before = faiss.omp_get_max_threads()
    index.search(collection[:1], k=2)
    index.search(collection[:40], k=2)
    assert faiss.omp_get_max_threads() == before


def planted(n: int = 400, width: int = 32) -> VectorCollection:
    assert n >= 100
    """Random vectors (cosines near 0) with planted near-duplicates: rows 10, 20
    and 30 copy row 7 (a cluster of four, more than k = 1 per row), row 50 copies
    row 3 at cosine ~0.97 (under a threshold of 0.99), and row 99 is zero."""
    rng = numpy.random.default_rng(0)
    vectors = rng.normal(size=(n, width)).astype("f")
    for row in (10, 20, 30):
        vectors[row] = vectors[7] + 0.01 * rng.normal(size=width)
    vectors[50] = vectors[3] + 0.25 * rng.normal(size=width)
    vectors[99] = 0.0
    return VectorCollection("planted.jsonl", [f"r{i}" for i in range(n)], vectors)


@pytest.mark.parametrize("k,batch_size", [(1, 64), (5, 1000)])
def test_collection_neighbours_finds_the_planted_duplicates(k: int, batch_size: int) -> None:
    collection = planted()
    cosines = unit_rows(collection.vectors) @ unit_rows(collection.vectors).T
    assert 0.95 < cosines[3, 50] < 0.99 and cosines[7, 10] > 0.99
    found = collection_neighbours(collection, k=k, threshold=0.99, batch_size=batch_size)
    cluster = [(7, 10), (7, 20), (7, 30), (10, 20), (10, 30), (20, 30)]
    assert sorted((p.first, p.second) for p in found.pairs) == cluster
    assert [p.cosine for p in found.pairs] == sorted((p.cosine for p in found.pairs), reverse=True)
    for pair in found.pairs:
        assert pair.cosine == pytest.approx(cosines[pair.first, pair.second], abs=1e-5)
    looser = collection_neighbours(collection, k=k, threshold=0.95, batch_size=batch_size)
    assert sorted((p.first, p.second) for p in looser.pairs) == sorted([(3, 50), *cluster])
    # neighbours: the k nearest other rows, exactly, most similar first
    assert found.without_vector == [99] and found.neighbours[99] == []
    numpy.fill_diagonal(cosines, -2.0)
    cosines[:, 99] = -2.0
    for row, hits in enumerate(found.neighbours):
        if row == 99:
            continue
        assert len(hits) == k and all(h.row != row for h in hits)
        assert [h.cosine for h in hits] == sorted((h.cosine for h in hits), reverse=True)
        want = numpy.sort(cosines[row])[::-1][:k]
        numpy.testing.assert_allclose([h.cosine for h in hits], want, atol=1e-5)
        assert all(h.id == f"r{h.row}" for h in hits)


def test_collection_neighbours_small_and_bad_settings() -> None:
    collection = VectorCollection("x.jsonl", ["a", "b"], numpy.eye(2, dtype="f"))
    found = collection_neighbours(collection, k=5, threshold=0.5)
    assert [[h.id for h in hits] for hits in found.neighbours] == [["b"], ["a"]]
    assert found.pairs == []
    with pytest.raises(ValueError, match="k must be at least 1"):
        collection_neighbours(collection, k=0)
    with pytest.raises(ValueError, match=r"threshold must be a cosine, in \[-1, 1\]"):
        collection_neighbours(collection, threshold=1.5)


def test_top_intent_and_labels(tmp_path: Path) -> None:
    cats = {"card": 0.2, "fx": 0.7, "how": 0.9}
    assert top_intent(cats) == "how"
    assert top_intent(cats, {"card", "fx"}) == "fx"
    assert top_intent(None) is None and top_intent(cats, {"other"}) is None
    (tmp_path / "labels.json").write_text('["card", "fx"]')
    (tmp_path / "labels.txt").write_text("card\n\nfx\n")
    assert read_labels(tmp_path / "labels.json") == read_labels(tmp_path / "labels.txt")
    (tmp_path / "bad.json").write_text('{"card": 1}')
    with pytest.raises(ConversionError, match="bad.json: expected a JSON list"):
        read_labels(tmp_path / "bad.json")


def annotated_rows(collection: VectorCollection) -> List[dict]:
    """Rows as `annotate --vectors` writes them: intents from the NLU++-like
    label "how" (always most probable) and a Banking77-like label per row."""
    rows = []
    for i, (row_id, vector) in enumerate(zip(collection.ids, collection.vectors)):
        cats = {"how": 0.99, f"intent{i % 3}": 0.8, "intent9": 0.1}
        rows.append(
            {"id": row_id, "cats": cats, "entities": [], "answers": [], "vector": vector.tolist()}
        )
    return rows


def test_similar_collection_writes_pairs_and_neighbours(tmp_path: Path) -> None:
    collection = planted(100)
    path = write_jsonl(tmp_path / "tickets.jsonl", annotated_rows(collection))
    texts = [{"id": row_id, "text": f"text of {row_id}"} for row_id in reversed(collection.ids)]
    inputs = write_jsonl(tmp_path / "in.jsonl", texts + [{"id": "extra", "text": "not annotated"}])
    labels = ["intent0", "intent1", "intent2", "intent9"]
    result = similar_collection(path, texts=inputs, intent_labels=labels, k=2, threshold=0.99)
    duplicates, neighbours, summary = write_similar(result, tmp_path / "out")
    assert duplicates == tmp_path / "out" / "tickets_duplicates.jsonl"
    pairs = [json.loads(line) for line in duplicates.read_text().splitlines()]
    assert len(pairs) == 6
    assert {(p["id_a"], p["id_b"]) for p in pairs} >= {("r7", "r10"), ("r20", "r30")}
    first = pairs[0]
    row_a, row_b = int(first["id_a"][1:]), int(first["id_b"][1:])
    assert first["text_a"] == f"text of {first['id_a']}"
    assert first["intent_a"] == f"intent{row_a % 3}" and first["intent_b"] == f"intent{row_b % 3}"
    lines = [json.loads(line) for line in neighbours.read_text().splitlines()]
    assert [line["id"] for line in lines] == collection.ids
    assert [n["id"] for n in lines[7]["neighbours"]][:1] in (["r10"], ["r20"], ["r30"])
    assert len(lines[0]["neighbours"]) == 2 and lines[0]["intent"] == "intent0"
    data = json.loads(summary.read_text())
    assert data["rows"] == 100 and data["rows_without_vector"] == 1  # row 99
    assert (data["pairs"], data["rows_in_pairs"], data["threshold"], data["k"]) == (6, 4, 0.99, 2)
    assert data["duplicates"] == "tickets_duplicates.jsonl" and data["intent_labels"] == 4
    # without labels the intent is the most probable category of all: "how"
    plain = similar_collection(path, k=1, threshold=0.99)
    assert set(plain.intents) == {"how"} and plain.texts is None
    assert "text_a" not in next(iter(plain.pair_records()))


def test_similar_collection_errors_name_the_file_and_row(tmp_path: Path) -> None:
    vectors = numpy.random.default_rng(0).normal(size=(5, 4)).astype("f")
    rows = annotated_rows(VectorCollection("x", [f"r{i}" for i in range(5)], vectors))
    bad = dict(rows[2], vector=rows[2]["vector"][:3])
    path = write_jsonl(tmp_path / "a.jsonl", [*rows[:2], bad, *rows[3:]])
    with pytest.raises(ConversionError, match=r"a.jsonl:3: the vector has 3 values"):
        similar_collection(path)
    nan = dict(rows[1], vector=[float("nan")] * 4)
    path = write_jsonl(tmp_path / "b.jsonl", [rows[0], nan, *rows[2:]])
    with pytest.raises(ConversionError, match=r"b.jsonl:2: the vector of id 'r1' is not finite"):
        similar_collection(path)
    no_vectors = [{k: v for k, v in row.items() if k != "vector"} for row in rows]
    path = write_jsonl(tmp_path / "c.jsonl", no_vectors)
    with pytest.raises(ConversionError, match=r"c.jsonl:1: no 'vector' field"):
        similar_collection(path)
    # the texts' input lacks a row of the annotations (another collection's input)
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    inputs = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "text": "t"} for i in (0, 1, 3)])
    with pytest.raises(ConversionError, match=r"d.jsonl:3: id 'r2' has no text in .*in.jsonl"):
        similar_collection(path, texts=inputs)


def test_similar_collection_reads_parquet_shards(tmp_path: Path) -> None:
    """A folder of Parquet shards, as `annotate --vectors` writes it: the JSON
    text cells and a fixed-size list column."""
    collection = planted(100, 8)
    rows = annotated_rows(collection)
    folder = tmp_path / "out"
    folder.mkdir()
    for shard, part in enumerate((rows[:60], rows[60:])):
        vectors = numpy.asarray([r["vector"] for r in part], dtype="float32")
        values = pyarrow.FixedSizeListArray.from_arrays(pyarrow.array(vectors.ravel()), 8)
        cells = {"id": [r["id"] for r in part]}
        cells |= {k: [json.dumps(r[k]) for r in part] for k in ("cats", "entities", "answers")}
        table = pyarrow.table({**cells, "vector": values})
        pq.write_table(table, folder / f"part-{shard:06d}.parquet")
    result = similar_collection(folder, intent_labels=["intent0", "intent1"], k=2, threshold=0.99)
    assert result.collection.ids == collection.ids
    assert result.intents[:3] == ["intent0", "intent1", None]
    assert sorted((p.first, p.second) for p in result.found.pairs)[:3] == [
        (7, 10),
        (7, 20),
        (7, 30),
    ]
    paths = write_similar(result)
    assert [p.name for p in paths] == [
        "out_duplicates.jsonl",
        "out_neighbours.jsonl",
        "out_similar.json",
    ]
    assert all(p.parent == tmp_path for p in paths)


def test_saved_index_is_loaded_not_built(
    tmp_path: Path, collection: numpy.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"doc{i}" for i in range(len(collection))]
    path = write_parquet(tmp_path / "v.parquet", ids, collection)
    assert load_saved_index(read_vectors(path), kind="hnsw") is None
    built = VectorIndex(read_vectors(path), kind="hnsw")
    assert built.save() == tmp_path / "v.parquet.hnsw.faiss"
    assert saved_index_paths(path, "hnsw")[1].exists()

    def no_building(*args: object, **kwargs: object) -> None:
        raise AssertionError("built, not loaded")

    monkeypatch.setattr(index_module, "build_faiss_index", no_building)
    loaded = load_saved_index(read_vectors(path), kind="hnsw", ef_search=64)
    assert loaded is not None and len(loaded) == len(collection)
    queries = numpy.random.default_rng(1).normal(size=(5, 24)).astype("f")
    assert loaded.search(queries, k=10) == built.search(queries, k=10)
    # another M is another graph
    assert load_saved_index(read_vectors(path), kind="hnsw", hnsw_m=16) is None


def test_saved_index_of_other_vectors_is_not_loaded(
    tmp_path: Path, collection: numpy.ndarray
) -> None:
    ids = [f"doc{i}" for i in range(len(collection))]
    path = write_parquet(tmp_path / "v.parquet", ids, collection)
    VectorIndex(read_vectors(path), kind="hnsw").save()
    assert load_saved_index(read_vectors(path), kind="hnsw") is not None
    changed = collection.copy()
    changed[3, 0] += 1e-3
    write_parquet(path, ids, changed)
    assert load_saved_index(read_vectors(path), kind="hnsw") is None
    write_parquet(path, ids[1:] + ids[:1], collection)  # the same vectors, other ids
    assert load_saved_index(read_vectors(path), kind="hnsw") is None


@pytest.mark.parametrize("damage", ["truncated", "flipped", "sidecar", "rows", "other_index"])
def test_damaged_saved_index_is_not_loaded(
    tmp_path: Path, collection: numpy.ndarray, damage: str
) -> None:
    import faiss

    ids = [f"doc{i}" for i in range(len(collection))]
    path = write_parquet(tmp_path / "v.parquet", ids, collection)
    VectorIndex(read_vectors(path), kind="hnsw").save()
    index_path, sidecar_path = saved_index_paths(path, "hnsw")
    data = bytearray(index_path.read_bytes())
    sidecar = json.loads(sidecar_path.read_text())
    if damage == "truncated":
        index_path.write_bytes(data[: len(data) // 2])
    elif damage == "flipped":
        data[-100] ^= 1  # a bit of a stored vector: faiss reads it without complaint
        index_path.write_bytes(bytes(data))
    elif damage == "sidecar":
        sidecar_path.write_text("{not json")
    elif damage == "rows":
        sidecar_path.write_text(json.dumps({**sidecar, "rows": 499}))
    else:
        # a readable index with a matching checksum, of the wrong size and kind
        other = faiss.IndexFlatIP(24)
        other.add(unit_rows(collection[:10]))
        index_bytes = faiss.serialize_index(other)
        index_path.write_bytes(index_bytes.tobytes())
        digest = hashlib.sha256(index_bytes.tobytes()).hexdigest()
        sidecar_path.write_text(json.dumps({**sidecar, "index_sha256": digest}))
    assert load_saved_index(read_vectors(path), kind="hnsw") is None
