"""The `route-banking` workflow step by step on a slice of BANKING77-OOS, with a
short training run: each step's outputs are there and say what docs/routing.md
says they do."""

import json
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest
import spacy
from helpers import SHARED_DATASETS as SHARED
from helpers import copy_project, run_workflow, yaml_workflow
from spacy.tokens import Doc, DocBin

pytestmark = pytest.mark.slow

SMALL = {
    "route_banking_steps": 6,
    "route_banking_warmup": 1,
    "route_banking_eval_frequency": 100,
    "route_trials": 21,
    "shared_datasets": str(SHARED),
}


def shrink(path: Path, counts: Dict[str, int], per_label: int, out_of_scope: int) -> int:
    """Keep `per_label` docs of each intent and `out_of_scope` docs of each kind
    of out-of-scope query (a split holds its in-scope docs, then the ID-OOS
    ones, then the OOD-OOS ones: `counts`, from banking77_oos.json)."""
    docs = list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))
    assert len(docs) == sum(counts.values())
    start = counts["in_scope"]
    in_scope, id_oos = docs[:start], docs[start : start + counts["id_oos"]]
    ood_oos = docs[start + counts["id_oos"] :]
    kept: List[Doc] = []
    seen: Counter = Counter()
    for doc in in_scope:
        label = max(doc.cats, key=doc.cats.__getitem__)
        assert doc.cats[label] == 1.0
        seen[label] += 1
        if seen[label] <= per_label:
            kept.append(doc)
    for docs_ in (id_oos, ood_oos):
        assert all(sum(doc.cats.values()) == 0.0 for doc in docs_)
        kept.extend(docs_[:out_of_scope])
    DocBin(docs=kept).to_disk(path)
    return len(kept)


def test_route_banking_runs_from_assets_to_its_report(tmp_path: Path) -> None:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the workflow test needs ../shared/datasets")
    project = copy_project(tmp_path)
    steps = yaml_workflow("route-banking")
    assert steps[:2] == ["assets", "convert-banking77-oos"]
    for step in steps[:2]:
        run_workflow(project, step, SMALL)
    corpus = project / "corpus" / "banking77_oos"
    counts = json.loads((corpus / "banking77_oos.json").read_text())["counts"]
    assert counts["test"] == {"in_scope": 2000, "id_oos": 1080, "ood_oos": 1000}
    # a slice, so that each step runs in seconds: 10 training and 2 val queries per
    # intent, 3 test queries per intent, 20 of each kind of out-of-scope query
    assert shrink(corpus / "train.spacy", counts["train"], 10, 0) == 500
    assert shrink(corpus / "val.spacy", counts["val"], 2, 20) == 140
    assert shrink(corpus / "test_id.spacy", counts["test_id"], 3, 20) == 170
    assert shrink(corpus / "test_ood.spacy", counts["test_ood"], 3, 20) == 170
    for step in steps[2:]:
        run_workflow(project, step, SMALL)
    metrics = project / "metrics"
    for test in ("id", "ood"):
        scores = json.loads((metrics / f"route_banking_{test}.json").read_text())
        for key in ("cats_accuracy", "cats_oos_auroc", "cats_oos_fpr95", "cats_oos_r", "cats_ece"):
            assert 0.0 <= scores[key] <= 1.0, (test, key)
        lines = (metrics / f"route_banking_{test}_predictions.jsonl").read_text().splitlines()
        assert len(lines) == 170  # 150 in scope, 20 out of scope
        last = json.loads(lines[-1])["components"]["bert_textcat"]
        assert last["gold"] == [] and last["route"]["decision"] in ("routed", "out_of_scope")
    # calibrated on the in-scope queries alone: val's out-of-scope ones are left out
    calibration = json.loads((metrics / "route_banking_calibration.json").read_text())
    assert calibration["method"] == "knn" and calibration["dev_in_scope_docs"] == 100
    threshold = json.loads((metrics / "route_banking_threshold.json").read_text())
    assert threshold["key"] == "cats_oos_f2" and len(threshold["scores"]) == 21
    config = (project / "training" / "route-banking" / "model-routed" / "config.cfg").read_text()
    assert f"oos_threshold = {threshold['best_threshold']}" in config
    report = (project / "reports" / "route-banking" / "report.md").read_text()
    assert "#### Routing" in report
    for run in ("route_banking_id", "route_banking_ood"):
        assert f"Run `{run}`" in report and f"{run}_risk_coverage.png" in report
