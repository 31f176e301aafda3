"""OUTPUT's columns (spacy_bert_pipes.annotate.columns): the id under the
input's name, the kept input columns, only the annotations the pipeline can
fill, the empty_text flag; settings that would clash, and resuming."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spacy
import torch
from annotate_helpers import read_output, run, save_tiny_pipeline, write_input

from spacy_bert_pipes.annotate import AnnotateError, AnnotateOptions, annotate, prepare_run
from spacy_bert_pipes.annotate.columns import filled_annotations
from spacy_bert_pipes.io.errors import ConversionError
from spacy_bert_pipes.io.output_readers import read_output_rows

torch.set_num_threads(1)

TICKETS: List[Dict[str, Any]] = [
    {"ticket_id": "t1", "customer": "ann", "text": "my card not working", "channel": "mail"},
    {"ticket_id": "t2", "customer": "bob, jr", "text": "", "channel": "chat"},
    {"ticket_id": "t3", "customer": "cy", "text": " \t ", "channel": "chat"},
    {"ticket_id": "t4", "customer": "dee", "text": "john smith is in paris", "channel": "mail"},
    {"ticket_id": "t5", "customer": "zoë", "text": "apple in london", "channel": "phone"},
]


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """bert_textcat, bert_ner and bert_qa."""
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


def keep_only(pipeline: str, folder: Path, names: List[str]) -> str:
    """The pipeline with only these components (each has its own encoder)."""
    nlp = spacy.load(pipeline)
    for name in list(nlp.pipe_names):
        if name not in names:
            nlp.remove_pipe(name)
    nlp.to_disk(folder)
    return str(folder)


@pytest.mark.parametrize("input_format", ["csv", "jsonl", "parquet"])
def test_keep_columns_and_the_id_column_name(
    pipeline: str, tmp_path: Path, input_format: str
) -> None:
    """`--keep-columns text,customer --id-column ticket_id`: every output
    format has ticket_id, text, customer, then the annotations, with the
    input's values."""
    input_path = write_input(tmp_path, input_format, TICKETS)
    options = dict(id_column="ticket_id", keep_columns=("text", "customer"), chunk_size=2)
    found = {}
    for output_format in ("jsonl", "csv", "parquet"):
        output = tmp_path / f"out.{output_format}"
        run(pipeline, input_path, output, **options)
        rows = read_output(output)
        names = ["ticket_id", "text", "customer", "cats", "entities", "answers", "route"]
        assert [list(row) for row in rows] == [names + ["empty_text"]] * len(TICKETS)
        assert [(r["ticket_id"], r["text"], r["customer"]) for r in rows] == [
            (t["ticket_id"], t["text"], t["customer"]) for t in TICKETS
        ]
        found[output_format] = [row for _, row in read_output_rows(output)]
    assert found["jsonl"] == found["csv"] == found["parquet"]
    assert [row["id"] for row in found["jsonl"]] == ["t1", "t2", "t3", "t4", "t5"]
    if input_format == "parquet":
        schema = pq.read_schema(tmp_path / "out.parquet")
        assert schema.field("text").type == pa.string()
        assert schema.field("empty_text").type == pa.bool_()


def test_empty_and_whitespace_texts_are_flagged(pipeline: str, tmp_path: Path) -> None:
    input_path = write_input(tmp_path, "jsonl", TICKETS)
    output = tmp_path / "out.jsonl"
    summary = run(pipeline, input_path, output, id_column="ticket_id")
    rows = read_output(output)
    assert [row["empty_text"] for row in rows] == [False, True, True, False, False]
    assert summary.error_rows == 0  # flagged, still annotated: one row per input row
    assert all(row["cats"] is not None for row in rows)


def test_a_textcat_only_pipeline_writes_no_entities_or_answers(
    pipeline: str, tmp_path: Path
) -> None:
    textcat = keep_only(pipeline, tmp_path / "textcat", ["bert_textcat"])
    input_path = write_input(tmp_path, "csv", TICKETS)
    for fmt in ("jsonl", "csv", "parquet"):
        output = tmp_path / f"out.{fmt}"
        run(textcat, input_path, output, id_column="ticket_id", keep_columns=("channel",))
        names = ["ticket_id", "channel", "cats", "route", "empty_text"]
        assert list(read_output(output)[0]) == names
        if fmt == "parquet":
            assert pq.read_schema(output).names == names
        # read back, the omitted columns are what such a pipeline gives
        row = next(read_output_rows(output))[1]
        assert (row["entities"], row["answers"]) == ([], [])
    assert filled_annotations(spacy.load(textcat)) == ("cats", "route")


