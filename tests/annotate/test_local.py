"""Batch annotation with the local engine (spacy_bert_pipes.annotate) and a tiny
saved pipeline: formats, row schema, error rows, resuming and its manifest."""

import json
import os
from pathlib import Path

import pytest
import spacy
import torch
from annotate_helpers import (
    IDS,
    TEXTS,
    read_errors,
    read_output,
    run,
    save_tiny_pipeline,
    write_input,
)
from spacy.language import Language

from spacy_bert_pipes.annotate import (
    AnnotateError,
    AnnotateOptions,
    doc_to_row,
    load_pipeline,
    prepare_run,
    read_input,
    run_annotation,
)
from spacy_bert_pipes.io.errors import ConversionError
from spacy_bert_pipes.memory import KERNEL_CACHE_CAPACITY

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


@pytest.fixture(scope="module")
def nlp(pipeline: str) -> Language:
    return spacy.load(pipeline)


@pytest.mark.parametrize("input_format", ["csv", "jsonl", "parquet", "txt"])
def test_every_input_format_to_every_output_format(
    pipeline: str, tmp_path: Path, input_format: str
) -> None:
    ids = [f"{i}.txt" for i in IDS] if input_format == "txt" else IDS
    records = [{"id": i, "text": t} for i, t in zip(ids, TEXTS)]
    input_path = write_input(tmp_path, input_format, records)
    outputs = {}
    for output_format in ("jsonl", "csv", "parquet"):
        output = tmp_path / f"out.{output_format}"
        summary = run(pipeline, input_path, output, chunk_size=2, batch_size=2)
        assert (summary.input_rows, summary.error_rows, summary.chunks) == (5, 0, 3)
        outputs[output_format] = read_output(output)
        assert [row["id"] for row in outputs[output_format]] == ids
    assert outputs["csv"] == outputs["jsonl"]
    assert outputs["parquet"] == outputs["jsonl"]


