"""report: metrics tables, analyses of predictions, PNGs, Markdown and HTML."""

import csv
import dataclasses
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spacy_bert_pipes.report import (
    Collection,
    ReportError,
    answer_length,
    confusion_counts,
    most_confused,
    ner_errors,
    qa_groups,
    read_collection,
    read_inputs,
    write_report,
)

PNG = b"\x89PNG\r\n\x1a\n"
TEXTCAT = {
    "token_acc": 1.0,
    "cats_score": 0.8123,
    "cats_score_desc": "macro F",
    "cats_micro_p": 0.8,
    "cats_micro_r": 0.8,
    "cats_micro_f": 0.8,
    "cats_macro_p": 0.8412,
    "cats_macro_r": 0.8256,
    "cats_macro_f": 0.8123,
    "cats_macro_auc": 0.9731,
    "cats_f_per_type": {
        "card": {"p": 1.0, "r": 0.6667, "f": 0.8},
        "fx": {"p": 0.6667, "r": 1.0, "f": 0.8},
        "other": {"p": 1.0, "r": 1.0, "f": 1.0},
    },
    "cats_auc_per_type": {"card": 1.0, "fx": 0.9, "other": 1.0},
    "cats_accuracy": 0.8,
    "speed": 1234.5,
}
MULTILABEL = {
    "cats_score": 0.55,
    "cats_micro_f": 0.61,
    "cats_macro_p": 0.5,
    "cats_macro_r": 0.6,
    "cats_macro_f": 0.55,
    "cats_macro_auc": 0.7,
    "cats_f_per_type": {"refund": {"p": 0.5, "r": 0.6, "f": 0.5455}},
    "cats_accuracy": None,
}
NER = {
    "ents_p": 0.7512,
    "ents_r": 0.7014,
    "ents_f": 0.7254,
    "ents_per_type": {
        "LOC": {"p": 0.9, "r": 0.8, "f": 0.8471},
        "PER": {"p": 0.5, "r": 0.5, "f": 0.5},
    },
    "speed": 800.0,
}
QA = {
    "qa_exact": 0.625,
    "qa_f1": 0.7042,
    "qa_has_ans_exact": 0.5,
    "qa_has_ans_f1": 0.6056,
    "qa_no_ans_exact": 1.0,
    "qa_no_ans_f1": 1.0,
    "qa_n": 8,
    "qa_has_ans_n": 6,
    "qa_no_ans_n": 2,
    "qa_span_p": 0.75,
    "qa_span_r": 0.5,
    "qa_span_f": 0.6,
    "speed": 300.0,
}


def textcat_record(text: str, gold: str, predicted: str) -> Dict[str, Any]:
    return {
        "index": 0,
        "text": text,
        "components": {
            "bert_textcat": {
                "task": "textcat",
                "exclusive": True,
                "gold": [gold],
                "predicted": [predicted],
                "scores": {gold: 0.3, predicted: 0.6},
            }
        },
    }


TEXTCAT_RECORDS = [
    textcat_record("my card is lost", "card", "card"),
    textcat_record("card not here", "card", "card"),
    textcat_record("exchange my card", "card", "fx"),
    textcat_record("the rate", "fx", "fx"),
    textcat_record("hello", "other", "other"),
]


def entity(start: int, end: int, label: str, text: str) -> Dict[str, Any]:
    return {"start": start, "end": end, "label": label, "text": text}


NER_RECORDS = [
    {
        "index": 0,
        "text": "john smith is in paris",
        "components": {
            "bert_ner": {
                "task": "ner",
                "gold": [entity(0, 10, "PER", "john smith"), entity(17, 22, "LOC", "paris")],
                "predicted": [entity(0, 4, "PER", "john"), entity(17, 22, "LOC", "paris")],
            }
        },
    },
    {
        "index": 1,
        "text": "apple in london today",
        "components": {
            "bert_ner": {
                "task": "ner",
                "gold": [entity(0, 5, "ORG", "apple"), entity(9, 15, "LOC", "london")],
                "predicted": [entity(0, 5, "PER", "apple"), entity(16, 21, "LOC", "today")],
            }
        },
    },
]


def question(key: str, predicted: str, gold: List[str], exact: float, f1: float) -> Dict[str, Any]:
    return {
        "key": key,
        "question": f"What {key}?",
        "predicted": predicted,
        "score": 1.0,
        "gold": gold,
        "exact": exact,
        "f1": f1,
    }


QA_RECORDS = [
    {
        "index": 0,
        "text": "a table for 4 at 7pm on friday please",
        "components": {
            "bert_qa": {
                "task": "qa",
                "questions": [
                    question("people", "4", ["4"], 1.0, 1.0),
                    question("time", "7pm on friday", ["7pm"], 0.0, 0.5),
                    question("date", "", ["friday"], 0.0, 0.0),
                    question("first_name", "", [], 1.0, 1.0),
                ],
            }
        },
    },
    {
        "index": 1,
        "text": "book it for anna at 8 in the evening",
        "components": {
            "bert_qa": {
                "task": "qa",
                "questions": [
                    question("people", "anna", [], 0.0, 0.0),
                    question("time", "8 in the evening", ["8 in the evening"], 1.0, 1.0),
                    question("first_name", "anna", ["anna"], 1.0, 1.0),
                    question("date", "", [], 1.0, 1.0),
                ],
            }
        },
    },
]


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf8")
    return path


