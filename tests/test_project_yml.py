"""project.yml: the workflows' steps, in order, with complete deps and outputs
(the workflow itself runs in tests/slow/test_project.py)."""

from pathlib import Path
from typing import Any, Dict

import srsly

ROOT = Path(__file__).resolve().parent.parent


def project() -> Dict[str, Any]:
    return srsly.read_yaml(ROOT / "project.yml")


def command(config: Dict[str, Any], name: str) -> Dict[str, Any]:
    return next(c for c in config["commands"] if c["name"] == name)


def test_similar_runs_between_annotate_and_report() -> None:
    config = project()
    for workflow, suffix, stem, builds in (
        ("all", "", "collection", "train-multitask"),
        ("all-gpu", "-full", "collection_full", "assemble-full"),
    ):
        steps = config["workflows"][workflow]
        order = [steps.index(builds)]
        order += [steps.index(f"{name}{suffix}") for name in ("annotate", "similar", "report")]
        assert order == sorted(order), workflow
        # the pipeline gives doc vectors, and annotate writes them
        if suffix:
            assert "--vectors ${vars.encoder}" in command(config, f"assemble{suffix}")["script"][0]
        assert " --vectors " in command(config, f"annotate{suffix}")["script"][0]
        similar = command(config, f"similar{suffix}")
        script = similar["script"][0]
        assert f"similar-collection annotations/{stem}.jsonl" in script
        for var in ("similar_threshold", "similar_k", "intent_labels"):
            assert "${vars." + var + "}" in script and var in config["vars"]
        assert f"annotations/{stem}.jsonl" in similar["deps"]
        assert (
            f"corpus/{stem}.jsonl" in similar["deps"] and "${vars.intent_labels}" in similar["deps"]
        )
        outputs = [
            f"annotations/{stem}_duplicates.jsonl",
            f"annotations/{stem}_neighbours.jsonl",
            f"annotations/{stem}_similar.json",
        ]
        assert set(outputs) <= set(similar["outputs"])
        report = command(config, f"report{suffix}")
        assert {outputs[0], outputs[2]} <= set(report["deps"])
        assert "--intents ${vars.intent_labels}" in report["script"][0]
    assert "reports/annotated_collection_map.png" in command(config, "report")["outputs"]
    assert config["vars"]["similar_threshold"] == 0.95 and config["vars"]["similar_k"] == 5


def test_every_step_of_the_workflows_is_a_command() -> None:
    config = project()
    names = {c["name"] for c in config["commands"]}
    for workflow, steps in config["workflows"].items():
        assert set(steps) <= names, workflow


def test_all_annotates_with_the_one_pass_pipeline() -> None:
    config = project()
    workflows = config["workflows"]
    apart = [
        f"{verb}-{head}"
        for head in ("textcat", "multilabel", "ner", "qa-slots")
        for verb in ("train", "evaluate")
    ] + ["assemble"]
    assert not set(apart) & set(workflows["all"])
    assert set(apart) <= set(workflows["apart"])
    # one-pass: everything of `all` and of `apart`, then the comparison, then the report
    assert set(workflows["all"]) | set(workflows["apart"]) <= set(workflows["one-pass"])
    assert workflows["one-pass"][-2:] == ["compare-one-pass", "report"]
    annotate = command(config, "annotate")
    assert "annotate training/multitask/model-last " in annotate["script"][0]
    assert annotate["deps"][0] == "training/multitask/model-last"
    # the shared pass answers fixed slot questions only: no per-row questions
    assert "--questions-column" not in annotate["script"][0]
    report = command(config, "report")
    assert report["no_skip"] is True  # it shows the heads apart once `one-pass` scored them
    assert "--one-pass metrics" in report["script"][0]
    evaluate = command(config, "evaluate-multitask")
    for source in ("banking77", "nluplusplus", "conll2003", "restaurant8k"):
        predictions = f"metrics/multitask_{source}_predictions.jsonl"
        assert predictions in evaluate["outputs"] and predictions in report["deps"]
        assert f"--predictions {predictions}" in report["script"][0]
    shares = [
        config["vars"][f"multitask_{s}"]
        for s in ("banking77", "nluplusplus", "conll2003", "restaurant8k")
    ]
    assert sum(shares) == config["vars"]["multitask_epoch_size"] == 679 * 32