def test_an_ner_only_pipeline_writes_no_cats_or_route(pipeline: str, tmp_path: Path) -> None:
    ner = keep_only(pipeline, tmp_path / "ner", ["bert_ner"])
    input_path = write_input(tmp_path, "jsonl", TICKETS)
    output = tmp_path / "out.csv"
    run(ner, input_path, output)
    header = output.read_text(encoding="utf8").splitlines()[0]
    assert header == "id,entities,empty_text"  # the input has no "id": row numbers


def test_the_columns_of_an_undeclared_component_are_found_by_the_probe() -> None:
    """A component that sets doc.cats without declaring it still gets its column."""
    from spacy.language import Language
    from spacy.tokens import Doc

    @Language.component("test_columns_undeclared_cats")
    def undeclared(doc: Doc) -> Doc:
        doc.cats = {"x": 1.0}
        return doc

    nlp = spacy.blank("en")
    assert filled_annotations(nlp) == ()
    nlp.add_pipe("test_columns_undeclared_cats")
    assert filled_annotations(nlp) == ("cats",)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"keep_columns": ("text", "text")}, "'text' is given twice"),
        ({"keep_columns": ("cats",)}, "'cats' is the name of a column annotate writes"),
        ({"keep_columns": ("empty_text",)}, "'empty_text' is the name of a column"),
        ({"keep_columns": ("id",)}, "'id' is the id column"),
        ({"keep_columns": ("ticket_id",), "id_column": "ticket_id"}, "is the id column"),
        ({"keep_columns": ("text", "")}, "an empty column name"),
        ({"id_column": "route"}, "--id-column 'route': annotate writes a column"),
    ],
)
def test_kept_columns_that_would_clash_are_refused(
    tmp_path: Path, settings: Dict[str, Any], message: str
) -> None:
    input_path = write_input(tmp_path, "csv", TICKETS)
    with pytest.raises(AnnotateError, match=message):
        prepare_run("unused", input_path, tmp_path / "out.jsonl", AnnotateOptions(**settings))


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_missing_kept_column_fails_before_anything_is_written(tmp_path: Path, fmt: str) -> None:
    input_path = write_input(tmp_path, fmt, TICKETS)
    options = AnnotateOptions(keep_columns=("text", "cust"))
    with pytest.raises(ConversionError, match=rf"input\.{fmt}(:1)?: no column 'cust' to keep"):
        prepare_run("unused", input_path, tmp_path / "out.jsonl", options)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"input.{fmt}"]


class Stop(Exception):
    pass


def test_a_resumed_run_with_other_kept_columns_is_refused(pipeline: str, tmp_path: Path) -> None:
    """The kept columns are in the manifest: a rerun with others would mix
    rows of two shapes, so it is refused until it asks for the same ones
    (or --overwrite); the same ones resume to the bytes of one run."""
    input_path = write_input(tmp_path, "csv", TICKETS)
    expected = tmp_path / "expected.csv"
    run(pipeline, input_path, expected, chunk_size=2, keep_columns=("text",))
    output = tmp_path / "out.csv"

    def stop(rows: int) -> None:
        raise Stop

    first = AnnotateOptions(chunk_size=2, keep_columns=("text",))
    with pytest.raises(Stop):
        annotate(pipeline, input_path, output, first, on_chunk=stop)
    other = AnnotateOptions(chunk_size=2, keep_columns=("text", "customer"))
    with pytest.raises(AnnotateError) as err:
        annotate(pipeline, input_path, output, other)
    assert 'options.keep_columns: was ["text"], now ["text", "customer"]' in str(err.value)
    assert "--overwrite" in str(err.value)
    summary = annotate(pipeline, input_path, output, first)
    assert summary.resumed_chunks == 1
    assert output.read_bytes() == expected.read_bytes()


def test_a_run_of_the_earlier_format_is_not_resumed(pipeline: str, tmp_path: Path) -> None:
    """Parts written before the id column kept its name (manifest version 1)
    would join with new ones into mixed rows: the run is refused."""
    input_path = write_input(tmp_path, "jsonl", TICKETS)
    output = tmp_path / "out.jsonl"
    options = AnnotateOptions(chunk_size=2, id_column="ticket_id")

    def stop(rows: int) -> None:
        raise Stop

    with pytest.raises(Stop):
        annotate(pipeline, input_path, output, options, on_chunk=stop)
    manifest_path = tmp_path / "out.jsonl.parts" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["version"] = 1
    del manifest["options"]["keep_columns"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(AnnotateError, match="version: was 1, now 2"):
        annotate(pipeline, input_path, output, options)
