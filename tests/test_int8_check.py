"""The int8 check: a pipeline scored at fp32 and at int8, and the mark that lets its
"auto" precision pick int8 on CPUs without fast bf16."""

import json
import shutil
from pathlib import Path
from typing import Dict

import pytest
import spacy
import srsly
import torch
from helpers import NER_TEXTS, SMALL_ENCODER, TRAIN_TEXTS, loader_config
from spacy.tokens import DocBin
from spacy.training import Example
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.evaluate import evaluate, read_examples
from spacy_bert_pipes.int8_check import (
    Int8Check,
    Int8CheckError,
    ScoreCheck,
    check_int8,
    judged_keys,
    mark_pipeline,
    unmark_pipeline,
)
from spacy_bert_pipes.loading import load_pipeline
from spacy_bert_pipes.models.transformer import precision as precision_module
from spacy_bert_pipes.models.transformer.hf_shim import HFShim

torch.set_num_threads(1)
runner = CliRunner()
LABELS = ("card", "fx", "other")


@pytest.fixture(scope="module")
def saved(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A textcat + NER pipeline (one encoder each, "auto" as saved) and a corpus
    with both annotations."""
    root = tmp_path_factory.mktemp("int8_check")
    nlp = spacy.blank("en")
    for name in ("bert_textcat", "bert_ner"):
        nlp.add_pipe(name, config={"model": {"encoder": SMALL_ENCODER}})
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    docs = []
    for text, ents in NER_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {label: float(label == "other") for label in LABELS}
        doc.ents = [doc.char_span(s, e, label=lb) for s, e, lb in ents]
        docs.append(doc)
    for text, label in TRAIN_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {lb: float(lb == label) for lb in LABELS}
        docs.append(doc)
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    nlp.to_disk(root / "nlp")
    DocBin(docs=docs).to_disk(root / "data.spacy")
    return {"pipeline": root / "nlp", "data": root / "data.spacy"}


@pytest.fixture
def pipeline(saved: Dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the saved pipeline that a test may mark."""
    shutil.copytree(saved["pipeline"], tmp_path / "nlp")
    return tmp_path / "nlp"


@pytest.fixture
def plain_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx2"}))


def encoder_precisions(nlp: spacy.language.Language) -> Dict[str, str]:
    """What each component's encoder predicts in, on this (patched) CPU."""
    return {
        name: shim.prediction_precision
        for name, pipe in nlp.components
        for node in pipe.model.walk()
        for shim in node.shims
        if isinstance(shim, HFShim)
    }


def test_the_judged_scores_are_the_pipelines_score_weights(saved: Dict[str, Path]) -> None:
    nlp = load_pipeline(saved["pipeline"])
    assert judged_keys(nlp) == ["cats_score", "ents_f"]


def test_the_check_scores_each_head_at_fp32_and_int8(saved: Dict[str, Path]) -> None:
    check = check_int8(saved["pipeline"], [saved["data"]])
    assert check.docs == {str(saved["data"]): len(NER_TEXTS) + len(TRAIN_TEXTS)}
    got = {s.key: s for s in check.scores}
    assert set(got) <= {"cats_score", "ents_f"} and "cats_score" in got
    # the fp32 figure is what `evaluate` gives at fp32
    nlp = load_pipeline(saved["pipeline"], precision="fp32")
    scores = evaluate(nlp, read_examples(nlp, saved["data"])).scores
    assert got["cats_score"].fp32 == scores["cats_score"]
    assert check.cpu in {"amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "other"}


def test_a_head_fails_when_int8_loses_more_than_the_tolerance() -> None:
    scores = [ScoreCheck("dev.spacy", "cats_score", 0.8542, 0.8516)]  # -0.26 points
    assert Int8Check("p", 0.3, "avx2", scores=scores).passed
    failing = [*scores, ScoreCheck("nlu.spacy", "nlu_micro_f", 0.7520, 0.7470)]  # -0.50
    check = Int8Check("p", 0.3, "avx2", scores=failing)
    assert not check.passed
    assert [(s.key, s.points) for s in check.failed()] == [("nlu_micro_f", -0.5)]
    # 200 docs: one doc is 0.5 point of an accuracy, more than the tolerance
    check.docs = {"dev.spacy": 500, "nlu.spacy": 200}
    assert check.coarse() == {"nlu.spacy": 0.5}
    # gains never fail; nothing measured is no pass
    assert Int8Check("p", 0.0, "avx2", scores=[ScoreCheck("d", "k", 0.5, 0.6)]).passed
    assert not Int8Check("p", 0.3, "avx2").passed


def test_a_marked_pipeline_predicts_int8_on_a_cpu_without_fast_bf16(
    pipeline: Path, plain_cpu: None
) -> None:
    assert set(encoder_precisions(load_pipeline(pipeline)).values()) == {"fp32"}
    passed = Int8Check(str(pipeline), 0.3, "avx2", {"d": 1}, [ScoreCheck("d", "k", 0.5, 0.5)])
    marked = mark_pipeline(pipeline, passed)
    assert marked == [
        "components.bert_textcat.model.encoder",
        "components.bert_ner.model.encoder",
    ]
    nlp = spacy.load(pipeline)  # spaCy's own loading reads the mark
    assert set(encoder_precisions(nlp).values()) == {"int8"}
    assert nlp.meta["int8_check"]["passed"] is True
    assert nlp.meta["int8_check"]["scores"][0]["points"] == 0.0
    # an explicit precision still overrides it
    assert set(encoder_precisions(load_pipeline(pipeline, precision="fp32")).values()) == {"fp32"}
    unmark_pipeline(pipeline)
    nlp = spacy.load(pipeline)
    assert set(encoder_precisions(nlp).values()) == {"fp32"}
    assert "int8_check" not in nlp.meta


def test_a_failed_check_takes_the_mark_off(pipeline: Path, plain_cpu: None) -> None:
    good = [ScoreCheck("d", "k", 0.5, 0.5)]
    mark_pipeline(pipeline, Int8Check(str(pipeline), 0.3, "avx2", scores=good))
    bad = [ScoreCheck("d", "k", 0.5, 0.4)]
    mark_pipeline(pipeline, Int8Check(str(pipeline), 0.3, "avx2", scores=bad))
    nlp = spacy.load(pipeline)
    assert set(encoder_precisions(nlp).values()) == {"fp32"}
    assert nlp.meta["int8_check"]["passed"] is False  # the figures stay for the user


def test_the_cli_checks_marks_and_reports(
    saved: Dict[str, Path], pipeline: Path, tmp_path: Path, plain_cpu: None
) -> None:
    report = tmp_path / "check.json"
    args = ["check-int8", str(pipeline), str(saved["data"]), "--tolerance", "100"]
    result = runner.invoke(app, [*args, "--dry-run", "--report", str(report)])
    assert result.exit_code == 0, result.output
    assert "cats_score" in result.output and "fp32" in result.output
    assert "more docs make the check surer" not in result.output  # a doc's points < 100
    # at the default 0.3, a dozen docs cannot resolve the bar, which it says (pass or fail)
    result = runner.invoke(app, ["check-int8", str(pipeline), str(saved["data"]), "--dry-run"])
    assert result.exit_code == 0, result.output
    docs = len(NER_TEXTS) + len(TRAIN_TEXTS)
    said = " ".join(result.output.split())
    assert f"has {docs} docs: one doc moves a per-doc score by {round(100 / docs, 2)}" in said
    assert json.loads(report.read_text())["passed"] is True
    assert "int8_check" not in srsly.read_json(pipeline / "meta.json")  # a dry run
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Marked" in result.output
    assert set(encoder_precisions(spacy.load(pipeline)).values()) == {"int8"}


def test_the_cli_names_what_it_cannot_check(saved: Dict[str, Path], tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["check-int8", str(saved["pipeline"]), str(saved["data"]), "--score", "qa_f1"]
    )
    assert result.exit_code == 1
    assert "qa_f1" in result.output and "each head's own corpus" in result.output
    empty = tmp_path / "empty.spacy"
    DocBin().to_disk(empty)
    result = runner.invoke(app, ["check-int8", str(saved["pipeline"]), str(empty)])
    assert result.exit_code == 1
    assert "empty.spacy" in result.output and "no docs" in result.output


def test_an_encoder_without_the_setting_is_named(pipeline: Path) -> None:
    config = (pipeline / "config.cfg").read_text()
    (pipeline / "config.cfg").write_text(
        config.replace("spacy-bert-pipes.BertEncoder.v2", "spacy-bert-pipes.BertEncoder.v1")
    )
    with pytest.raises(Int8CheckError, match=r"components.bert_textcat.model.encoder.*v1"):
        mark_pipeline(pipeline, Int8Check(str(pipeline), 0.3, "avx2"))


def test_a_folder_that_is_not_a_pipeline_is_named(tmp_path: Path) -> None:
    with pytest.raises(Int8CheckError, match="no config.cfg"):
        unmark_pipeline(tmp_path)
