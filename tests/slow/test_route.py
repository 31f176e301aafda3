"""The `route` workflow step by step on a tenth of CLINC150, with a short
training run: each step's outputs are there and say what docs/routing.md says
they do."""

import json
from collections import Counter
from pathlib import Path
from typing import List

import pytest
import spacy
from helpers import SHARED_DATASETS as SHARED
from helpers import copy_project, run_workflow, yaml_workflow
from spacy.tokens import Doc, DocBin

pytestmark = pytest.mark.slow

SMALL = {
    "route_steps": 6,
    "route_warmup": 1,
    "route_eval_frequency": 100,
    "route_trials": 21,
    "shared_datasets": str(SHARED),
}


def shrink(path: Path, per_label: int, out_of_scope: int) -> int:
    """Keep `per_label` docs of each intent and `out_of_scope` docs without a label."""
    nlp = spacy.blank("en")
    docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    kept: List[Doc] = []
    seen: Counter = Counter()
    for doc in docs:
        label = max(doc.cats, key=doc.cats.__getitem__) if doc.cats else None
        key = label if label is not None and doc.cats[label] >= 0.5 else None
        if seen[key] < (per_label if key is not None else out_of_scope):
            seen[key] += 1
            kept.append(doc)
    DocBin(docs=kept, store_user_data=True).to_disk(path)
    return len(kept)


def test_route_runs_from_assets_to_its_report(tmp_path: Path) -> None:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the workflow test needs ../shared/datasets")
    project = copy_project(tmp_path)
    steps = yaml_workflow("route")
    assert steps[:2] == ["assets", "convert-clinc150"]
    for step in steps[:2]:
        run_workflow(project, step, SMALL)
    # a twentieth of CLINC150, so that each step runs in seconds: 5 training
    # queries, 1 val and 2 test queries per intent, and 50 out-of-scope queries
    corpus = project / "corpus" / "clinc150"
    assert shrink(corpus / "train.spacy", 5, 0) == 750
    assert shrink(corpus / "val.spacy", 1, 50) == 200
    assert shrink(corpus / "test.spacy", 2, 50) == 350
    for step in steps[2:]:
        run_workflow(project, step, SMALL)
    metrics = project / "metrics"
    scores = json.loads((metrics / "route.json").read_text())
    for key in ("cats_accuracy", "cats_oos_auroc", "cats_oos_fpr95", "cats_oos_r", "cats_ece"):
        assert 0.0 <= scores[key] <= 1.0, key
    calibration = json.loads((metrics / "route_calibration.json").read_text())
    assert calibration["method"] == "knn" and calibration["dev_in_scope_docs"] == 150
    threshold = json.loads((metrics / "route_threshold.json").read_text())
    assert threshold["key"] == "cats_oos_f2" and len(threshold["scores"]) == 21
    best = threshold["best_threshold"]
    config = (project / "training" / "route" / "model-routed" / "config.cfg").read_text()
    assert f"oos_threshold = {best}" in config
    lines = (metrics / "route_predictions.jsonl").read_text().splitlines()
    assert len(lines) == 350  # 300 in scope, 50 out of scope
    last = json.loads(lines[-1])["components"]["bert_textcat"]
    assert last["gold"] == [] and last["route"]["decision"] in ("routed", "out_of_scope")
    report = (project / "reports" / "route" / "report.md").read_text()
    assert "#### Routing" in report and "route_risk_coverage.png" in report
