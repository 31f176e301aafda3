"""`bert-pipes report`: the command line, its files and its errors."""

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

runner = CliRunner()
NER = {
    "ents_p": 0.8,
    "ents_r": 0.6,
    "ents_f": 0.6857,
    "ents_per_type": {"PER": {"p": 0.8, "r": 0.6, "f": 0.6857}},
    "speed": 100.0,
}
RECORD = {
    "index": 0,
    "text": "john smith is here",
    "components": {
        "bert_ner": {
            "task": "ner",
            "gold": [{"start": 0, "end": 10, "label": "PER", "text": "john smith"}],
            "predicted": [{"start": 0, "end": 4, "label": "PER", "text": "john", "score": 0.9}],
        }
    },
}


@pytest.fixture
def metrics(tmp_path: Path) -> Path:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "ner.json").write_text(json.dumps(NER), encoding="utf8")
    (folder / "ner_train_time.json").write_text(json.dumps({"seconds": 90}), encoding="utf8")
    return folder


def test_help_names_every_option() -> None:
    result = runner.invoke(app, ["report", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--output-dir", "--predictions", "--annotations", "--title", "--no-plots"):
        assert option in result.output


def test_writes_the_report(metrics: Path, tmp_path: Path) -> None:
    predictions = tmp_path / "ner_predictions.jsonl"
    predictions.write_text(json.dumps(RECORD) + "\n", encoding="utf8")
    out = tmp_path / "reports"
    args = ["report", str(metrics), "-o", str(out), "-p", str(predictions), "--title", "NER"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "and 2 pictures" in result.output and "report.html in a browser" in result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "ner_bert_ner_errors.png",
        "ner_ents_f1.png",
        "report.html",
        "report.md",
    ]
    markdown = (out / "report.md").read_text(encoding="utf8")
    assert markdown.startswith("# NER\n")
    assert "| `ner` | NER | F 68.57 (P 80.00, R 60.00) | 100 | 0:01:30 |" in markdown
    assert "| PER | 0 | 0 | 1 | 0 | 0 | 0 |" in markdown  # one wrong boundary
    assert (out / "ner_ents_f1.png").read_bytes()[:4] == b"\x89PNG"


def test_no_plots_and_notes(metrics: Path, tmp_path: Path) -> None:
    stray = tmp_path / "other_predictions.jsonl"
    stray.write_text(json.dumps(RECORD) + "\n", encoding="utf8")
    args = ["report", str(metrics / "ner.json"), "-o", str(tmp_path / "out"), "--no-plots"]
    result = runner.invoke(app, args + ["-p", str(stray)])
    assert result.exit_code == 0, result.output
    assert "and 0 pictures" in result.output
    assert "Note: " in result.output and "no metrics JSON of a run 'other'" in result.output


def test_annotations(metrics: Path, tmp_path: Path) -> None:
    output = tmp_path / "annotated.jsonl"
    rows = [
        {"id": "a", "cats": {"fx": 0.8}, "entities": [], "answers": []},
        {"id": "b", "cats": {"fx": 0.1}, "entities": [], "answers": []},
    ]
    output.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    (tmp_path / "annotated_time.json").write_text(json.dumps({"seconds": 4}), encoding="utf8")
    out = tmp_path / "reports"
    # with METRICS, and without
    for args in ([str(metrics), "-a", str(output)], ["--annotations", str(output), "--no-plots"]):
        result = runner.invoke(app, ["report", *args, "-o", str(out)])
        assert result.exit_code == 0, result.output
        markdown = (out / "report.md").read_text(encoding="utf8")
        assert "## Annotated collection: annotated.jsonl" in markdown
        assert "| Rows annotated | 2 |" in markdown and "| fx | 1 | 50.0 |" in markdown
        assert "| Docs/s (rows annotated / wall time) | 0.5 |" in markdown
    assert "## Run `ner`" not in markdown
    assert (out / "annotated_annotated_categories.png").read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["report", "-o", str(out)])
    assert result.exit_code == 1 and "Nothing to report" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"cats": null, "entities": [], "answers": []}\n', encoding="utf8")
    result = runner.invoke(app, ["report", "-a", str(bad), "-o", str(out)])
    assert result.exit_code == 1 and 'bad.jsonl:1: a row without "id"' in result.output


def test_errors(metrics: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert result.exit_code == 2  # typer checks that the paths exist
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["report", str(tmp_path / "empty"), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "No metrics in" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf8")
    result = runner.invoke(app, ["report", str(bad), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "bad.json" in result.output
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = runner.invoke(app, ["report", str(metrics), "-o", str(tmp_path / "o")])
    assert result.exit_code == 1 and "pip install" in result.output