def test_output_rows(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", [{"id": i, "text": t} for i, t in zip(IDS, TEXTS)])
    output = tmp_path / "out.jsonl"
    run(pipeline, input_path, output)
    lines = output.read_text(encoding="utf8").splitlines()
    rows = [json.loads(line) for line in lines]
    for row, text in zip(rows, TEXTS):
        assert list(row) == ["id", "cats", "entities", "answers", "route", "empty_text"]
        assert row["empty_text"] is (not text.strip())
        assert sorted(row["cats"]) == ["card", "other"]
        # the classifier routes every doc (no threshold): its top label
        top = max(row["cats"], key=row["cats"].__getitem__)
        assert row["route"]["decision"] == "routed" and row["route"]["label"] == top
        assert sum(row["cats"].values()) == pytest.approx(1.0, abs=1e-5)
        assert row["answers"] == []
        for ent in row["entities"]:
            assert list(ent) == ["text", "label", "start", "end", "score"]
            assert text[ent["start"] : ent["end"]] == ent["text"]
            assert ent["label"] in {"LOC", "ORG", "PER"}
            assert 0.0 < ent["score"] <= 1.0
    assert rows[2]["entities"] == [] and rows[2]["id"] == "c"  # the empty text
    # The same docs straight through the pipeline give the same rows.
    direct = [doc_to_row(doc, i) for doc, i in zip(spacy.load(pipeline).pipe(TEXTS), IDS)]
    assert json.loads(json.dumps(direct)) == rows


def test_ids_default_to_row_numbers(pipeline: str, tmp_path: Path) -> None:
    for fmt in ("csv", "jsonl", "parquet"):
        input_path = write_input(tmp_path, fmt, [{"body": t} for t in TEXTS])
        output = tmp_path / f"out-{fmt}.jsonl"
        run(pipeline, input_path, output, text_column="body")
        assert [row["id"] for row in read_output(output)] == ["0", "1", "2", "3", "4"]
    input_path = write_input(
        tmp_path, "csv", [{"key": i, "id": "x", "text": t} for i, t in zip(IDS, TEXTS)]
    )
    output = tmp_path / "out-key.jsonl"
    run(pipeline, input_path, output, id_column="key")
    assert [row["key"] for row in read_output(output)] == IDS


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_missing_text_column_fails_at_once(tmp_path: Path, fmt: str) -> None:
    input_path = write_input(tmp_path, fmt, [{"id": "a", "body": "x"}])
    with pytest.raises(ConversionError, match=r"no (column|field) 'text'.*'id', 'body'"):
        read_input(input_path)
    output = tmp_path / "out.jsonl"
    with pytest.raises(ConversionError):
        prepare_run("unused", input_path, output, AnnotateOptions())
    assert not (tmp_path / "out.jsonl.parts").exists()


def test_null_empty_and_missing_text(pipeline: str, tmp_path: Path) -> None:
    lines = [
        '{"id": "a", "text": "hello"}',
        '{"id": "b", "text": null}',
        '{"id": "c", "text": ""}',
        '{"id": "d", "body": "no text field"}',
        '{"id": "e", "text": 12}',
        "[1, 2]",
        '{"id": "f", "text": "broken',
        '{"id": "g", "text": "lone \\ud800 surrogate"}',
        '{"id": "h", "text": "ok"}',
    ]
    input_path = tmp_path / "in.jsonl"
    input_path.write_text("\n".join(lines) + "\n", encoding="utf8")
    output = tmp_path / "out.jsonl"
    summary = run(pipeline, input_path, output, chunk_size=4)
    assert (summary.input_rows, summary.output_rows, summary.error_rows) == (9, 3, 6)
    assert [row["id"] for row in read_output(output)] == ["a", "c", "h"]
    errors = {e["row"]: e for e in read_errors(output)}
    assert errors[1] == {"id": "b", "row": 1, "source": "in.jsonl:2", "reason": "text is null"}
    assert errors[3]["reason"] == "no field 'text'; the fields are: 'id', 'body'"
    assert errors[4]["reason"].startswith("text must be a string, found int")
    assert errors[5]["reason"].startswith("expected a JSON object")
    assert errors[6]["reason"].startswith("invalid JSON") and errors[6]["id"] is None
    assert "lone surrogate" in errors[7]["reason"] and errors[7]["id"] == "g"


def test_null_text_in_parquet(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(
        tmp_path,
        "parquet",
        [{"id": 1, "text": "a"}, {"id": 2, "text": None}, {"id": 3, "text": ""}],
    )
    output = tmp_path / "out.csv"
    run(pipeline, input_path, output)
    assert [row["id"] for row in read_output(output)] == ["1", "3"]
    assert read_errors(output) == [
        {"id": "2", "row": 1, "source": "input.parquet:row 1", "reason": "text is null"}
    ]


def test_invalid_utf8_is_an_error_row_with_its_offset(pipeline: str, tmp_path: Path) -> None:
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes(
        b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "bad \xff byte"}\n'
        b'{"id": "c", "text": "caf\xc3\xa9"}\n'
    )
    output = tmp_path / "out.jsonl"
    run(pipeline, jsonl, output)
    assert [row["id"] for row in read_output(output)] == ["a", "c"]
    offset = len(b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "bad ')
    assert read_errors(output) == [
        {
            "id": "b",
            "row": 1,
            "source": "in.jsonl:2",
            "reason": f"invalid UTF-8 at byte offset {offset} (line 2): b'\\xff'",
        }
    ]

    table = tmp_path / "in.csv"
    table.write_bytes(b'id,text\na,fine\nb,"two\nlines \xfe"\nc,ok\n')
    output = tmp_path / "out-csv.jsonl"
    run(pipeline, table, output)
    assert [row["id"] for row in read_output(output)] == ["a", "c"]
    (error,) = read_errors(output)
    assert error["source"] == "in.csv:3" and "(line 4)" in error["reason"] and error["id"] == "b"

    docs = write_input(
        tmp_path, "txt", [{"id": "a.txt", "text": "fine"}, {"id": "sub/c.txt", "text": "ok"}]
    )
    (docs / "b.txt").write_bytes(b"first line\nsecond \x80 line\n")
    output = tmp_path / "out-txt.jsonl"
    run(pipeline, docs, output)
    assert [row["id"] for row in read_output(output)] == ["a.txt", "sub/c.txt"]
    assert read_errors(output) == [
        {
            "id": "b.txt",
            "row": 1,
            "source": "docs/b.txt:2",
            "reason": "invalid UTF-8 at byte offset 18 (line 2): b'\\x80'",
        }
    ]


def test_duplicate_ids(pipeline: str, tmp_path: Path) -> None:
    records = [{"id": i, "text": "x"} for i in ["a", "b", "a", "c", "b", "a"]]
    input_path = write_input(tmp_path, "csv", records)
    output = tmp_path / "out.jsonl"
    summary = run(pipeline, input_path, output, chunk_size=2)
    assert (summary.output_rows, summary.error_rows) == (3, 3)
    assert [row["id"] for row in read_output(output)] == ["a", "b", "c"]
    errors = read_errors(output)
    assert [(e["id"], e["row"], e["source"]) for e in errors] == [
        ("a", 2, "input.csv:4"),
        ("b", 4, "input.csv:6"),
        ("a", 5, "input.csv:7"),
    ]
    assert all("duplicate id" in e["reason"] for e in errors)


def test_a_2mb_document_is_annotated(pipeline: str, tmp_path: Path) -> None:
    """Past spaCy's default max_length and the csv module's field limit."""
    huge = ("x" * 999 + " ") * 2000
    records = [{"id": "small", "text": "hello"}, {"id": "huge", "text": huge}]
    input_path = write_input(tmp_path, "csv", records)
    output = tmp_path / "out.jsonl"
    summary = run(pipeline, input_path, output)
    assert (summary.output_rows, summary.error_rows) == (2, 0)
    assert sorted(read_output(output)[1]["cats"]) == ["card", "other"]
    output = tmp_path / "limited.jsonl"
    summary = run(pipeline, input_path, output, max_length=1000)
    assert (summary.output_rows, summary.error_rows) == (1, 1)
    assert read_errors(output)[0]["reason"].startswith("the text has 2000000 characters")


def test_questions_from_a_file_and_a_column(pipeline: str, tmp_path: Path) -> None:
    records = [
        {"id": "a", "text": "john smith is in paris", "q": '{"where": "where ?"}'},
        {"id": "b", "text": "hello world", "q": ""},
        {"id": "c", "text": "apple in london", "q": "{not json"},
        {"id": "d", "text": "apple in london", "q": '{"who": ""}'},
    ]
    input_path = write_input(tmp_path, "csv", records)
    output = tmp_path / "out.jsonl"
    options = {"questions": {"who": "who is it ?"}, "questions_column": "q"}
    summary = run(pipeline, input_path, output, **options)
    assert summary.error_rows == 2
    rows = read_output(output)
    assert [[a["key"] for a in row["answers"]] for row in rows] == [["who", "where"], ["who"]]
    answer = rows[0]["answers"][1]
    assert answer["question"] == "where ?" and answer["rank"] == 0
    assert records[0]["text"][answer["start"] : answer["end"]] == answer["text"]
    reasons = [e["reason"] for e in read_errors(output)]
    assert reasons[0].startswith("questions are not valid JSON")
    assert reasons[1] == "the question for 'who' is empty or not a string"


def test_questions_need_a_qa_component(tmp_path: Path) -> None:
    blank = tmp_path / "blank"
    spacy.blank("en").to_disk(blank)
    with pytest.raises(AnnotateError, match="no bert_qa component"):
        load_pipeline(str(blank), AnnotateOptions(questions={"k": "what ?"}))
    # A pipeline without annotating components: no annotation columns.
    input_path = write_input(tmp_path, "jsonl", [{"text": "hello"}])
    for suffix in (".jsonl", ".csv", ".parquet"):
        output = tmp_path / f"out{suffix}"
        run(str(blank), input_path, output)
        assert read_output(output) == [{"id": "0", "empty_text": False}]


def test_n_process_2_gives_the_same_rows(pipeline: str, tmp_path: Path) -> None:
    records = [{"id": i, "text": t, "q": {"who": "who ?"}} for i, t in zip(IDS, TEXTS)]
    input_path = write_input(tmp_path, "jsonl", records)
    rows = {}
    for n_process in (1, 2):
        output = tmp_path / f"out{n_process}.jsonl"
        run(pipeline, input_path, output, questions_column="q", n_process=n_process, batch_size=2)
        rows[n_process] = read_output(output)
    assert [r["id"] for r in rows[2]] == IDS
    # the empty text gets the null answer
    assert [len(r["answers"]) for r in rows[2]] == [1, 1, 1, 1, 1]
    for one, two in zip(rows[1], rows[2]):
        assert [a["text"] for a in two["answers"]] == [a["text"] for a in one["answers"]]
        assert [(e["start"], e["end"], e["label"]) for e in two["entities"]] == [
            (e["start"], e["end"], e["label"]) for e in one["entities"]
        ]
        assert two["cats"] == pytest.approx(one["cats"], abs=1e-5)


class Interrupted(Exception):
    pass


def test_resume_after_an_interruption(pipeline: str, nlp: Language, tmp_path: Path) -> None:
    records = [{"id": str(i), "text": TEXTS[i % 5]} for i in range(9)] + [{"id": "3", "text": "x"}]
    input_path = write_input(tmp_path, "jsonl", records)
    expected = tmp_path / "expected.jsonl"
    run(pipeline, input_path, expected, chunk_size=3)

    output = tmp_path / "out.jsonl"
    options = AnnotateOptions(chunk_size=3)

    def stop_after_two_chunks(rows_read: int) -> None:
        if rows_read >= 6:
            raise Interrupted

    with pytest.raises(Interrupted):
        run_annotation(
            prepare_run(pipeline, input_path, output, options), nlp, on_chunk=stop_after_two_chunks
        )
    parts = tmp_path / "out.jsonl.parts"
    assert sorted(p.name for p in parts.iterdir()) == [
        "manifest.json",
        "part-000000.errors.jsonl",
        "part-000000.jsonl",
        "part-000001.errors.jsonl",
        "part-000001.jsonl",
    ]
    (parts / "part-000002.jsonl.tmp").write_text("half a part")  # a kill mid-write
    run_ = prepare_run(pipeline, input_path, output, options)
    assert run_.done == {0, 1}
    summary = run_annotation(run_, nlp)
    assert (summary.resumed_chunks, summary.chunks, summary.error_rows) == (2, 4, 1)
    assert output.read_bytes() == expected.read_bytes()
    assert read_errors(output) == read_errors(expected)
    assert not parts.exists()
    # each run times itself beside its OUTPUT; the resumed one its own chunks only
    whole = json.loads((tmp_path / "expected_time.json").read_text(encoding="utf8"))
    assert (whole["docs"], whole["error_rows"], whole["chunks"]) == (9, 1, 4)
    assert (whole["resumed_chunks"], whole["resumed_rows"]) == (0, 0)
    assert whole["covers"] == "the whole run: 4 chunks, 10 rows (9 annotated, 1 error rows)"
    assert whole["command"].endswith(f" {input_path} {expected}")
    assert whole["settings"]["chunk_size"] == options.chunk_size
    assert whole["settings"]["workers"] == options.workers
    resumed = json.loads((tmp_path / "out_time.json").read_text(encoding="utf8"))
    assert summary.timing_path == tmp_path / "out_time.json"
    assert resumed["seconds"] == round(summary.seconds, 3) and summary.seconds > 0
    assert (resumed["docs"], resumed["error_rows"], resumed["chunks"]) == (3, 1, 2)
    assert (resumed["resumed_chunks"], resumed["resumed_rows"]) == (2, 6)
    assert resumed["covers"].startswith("this run's 2 of 4 chunks, 4 rows (3 annotated")
    assert "the other 2 chunks (6 rows) were annotated by an earlier" in resumed["covers"]


def test_leftovers_of_a_kill_in_the_final_steps(
    pipeline: str, nlp: Language, tmp_path: Path
) -> None:
    """Killed after the last chunk, mid-way through writing OUTPUT, with the
    folder of an earlier finished run still being deleted."""
    input_path = write_input(tmp_path, "jsonl", [{"id": i, "text": t} for i, t in zip(IDS, TEXTS)])
    expected = tmp_path / "expected.csv"
    run(pipeline, input_path, expected, chunk_size=2)
    output = tmp_path / "out.csv"
    options = AnnotateOptions(chunk_size=2)

    def stop_after_the_last_chunk(rows_read: int) -> None:
        if rows_read == len(IDS):
            raise Interrupted

    with pytest.raises(Interrupted):
        run_annotation(
            prepare_run(pipeline, input_path, output, options),
            nlp,
            on_chunk=stop_after_the_last_chunk,
        )
    (tmp_path / "out.csv.tmp").write_text("id,cats\nhalf")
    (tmp_path / "out.csv.parts.finished").mkdir()
    (tmp_path / "out.csv.parts.finished" / "part-000000.csv").write_text("old")
    summary = run(pipeline, input_path, output, chunk_size=2)
    assert (summary.resumed_chunks, summary.chunks) == (3, 3)
    assert output.read_bytes() == expected.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "expected.csv",
        "expected.csv.errors.jsonl",
        "expected_time.json",
        "input.jsonl",
        "out.csv",
        "out.csv.errors.jsonl",
        "out_time.json",
    ]


def test_other_settings_refuse_to_resume_unless_overwrite(
    pipeline: str, nlp: Language, tmp_path: Path
) -> None:
    input_path = write_input(tmp_path, "jsonl", [{"id": i, "text": t} for i, t in zip(IDS, TEXTS)])
    output = tmp_path / "out.jsonl"
    with pytest.raises(Interrupted):
        run_annotation(
            prepare_run(pipeline, input_path, output, AnnotateOptions(chunk_size=2)),
            nlp,
            on_chunk=lambda rows: (_ for _ in ()).throw(Interrupted()),
        )
    with pytest.raises(AnnotateError, match=r"options.chunk_size: was 2, now 3") as err:
        prepare_run(pipeline, input_path, output, AnnotateOptions(chunk_size=3))
    assert "--overwrite" in str(err.value)
    input_path.write_text(input_path.read_text() + '{"id": "f", "text": "more"}\n')
    with pytest.raises(AnnotateError, match=r"input.size: was"):
        prepare_run(pipeline, input_path, output, AnnotateOptions(chunk_size=2))
    summary = run(pipeline, input_path, output, chunk_size=3, overwrite=True)
    assert (summary.input_rows, summary.resumed_chunks) == (6, 0)


def test_precision_sets_the_encoders_and_a_resume_needs_the_same(
    pipeline: str, nlp: Language, tmp_path: Path
) -> None:
    int8 = AnnotateOptions(chunk_size=2, precision="int8")
    quantized = load_pipeline(pipeline, int8)
    assert (
        quantized.config["components"]["bert_ner"]["model"]["encoder"]["predict_precision"]
        == "int8"
    )
    input_path = write_input(tmp_path, "jsonl", [{"id": i, "text": t} for i, t in zip(IDS, TEXTS)])
    output = tmp_path / "out.jsonl"
    with pytest.raises(Interrupted):
        run_annotation(
            prepare_run(pipeline, input_path, output, int8),
            quantized,
            on_chunk=lambda rows: (_ for _ in ()).throw(Interrupted()),
        )
    with pytest.raises(AnnotateError, match=r"options.precision: was .?int8.?, now"):
        prepare_run(pipeline, input_path, output, AnnotateOptions(chunk_size=2))
    summary = run(pipeline, input_path, output, chunk_size=2, precision="int8")
    assert summary.resumed_chunks == 1
    fp32 = run(pipeline, input_path, tmp_path / "fp32.jsonl", chunk_size=2)
    for ours, theirs in zip(read_output(output), read_output(fp32.output_path)):
        assert ours["id"] == theirs["id"]
        for label, score in theirs["cats"].items():
            assert ours["cats"][label] == pytest.approx(score, abs=0.05)


def test_a_parts_folder_that_is_not_a_run_is_left_alone(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", [{"id": "a", "text": "x"}])
    (tmp_path / "out.jsonl.parts").mkdir()
    (tmp_path / "out.jsonl.parts" / "precious.txt").write_text("mine")
    with pytest.raises(AnnotateError, match="no manifest.json"):
        prepare_run(pipeline, input_path, tmp_path / "out.jsonl", AnnotateOptions())


def test_pipeline_failures_isolate_the_bad_rows(nlp: Language, tmp_path: Path) -> None:
    @Language.component("fails_on_boom")
    def fails_on_boom(doc):  # type: ignore[no-untyped-def]
        if "boom" in doc.text:
            raise RuntimeError("boom")
        return doc

    broken = spacy.blank("en")
    broken.add_pipe("fails_on_boom")
    input_path = write_input(
        tmp_path,
        "jsonl",
        [{"id": "a", "text": "x"}, {"id": "b", "text": "boom"}, {"id": "c", "text": "y"}],
    )
    output = tmp_path / "out.jsonl"
    summary = run_annotation(prepare_run("blank", input_path, output, AnnotateOptions()), broken)
    assert (summary.output_rows, summary.error_rows) == (2, 1)
    assert read_errors(output)[0]["reason"] == (
        "the pipeline failed on this text: RuntimeError: boom"
    )
    # A pipeline that fails on every row is broken: the run stops.
    input_path = write_input(
        tmp_path, "jsonl", [{"id": "a", "text": "boom"}, {"id": "b", "text": "boom!"}]
    )
    with pytest.raises(RuntimeError, match="boom"):
        run_annotation(
            prepare_run("blank", input_path, tmp_path / "o.jsonl", AnnotateOptions()), broken
        )


def test_loading_the_pipeline_bounds_the_cpu_kernel_caches(monkeypatch, tmp_path):
    """PyTorch's and oneDNN's per-shape kernel caches are capped before the first
    kernel runs (bf16 RSS grew by hundreds of MB over a collection without it);
    a value the user set is kept."""
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "7")
    nlp = spacy.blank("en")
    nlp.to_disk(tmp_path / "blank")
    load_pipeline(str(tmp_path / "blank"), AnnotateOptions())
    assert os.environ["LRU_CACHE_CAPACITY"] == str(KERNEL_CACHE_CAPACITY)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "7"
