"""report: metrics tables, analyses of predictions, PNGs, Markdown and HTML."""

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import pytest

from spacy_bert_pipes.report import (
    ReportError,
    answer_length,
    confusion_counts,
    most_confused,
    ner_errors,
    qa_groups,
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
    assert runs["textcat"].tasks == ["textcat"]
    assert runs["ner"].tasks == ["ner:ents"]
    assert runs["qa_slots"].tasks == ["qa"]
    assert set(inputs.timings) == {"textcat_train_time", "pretrain_time"}
    assert inputs.notes == [
        f"{metrics_dir / 'settings.json'}: skipped (no cats_, ents_, spans_ or qa_ scores)"
    ]


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
