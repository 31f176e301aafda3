"""The ray engine of batch annotation (spacy_bert_pipes.annotate.ray): the same
rows and error rows as the local engine (with `--vectors` too), resuming across
engines, and the sharded Parquet input and output that both engines read and
write. One local Ray serves the module."""

import json
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, cast

import numpy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spacy
import torch
from annotate_helpers import (
    TEXTS,
    needs_ray,
    read_errors,
    read_output,
    run,
    save_tiny_pipeline,
    save_vectors_pipeline,
    write_input,
)
from helpers import LABELS, WORDS, prototype_router
from spacy.training import Example

from spacy_bert_pipes.annotate import (
    AnnotateError,
    AnnotateOptions,
    annotate,
    prepare_run,
    run_annotation,
)
from spacy_bert_pipes.annotate.prepare import load_pipeline
from spacy_bert_pipes.annotate.ray import annotate_ray, run_annotation_ray
from spacy_bert_pipes.models.heads.scope import SCORE_TOLERANCE, get_fit, set_fit
from spacy_bert_pipes.pipeline import textcat_scope

pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time on the machine (make test -n 2)

torch.set_num_threads(1)  # as in Ray's actors (OMP_NUM_THREADS=1): the same float sums


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """bert_textcat, bert_ner and bert_qa (for the rows' own questions)."""
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One small local Ray for the module: the engine uses it as it is."""
    import logging

    import ray

    ray.init("local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()


def texts(n: int, seed: int = 0) -> List[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(0, 16))) for _ in range(n)]


def write_jsonl_with_bad_rows(path: Path, n: int) -> Path:
    """n rows, some with their own questions, and every kind of bad row spread
    through them: each must go to the errors file, none may vanish."""
    bad = [
        b'{"id": "null", "text": null}',
        b'{"id": "missing", "body": "no text field"}',
        b'{"id": "utf8", "text": "bad \xff byte"}',
        b'{"id": "json", "text": "cut',
        b"[1, 2]",
        b'{"id": "d7", "text": "a duplicate id"}',
        b'{"id": "number", "text": 12}',
        b'{"id": "surrogate", "text": "lone \\ud800"}',
        b'{"id": "questions", "text": "x", "questions": "not json"}',
    ]
    lines = []
    for i, text in enumerate(texts(n)):
        record: Dict[str, Any] = {"id": f"d{i}", "text": text}
        if i % 97 == 0:
            record["questions"] = {"who": "who is in paris ?"}
        lines.append(json.dumps(record).encode("utf8"))
        if i % 211 == 5:
            lines.append(bad[(i // 211) % len(bad)])
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@needs_ray
def test_2000_docs_give_the_local_rows(pipeline: str, tmp_path: Path, local_ray: None) -> None:
    """The acceptance test: 2 workers, byte for byte the local engine's output
    and errors file."""
    input_path = write_jsonl_with_bad_rows(tmp_path / "in.jsonl", 2000)
    options = dict(chunk_size=250, questions_column="questions", keep_columns=("text",))
    local = tmp_path / "local.jsonl"
    summary = run(pipeline, input_path, local, **options)
    assert summary.input_rows == 2010 and summary.error_rows == 10
    output = tmp_path / "ray.jsonl"
    found = annotate_ray(pipeline, input_path, output, AnnotateOptions(**options), workers=2)
    counts = ("input_rows", "output_rows", "error_rows", "chunks")
    assert [getattr(found, name) for name in counts] == [getattr(summary, name) for name in counts]
    assert output.read_bytes() == local.read_bytes()
    assert read_errors(output) == read_errors(local)
    assert {error["id"] for error in read_errors(output)} >= {"null", "missing", "utf8", "d7"}
    rows = read_output(output)
    assert len(rows) == 2000 and rows[0]["answers"] and rows[1]["answers"] == []
    assert [row["text"] for row in rows[:3]] == texts(3)
    assert any(row["empty_text"] for row in rows)  # texts of 0 words
    assert not (tmp_path / "ray.jsonl.parts").exists()


def write_shards(folder: Path, records: List[Dict[str, Any]], sizes: List[int]) -> Path:
    """The records as Parquet shards of these sizes, the texts as binary (so
    that they can hold invalid UTF-8), in sub/ for the last one."""
    folder.mkdir()
    start = 0
    for i, size in enumerate(sizes):
        shard = records[start : start + size]
        path = folder / ("sub/" if i == len(sizes) - 1 else "") / f"part-{i}.parquet"
        path.parent.mkdir(exist_ok=True)
        schema = pa.schema([("id", pa.string()), ("text", pa.binary())])
        pq.write_table(pa.Table.from_pylist(shard, schema=schema), path)
        start += size
    return folder


@needs_ray
def test_sharded_parquet_in_and_out(pipeline: str, tmp_path: Path, local_ray: None) -> None:
    records: List[Dict[str, Any]] = [
        {"id": f"r{i}", "text": text.encode("utf8")} for i, text in enumerate(texts(23, seed=1))
    ]
    records[4]["text"] = None
    records[15]["text"] = b"caf\xe9"
    shards = write_shards(tmp_path / "shards", records, [10, 0, 13])
    single = tmp_path / "single.parquet"
    pq.write_table(pa.Table.from_pylist(records), single)

    options: Dict[str, Any] = {"chunk_size": 5, "keep_columns": ("text",)}
    local = tmp_path / "local.jsonl"
    run(pipeline, single, local, **options)
    local_dir = tmp_path / "local_out"
    run(pipeline, shards, local_dir, **options)
    ray_dir = tmp_path / "ray_out"
    summary = annotate_ray(pipeline, shards, ray_dir, AnnotateOptions(**options), workers=2)
    assert (summary.input_rows, summary.error_rows, summary.chunks) == (23, 2, 5)

    # One shard per chunk; read together, the rows of the local engine.
    names = [f"part-{i:06d}.parquet" for i in range(5)]
    assert sorted(p.name for p in ray_dir.iterdir()) == names
    assert [pq.read_metadata(ray_dir / name).num_rows for name in names] == [4, 5, 5, 4, 3]
    assert read_output(ray_dir) == read_output(local_dir) == read_output(local)
    # the binary text column kept as the text it decodes to
    assert read_output(ray_dir)[0]["text"] == records[0]["text"].decode("utf8")
    for output in (local_dir, ray_dir):
        assert read_errors(output) == [
            {"id": "r4", "row": 4, "source": "part-0.parquet:row 4", "reason": "text is null"},
            {
                "id": "r15",
                "row": 15,
                "source": "sub/part-2.parquet:row 5",
                "reason": "invalid UTF-8 in the text at byte 3: b'\\xe9'",
            },
        ]
    # A run replaces the folder, leaving nothing beside it.
    (ray_dir / "stale.parquet").write_bytes(b"old")
    run(pipeline, shards, ray_dir, **options)
    assert sorted(p.name for p in ray_dir.iterdir()) == names
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ray_out")) == [
        "ray_out",
        "ray_out.errors.jsonl",
        "ray_out_time.json",
    ]


@pytest.fixture(scope="module")
def vectors_pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """bert_textcat and bert_ner, with static word vectors."""
    return str(save_vectors_pipeline(tmp_path_factory.mktemp("vectors") / "nlp", tiny_bert))


@needs_ray
def test_vectors_give_the_local_bytes(
    vectors_pipeline: str, tmp_path: Path, local_ray: None
) -> None:
    """`--vectors` in float16 Parquet: the actors fill the vector column with
    the local engine's code (`annotate_chunk`), its error rows included (a
    text of unknown words has no vector). JSONL and float32 are the same code
    with another dtype and writer (test_vector_column.py)."""
    texts_ = (list(TEXTS) + ["  \n ", "xyzzy plugh"]) * 3
    input_path = write_input(
        tmp_path, "jsonl", [{"id": str(i), "text": text} for i, text in enumerate(texts_)]
    )
    options = AnnotateOptions(chunk_size=4, vectors=True, vectors_dtype="float16")
    local = tmp_path / "local.parquet"
    expected = annotate(vectors_pipeline, input_path, local, options)
    output = tmp_path / "ray.parquet"
    summary = annotate_ray(vectors_pipeline, input_path, output, options, workers=2)
    assert (summary.output_rows, summary.error_rows) == (expected.output_rows, 3)
    assert output.read_bytes() == local.read_bytes()
    assert read_errors(output) == read_errors(local)


class Interrupted(Exception):
    pass


@needs_ray
def test_a_stopped_run_resumes_with_either_engine(
    pipeline: str, tmp_path: Path, local_ray: None
) -> None:
    """A local run stopped after its first chunk is resumed on Ray, which is
    stopped after one more chunk; the local engine finishes it: the bytes of
    one uninterrupted run."""
    table = tmp_path / "in.csv"
    lines = ["id,text"] + [f"c{i},{text}" for i, text in enumerate(texts(40, seed=2))]
    lines[8] = "c7,bad \udcff byte"  # written back as the invalid byte 0xff
    lines[20] = "c19,one,field too many"
    table.write_bytes("\n".join(lines).encode("utf8", "surrogateescape") + b"\n")
    expected = tmp_path / "expected.csv"
    run(pipeline, table, expected, chunk_size=10, keep_columns=("text",))
    assert [e["id"] for e in read_errors(expected)] == ["c7", "c19"]

    output = tmp_path / "out.csv"
    options = AnnotateOptions(chunk_size=10, keep_columns=("text",))

    def stop_after_one_chunk(rows: int) -> None:
        raise Interrupted

    nlp = load_pipeline(pipeline, options)
    with pytest.raises(Interrupted):
        run_annotation(
            prepare_run(pipeline, table, output, options), nlp, on_chunk=stop_after_one_chunk
        )
    run_ = prepare_run(pipeline, table, output, options)
    assert run_.done == {0}
    with pytest.raises(Interrupted):
        run_annotation_ray(run_, pipeline, workers=2, on_chunk=stop_after_one_chunk)
    run_ = prepare_run(pipeline, table, output, options)
    assert len(run_.done) == 2
    summary = run_annotation(run_, nlp)
    assert (summary.resumed_chunks, summary.chunks, summary.error_rows) == (2, 4, 2)
    assert output.read_bytes() == expected.read_bytes()
    assert read_errors(output) == read_errors(expected)


@pytest.fixture(scope="module")
def knn_router(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prototype router (configs/route.cfg's model) calibrated with a knn fit
    that remembers 600 training docs (OpenBLAS splits a product that large
    between threads)."""
    path = prototype_router(tiny_bert, tmp_path_factory.mktemp("knn") / "router")
    nlp = spacy.load(path, config={"components": {"bert_textcat": {"oos_method": "knn"}}})
    examples = [
        Example.from_dict(
            nlp.make_doc(text), {"cats": {label: float(label == LABELS[i % 3]) for label in LABELS}}
        )
        for i, text in enumerate(texts(660, seed=3))
    ]
    textcat: Any = nlp.get_pipe("bert_textcat")
    textcat.calibrate(examples[:600], examples[600:])
    nlp.to_disk(path)
    return path


