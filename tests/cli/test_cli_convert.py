import json
from pathlib import Path
from typing import List

import pytest
import spacy
import typer
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.cli.convert import parse_folds

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[3] / "shared" / "datasets"

runner = CliRunner()


def read_docs(path: Path) -> List[Doc]:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


@pytest.fixture
def nluplusplus_dir(tmp_path):
    ontology = {
        "intents": {
            "greet": {"domain": ["general"]},
            "pin": {"domain": ["banking"]},
            "wifi": {"domain": ["hotels"]},
        }
    }
    (tmp_path / "ontology.json").write_text(json.dumps(ontology))
    folder = tmp_path / "banking"
    folder.mkdir()
    folds = [
        [{"text": "hi", "intents": ["greet"]}, {"text": "hmm"}],
        [{"text": "my pin", "intents": ["pin"]}],
        [{"text": "wifi?", "intents": ["wifi"]}],
    ]
    for number, records in enumerate(folds):
        (folder / f"fold{number}.json").write_text(json.dumps(records))
    return folder


def test_textcat_csv(tmp_path):
    input_path = tmp_path / "train.csv"
    input_path.write_text('text,label\n"Hello, world",b\nbye,a\n')
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "textcat", str(input_path), str(output_path)])
    assert result.exit_code == 0, result.output
    assert f"Wrote 2 docs with 2 labels to {output_path}" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == ["Hello, world", "bye"]
    assert [doc.cats for doc in docs] == [{"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0}]


def test_textcat_jsonl_multilabel_with_labels_file(tmp_path):
    input_path = tmp_path / "train.jsonl"
    input_path.write_text('{"body": "x", "tags": ["b", "c"]}\n{"body": "y", "tags": []}\n')
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["c", "b", "a"]')
    output_path = tmp_path / "train.spacy"
    args = ["convert", "textcat", str(input_path), str(output_path), "--multilabel"]
    args += ["--text-column", "body", "--label-column", "tags", "--labels", str(labels_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 2 docs with 3 labels" in result.output
    docs = read_docs(output_path)
    assert [doc.cats for doc in docs] == [
        {"c": 1.0, "b": 1.0, "a": 0.0},
        {"c": 0.0, "b": 0.0, "a": 0.0},
    ]


@pytest.mark.parametrize(
    "extra,message",
    [
        ([], "train.jsonl:2: exclusive classes need exactly one label per row, found 'a', 'b'"),
        (["--multilabel", "--labels", "LABELS"], "train.jsonl:2: unknown label 'b'"),
        (["--multilabel", "--text-column", "body"], "train.jsonl:1: no text field 'body'"),
        (["--lang", "not-a-language"], "unknown language code 'not-a-language'"),
    ],
)
def test_textcat_errors_exit_1(tmp_path, extra, message):
    input_path = tmp_path / "train.jsonl"
    input_path.write_text('{"text": "x", "label": "a"}\n{"text": "y", "labels": ["a", "b"]}\n')
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["a"]')
    output_path = tmp_path / "train.spacy"
    extra = [str(labels_path) if arg == "LABELS" else arg for arg in extra]
    result = runner.invoke(app, ["convert", "textcat", str(input_path), str(output_path), *extra])
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not output_path.exists()


def test_nluplusplus(nluplusplus_dir, tmp_path):
    output_path = tmp_path / "train.spacy"
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(output_path), "--folds", "0-1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 3 docs with 2 labels" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == ["hi", "hmm", "my pin"]
    assert docs[1].cats == {"greet": 0.0, "pin": 0.0}


@pytest.mark.parametrize(
    "folds,message",
    [("2", "fold2.json:record 1: unknown label 'wifi'"), ("0,5", "fold5.json: no such fold file")],
)
def test_nluplusplus_errors_exit_1(nluplusplus_dir, tmp_path, folds, message):
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(tmp_path / "x.spacy")]
    result = runner.invoke(app, [*args, "--folds", folds])
    assert result.exit_code == 1
    assert message in result.stderr


def test_nluplusplus_bad_folds_is_a_usage_error(nluplusplus_dir, tmp_path):
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(tmp_path / "x.spacy")]
    result = runner.invoke(app, [*args, "--folds", "3-1"])
    assert result.exit_code == 2
    assert "expected a fold number or a range" in result.stderr


@pytest.mark.parametrize(
    "text,folds",
    [
        ("0-17", list(range(18))),
        ("18,19", [18, 19]),
        ("18-19", [18, 19]),
        (" 0-2, 7", [0, 1, 2, 7]),
    ],
)
def test_parse_folds(text, folds):
    assert parse_folds(text) == folds


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "1,1", "0-2,2"])
def test_parse_folds_invalid(text):
    with pytest.raises(typer.BadParameter):
        parse_folds(text)


def test_help():
    for command in ("textcat", "nluplusplus"):
        result = runner.invoke(app, ["convert", command, "--help"])
        assert result.exit_code == 0
        assert f"bert-pipes convert {command}" in result.output


@pytest.mark.slow
def test_convert_real_banking77_and_nluplusplus(tmp_path):
    if not DATASETS.is_dir():
        pytest.skip(f"no shared datasets at {DATASETS}")
    banking77, nluplusplus = DATASETS / "banking77", DATASETS / "nluplusplus" / "banking"
    args = ["convert", "textcat", str(banking77 / "train.csv"), str(tmp_path / "b77.spacy")]
    args += ["--label-column", "category", "--labels", str(banking77 / "categories.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 10003 docs with 77 labels" in result.output
    docs = read_docs(tmp_path / "b77.spacy")
    assert len(docs) == 10003
    assert all(len(doc.cats) == 77 and sum(doc.cats.values()) == 1.0 for doc in docs)

    n_docs = 0
    for folds in ("0-17", "18,19"):
        output_path = tmp_path / f"nlupp-{folds}.spacy"
        args = ["convert", "nluplusplus", str(nluplusplus), str(output_path), "--folds", folds]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "with 48 labels" in result.output
        docs = read_docs(output_path)
        assert all(len(doc.cats) == 48 for doc in docs)
        n_docs += len(docs)
    assert n_docs == 2071
