"""Nearest-neighbour search over exported vectors: reading, errors, exactness."""

import json
from pathlib import Path
from typing import List

import numpy
import pyarrow
import pyarrow.parquet as pq
import pytest

from spacy_bert_pipes.convert import ConversionError
from spacy_bert_pipes.similar import VectorIndex, read_vectors, unit_rows


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