def knife_edge(raw: numpy.ndarray) -> numpy.ndarray:
    """Reference scores that put each raw score at a step of its confidence:
    the float32s on either side of raw - tolerance (`confidence` counts the
    references below it), so a raw score an ulp higher or lower moves its
    doc's confidence."""
    edge = raw.astype("float64") - SCORE_TOLERANCE * numpy.maximum(numpy.abs(raw), 1.0)
    near = edge.astype("f")
    below = numpy.where(near < edge, near, numpy.nextafter(near, numpy.float32(-numpy.inf)))
    above = numpy.where(near >= edge, near, numpy.nextafter(near, numpy.float32(numpy.inf)))
    return numpy.sort(numpy.concatenate([below, above]))


@needs_ray
def test_a_knn_router_writes_the_local_bytes_on_ray(
    knn_router: Path, tmp_path: Path, local_ray: None
) -> None:
    """Issue 65: numpy's BLAS gave a knn score another last bit on a Ray actor
    (1 thread, OMP_NUM_THREADS=1) than in this process and in `--workers` (all
    cores, numpy loaded by the fork server), and the doc's confidence another
    value. The reference here puts every doc's score at a step of its
    confidence: a score an ulp off shows in the bytes. (OpenBLAS's AVX2 kernels
    round otherwise on other threads; its AVX-512 ones did not, here.)"""
    records = [{"id": f"q{i}", "text": text} for i, text in enumerate(texts(200, seed=4))]
    input_path = write_input(tmp_path, "jsonl", records)
    options = AnnotateOptions(chunk_size=50)
    scores: List[numpy.ndarray] = []
    confidence = textcat_scope.confidence

    def record(fit: Any, method: str, raw: numpy.ndarray) -> numpy.ndarray:
        scores.append(numpy.asarray(raw, dtype="f"))
        return confidence(fit, method, raw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(textcat_scope, "confidence", record)
        annotate(str(knn_router), input_path, tmp_path / "scores.jsonl", options)
    nlp = spacy.load(knn_router)
    model = cast(Any, nlp.get_pipe("bert_textcat")).model
    fit = get_fit(model)
    assert fit is not None and fit.method == "knn"
    set_fit(model, replace(fit, reference=knife_edge(numpy.concatenate(scores))))
    nlp.to_disk(tmp_path / "router")
    router = str(tmp_path / "router")

    local = tmp_path / "local.jsonl"
    annotate(router, input_path, local, options)
    on_ray = tmp_path / "ray.jsonl"
    annotate_ray(router, input_path, on_ray, options, workers=1)
    assert on_ray.read_bytes() == local.read_bytes()
    assert len({row["route"]["confidence"] for row in read_output(local)}) > 100


@pytest.fixture(scope="module")
def xlm_r_pipeline(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Textcat and NER (case embeddings) on a shared encoder and QA on its own,
    from a tiny XLM-R (SentencePiece, </s></s> pairs, one segment)."""
    from families import family_pipeline, write_family

    folder = tmp_path_factory.mktemp("xlm_r")
    family_pipeline(write_family("xlm-roberta", folder / "checkpoint")).to_disk(folder / "nlp")
    return str(folder / "nlp")


@needs_ray
def test_an_xlm_r_pipeline_writes_the_local_bytes_on_ray(
    xlm_r_pipeline: str, tmp_path: Path, local_ray: None
) -> None:
    """The family matrix (tests/test_families.py) on the Ray engine."""
    rows = [{"id": f"x{i}", "text": text.title()} for i, text in enumerate(texts(24, seed=5))]
    input_path = write_input(tmp_path, "jsonl", rows)
    options = AnnotateOptions(batch_size=4, chunk_size=8, precision="fp32")
    annotate(xlm_r_pipeline, input_path, tmp_path / "local.jsonl", options)
    annotate_ray(xlm_r_pipeline, input_path, tmp_path / "ray.jsonl", options, workers=1)
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_without_ray_the_error_says_what_to_install(
    pipeline: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    input_path = tmp_path / "in.jsonl"
    input_path.write_text('{"text": "hello"}\n', encoding="utf8")
    with pytest.raises(AnnotateError, match=r"spacy-bert-pipes\[ray\]"):
        annotate_ray(pipeline, input_path, tmp_path / "out.jsonl")


def test_n_process_is_refused(pipeline: str, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    input_path = tmp_path / "in.jsonl"
    input_path.write_text('{"text": "hello"}\n', encoding="utf8")
    with pytest.raises(AnnotateError, match="n_process is for the local engine"):
        annotate_ray(pipeline, input_path, tmp_path / "out.jsonl", AnnotateOptions(n_process=2))


@needs_ray
def test_a_router_vector_column_is_the_local_bytes_on_ray(
    knn_router: Path, tmp_path: Path, local_ray: None
) -> None:
    """A router's doc vectors (its sentence vectors, set by its bert_textcat
    as it routes) are read in the actor that ran it: the local bytes."""
    records = [{"id": f"q{i}", "text": text} for i, text in enumerate(texts(60, seed=5))]
    input_path = write_input(tmp_path, "jsonl", records)
    options = AnnotateOptions(chunk_size=20, vectors=True)
    local = tmp_path / "local.parquet"
    expected = annotate(str(knn_router), input_path, local, options)
    on_ray = tmp_path / "ray.parquet"
    summary = annotate_ray(str(knn_router), input_path, on_ray, options, workers=2)
    assert (summary.output_rows, summary.error_rows) == (expected.output_rows, 0) == (60, 0)
    assert on_ray.read_bytes() == local.read_bytes()
    vectors = numpy.stack(pq.read_table(on_ray).column("vector").to_pylist())
    assert vectors.shape == (60, 32)
    assert numpy.allclose(numpy.linalg.norm(vectors[vectors.any(axis=1)], axis=1), 1.0, atol=1e-5)
