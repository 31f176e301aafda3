"""The `route` workflow end to end on CLINC150, with a short training run: each
step's outputs are there and say what docs/routing.md says they do."""

import json
from pathlib import Path

import pytest
from helpers import SHARED_DATASETS as SHARED
from helpers import copy_project, run_workflow

pytestmark = pytest.mark.slow

SMALL = {
    "route_steps": 6,
    "route_warmup": 1,
    "route_eval_frequency": 100,
    "route_trials": 21,
    "shared_datasets": str(SHARED),
}


def test_route_runs_from_assets_to_its_report(tmp_path: Path) -> None:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the workflow test needs ../shared/datasets")
    project = copy_project(tmp_path)
    run_workflow(project, "route", SMALL)
    metrics = project / "metrics"
    scores = json.loads((metrics / "route.json").read_text())
    for key in ("cats_accuracy", "cats_oos_auroc", "cats_oos_fpr95", "cats_oos_r", "cats_ece"):
        assert 0.0 <= scores[key] <= 1.0, key
    calibration = json.loads((metrics / "route_calibration.json").read_text())
    assert calibration["method"] == "knn" and calibration["dev_in_scope_docs"] == 3000
    threshold = json.loads((metrics / "route_threshold.json").read_text())
    assert threshold["key"] == "cats_oos_f2" and len(threshold["scores"]) == 21
    best = threshold["best_threshold"]
    config = (project / "training" / "route" / "model-routed" / "config.cfg").read_text()
    assert f"oos_threshold = {best}" in config
    lines = (metrics / "route_predictions.jsonl").read_text().splitlines()
    assert len(lines) == 5500  # 4,500 in scope, 1,000 out of scope
    last = json.loads(lines[-1])["components"]["bert_textcat"]
    assert last["gold"] == [] and last["route"]["decision"] in ("routed", "out_of_scope")
    report = (project / "reports" / "route" / "report.md").read_text()
    assert "#### Routing" in report and "route_risk_coverage.png" in report
