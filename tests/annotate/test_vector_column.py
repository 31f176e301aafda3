"""`annotate --vectors` (spacy_bert_pipes.annotate.vectors): every doc's
`doc.vector` in a "vector" column of JSONL and Parquet outputs, its errors and
resuming (the Ray engine's bytes are in test_ray.py, beside its local Ray)."""

import math
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pandas
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spacy
import torch
from annotate_helpers import (
    TEXTS,
    VECTOR_WIDTH,
    read_errors,
    read_output,
    run,
    save_vectors_pipeline,
    write_input,
)
from helpers import WORDS, prototype_router
from spacy.language import Language
from spacy.tokens import Doc

from spacy_bert_pipes.annotate import (
    AnnotateError,
    AnnotateOptions,
    prepare_run,
    run_annotation,
)
from spacy_bert_pipes.annotate.vectors import PROBE_TEXT
from spacy_bert_pipes.models.encoder.bert import hf_shim
from spacy_bert_pipes.pipeline.router_vectors import prototype_vectors

torch.set_num_threads(1)  # as in Ray's actors (OMP_NUM_THREADS=1): the same float sums


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """bert_textcat and bert_ner, with static word vectors (width 12)."""
    return str(save_vectors_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


def records() -> List[Dict[str, Any]]:
    """TEXTS (one empty), a whitespace text and a text of unknown words only."""
    rows = [{"id": f"t{i}", "text": text} for i, text in enumerate(TEXTS)]
    return rows + [{"id": "space", "text": "  \n "}, {"id": "unknown", "text": "xyzzy plugh"}]


def numbered(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [{"id": str(i), "text": row["text"]} for i, row in enumerate(rows)]


def expected_vector(nlp: Language, text: str) -> numpy.ndarray:
    """The mean of the words' static vectors (unknown words: zeros), computed here."""
    words = text.split()
    if not words:
        return numpy.zeros(VECTOR_WIDTH, dtype="float32")
    vectors = [nlp.vocab.get_vector(word) for word in words]
    return numpy.asarray(sum(vectors) / len(words), dtype="float32")


def test_jsonl_and_parquet_hold_the_vectors(pipeline: str, tmp_path: Path) -> None:
    nlp = spacy.load(pipeline)
    input_path = write_input(tmp_path, "jsonl", records())
    plain = tmp_path / "plain.jsonl"
    run(pipeline, input_path, plain, chunk_size=3)
    outputs = {
        name: tmp_path / name for name in ("out.jsonl", "out.parquet", "half.jsonl", "shards")
    }
    for name, output in outputs.items():
        dtype = "float16" if name.startswith("half") else "float32"
        summary = run(pipeline, input_path, output, chunk_size=3, vectors=True, vectors_dtype=dtype)
        assert (summary.output_rows, summary.error_rows) == (6, 1)
        assert read_errors(output) == [
            {
                "id": "unknown",
                "row": 6,
                "source": "input.jsonl:7",
                "reason": "--vectors: the pipeline gave this doc no vector (doc.has_vector is "
                "False; with static word vectors, none of its words has one): add a "
                "component that sets them, such as bert_vectors (nlp.add_pipe('bert_vectors') "
                "after the bert_encoder), or use a pipeline with static word vectors",
            }
        ]
    # JSONL: the other columns as without --vectors, then the vector.
    rows = read_output(outputs["out.jsonl"])
    plain_rows = read_output(plain)
    assert [{k: v for k, v in row.items() if k != "vector"} for row in rows] == plain_rows[:6]
    # (no bert_qa in this pipeline: no answers column)
    columns = ["id", "cats", "entities", "route", "empty_text", "vector"]
    assert [list(row) for row in rows] == [columns] * 6
    texts = {r["id"]: r["text"] for r in records()}
    for row in rows:
        found = numpy.asarray(row["vector"], dtype="float32")
        numpy.testing.assert_allclose(found, expected_vector(nlp, texts[row["id"]]), rtol=1e-6)
    # An empty or whitespace text: zeros of the width.
    assert rows[2]["vector"] == rows[5]["vector"] == [0] * VECTOR_WIDTH
    float32 = numpy.asarray([row["vector"] for row in rows], dtype="float32")
    # Parquet: a fixed-size float32 list column, the JSONL values exactly.
    table = pq.read_table(outputs["out.parquet"])
    assert table.schema.field("vector").type == pa.list_(pa.float32(), VECTOR_WIDTH)
    assert table.column("id").to_pylist() == [row["id"] for row in rows]
    frame = pandas.read_parquet(outputs["out.parquet"])
    assert list(frame.columns) == columns
    assert numpy.stack(frame["vector"].to_list()).dtype == numpy.float32
    assert numpy.array_equal(numpy.stack(frame["vector"].to_list()), float32)
    # A folder: the same rows as shards of the same type.
    shards = pq.read_table(outputs["shards"])
    assert sorted(p.name for p in outputs["shards"].iterdir()) == [
        "part-000000.parquet",
        "part-000001.parquet",
        "part-000002.parquet",
    ]
    assert shards.schema.field("vector").type == pa.list_(pa.float32(), VECTOR_WIDTH)
    assert numpy.array_equal(numpy.stack(pandas.read_parquet(outputs["shards"])["vector"]), float32)
    # float16 in JSONL: the float32 values rounded through float16.
    half = numpy.asarray([row["vector"] for row in read_output(outputs["half.jsonl"])])
    assert numpy.array_equal(half.astype("float16"), float32.astype("float16"))
    assert not numpy.array_equal(half.astype("float32"), float32)  # rounded indeed


def test_float16_parquet(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", records())
    output = tmp_path / "out.parquet"
    run(pipeline, input_path, output, chunk_size=4, vectors=True, vectors_dtype="float16")
    reference = tmp_path / "ref.jsonl"
    run(pipeline, input_path, reference, chunk_size=4, vectors=True)
    float32 = numpy.asarray([row["vector"] for row in read_output(reference)], dtype="float32")
    table = pq.read_table(output)
    assert table.schema.field("vector").type == pa.list_(pa.float16(), VECTOR_WIDTH)
    values = numpy.stack(pandas.read_parquet(output)["vector"].to_list())
    assert values.dtype == numpy.float16
    assert numpy.array_equal(values, float32.astype("float16"))


@Language.factory("test_vector_hooks")
def make_vector_hooks(nlp: Language, name: str) -> Any:
    """Sets doc.vector from the text, deterministically (4 values from its
    characters), with faults on demand: "nan", "inf", "wide" (width 5),
    "huge" (beyond float16), "none" (has_vector False)."""

    def vector(doc: Doc) -> numpy.ndarray:
        codes = [ord(c) for c in doc.text]
        values = numpy.asarray([sum(codes[i::4]) / 100 for i in range(4)], dtype="float32")
        if "nan" in doc.text:
            values[1] = math.nan
        if "inf" in doc.text:
            values[2] = -math.inf
        if "wide" in doc.text:
            values = numpy.append(values, 1.0)
        if "huge" in doc.text:
            values[0] = 1e6
        return values

    def set_hooks(doc: Doc) -> Doc:
        doc.user_hooks["vector"] = vector
        doc.user_hooks["has_vector"] = lambda doc: "none" not in doc.text
        return doc

    return set_hooks


def test_bad_vectors_are_error_rows_naming_the_doc(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("test_vector_hooks")
    texts = ["good", "a nan", "an inf", "too wide", "huge", "none here", "", "fine"]
    input_path = write_input(
        tmp_path, "jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    )
    reasons = {}
    for dtype in ("float32", "float16"):
        output = tmp_path / f"{dtype}.jsonl"
        options = AnnotateOptions(vectors=True, vectors_dtype=dtype, chunk_size=3)
        summary = run_annotation(prepare_run("blank", input_path, output, options), nlp)
        assert (summary.input_rows, summary.output_rows) == (8, 8 - summary.error_rows)
        assert [row["id"] for row in read_output(output)] == (
            ["d0", "d4", "d6", "d7"] if dtype == "float32" else ["d0", "d6", "d7"]
        )
        reasons[dtype] = {e["id"]: e["reason"] for e in read_errors(output)}
        rows = {row["id"]: row["vector"] for row in read_output(output)}
        assert rows["d6"] == [0, 0, 0, 0]  # the empty text
        good = numpy.asarray([1.03, 1.11, 1.11, 1.00], dtype=dtype)  # g, o, o, d
        assert numpy.array_equal(numpy.asarray(rows["d0"], dtype=dtype), good)
    assert reasons["float32"] == {
        "d1": "--vectors: this doc's vector has NaN or infinite values at 1 of 4 dimensions (1)",
        "d2": "--vectors: this doc's vector has NaN or infinite values at 1 of 4 dimensions (2)",
        "d3": "--vectors: this doc's vector has shape [5], not [4] as the pipeline's other "
        "doc vectors: the width changed between docs",
        "d5": reasons["float32"]["d5"],
    }
    assert reasons["float32"]["d5"].startswith(
        "--vectors: the pipeline gave this doc no vector (doc.has_vector is False"
    )
    assert reasons["float16"] == {
        **reasons["float32"],
        "d4": "--vectors: this doc's vector has values beyond float16's range (+-65504) at 1 "
        "of 4 dimensions (0): use --vectors-dtype float32",
    }


def test_a_pipeline_without_doc_vectors_fails_before_writing(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    input_path = write_input(tmp_path, "jsonl", [{"id": "a", "text": "some text"}])
    output = tmp_path / "out.parquet"
    run_ = prepare_run("blank", input_path, output, AnnotateOptions(vectors=True))
    with pytest.raises(AnnotateError) as err:
        run_annotation(run_, nlp)
    assert str(err.value) == (
        "--vectors: the pipeline gives no doc vectors (doc.vector of a text has width 0; "
        "its components: sentencizer): add a component that sets them, such as "
        "bert_vectors (nlp.add_pipe('bert_vectors') after the bert_encoder), or use a "
        "pipeline with static word vectors"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.jsonl"]


def test_csv_and_unknown_dtypes_are_refused(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", records())
    with pytest.raises(AnnotateError, match=r"out.csv: --vectors needs a .jsonl or .parquet"):
        prepare_run(pipeline, input_path, tmp_path / "out.csv", AnnotateOptions(vectors=True))
    bad = AnnotateOptions(vectors=True, vectors_dtype="float64")  # type: ignore[arg-type]
    with pytest.raises(AnnotateError, match="unknown vectors dtype 'float64'"):
        prepare_run(pipeline, input_path, tmp_path / "out.jsonl", bad)
    two = AnnotateOptions(vectors=True, n_process=2)
    with pytest.raises(AnnotateError, match="--vectors needs --n-process 1: spaCy's worker"):
        prepare_run(pipeline, input_path, tmp_path / "out.jsonl", two)
    # Without --vectors, CSV output is as before.
    run(pipeline, input_path, tmp_path / "plain.csv")


class Interrupted(Exception):
    pass


def test_resume_needs_the_same_vectors_settings(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", numbered(records() * 2))
    expected = tmp_path / "expected.parquet"
    run(pipeline, input_path, expected, chunk_size=4, vectors=True)
    output = tmp_path / "out.parquet"
    options = AnnotateOptions(chunk_size=4, vectors=True)
    nlp = spacy.load(pipeline)

    def stop(rows_read: int) -> None:
        if rows_read >= 8:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_annotation(prepare_run(pipeline, input_path, output, options), nlp, on_chunk=stop)
    for other, difference in [
        (AnnotateOptions(chunk_size=4, vectors=True, vectors_dtype="float16"), '"float16"'),
        (AnnotateOptions(chunk_size=4), "null"),
    ]:
        with pytest.raises(AnnotateError) as err:
            prepare_run(pipeline, input_path, output, other)
        assert f'options.vectors: was "float32", now {difference}' in str(err.value)
    run_ = prepare_run(pipeline, input_path, output, options)
    assert run_.done == {0, 1}
    summary = run_annotation(run_, nlp)
    assert (summary.resumed_chunks, summary.chunks) == (2, 4)
    assert output.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet", "shards"])
def test_vectors_under_a_renamed_id_column_are_read_by_their_ids(
    pipeline: str, tmp_path: Path, name: str
) -> None:
    """`--id-column ticket_id --vectors`: the readers of vectors (similar-
    collection, the report) find the ids in the ticket_id column."""
    from spacy_bert_pipes.io.output_readers import output_id_column
    from spacy_bert_pipes.report.inputs import read_collection
    from spacy_bert_pipes.similar import similar_collection

    rows = [{"ticket_id": row["id"], "text": row["text"]} for row in records()]
    input_path = write_input(tmp_path, "jsonl", rows)
    output = tmp_path / name
    run(pipeline, input_path, output, id_column="ticket_id", keep_columns=("text",), vectors=True)
    assert output_id_column(output) == "ticket_id"
    ids = [row["ticket_id"] for row in rows if row["ticket_id"] != "unknown"]  # an error row
    assert similar_collection(output, k=2).collection.ids == ids
    collection = read_collection(output)
    assert collection.ids == ids and collection.vectors is not None


# --- a router as configs/route.cfg trains: its own sentence vectors ---------------


@pytest.fixture(scope="module")
def router(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A prototype bert_textcat on its own encoder and nothing else (no
    bert_vectors, no static vectors)."""
    return str(prototype_router(tiny_bert, tmp_path_factory.mktemp("router") / "router"))


def router_records() -> List[Dict[str, Any]]:
    rows = [{"id": f"w{i}", "text": " ".join(WORDS[i : i + 1 + i % 9])} for i in range(40)]
    return rows + [{"id": "empty", "text": ""}, {"id": "space", "text": "  "}]


def test_a_router_column_is_its_sentence_vectors_from_the_routing_pass(
    router: str, tmp_path: Path
) -> None:
    """The vector column of a router is what its prediction computed: the
    encoder runs once per doc with --vectors as without (the probe text
    aside), and the values are the router's sentence vectors as
    `prototype_vectors` computes them apart."""
    input_path = write_input(tmp_path, "jsonl", router_records())
    nlp = spacy.load(router)
    calls: List[int] = []
    encoder = nlp.get_pipe("bert_textcat").model.get_ref("encoder")  # type: ignore[attr-defined]
    hf_shim(encoder).module.register_forward_hook(lambda *args: calls.append(1))
    nlp(PROBE_TEXT)
    probe = len(calls)
    passes = {}
    for vectors in (False, True):
        calls.clear()
        output = tmp_path / f"vectors_{vectors}.jsonl"
        options = AnnotateOptions(chunk_size=16, batch_size=8, vectors=vectors)
        run_annotation(prepare_run(router, input_path, output, options), nlp)
        passes[vectors] = len(calls)
    assert passes[True] == passes[False] + probe  # vector_width's probe, nothing per doc
    rows = read_output(tmp_path / "vectors_True.jsonl")
    plain = read_output(tmp_path / "vectors_False.jsonl")
    assert [{k: v for k, v in row.items() if k != "vector"} for row in rows] == plain
    found = numpy.asarray([row["vector"] for row in rows[:-2]], dtype="float32")
    texts = [row["text"] for row in router_records()[:-2]]
    expected = prototype_vectors(nlp, "bert_textcat", texts)  # the former second pass
    numpy.testing.assert_allclose(found, expected, atol=1e-5)
    assert rows[-1]["vector"] == rows[-2]["vector"] == [0] * expected.shape[1]


def test_a_router_column_is_the_same_bytes_in_workers(router: str, tmp_path: Path) -> None:
    """The workers engine reads doc.vector in the worker that ran the router:
    the hooks never cross a process boundary, and the bytes are one process's."""
    input_path = write_input(tmp_path, "jsonl", router_records())
    local = tmp_path / "local.parquet"
    run(router, input_path, local, chunk_size=10, vectors=True)
    workers = tmp_path / "workers.parquet"
    summary = run(router, input_path, workers, chunk_size=10, vectors=True, workers=2)
    assert (summary.output_rows, summary.error_rows) == (42, 0)
    assert workers.read_bytes() == local.read_bytes()