def write_jsonl(path: Path, records: List[Dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    return path


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "metrics"
    folder.mkdir()
    write_json(folder / "textcat.json", TEXTCAT)
    write_json(folder / "multilabel.json", MULTILABEL)
    write_json(folder / "ner.json", NER)
    write_json(folder / "qa_slots.json", QA)
    write_json(
        folder / "textcat_train_time.json",
        {
            "command": "/venv/bin/python -m spacy train x.cfg",
            "seconds": 3725.4,
            "machine": "x86_64",
        },
    )
    write_json(folder / "pretrain_time.json", {"command": "python pretrain", "seconds": 61})
    write_json(folder / "settings.json", {"epochs": 3})
    write_jsonl(folder / "textcat_predictions.jsonl", TEXTCAT_RECORDS)
    write_jsonl(folder / "ner_predictions.jsonl", NER_RECORDS)
    write_jsonl(folder / "qa_slots_predictions.jsonl", QA_RECORDS)
    return folder


def test_inputs_are_paired_by_name(metrics_dir: Path) -> None:
    inputs = read_inputs([metrics_dir])
    runs = {run.name: run for run in inputs.runs}
    assert sorted(runs) == ["multilabel", "ner", "qa_slots", "textcat"]
    assert runs["textcat"].timing is not None and runs["textcat"].timing["seconds"] == 3725.4
    assert runs["ner"].timing is None
    assert len(runs["textcat"].predictions) == 5 and runs["multilabel"].predictions == []
    assert runs["textcat"].tasks == ["textcat:cats"]
    assert runs["ner"].tasks == ["ner:ents"]
    assert runs["qa_slots"].tasks == ["qa"]
    assert set(inputs.timings) == {"textcat_train_time", "pretrain_time"}
    assert inputs.notes == [
        f"{metrics_dir / 'settings.json'}: skipped (no cats_, ents_, spans_ or qa_ scores)"
    ]


def test_runs_of_one_pipeline_share_its_training_time(tmp_path: Path) -> None:
    # the one-pass pipeline scored on two test sets, trained once; textcat_full
    # has no time of its own, and textcat's is another training's
    for name, scores in (
        ("multitask_banking77", TEXTCAT),
        ("multitask_conll2003", NER),
        ("textcat", TEXTCAT),
        ("textcat_full", TEXTCAT),
    ):
        write_json(tmp_path / f"{name}.json", scores)
    write_json(tmp_path / "multitask_train_time.json", {"seconds": 600})
    write_json(tmp_path / "textcat_train_time.json", {"seconds": 60})
    runs = {run.name: run for run in read_inputs([tmp_path]).runs}
    assert runs["multitask_banking77"].timing == {"seconds": 600}
    assert runs["multitask_conll2003"].timing == {"seconds": 600}
    assert runs["textcat"].timing == {"seconds": 60}
    assert runs["textcat_full"].timing is None


def test_confusions() -> None:
    records = [r["components"]["bert_textcat"] for r in TEXTCAT_RECORDS]
    counts = confusion_counts(records)
    assert counts == Counter(
        {("card", "card"): 2, ("card", "fx"): 1, ("fx", "fx"): 1, ("other", "other"): 1}
    )
    assert most_confused(counts) == ["card", "fx"]
    many = Counter({("a", "b"): 5, ("c", "d"): 3, ("b", "a"): 2, ("e", "a"): 1, ("a", "a"): 9})
    assert most_confused(many) == ["a", "b", "c", "d", "e"]
    assert most_confused(many, k=3) == ["a", "b", "c"]


def test_ner_error_types() -> None:
    records = [r["components"]["bert_ner"] | {"text": r["text"]} for r in NER_RECORDS]
    per_label, wrong = ner_errors(records)
    assert per_label["PER"] == Counter({"wrong boundary": 1})
    assert per_label["LOC"] == Counter({"correct": 1, "spurious": 1, "missed": 1})
    assert per_label["ORG"] == Counter({"wrong label": 1})
    assert len(wrong) == 2


def test_qa_groups() -> None:
    questions = [
        q | {"text": r["text"]} for r in QA_RECORDS for q in r["components"]["bert_qa"]["questions"]
    ]
    assert [answer_length(q) for q in questions[:3]] == [1, 1, 1]
    assert answer_length(questions[5]) == 3  # "8 in the evening": "the" is not a word
    by_key = {row["group"]: row for row in qa_groups(questions, "key")}
    assert list(by_key) == ["people", "time", "date", "first_name"]
    assert by_key["people"] == {
        "group": "people",
        "n": 2,
        "exact": 0.5,
        "f1": 0.5,
        "n_has": 1,
        "exact_has": 1.0,
        "f1_has": 1.0,
        "n_no": 1,
        "exact_no": 0.0,
        "missed": 0,
        "false answers": 1,
    }
    assert by_key["first_name"]["exact_has"] == 1.0 and by_key["first_name"]["exact_no"] == 1.0
    assert by_key["date"]["missed"] == 1 and by_key["time"]["f1"] == 0.75
    by_length = {row["group"]: row for row in qa_groups(questions, "length")}
    assert list(by_length) == ["no answer", "1 word", "3 words"]
    assert by_length["no answer"]["n"] == 3 and by_length["1 word"]["n"] == 4


def test_report_files_tables_and_pictures(metrics_dir: Path, tmp_path: Path) -> None:
    report = write_report([metrics_dir], tmp_path / "report", title="Test report")
    markdown = report.markdown.read_text(encoding="utf8")
    page = report.html.read_text(encoding="utf8")
    names = sorted(p.name for p in report.images)
    assert names == [
        "multilabel_textcat_f1.png",
        "ner_bert_ner_errors.png",
        "ner_ents_f1.png",
        "qa_slots_bert_qa_by_key.png",
        "qa_slots_bert_qa_by_length.png",
        "qa_slots_qa_answerable.png",
        "textcat_bert_textcat_confusion_all.png",
        "textcat_bert_textcat_confusion_top.png",
        "textcat_textcat_f1.png",
    ]
    for image in report.images:
        assert image.parent == tmp_path / "report"
        assert image.read_bytes()[:8] == PNG
        assert f"]({image.name})" in markdown
    assert page.count("data:image/png;base64,") == len(report.images)
    assert not re.search(r'src="(?!data:)', page)  # everything is embedded
    assert markdown.startswith("# Test report\n")
    # the numbers of the metrics are in the tables
    assert "| Accuracy (top label) | 80.00 |" in markdown
    assert "| Macro F | 81.23 |" in markdown
    assert "| card | 100.00 | 66.67 | 80.00 | 3 |" in markdown
    assert (
        "| `textcat` | text classification | accuracy 80.00, macro F 81.23 | 1234 | 1:02:05 |"
        in markdown
    )
    assert "| `ner` | NER | F 72.54 (P 75.12, R 70.14) | 800 | - |" in markdown
    assert "| LOC | 90.00 | 80.00 | 84.71 |" in markdown
    assert "| Has an answer | 6 | 50.00 | 60.56 |" in markdown
    assert "| Span F | 60.00 |" in markdown
    assert "| card | fx | 1 | exchange my card |" in markdown
    assert "| `people` | 2 | 50.00 | 50.00 | 1 | 100.00 | 100.00 | 0.00 | 0 | 1 |" in markdown
    assert "| 1 word | 4 | 50.00 | 62.50 | 1 | 0 |" in markdown
    assert "| all | 1 | 1 | 1 | 0 | 1 | 1 |" in markdown
    assert "| `pretrain_time` | 0:01:01 | - | `python pretrain` |" in markdown
    # the interpreter's path is not shown
    assert "`python -m spacy train x.cfg`" in markdown and "/venv/bin" not in markdown
    assert "settings.json: skipped" in markdown
    assert '<td class="r">81.23</td>' in page and "<code>textcat</code>" in page


def test_without_plots(metrics_dir: Path, tmp_path: Path) -> None:
    report = write_report([metrics_dir / "ner.json"], tmp_path / "out", plots=False)
    assert report.images == [] and not list((tmp_path / "out").glob("*.png"))
    markdown = report.markdown.read_text(encoding="utf8")
    assert "| F | 72.54 |" in markdown and "![" not in markdown


def test_explicit_predictions_and_notes(metrics_dir: Path, tmp_path: Path) -> None:
    other = write_jsonl(tmp_path / "elsewhere.jsonl", TEXTCAT_RECORDS)
    inputs = read_inputs([metrics_dir / "textcat.json"], [other])
    assert inputs.runs[0].predictions == []
    assert "elsewhere.jsonl: skipped (no metrics JSON of a run 'elsewhere')" in inputs.notes[0]
    renamed = write_jsonl(tmp_path / "textcat.jsonl", TEXTCAT_RECORDS)
    inputs = read_inputs([metrics_dir / "textcat.json"], [renamed])
    assert len(inputs.runs[0].predictions) == 5


def test_errors(metrics_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="No metrics in"):
        write_report([tmp_path / "empty"], tmp_path / "out")
    with pytest.raises(ReportError, match="no such file or folder"):
        write_report([tmp_path / "missing"], tmp_path / "out")
    bad = tmp_path / "bad_predictions.jsonl"
    bad.write_text('{"index": 0}\n', encoding="utf8")
    write_json(tmp_path / "bad.json", NER)
    with pytest.raises(ReportError, match="bad_predictions.jsonl:1: not a record"):
        read_inputs([tmp_path / "bad.json"], [bad])
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="spacy-bert-pipes\\[plots\\]"):
        write_report([metrics_dir], tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- annotated collections (outputs of bert-pipes annotate) ---------------------------


def answer(key: str, text: str, score: float, rank: int = 0) -> Dict[str, Any]:
    start = None if not text else 0
    return {
        "key": key,
        "question": f"What {key}?",
        "text": text,
        "start": start,
        "end": None if start is None else len(text),
        "score": score,
        "rank": rank,
        "question_truncated": False,
    }


def annotated(start: int, end: int, label: str, text: str) -> Dict[str, Any]:
    return {"text": text, "label": label, "start": start, "end": end, "score": 0.9}


ANNOTATED = [
    {
        "id": "a",
        "cats": {"card": 0.9, "fx": 0.05, "refund": 0.6},
        "entities": [annotated(0, 4, "PER", "anna"), annotated(8, 13, "LOC", "paris")],
        "answers": [answer("time", "7pm", 0.8), answer("people", "", 0.6)],
    },
    {
        "id": "b",
        "cats": {"card": 0.7, "fx": 0.2, "refund": 0.5},  # 0.5 counts
        "entities": [annotated(0, 3, "PER", "bob")],
        # top_k 2: the best non-empty answer per key counts, once per doc
        "answers": [
            answer("time", "8", 0.4),
            answer("time", "8 pm", 0.3, 1),
            answer("people", "4", 0.9),
        ],
    },
    {
        "id": 3,
        "cats": {"card": 0.3, "fx": 0.4, "refund": 0.3},
        "entities": [],
        "answers": [],
    },
]
ERROR_ROWS = [
    {"id": "d", "row": 3, "source": "in.csv:5", "reason": "text is null"},
    {"id": "a", "row": 4, "source": "in.csv:6", "reason": "duplicate id 'a' (first in row 0)"},
]


def write_annotated_csv(path: Path, rows: List[Dict[str, Any]]) -> Path:
    """As annotate writes CSV: a header, then the id and the other fields as JSON text."""
    with path.open("w", encoding="utf8", newline="") as file_:
        writer = csv.writer(file_, lineterminator="\n")
        writer.writerow(["id", "cats", "entities", "answers"])
        for row in rows:
            writer.writerow(
                [row["id"]] + [json.dumps(row[k]) for k in ("cats", "entities", "answers")]
            )
    return path


def counts(collection: Collection) -> Dict[str, Any]:
    """The counts of a collection (what does not depend on the file read)."""
    out = {f.name: getattr(collection, f.name) for f in dataclasses.fields(collection)}
    # per-row fields (ids, intents, vectors) and the similarity summary are tested apart
    for key in ("name", "path", "errors_path", "timing", "ids", "intents", "vectors"):
        out.pop(key)
    for key in ("similar", "duplicate_examples"):
        assert not out.pop(key)
    out["answer_scores"] = {k: round(v, 6) for k, v in out["answer_scores"].items()}
    return out


def test_collection_counts(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "news.jsonl", ANNOTATED)
    write_jsonl(tmp_path / "news.jsonl.errors.jsonl", ERROR_ROWS)
    collection = read_collection(path)
    assert collection.name == "news" and collection.timing is None
    assert counts(collection) == {
        "rows": 3,
        "docs_with_cats": 3,
        "categories": Counter({"card": 2, "refund": 2}),
        "docs_without_category": 1,
        "routed": Counter(),
        "not_routed": Counter(),
        "docs_with_route": 0,
        "entities": Counter({"PER": 2, "LOC": 1}),
        "entity_docs": Counter({"PER": 2, "LOC": 1}),
        "docs_with_entities": 2,
        "answered": Counter({"time": 2, "people": 1}),
        "answer_scores": {"time": 1.2, "people": 0.9},
        "null_answers": Counter({"people": 1}),
        "docs_with_answers": 2,
        "error_rows": 2,
        "first_errors": ERROR_ROWS,
    }
    assert collection.errors_path == tmp_path / "news.jsonl.errors.jsonl"
    # the same rows as CSV and as Parquet shards give the same counts
    csv_path = write_annotated_csv(tmp_path / "news.csv", ANNOTATED)
    write_jsonl(tmp_path / "news.csv.errors.jsonl", ERROR_ROWS)
    assert counts(read_collection(csv_path)) == counts(collection)
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, rows in enumerate((ANNOTATED[:2], ANNOTATED[2:])):
        cells = {"id": [str(r["id"]) for r in rows]}
        cells |= {k: [json.dumps(r[k]) for r in rows] for k in ("cats", "entities", "answers")}
        pq.write_table(pa.table(cells), shards / f"part-{i:06d}.parquet")
    write_jsonl(tmp_path / "shards.errors.jsonl", ERROR_ROWS)
    assert counts(read_collection(shards)) == counts(collection)
    assert counts(read_collection(shards / "part-000000.parquet"))["rows"] == 2


def test_collection_without_cats_or_errors(tmp_path: Path) -> None:
    rows = [{"id": str(i), "cats": None, "entities": [], "answers": []} for i in range(4)]
    collection = read_collection(write_jsonl(tmp_path / "plain.jsonl", rows))
    assert collection.rows == 4 and collection.docs_with_cats == 0
    assert collection.errors_path is None and collection.error_rows == 0
    report = write_report([], tmp_path / "out", annotations=[tmp_path / "plain.jsonl"])
    markdown = report.markdown.read_text(encoding="utf8")
    assert "## Annotated collection: plain.jsonl" in markdown
    assert "| Rows annotated | 4 |" in markdown and "| Error rows | 0 |" in markdown
    assert "| Wall time (h:mm:ss) | - |" in markdown
    # and says where one comes from
    assert "No wall time: no `plain_time.json`" in markdown
    assert "`bert-pipes annotate` writes it beside OUTPUT when a run finishes" in markdown
    # nothing predicted: no tables and no pictures of categories, entities or answers;
    # no vectors: the map's section says so
    assert report.images == []
    assert re.findall("### .*", markdown) == ["### Map and near-duplicates of plain.jsonl"]
    assert "`" + str(tmp_path / "plain.jsonl") + "` has no vector column" in markdown


def test_report_of_annotated_collections(metrics_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "annotated"
    folder.mkdir()
    jsonl = write_jsonl(folder / "news.jsonl", ANNOTATED)
    write_jsonl(folder / "news.jsonl.errors.jsonl", ERROR_ROWS)
    # the timing beside the output (as scripts/timed.py writes it)
    write_json(folder / "news_time.json", {"command": "bert-pipes annotate", "seconds": 1.5})
    # and one among the metrics inputs
    table = write_annotated_csv(folder / "tickets.csv", ANNOTATED[:2])
    write_json(metrics_dir / "tickets_time.json", {"seconds": 4.0})
    report = write_report([metrics_dir], tmp_path / "report", annotations=[jsonl, table])
    markdown = report.markdown.read_text(encoding="utf8")
    page = report.html.read_text(encoding="utf8")
    new_images = [
        "annotated_news_answers.png",
        "annotated_news_categories.png",
        "annotated_news_entities.png",
        "annotated_tickets_answers.png",
        "annotated_tickets_categories.png",
        "annotated_tickets_entities.png",
    ]
    names = sorted(p.name for p in report.images)
    assert [n for n in names if n.startswith("annotated_")] == new_images
    assert len(names) == 9 + len(new_images)  # the runs' pictures are all still there
    for image in report.images:
        assert image.read_bytes()[:8] == PNG and f"]({image.name})" in markdown
    assert page.count("data:image/png;base64,") == len(report.images)
    # the collections come after the runs, in the order given
    news = markdown.index("## Annotated collection: news.jsonl")
    tickets = markdown.index("## Annotated collection: tickets.csv")
    assert markdown.index("## Run `textcat`") < news < tickets < markdown.index("## Timings")
    news_section = markdown[news:tickets]
    for line in [
        "| Rows annotated | 3 |",
        "| Error rows | 2 |",
        "| Wall time (h:mm:ss) | 0:00:02 |",
        "| Docs/s (rows annotated / wall time) | 2.0 |",
        "| Docs with categories | 3 |",
        "| Docs with an entity | 2 |",
        "| Docs with an answer | 2 |",
        # the error rows' reasons
        "| in.csv:5 | d | text is null |",
        "| in.csv:6 | a | duplicate id 'a' (first in row 0) |",
        # categories: docs with a probability >= 0.5, most frequent first
        "| card | 2 | 66.7 |",
        "| refund | 2 | 66.7 |",
        # entities and docs per label
        "| PER | 2 | 2 |",
        "| LOC | 1 | 1 |",
        # per question: docs answered, % of rows, mean score of the best answer, null only
        "| `people` | 1 | 33.3 | 0.900 | 1 |",
        "| `time` | 2 | 66.7 | 0.600 | 0 |",
    ]:
        assert line in news_section, line
    assert "| fx |" not in news_section  # never at 0.5 or over
    assert "1 of 3 docs have none" in news_section
    assert f"{jsonl}.errors.jsonl" in news_section
    # most frequent first, ties in alphabetical order
    assert news_section.index("| card | 2 |") < news_section.index("| refund | 2 |")
    tickets_section = markdown[tickets : markdown.index("## Timings")]
    assert "| Rows annotated | 2 |" in tickets_section
    assert (
        "| Error rows | 0 |" in tickets_section and "could not be annotated" not in tickets_section
    )
    assert "| Docs/s (rows annotated / wall time) | 0.5 |" in tickets_section
    assert "No wall time" not in markdown
    assert "| card | 2 | 100.0 |" in tickets_section and "| refund | 2 | 100.0 |" in tickets_section
    assert f"Made from `{metrics_dir / 'multilabel.json'}`" in markdown and f"`{table}`" in markdown


def test_a_resumed_run_is_timed_on_its_own_docs(tmp_path: Path) -> None:
    """annotate's timing of a resumed run covers the docs it annotated, not
    the rows of OUTPUT: docs/s divides those, and the section says so."""
    output = write_jsonl(tmp_path / "news.jsonl", ANNOTATED)  # 3 rows
    covers = "this run's 1 of 2 chunks, 1 rows (1 annotated, 0 error rows); ..."
    timing = {"seconds": 2.0, "docs": 1, "resumed_chunks": 1, "covers": covers}
    write_json(tmp_path / "news_time.json", timing)
    report = write_report([], tmp_path / "out", annotations=[output], plots=False)
    markdown = report.markdown.read_text(encoding="utf8")
    assert "| Rows annotated | 3 |" in markdown
    assert "| Docs/s (rows annotated / wall time) | 0.5 |" in markdown
    assert f"timed by `news_time.json` ({covers})." in markdown


def test_collection_top_labels(tmp_path: Path) -> None:
    labels = [f"label{i:02d}" for i in range(25)]
    # label00 in 25 docs, label01 in 24, ...: the 20 most frequent are shown
    rows = [
        {
            "id": str(n),
            "cats": {label: 1.0 for label in labels[: 25 - n]},
            "entities": [],
            "answers": [],
        }
        for n in range(25)
    ]
    path = write_jsonl(tmp_path / "many.jsonl", rows)
    report = write_report([], tmp_path / "out", annotations=[path], plots=False)
    markdown = report.markdown.read_text(encoding="utf8")
    assert "the 20 most frequent of 25 labels" in markdown
    assert "| label00 | 25 | 100.0 |" in markdown and "| label19 | 6 | 24.0 |" in markdown
    assert "| label20 |" not in markdown


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("bad.jsonl", json.dumps(ANNOTATED[0]) + "\n{not json\n", r"bad\.jsonl:2: not JSON"),
        (
            "bad.jsonl",
            "\n" + json.dumps({"cats": None, "entities": [], "answers": []}),
            r'bad\.jsonl:2: a row without "id"',
        ),
        (
            "bad.jsonl",
            json.dumps({"id": None, "cats": None, "entities": [], "answers": []}),
            r'bad\.jsonl:1: a row without "id"',
        ),
        (
            "bad.jsonl",
            json.dumps({"id": "a", "text": "the input"}),
            r'bad\.jsonl:1: a row without "cats"',
        ),
        ("bad.jsonl", "[1, 2]\n", r"bad\.jsonl:1: not a JSON object"),
        (
            "bad.jsonl",
            json.dumps({"id": "a", "cats": {"x": "high"}, "entities": [], "answers": []}),
            r"bad\.jsonl:1: cats is not \{label: probability\}",
        ),
        (
            "bad.jsonl",
            json.dumps({"id": "a", "cats": None, "entities": [{"text": "x"}], "answers": []}),
            r"bad\.jsonl:1: entities is not a list",
        ),
        (
            "bad.csv",
            "id,cats,entities,answers\na,null,[],[]\nb,{oops,[],[]\n",
            r"bad\.csv:3: cats is not JSON text",
        ),
        ("bad.csv", "id,text\na,hello\n", r"bad\.csv:1: no column 'cats', 'entities', 'answers'"),
        (
            "bad.csv",
            "id,cats,entities,answers\na,null,[]\n",
            r"bad\.csv:2: 3 cells, the header has 4",
        ),
        ("bad.txt", "hello\n", r"bad\.txt: not an output of bert-pipes annotate"),
    ],
)
def test_collection_errors(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf8")
    with pytest.raises(ReportError, match=message):
        write_report([], tmp_path / "out", annotations=[path])
    assert not (tmp_path / "out").exists()


def test_collection_input_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="missing.jsonl: no such file"):
        read_collection(tmp_path / "missing.jsonl")
    with pytest.raises(ReportError, match="Nothing to report"):
        write_report([], tmp_path / "out")
    path = write_jsonl(tmp_path / "news.jsonl", ANNOTATED)
    errors = tmp_path / "news.jsonl.errors.jsonl"
    errors.write_text(json.dumps(ERROR_ROWS[0]) + "\n" + '{"id": "x"}\n', encoding="utf8")
    with pytest.raises(ReportError, match=r"news\.jsonl\.errors\.jsonl:2: not an error record"):
        read_collection(path)
    errors.unlink()
    (tmp_path / "other").mkdir()
    write_jsonl(tmp_path / "other" / "news.jsonl", ANNOTATED)
    with pytest.raises(ReportError, match="a second annotated collection named 'news'"):
        read_inputs([], annotations=[path, tmp_path / "other" / "news.jsonl"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="empty: no .parquet files"):
        read_collection(tmp_path / "empty")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    with pytest.raises(ReportError, match="broken.parquet: not a readable Parquet file"):
        read_collection(tmp_path / "broken.parquet")


def test_questions_of_one_doc_each_share_a_row(tmp_path: Path) -> None:
    """A doc's own questions (SQuAD's, keyed by question id) get one row together,
    not one row per question; questions asked of several docs keep their own."""
    rows = [
        {"id": "a", "cats": None, "entities": [], "answers": [answer("q1", "x", 0.5)]},
        {"id": "b", "cats": None, "entities": [], "answers": [answer("q2", "", 0.3)]},
        {"id": "c", "cats": None, "entities": [], "answers": [answer("q3", "y", 0.7)]},
    ]
    for row in rows:
        row["answers"].append(answer("time", "7pm", 0.8))
    path = write_jsonl(tmp_path / "own.jsonl", rows)
    report = write_report([], tmp_path / "out", annotations=[path])
    markdown = report.markdown.read_text(encoding="utf8")
    assert "| `time` | 3 | 100.0 | 0.800 | 0 |" in markdown
    own = "| each doc's own (3 questions asked of one doc each) | 2 | 66.7 | 0.600 | 1 |"
    assert own in markdown
    assert "`q1`" not in markdown


def test_collection_map_and_near_duplicates(tmp_path: Path) -> None:
    """With vectors: a PCA map coloured by intent (the 10 most frequent, then
    "other"), and the summary of `bert-pipes similar-collection` beside them."""
    import numpy

    from spacy_bert_pipes.report.analysis import intent_groups, pca_2d
    from spacy_bert_pipes.similar import similar_collection, write_similar

    rng = numpy.random.default_rng(0)
    centres = rng.normal(size=(12, 16))
    rows = []
    for i in range(120):
        intent = f"intent{i % 12:02d}"
        vector = centres[i % 12] + 0.1 * rng.normal(size=16)
        if i == 5:
            vector = numpy.zeros(16)  # an empty text
        cats = {intent: 0.9, "how": 0.95}  # "how": another classifier's label
        rows.append({"id": f"r{i}", "cats": cats, "entities": [], "answers": []})
        rows[-1]["vector"] = vector.astype("f").tolist()
    path = write_jsonl(tmp_path / "tickets.jsonl", rows)
    labels = [f"intent{i:02d}" for i in range(12)]
    write_similar(similar_collection(path, intent_labels=labels, k=3, threshold=0.9))
    report = write_report([], tmp_path / "out", annotations=[path], intents=labels)
    markdown = report.markdown.read_text(encoding="utf8")
    section = markdown[markdown.index("### Map and near-duplicates of tickets.jsonl") :]
    assert "![Map of tickets, coloured by predicted intent](annotated_tickets_map.png)" in section
    assert (tmp_path / "out" / "annotated_tickets_map.png").read_bytes()[:8] == PNG
    assert "The 119 rows with a vector" in section and "1 rows have a zero vector" in section
    summary = json.loads((tmp_path / "tickets_similar.json").read_text())
    assert summary["pairs"] > 0
    assert f"| Near-duplicate pairs | {summary['pairs']} |" in section
    assert "| Near-duplicate threshold (cosine) | 0.9 |" in section
    assert "| Rows whose nearest row has the same predicted intent | 100.0 % |" in section
    assert "most similar pairs:" in section and "| intent" in section and "| how |" not in section
    # the map's analysis: the first principal component separates two clusters
    points, shares = pca_2d(numpy.array([[1.0, 0.0, 0.1], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    assert points.shape == (3, 2) and shares[0] > shares[1] >= 0.0
    assert abs(points[0, 0] - points[1, 0]) < abs(points[0, 0] - points[2, 0])
    groups = intent_groups(["b", "a", "a", "c", None, "b", "a"], 2)
    assert groups == ["b", "a", "a", "other", "other", "b", "a"]
    # without the summary file, the section says how to make it
    (tmp_path / "tickets_similar.json").unlink()
    report = write_report([], tmp_path / "out2", annotations=[path])
    markdown = report.markdown.read_text(encoding="utf8")
    assert "No `tickets_similar.json` beside" in markdown
    assert [p.name for p in report.images if "map" in p.name] == ["annotated_tickets_map.png"]


def test_a_multi_head_run_reports_only_the_heads_it_scored(tmp_path: Path) -> None:
    """One pipeline with two classifiers (score prefixes "cats" and "nlu"), NER
    and QA, evaluated on one head's test set: the other heads' scores are None."""
    nlu = {k.replace("cats_", "nlu_"): v for k, v in MULTILABEL.items()}
    nones = {k: None for k in [*TEXTCAT, *NER, *QA] if k not in ("token_acc", "speed")}
    scores = {**nones, **{k: None for k in nlu}, **nlu, "qa_n": 0, "speed": 900.0}
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "multitask_nluplusplus.json").write_text(json.dumps(scores))
    record = {
        "index": 0,
        "text": "refund me",
        "components": {
            "intents": {**textcat_record("refund me", "x", "card")["components"]["bert_textcat"]},
            "nluplusplus": {
                "task": "textcat",
                "score_prefix": "nlu",
                "exclusive": False,
                "gold": ["refund"],
                "predicted": [],
                "scores": {"refund": 0.2},
            },
        },
    }
    record["components"]["intents"]["gold"] = []  # not a Banking77 doc
    with (folder / "multitask_nluplusplus_predictions.jsonl").open("w") as file_:
        file_.write(json.dumps(record) + "\n")
    (run,) = read_inputs([folder]).runs
    assert run.tasks == ["textcat:nlu"]
    assert read_inputs([folder / "multitask_nluplusplus.json"]).runs[0].tasks == ["textcat:nlu"]
    report = write_report([folder], tmp_path / "out", plots=False)
    text = report.markdown.read_text()
    assert "text classification (multi-label, `nlu_`) | macro F 55.00, micro F 61.00" in text
    assert "Errors of `nluplusplus`" in text and "| refund | 1 | 0 |" in text
    # intents' records are scored under "cats", which this run has no number for
    assert "intents" not in text and "NER" not in text and "question answering" not in text


def test_the_one_pass_heads_beside_the_heads_apart(tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    one_pass = {
        "multitask_banking77": {**TEXTCAT, "cats_accuracy": 0.85},
        "multitask_nluplusplus": {"nlu_micro_f": 0.79, "nlu_macro_f": 0.7, "nlu_f_per_type": {}},
        "multitask_conll2003": {**NER, "ents_f": 0.8012},
        "multitask_restaurant8k": {**QA, "qa_span_f": 0.88, "qa_f1": 0.97},
    }
    for stem, scores in one_pass.items():
        (folder / f"{stem}.json").write_text(json.dumps(scores))
    report = write_report([folder], tmp_path / "out", plots=False, one_pass=folder)
    text = report.markdown.read_text()
    assert "| CoNLL-2003 F1 | - | 80.12 | - |" in text
    assert "Heads apart: not scored in" in text and "spacy project run one-pass" in text
    assert text.index("## One encoder pass") < text.index("## Summary")
    (folder / "ner.json").write_text(json.dumps({**NER, "ents_f": 0.8}))
    text = write_report([folder], tmp_path / "out", plots=False, one_pass=folder).markdown
    assert "| CoNLL-2003 F1 | 80.00 | 80.12 | +0.12 |" in text.read_text()
    (folder / "multitask_conll2003.json").unlink()
    with pytest.raises(ReportError, match="--one-pass: .*multitask_conll2003.json: no such"):
        write_report([folder], tmp_path / "out", plots=False, one_pass=folder)


def route(label: Any, top: str, confidence: float, decision: str) -> Dict[str, Any]:
    return {"label": label, "top": top, "confidence": confidence, "decision": decision}


def test_a_routed_collection_counts_the_routing_decision(tmp_path: Path) -> None:
    # probabilities of 0.5 or more would count card 4 times; the router routed it once
    rows = [
        {
            "id": "1",
            "cats": {"card": 0.9, "fx": 0.1},
            "route": route("card", "card", 0.8, "routed"),
        },
        {
            "id": "2",
            "cats": {"card": 0.8, "fx": 0.2},
            "route": route(None, "card", 0.01, "out_of_scope"),
        },
        {
            "id": "3",
            "cats": {"card": 0.7, "fx": 0.3},
            "route": route(None, "card", 0.02, "out_of_scope"),
        },
        {
            "id": "4",
            "cats": {"card": 0.5, "fx": 0.5},
            "route": route(None, "card", 0.6, "ambiguous"),
        },
        {"id": "5", "cats": {"card": 0.4, "fx": 0.6}, "route": route("fx", "fx", 0.7, "routed")},
    ]
    for row in rows:
        row.update(entities=[], answers=[])
    path = write_jsonl(tmp_path / "tickets.jsonl", rows)
    collection = read_collection(path)
    assert collection.categories == Counter({"card": 4, "fx": 2})
    assert collection.routed == Counter({"card": 1, "fx": 1})
    assert collection.not_routed == Counter({"out_of_scope": 2, "ambiguous": 1})
    assert collection.docs_with_route == 5
    report = write_report([], tmp_path / "out", annotations=[path], plots=False)
    markdown = report.markdown.read_text(encoding="utf8")
    assert "2 of 5 docs routed to a label, 2 to none of these, 1 ambiguous" in markdown
    for line in (
        "| (none of these) | 2 | 40.0 |",
        "| card | 1 | 20.0 |",
        "| fx | 1 | 20.0 |",
        "| (ambiguous) | 1 | 20.0 |",
    ):
        assert line in markdown, line
    assert "| card | 4 |" not in markdown
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**rows[0], "route": {"decision": "maybe"}}])
    with pytest.raises(ReportError, match="bad.jsonl:1: route is not"):
        read_collection(bad)


def test_a_router_s_run_shows_its_routing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_scorers import ROUTED_ROWS, routed_examples

    from spacy_bert_pipes.report import textcat as textcat_report
    from spacy_bert_pipes.scorers import score_textcat

    scores = score_textcat(
        routed_examples(ROUTED_ROWS),
        labels=["a", "b"],
        multi_label=False,
        route_attr="route",
        oos_label="oos",
    )
    folder = tmp_path / "metrics"
    folder.mkdir()
    write_json(folder / "router.json", scores)
    drawn: Dict[str, Any] = {}

    def capture(name: str) -> Any:
        def draw(path: Path, *args: Any) -> None:
            drawn[name] = args
            path.write_bytes(PNG)

        return draw

    monkeypatch.setattr(textcat_report, "draw_risk_coverage", capture("risk"))
    monkeypatch.setattr(textcat_report, "draw_reliability", capture("reliability"))
    report = write_report([folder], tmp_path / "out")
    markdown = report.markdown.read_text(encoding="utf8")
    # the summary line: routed right 1 of 3 in-scope docs, 2 of 3 routed, 2 of 3 caught
    assert (
        "| `router` | text classification | routed right 33.33, coverage 66.67, "
        "out-of-scope recall 66.67; accuracy 66.67, macro F 33.33 |" in markdown
    )
    names = sorted(p.name for p in report.images)
    assert "router_risk_coverage.png" in names and "router_route_reliability.png" in names
    curves, _ = drawn["risk"]
    assert [name for name, _, _ in curves] == ["in-scope docs", "all docs"]
    (_, in_scope, in_point), (_, every, point) = curves
    assert in_scope == scores["cats_risk_coverage_in_scope"]
    assert every == scores["cats_risk_coverage"]
    # in scope: 2 of 3 routed, 1 of those 2 right; all docs: 3 of 6 routed, 1 right
    assert in_point == pytest.approx((2 / 3, 1 / 2))
    assert point == pytest.approx((1 / 2, 1 / 3))
    # the last reliability diagram drawn is the top probability's; the routing
    # confidence's came before it
    assert drawn["reliability"][0] == scores["cats_reliability"]
    assert "Per bin of the routing confidence" in markdown
    # the per-label table counts the routing decision
    assert "| b | 0.00 | 0.00 | 0.00 |" in markdown
    assert "| a | 100.00 | 50.00 | 66.67 |" in markdown
