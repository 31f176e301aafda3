"""`bert-pipes threshold` on a tiny trained router and a dev set that is mostly
out-of-scope traffic: the printed and written trade-off, the three rules
(coverage, the default; cost ratio; a key) and the errors."""

import json
import random
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, WORDS, loader_config, textcat_examples
from spacy.tokens import DocBin
from spacy.training import Example
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

pytestmark = pytest.mark.usefixtures("one_thread")

IN_SCOPE = [
    ("my new card has not come", "card"),
    ("the card is broken", "card"),
    ("exchange rate today", "fx"),
    ("which rate of exchange", "fx"),
    ("hello there", "other"),
    ("new york city", "other"),
]
N_FOREIGN = 30  # five foreign docs to one in-scope doc, as a help desk's traffic


@pytest.fixture(scope="module")
def router(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A trained bert_textcat saved to disk, a dev set of 6 in-scope and 30
    out-of-scope docs, and one of the in-scope docs alone."""
    path = tmp_path_factory.mktemp("router")
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER, "pooling": "mean"}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(20):
        nlp.update(examples, sgd=optimizer)
    nlp.to_disk(path / "model")
    in_scope = textcat_examples(nlp, IN_SCOPE)
    rng = random.Random(0)
    foreign = [
        Example.from_dict(
            nlp.make_doc(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8)))),
            {"cats": {label: 0.0 for label in LABELS}},
        )
        for _ in range(N_FOREIGN)
    ]
    for name, docs in (("dev", in_scope + foreign), ("in_scope", in_scope)):
        DocBin(docs=[eg.reference for eg in docs]).to_disk(path / f"{name}.spacy")
    return {name: path / name for name in ("model", "dev.spacy", "in_scope.spacy")}


def run(router: Dict[str, Path], output: Path, *options: str, dev: str = "dev.spacy") -> Any:
    args = ["threshold", str(router["model"]), str(router[dev]), str(output), "-n", "21"]
    return CliRunner().invoke(app, args + list(options))


def rows(output: Path) -> List[Dict[str, Any]]:
    return json.loads((output / "threshold.json").read_text())["scores"]


def test_the_default_routes_97_percent_of_the_in_scope_docs(
    router: Dict[str, Path], tmp_path: Path
) -> None:
    result = run(router, tmp_path / "routed")
    assert result.exit_code == 0, result.output
    for column in ("in-scope routed", "routed right", "out-of-scope caught", "cats_oos_f2"):
        assert column in result.output
    assert "6 in-scope and 30 out-of-scope docs" in result.output
    report = json.loads((tmp_path / "routed" / "threshold.json").read_text())
    assert report["rule"] == "coverage 0.97"
    assert (report["in_scope_docs"], report["out_of_scope_docs"]) == (6, 30)
    best = report["best"]
    assert best["coverage"] >= 0.97  # all 6 in-scope docs
    assert len(report["scores"]) == 21
    for row in report["scores"]:
        assert set(row) >= {"threshold", "coverage", "routed_accuracy", "oos_recall", "cats_oos_f2"}
        if row["threshold"] > best["threshold"]:
            assert row["coverage"] < 0.97  # the highest threshold with that coverage
    loaded = spacy.load(tmp_path / "routed")
    assert loaded.get_pipe("bert_textcat").cfg["oos_threshold"] == pytest.approx(
        report["best_threshold"]
    )
    # what the report says the threshold does is what the saved pipeline does
    docs = [loaded(text) for text, _ in IN_SCOPE]
    assert all(doc._.route["decision"] == "routed" for doc in docs)
    said = " ".join(result.output.split())  # the message is wrapped
    assert f"catches {best['oos_recall'] * 100:.1f}% (+/- " in said
    assert f"routes {best['coverage'] * 100:.1f}% (+/- " in said


def test_a_coverage_and_a_cost_ratio(router: Dict[str, Path], tmp_path: Path) -> None:
    result = run(router, tmp_path / "half", "--coverage", "0.5")
    assert result.exit_code == 0, result.output
    half = json.loads((tmp_path / "half" / "threshold.json").read_text())
    assert half["rule"] == "coverage 0.5" and half["best"]["coverage"] >= 0.5
    assert all(
        r["coverage"] < 0.5 for r in half["scores"] if r["threshold"] > half["best_threshold"]
    )
    result = run(
        router, tmp_path / "cost", "--cost-ratio", "2", "--report", str(tmp_path / "c.json")
    )
    assert result.exit_code == 0, result.output
    cost = json.loads((tmp_path / "c.json").read_text())
    assert cost["rule"] == "cost ratio 2"
    costs = [2 * r["foreign_routed"] + r["abstained"] for r in cost["scores"]]
    best = cost["best"]
    assert 2 * best["foreign_routed"] + best["abstained"] == min(costs)
    assert best["threshold"] == cost["scores"][costs.index(min(costs))]["threshold"]
    both = run(router, tmp_path / "both", "--coverage", "0.5", "--cost-ratio", "2")
    assert both.exit_code != 0 and "one rule" in both.output


def test_a_key_chooses_as_find_threshold(router: Dict[str, Path], tmp_path: Path) -> None:
    result = run(router, tmp_path / "f2", "--key", "cats_oos_f2")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "f2" / "threshold.json").read_text())
    assert report["rule"] == "max cats_oos_f2"
    scores = [r["cats_oos_f2"] for r in report["scores"]]
    assert report["best_score"] == max(scores)
    assert report["best_threshold"] == report["scores"][scores.index(max(scores))]["threshold"]
    again = run(router, tmp_path / "f2")
    assert again.exit_code != 0 and "not empty" in again.output


def test_a_mistyped_key_lists_the_valid_ones(router: Dict[str, Path], tmp_path: Path) -> None:
    result = run(router, tmp_path / "x", "--key", "cats_oos_f3")
    assert result.exit_code != 0
    assert "no score 'cats_oos_f3'" in result.output
    for valid in ("cats_oos_f2", "cats_coverage", "cats_macro_f"):
        assert valid in result.output
    assert "out-of-scope docs" not in result.output


def test_without_out_of_scope_docs(router: Dict[str, Path], tmp_path: Path) -> None:
    # a key that needs out-of-scope docs says so, with the counts
    result = run(router, tmp_path / "x", "--key", "cats_oos_f2", dev="in_scope.spacy")
    assert result.exit_code != 0
    assert "6 in-scope and 0 out-of-scope docs" in result.output
    # a coverage needs none: the out-of-scope figures are left empty
    result = run(router, tmp_path / "ok", "--coverage", "0.8", dev="in_scope.spacy")
    assert result.exit_code == 0, result.output
    assert all(r["oos_recall"] is None for r in rows(tmp_path / "ok"))
    said = " ".join(result.output.split())  # the message is wrapped
    assert "catches -%" not in said
    assert "has no out-of-scope docs, so what it catches is not measured" in said


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_calibrate_at_a_precision_saves_the_pipeline_at_it(
    router: Dict[str, Path], tmp_path: Path, precision: str
) -> None:
    """The confidences follow the precision they were fit at: `calibrate
    --precision` fits there and saves the pipeline predicting there."""
    output = tmp_path / "calibrated"
    args = ["calibrate", str(router["model"]), str(output), "--dev", str(router["dev.spacy"])]
    result = CliRunner().invoke(app, [*args, "--precision", precision])
    assert result.exit_code == 0, result.output
    saved = spacy.util.load_config(output / "config.cfg")
    assert saved["components"]["bert_textcat"]["model"]["encoder"]["predict_precision"] == precision


def test_calibrate_holds_out_dev_docs_for_the_threshold(
    router: Dict[str, Path], tmp_path: Path
) -> None:
    """--hold-out: calibration fits on half of each label's in-scope dev docs;
    the other half and every out-of-scope doc go to a file for the threshold.
    threshold warns when given the file the calibration read, not the held-out one."""
    calibrated, held = tmp_path / "calibrated", tmp_path / "held.spacy"
    args = ["calibrate", str(router["model"]), str(calibrated), "--dev", str(router["dev.spacy"])]
    report = tmp_path / "fit.json"
    result = CliRunner().invoke(app, [*args, "--hold-out", str(held), "--report", str(report)])
    assert result.exit_code == 0, result.output
    # IN_SCOPE has 2 docs of each of 3 labels: 1 each held out, with the 30 foreign
    assert json.loads(report.read_text())["dev_in_scope_docs"] == 3
    assert f"Held out 33 dev docs (in scope and out of scope) in {held}" in result.output
    nlp = spacy.blank("en")
    held_docs = list(DocBin().from_disk(held).get_docs(nlp.vocab))
    in_scope = [doc.text for doc in held_docs if max(doc.cats.values()) > 0.5]
    assert len(held_docs) == 33 and len(in_scope) == 3
    assert {dict(IN_SCOPE)[text] for text in in_scope} == {"card", "fx", "other"}
    # the same seed draws the same docs
    again = tmp_path / "again.spacy"
    result = CliRunner().invoke(
        app, [*args[:2], str(tmp_path / "c2"), *args[3:], "--hold-out", str(again)]
    )
    assert result.exit_code == 0, result.output
    assert [d.text for d in DocBin().from_disk(again).get_docs(nlp.vocab)] == [
        d.text for d in held_docs
    ]
    warning = "is the dev file 'bert_textcat' was calibrated on"
    on_held = CliRunner().invoke(
        app, ["threshold", str(calibrated), str(held), str(tmp_path / "t1")]
    )
    assert on_held.exit_code == 0, on_held.output
    assert warning not in " ".join(on_held.output.split())
    assert "3 in-scope and 30 out-of-scope docs" in on_held.output
    on_dev = CliRunner().invoke(
        app, ["threshold", str(calibrated), str(router["dev.spacy"]), str(tmp_path / "t2")]
    )
    assert on_dev.exit_code == 0, on_dev.output
    assert warning in " ".join(on_dev.output.split())
    # the record survives threshold's save: a second threshold on the output still knows
    assert spacy.load(tmp_path / "t1").meta["bert_pipes_calibration"]["dev_sha256"]
    refused = CliRunner().invoke(
        app, [*args[:2], str(tmp_path / "c3"), *args[3:], "--hold-out", str(router["dev.spacy"])]
    )
    assert refused.exit_code == 1 and "would overwrite --dev" in refused.output


def test_a_new_threshold_takes_the_int8_mark_off(router: Dict[str, Path], tmp_path: Path) -> None:
    """check-int8 measured the heads with their old threshold: the saved copy is
    not marked, and the command says so."""
    import shutil

    from spacy_bert_pipes.int8_check import Int8Check, ScoreCheck, mark_pipeline

    marked = tmp_path / "marked"
    shutil.copytree(router["model"], marked)
    mark_pipeline(marked, Int8Check(str(marked), 0.3, "avx2", scores=[ScoreCheck("d", "k", 1, 1)]))
    result = CliRunner().invoke(
        app, ["threshold", str(marked), str(router["dev.spacy"]), str(tmp_path / "out"), "-n", "5"]
    )
    assert result.exit_code == 0, result.output
    assert "run check-int8 on it again" in " ".join(result.output.split())
    saved = spacy.util.load_config(tmp_path / "out" / "config.cfg")
    assert saved["components"]["bert_textcat"]["model"]["encoder"]["int8_checked"] is False
    assert "int8_check" not in json.loads((tmp_path / "out" / "meta.json").read_text())
