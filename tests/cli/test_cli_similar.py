"""`bert-pipes similar`: a text through a pipeline, or a row, against a vectors file."""

import json
from pathlib import Path
from typing import Any, List

import numpy
import pytest
import spacy
from helpers import SMALL_ENCODER, loader_config
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

runner = CliRunner()
TEXTS = ["my card still not arrived", "exchange rate for cash", "hello world", "new york"]


@pytest.fixture(scope="module")
def vectors_pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("similar")
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_vectors")
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize()
    nlp.to_disk(root / "pipeline")
    rows = [{"id": f"t{i}", "vector": doc.vector.tolist()} for i, doc in enumerate(nlp.pipe(TEXTS))]
    (root / "v.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_text_query_finds_itself(vectors_pipeline: Path) -> None:
    root = vectors_pipeline
    args = ["similar", str(root / "v.jsonl"), TEXTS[1], "--pipeline", str(root / "pipeline")]
    result = runner.invoke(app, [*args, "-k", "2", "--json"])
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert [h["rank"] for h in hits] == [1, 2]
    assert hits[0]["id"] == "t1" and hits[0]["cosine"] == pytest.approx(1.0, abs=1e-5)


def test_row_query_and_table(vectors_pipeline: Path) -> None:
    result = runner.invoke(app, ["similar", str(vectors_pipeline / "v.jsonl"), "--id", "t0"])
    assert result.exit_code == 0, result.output
    assert "Nearest to id 't0'" in result.stdout
    assert "t1" in result.stdout and "t3" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert lines and all("t0" not in line for line in lines)


def test_clear_errors(vectors_pipeline: Path, tmp_path: Path) -> None:
    file = str(vectors_pipeline / "v.jsonl")
    result = runner.invoke(app, ["similar", file])
    assert result.exit_code == 1 and "either a QUERY" in result.output
    result = runner.invoke(app, ["similar", file, "hello"])
    assert result.exit_code == 1 and "needs --pipeline" in result.output
    result = runner.invoke(app, ["similar", file, "--id", "nope"])
    assert result.exit_code == 1 and "no row has id 'nope'" in result.output
    (tmp_path / "bad.jsonl").write_text('{"id": 1, "vector": [1, 2]}\n{"id": 2, "vector": [1]}\n')
    result = runner.invoke(app, ["similar", str(tmp_path / "bad.jsonl"), "--id", "1"])
    assert result.exit_code == 1 and "bad.jsonl:2: the vector has 1 values" in result.output
    narrow = tmp_path / "narrow.jsonl"
    narrow.write_text('{"id": 1, "vector": [1, 2]}\n')
    pipeline = str(vectors_pipeline / "pipeline")
    result = runner.invoke(app, ["similar", str(narrow), "hello", "--pipeline", pipeline])
    assert result.exit_code == 1 and "width 32" in result.output and "have 2" in result.output
    no_vectors = tmp_path / "plain"
    spacy.blank("en").to_disk(no_vectors)
    result = runner.invoke(app, ["similar", file, "hello", "--pipeline", str(no_vectors)])
    assert result.exit_code == 1 and "no bert_vectors component" in result.output


def test_similar_collection_writes_beside_the_annotations(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "cats": {"card": 0.9}, "vector": [1.0, 0.0, 0.0]},
        {"id": "b", "cats": {"card": 0.8}, "vector": [0.999, 0.02, 0.0]},
        {"id": "c", "cats": {"fx": 0.9}, "vector": [0.0, 1.0, 0.0]},
    ]
    annotations = tmp_path / "tickets.jsonl"
    lines = [json.dumps({**r, "entities": [], "answers": []}) + "\n" for r in rows]
    annotations.write_text("".join(lines))
    texts = tmp_path / "in.jsonl"
    texts.write_text(
        "".join(json.dumps({"id": r["id"], "text": f"t {r['id']}"}) + "\n" for r in rows)
    )
    args = ["similar-collection", str(annotations), "--texts", str(texts), "-k", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 near-duplicate pairs (cosine >= 0.95) among 2 rows" in result.output
    pairs = (tmp_path / "tickets_duplicates.jsonl").read_text().splitlines()
    assert [json.loads(p)["text_b"] for p in pairs] == ["t b"]
    near = [json.loads(n) for n in (tmp_path / "tickets_neighbours.jsonl").read_text().splitlines()]
    assert [[h["id"] for h in n["neighbours"]] for n in near] == [["b"], ["a"], ["b"]]
    assert json.loads((tmp_path / "tickets_similar.json").read_text())["pairs"] == 1
    # a bad row: one line, naming the file and the row
    lines[1] = json.dumps({**rows[1], "entities": [], "answers": [], "vector": [1.0]}) + "\n"
    annotations.write_text("".join(lines))
    result = runner.invoke(app, ["similar-collection", str(annotations)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    # (before it: the progress bar of the reading)
    last = result.output.strip().splitlines()[-1]
    assert last == f"{annotations}:2: the vector has 1 values, the first row has 3"


def write_vectors(path: Path, vectors: numpy.ndarray) -> Path:
    rows = [{"id": f"r{i}", "vector": v.tolist()} for i, v in enumerate(vectors)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_hnsw_index_is_saved_loaded_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy_bert_pipes.similar import index as index_module

    vectors = numpy.random.default_rng(0).normal(size=(60, 8)).astype("f")
    file = write_vectors(tmp_path / "v.jsonl", vectors)
    sidecar = tmp_path / "v.jsonl.hnsw.faiss.json"
    args = ["similar", str(file), "--id", "r0", "--index", "hnsw", "-k", "5"]
    first = runner.invoke(app, [*args, "--json"])
    assert first.exit_code == 0, first.output
    assert (tmp_path / "v.jsonl.hnsw.faiss").exists() and sidecar.exists()
    saved_at = sidecar.stat().st_mtime_ns
    build = index_module.build_faiss_index
    builds: List[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        builds.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(index_module, "build_faiss_index", counted)
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "Loaded the saved hnsw index" in again.stdout and builds == []
    assert runner.invoke(app, [*args, "--json"]).stdout == first.stdout
    assert sidecar.stat().st_mtime_ns == saved_at and builds == []
    # a damaged index is rebuilt (and replaced), with the same results
    (tmp_path / "v.jsonl.hnsw.faiss").write_bytes(b"\0" * 100)
    rebuilt = runner.invoke(app, args)
    assert rebuilt.exit_code == 0 and "Saved the hnsw index to" in rebuilt.stdout
    assert builds == [1]
    assert runner.invoke(app, [*args, "--json"]).stdout == first.stdout and builds == [1]
    # a changed vectors file: rebuilt
    vectors[5] = -vectors[5]
    write_vectors(file, vectors)
    changed = runner.invoke(app, [*args, "--json"])
    assert changed.exit_code == 0 and builds == [1, 1]
    assert changed.stdout != first.stdout and sidecar.stat().st_mtime_ns != saved_at


def test_no_save_index_and_flat_write_nothing(tmp_path: Path) -> None:
    file = write_vectors(tmp_path / "v.jsonl", numpy.eye(4, dtype="f"))
    for extra in (["--index", "hnsw", "--no-save-index"], ["--index", "flat"], []):
        result = runner.invoke(app, ["similar", str(file), "--id", "r0", *extra])
        assert result.exit_code == 0, result.output
        assert sorted(p.name for p in tmp_path.iterdir()) == ["v.jsonl"]
