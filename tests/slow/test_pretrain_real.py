"""`pretrain` on the real encoder and Banking77 texts, and the `domain` workflow."""

import json
from pathlib import Path

import pytest
from helpers import copy_project, run_workflow

from spacy_bert_pipes.pretrain import PretrainSettings, pretrain

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"
BANKING77_TRAIN = SHARED / "banking77" / "train.csv"


def test_held_out_loss_falls_on_banking77(tmp_path: Path) -> None:
    if not BANKING77_TRAIN.exists():
        pytest.fail(f"{BANKING77_TRAIN} is missing")
    sample = tmp_path / "train.csv"
    lines = BANKING77_TRAIN.read_text(encoding="utf8").splitlines()
    sample.write_text("\n".join(lines[:801]) + "\n", encoding="utf8")
    settings = PretrainSettings(
        epochs=0,
        max_steps=25,
        batch_size=32,
        max_length=64,
        learning_rate=1e-4,
        checkpoint_every=0,
        held_out=80,
    )
    summary = pretrain(sample, tmp_path / "out", settings)
    # The default encoder has no MLM head: a new one starts near ln(30522) = 10.3.
    assert summary.new_head
    assert summary.held_out_loss_before is not None and summary.held_out_loss_after is not None
    assert summary.held_out_loss_before > 9.0
    assert summary.held_out_loss_after < summary.held_out_loss_before - 2.0


def test_domain_workflow_runs(tmp_path: Path) -> None:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the workflow test needs ../shared/datasets")
    project = copy_project(tmp_path)
    small = {
        "shared_datasets": str(SHARED),
        "textcat_steps": 4,
        "textcat_warmup": 1,
        "textcat_dev_size": 20,
        "pretrain_max_steps": 4,
        "pretrain_checkpoint_every": 2,
        "pretrain_held_out": 20,
        "eval_sample": 200,
    }
    run_workflow(project, "domain", small)
    pretrained = json.loads(
        (project / "training" / "pretrain-banking77" / "pretrain_metrics.json").read_text()
    )
    assert pretrained["steps"] == 4
    scores = json.loads((project / "metrics" / "textcat_domain.json").read_text())
    assert 0.0 <= scores["cats_accuracy"] <= 1.0
