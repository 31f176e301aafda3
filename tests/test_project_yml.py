"""project.yml: the workflows' steps, in order, with complete deps and outputs
(the workflow itself runs in tests/slow/test_project.py)."""

from pathlib import Path
from typing import Any, Dict

import srsly

ROOT = Path(__file__).resolve().parent.parent
# The one-pass pipeline's heads, each with its own corpora
HEAD_CORPORA = ("banking77", "nluplusplus", "conll2003", "restaurant8k")


def project() -> Dict[str, Any]:
    return srsly.read_yaml(ROOT / "project.yml")


def command(config: Dict[str, Any], name: str) -> Dict[str, Any]:
    return next(c for c in config["commands"] if c["name"] == name)


def test_similar_runs_between_annotate_and_report() -> None:
    config = project()
    # workflow, command suffix, annotations stem, the step that builds the pipeline,
    # the pipeline, the collection it annotates
    for workflow, suffix, stem, builds, pipeline, texts in (
        (
            "all",
            "",
            "collection",
            "calibrate-multitask",
            "training/multitask/model-routed",
            "corpus/collection.jsonl",
        ),
        (
            "all-gpu",
            "-multitask-full",
            "collection_multitask_full",
            "calibrate-multitask-full",
            "training/multitask-full/model-routed",
            "corpus/collection_full.jsonl",
        ),
        (
            "apart-gpu",
            "-full",
            "collection_full",
            "assemble-full",
            "training/assembled-full",
            "corpus/collection_full.jsonl",
        ),
    ):
        steps = config["workflows"][workflow]
        order = [steps.index(builds)]
        order += [steps.index(f"{name}{suffix}") for name in ("annotate", "similar", "report")]
        assert order == sorted(order), workflow
        # the pipeline gives doc vectors, and annotate writes them
        if builds.startswith("assemble"):
            assert "--vectors ${vars.encoder}" in command(config, builds)["script"][0]
        annotate = command(config, f"annotate{suffix}")
        assert f"annotate {pipeline} {texts} annotations/{stem}.jsonl " in annotate["script"][0]
        assert " --vectors " in annotate["script"][0]
        assert annotate["deps"][:2] == [pipeline, texts]
        assert f"annotations/{stem}.jsonl" in annotate["outputs"]
        assert f"annotations/{stem}.jsonl.errors.jsonl" in annotate["outputs"]
        similar = command(config, f"similar{suffix}")
        script = similar["script"][0]
        assert f"similar-collection annotations/{stem}.jsonl" in script
        for var in ("similar_threshold", "similar_k", "intent_labels"):
            assert "${vars." + var + "}" in script and var in config["vars"]
        assert f"annotations/{stem}.jsonl" in similar["deps"]
        assert f"--texts {texts} " in script
        assert texts in similar["deps"] and "${vars.intent_labels}" in similar["deps"]
        outputs = [
            f"annotations/{stem}_duplicates.jsonl",
            f"annotations/{stem}_neighbours.jsonl",
            f"annotations/{stem}_similar.json",
        ]
        assert set(outputs) <= set(similar["outputs"])
        report = command(config, f"report{suffix}")
        assert {outputs[0], outputs[2]} <= set(report["deps"])
        assert f"--annotations annotations/{stem}.jsonl" in report["script"][0]
        assert "--intents ${vars.intent_labels}" in report["script"][0]
    assert "reports/annotated_collection_map.png" in command(config, "report")["outputs"]
    assert config["vars"]["similar_threshold"] == 0.95 and config["vars"]["similar_k"] == 5


def test_reports_of_the_workflows_do_not_overwrite_each_other() -> None:
    config = project()
    folders = {}
    for name in ("report", "report-multitask-full", "report-full"):
        script = command(config, name)["script"][0]
        folder = script.split("--output-dir ")[1].split()[0]
        assert all(out.startswith(f"{folder}/") for out in command(config, name)["outputs"])
        folders[name] = folder
    assert folders == {
        "report": "reports",
        "report-multitask-full": "reports-full",
        "report-full": "reports-apart-full",
    }
    ignored = (ROOT / ".gitignore").read_text(encoding="utf8").splitlines()
    assert {"reports/", "reports-full/", "reports-apart-full/"} <= set(ignored)
    assert "workflow all-gpu" in command(config, "report-multitask-full")["script"][0]
    assert "workflow apart-gpu" in command(config, "report-full")["script"][0]


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
    assert "annotate training/multitask/model-routed " in annotate["script"][0]
    assert annotate["deps"][0] == "training/multitask/model-routed"
    # the intents are calibrated on held-out dev queries to route 95% of them
    calibrate = command(config, "calibrate-multitask")
    steps = workflows["all"]
    assert steps.index("train-multitask") < steps.index("calibrate-multitask")
    assert steps.index("calibrate-multitask") < steps.index("evaluate-multitask")
    assert "--coverage ${vars.intents_coverage}" in calibrate["script"][0]
    assert config["vars"]["intents_coverage"] == 0.95
    assert "--rest corpus/banking77/train.spacy" in command(config, "convert-textcat")["script"][2]
    # the shared pass answers fixed slot questions only: no per-row questions
    assert "--questions-column" not in annotate["script"][0]
    report = command(config, "report")
    assert report["no_skip"] is True  # it shows the heads apart once `one-pass` scored them
    assert "--one-pass metrics" in report["script"][0]
    evaluate = command(config, "evaluate-multitask")
    sources = ("banking77", "nluplusplus", "conll2003", "restaurant8k")
    (line,) = evaluate["script"]  # one process scores each head on its own test set
    assert " ".join(f"corpus/{source}/test.spacy" for source in sources) in line
    for kind, suffix in (("--output", ".json"), ("--predictions", "_predictions.jsonl")):
        assert " ".join(f"{kind} metrics/multitask_{s}{suffix}" for s in sources) in line
    for source in sources:
        predictions = f"metrics/multitask_{source}_predictions.jsonl"
        assert predictions in evaluate["outputs"] and predictions in report["deps"]
        assert f"--predictions {predictions}" in report["script"][0]
    shares = [
        config["vars"][f"multitask_{s}"]
        for s in ("banking77", "nluplusplus", "conll2003", "restaurant8k")
    ]
    assert sum(shares) == config["vars"]["multitask_epoch_size"] == 679 * 32


def test_all_gpu_trains_the_one_pass_pipeline_on_full_data() -> None:
    config = project()
    steps = config["workflows"]["all-gpu"]
    assert steps == [
        "assets",
        "convert-textcat",
        "convert-multilabel",
        "convert-ner",
        "convert-qa",
        "train-multitask-full",
        "calibrate-multitask-full",
        "evaluate-multitask-full",
        "collection-full",
        "annotate-multitask-full",
        "similar-multitask-full",
        "report-multitask-full",
    ]
    # the heads trained apart are apart-gpu's, not all-gpu's
    assert not any(s.startswith(("assemble", "train-textcat", "train-ner")) for s in steps)
    train = command(config, "train-multitask-full")
    script = train["script"][0]
    assert "spacy train configs/multitask.cfg --output training/multitask-full " in script
    assert "--gpu-id ${vars.gpu_id_full}" in script and "${vars.gpu_id}" not in script
    assert "--corpora.dev.limit" not in script  # the whole dev sets
    for var in (
        "steps",
        "warmup",
        "epoch_size",
        "eval_frequency",
        "banking77",
        "nluplusplus",
        "conll2003",
        "restaurant8k",
    ):
        assert "${vars.multitask_full_" + var + "}" in script
    # the deps of train-multitask (the config, the four corpora's train and dev sets)
    assert train["deps"] == command(config, "train-multitask")["deps"]
    assert train["outputs"] == [
        "training/multitask-full/model-last",
        "metrics/multitask_full_train_time.json",
    ]
    vars_ = config["vars"]
    sources = ("banking77", "nluplusplus", "conll2003", "restaurant8k")
    shares = [vars_[f"multitask_full_{s}"] for s in sources]
    steps_ = vars_["multitask_full_steps"]
    assert sum(shares) == vars_["multitask_full_epoch_size"] == steps_ * 32 == 128000
    # the shares of `all`, scaled (to within a few docs of rounding)
    scale = vars_["multitask_full_epoch_size"] / vars_["multitask_epoch_size"]
    for source, share in zip(sources, shares):
        assert abs(share - vars_[f"multitask_{source}"] * scale) < 5, source
    evaluate = command(config, "evaluate-multitask-full")
    tests = {
        "banking77": "corpus/banking77/test.spacy",
        "nluplusplus": "corpus/nluplusplus/test.spacy",
        "conll2003": "corpus/conll2003/test.spacy",
        # all 3,731 requests, as evaluate-qa-slots-full
        "restaurant8k": "corpus/restaurant8k/test_all.spacy",
    }
    assert "corpus/restaurant8k/test_all.spacy" in command(config, "evaluate-qa-slots-full")["deps"]
    assert evaluate["deps"] == ["training/multitask-full/model-routed", *tests.values()]
    report = command(config, "report-multitask-full")
    # one process scores the four test sets, each with its own metrics and predictions
    (line,) = evaluate["script"]
    corpora = " ".join(tests.values())
    assert line.startswith(
        f"python -m spacy_bert_pipes evaluate training/multitask-full/model-routed {corpora} "
    )
    assert "--gpu-id ${vars.gpu_id_full}" in line
    for kind, suffix in (("--output", ".json"), ("--predictions", "_predictions.jsonl")):
        outputs = [f"metrics/multitask_full_{source}{suffix}" for source in tests]
        assert " ".join(f"{kind} {output}" for output in outputs) in line  # DATA's order
        for output in outputs:
            assert output in evaluate["outputs"]
            assert output in report["deps"] and output in report["script"][0]
    annotate = command(config, "annotate-multitask-full")
    script = annotate["script"][0]
    assert "annotate training/multitask-full/model-routed corpus/collection_full.jsonl " in script
    assert "--gpu-id ${vars.gpu_id_full}" in script
    # the shared pass answers fixed slot questions only: no per-row questions
    assert "--questions-column" not in script
    assert "metrics/collection_multitask_full_time.json" in annotate["outputs"]
    for timing in (
        "metrics/multitask_full_train_time.json",
        "metrics/collection_multitask_full_time.json",
        "metrics/collection_multitask_full_similar_time.json",
    ):
        assert timing in report["deps"] and timing in report["script"][0]
    # --one-pass reads the CPU run's file names (multitask_<corpus>.json): not for full runs
    assert "--one-pass" not in report["script"][0]


def test_each_intent_classifier_is_calibrated_as_all_does() -> None:
    """all, all-gpu and apart calibrate their Banking77 intents on the held-out
    dev set to route vars.intents_coverage of them, and score and annotate
    (or assemble) the calibrated pipeline."""
    config = project()
    workflows = config["workflows"]
    # workflow, trains, calibrates, from, to, component, gpu, the steps that use it
    for workflow, train, calibrate, trained, routed, component, gpu, users in (
        (
            "all",
            "train-multitask",
            "calibrate-multitask",
            "training/multitask/model-last",
            "training/multitask/model-routed",
            "intents",
            "${vars.gpu_id}",
            ["evaluate-multitask", "annotate"],
        ),
        (
            "all-gpu",
            "train-multitask-full",
            "calibrate-multitask-full",
            "training/multitask-full/model-last",
            "training/multitask-full/model-routed",
            "intents",
            "${vars.gpu_id_full}",
            ["evaluate-multitask-full", "annotate-multitask-full"],
        ),
        (
            "apart",
            "train-textcat",
            "calibrate-textcat",
            "training/textcat/model-last",
            "training/textcat/model-routed",
            "bert_textcat",
            "${vars.gpu_id}",
            ["evaluate-textcat", "assemble"],
        ),
    ):
        steps = workflows[workflow]
        assert steps.index(train) + 1 == steps.index(calibrate), workflow
        assert all(steps.index(calibrate) < steps.index(user) for user in users), workflow
        step = command(config, calibrate)
        script = step["script"][0]
        assert script.startswith(f"python -m spacy_bert_pipes calibrate {trained} {routed} ")
        for option in (
            "--dev corpus/banking77/dev.spacy",
            f"--component {component}",
            "--coverage ${vars.intents_coverage}",
            f"--gpu-id {gpu}",
        ):
            assert option in script, (calibrate, option)
        report = script.split("--report ")[1].split()[0]
        if calibrate == "calibrate-textcat":
            assert step["deps"] == [trained, "corpus/banking77/dev.spacy"]
            assert step["outputs"] == [routed, report]
        else:  # a one-pass pipeline: checked for int8 on every head's dev set once routed
            dev = [f"corpus/{c}/dev.spacy" for c in HEAD_CORPORA]
            (check,) = step["script"][1:]
            assert check.split()[:9] == [
                "python",
                "-m",
                "spacy_bert_pipes",
                "check-int8",
                routed,
                *dev,
            ]
            assert "--tolerance ${vars.int8_tolerance}" in check
            assert step["deps"] == [trained, *dev]
            assert step["outputs"] == [routed, report, check.split("--report ")[1].split()[0]]
        for user in users:
            used = command(config, user)
            assert f" {routed} " in used["script"][0] and routed in used["deps"], user
            assert trained not in " ".join(used["script"]) + " ".join(used["deps"]), user
    # one-pass runs apart's steps, the calibration included
    assert "calibrate-textcat" in workflows["one-pass"]


def test_apart_gpu_keeps_the_heads_apart() -> None:
    config = project()
    steps = config["workflows"]["apart-gpu"]
    heads = [
        f"{verb}-{head}-full"
        for head in ("textcat", "multilabel", "ner", "qa-slots")
        for verb in ("train", "evaluate")
    ]
    squad = ["train-qa-squad", "evaluate-qa-squad", "evaluate-qa-covid"]
    assert set(heads + squad) <= set(steps)
    assert steps[-5:] == [
        "assemble-full",
        "collection-full",
        "annotate-full",
        "similar-full",
        "report-full",
    ]
    assert not any("multitask" in step for step in steps)
    assemble = command(config, "assemble-full")["script"][0]
    for model in (
        "training/textcat-full/model-last",
        "training/multilabel-full/model-last",
        "training/ner-full/model-best",
        "training/qa_squad/model-last",
    ):
        assert model in assemble
    for head in heads:
        assert "${vars.gpu_id_full}" in command(config, head)["script"][0], head
    # the assembled pipeline's SQuAD reader asks the paragraphs' own questions
    assert "--questions-column questions" in command(config, "annotate-full")["script"][0]


def test_every_script_path_of_a_command_is_a_dep_or_an_output() -> None:
    """A file a command reads is a dep (or an earlier output) and each file it writes
    is an output, for the full-size commands whose scripts are one line."""
    config = project()
    names = ["train-multitask-full", "calibrate-multitask-full", "evaluate-multitask-full"]
    names += ["annotate-multitask-full", "calibrate-multitask", "calibrate-textcat"]
    names += ["similar-multitask-full", "report-multitask-full"]
    for name in names:
        cmd = command(config, name)
        declared = set(cmd["deps"]) | set(cmd["outputs"])
        for line in cmd["script"]:
            for word in line.replace("'", " ").split():
                if word.startswith(("corpus/", "metrics/", "annotations/", "training/")):
                    assert word in declared or any(
                        d.startswith(word + "/") or word.startswith(d + "/") for d in declared
                    ), (name, word)


def test_route_takes_clinc150_from_assets_to_its_report() -> None:
    config = project()
    steps = config["workflows"]["route"]
    assert steps == [
        "assets",
        "convert-clinc150",
        "train-route",
        "calibrate-route",
        "threshold-route",
        "evaluate-route",
        "report-route",
    ]
    # each step reads what the one before wrote
    for before, after in zip(steps[1:], steps[2:]):
        assert set(command(config, before)["outputs"]) & set(command(config, after)["deps"]), after
    threshold = command(config, "threshold-route")["script"][0]
    assert "--key ${vars.route_key}" in threshold and config["vars"]["route_key"] == "cats_oos_f2"
    assert "corpus/clinc150/val.spacy" in threshold
    assert "corpus/clinc150/test.spacy" in command(config, "evaluate-route")["script"][0]
    assert "assets/clinc150/data_full.json" in command(config, "assets")["outputs"]


def test_route_banking_takes_banking77_oos_from_assets_to_its_report() -> None:
    from spacy.util import load_config

    from spacy_bert_pipes.convert import training_steps

    config = project()
    steps = config["workflows"]["route-banking"]
    assert steps == [
        "assets",
        "convert-banking77-oos",
        "train-route-banking",
        "calibrate-route-banking",
        "threshold-route-banking",
        "evaluate-route-banking",
        "report-route-banking",
    ]
    # each step reads what the one before wrote, and names every file it reads or writes
    for before, after in zip(steps[1:], steps[2:]):
        assert set(command(config, before)["outputs"]) & set(command(config, after)["deps"]), after
    for name in steps[1:]:
        cmd = command(config, name)
        declared = set(cmd["deps"]) | set(cmd["outputs"])
        for line in cmd["script"]:
            for word in line.replace("'", " ").split():
                if word.startswith(("assets/", "corpus/", "metrics/", "training/", "configs/")):
                    assert word in declared or any(d.startswith(word + "/") for d in declared), (
                        name,
                        word,
                    )
    # the held-out intents are an asset, as the data they select
    assets = {asset["dest"]: asset for asset in config["assets"]}
    held_out = assets["assets/banking77/id_oos_intents.txt"]
    assert held_out["shared"] == "banking77/id_oos_intents.txt" and len(held_out["sha256"]) == 64
    assert held_out["dest"] in command(config, "assets")["outputs"]
    convert = command(config, "convert-banking77-oos")["script"][0]
    assert "--id-oos-intents assets/banking77/id_oos_intents.txt" in convert
    for var in ("route_banking_val_per_intent", "route_banking_val_seed"):
        assert "${vars." + var + "}" in convert and var in config["vars"]
    # 4 epochs of the 5,911 training queries (tests/convert/test_banking77_oos.py)
    # in batches of route.cfg's size, by the rule of `bert-pipes train-steps`
    batch = load_config(ROOT / "configs" / "route.cfg")["training"]["batcher"]["size"]
    rule = training_steps(5911, epochs=4, batch_size=batch)
    vars_ = config["vars"]
    assert vars_["route_banking_steps"] == rule.max_steps
    assert vars_["route_banking_eval_frequency"] == rule.eval_frequency
    assert vars_["route_banking_warmup"] == rule.warmup_steps
    # calibrate sees in-scope queries only: val's out-of-scope ones have no
    # positive label, and calibrate leaves such docs out
    calibrate = command(config, "calibrate-route-banking")["script"][0]
    assert "--train corpus/banking77_oos/train.spacy --dev corpus/banking77_oos/val.spacy" in (
        calibrate
    )
    threshold = command(config, "threshold-route-banking")["script"][0]
    assert "--key ${vars.route_key}" in threshold
    assert "corpus/banking77_oos/val.spacy" in threshold
    evaluate = command(config, "evaluate-route-banking")["script"]
    report = command(config, "report-route-banking")
    for line, test in zip(evaluate, ("id", "ood")):
        assert f"corpus/banking77_oos/test_{test}.spacy" in line
        for output in (
            f"metrics/route_banking_{test}.json",
            f"metrics/route_banking_{test}_predictions.jsonl",
        ):
            assert output in line and output in report["deps"] and output in report["script"][0]
    assert len(evaluate) == 2
    assert all(out.startswith("reports/route-banking/") for out in report["outputs"])


def test_discover_takes_clinc150_from_assets_to_its_report() -> None:
    from spacy.util import load_config

    from spacy_bert_pipes.convert import training_steps

    config = project()
    steps = config["workflows"]["discover"]
    assert steps == [
        "assets",
        "convert-clinc150-discover",
        "train-discover",
        "calibrate-discover",
        "threshold-discover",
        "annotate-discover",
        "discover-discover",
        "add-labels-discover",
        "evaluate-discover",
        "score-discover",
        "report-discover",
    ]
    # each step reads what earlier steps wrote (besides configs and scripts),
    # and names every file it reads or writes
    written = set(command(config, "assets")["outputs"])
    for name in steps[1:]:
        cmd = command(config, name)
        for dep in cmd["deps"]:
            assert dep in written or dep.startswith(("configs/", "scripts/")), (name, dep)
        written |= set(cmd["outputs"])
        declared = set(cmd["deps"]) | set(cmd["outputs"])
        for line in cmd["script"]:
            for word in line.replace("'", " ").split():
                if word.startswith(
                    ("assets/", "corpus/", "metrics/", "training/", "configs/", "annotations/")
                ) or word.startswith("scripts/"):
                    assert word in declared or any(d.startswith(word + "/") for d in declared), (
                        name,
                        word,
                    )
    vars_ = config["vars"]
    convert = command(config, "convert-clinc150-discover")["script"][0]
    assert "--held-out ${vars.discover_held_out} --seed ${vars.discover_seed}" in convert
    assert vars_["discover_held_out"] == 30
    # 4 epochs of the known intents' training queries (CLINC150 has 100 of each of
    # its 150 intents) in batches of route.cfg's size, by `bert-pipes train-steps`'s rule
    train = command(config, "train-discover")["script"][0]
    assert train.startswith("python scripts/timed.py metrics/discover_router_train_time.json -- ")
    assert "spacy train configs/route.cfg --output training/discover " in train
    assert "--system.seed ${vars.discover_seed}" in train
    batch = load_config(ROOT / "configs" / "route.cfg")["training"]["batcher"]["size"]
    rule = training_steps((150 - vars_["discover_held_out"]) * 100, epochs=4, batch_size=batch)
    assert vars_["discover_steps"] == rule.max_steps
    assert vars_["discover_eval_frequency"] == rule.eval_frequency
    assert vars_["discover_warmup"] == rule.warmup_steps
    for var in ("steps", "warmup", "eval_frequency"):
        assert "${vars.discover_" + var + "}" in train
    # calibrated on in-scope queries, the threshold chosen on val, as `route` does
    calibrate = command(config, "calibrate-discover")["script"][0]
    assert "--train corpus/clinc150_discover/train.spacy" in calibrate
    threshold = command(config, "threshold-discover")["script"][0]
    assert "--key ${vars.route_key}" in threshold
    assert "corpus/clinc150_discover/val.spacy" in threshold
    # the router routes the traffic, and discover clusters what it did not route
    # on the frozen vectors of the checkpoint the router was fine-tuned from
    annotate = command(config, "annotate-discover")["script"][0]
    assert "annotate training/discover/model-routed corpus/clinc150_discover/traffic.jsonl " in (
        annotate
    )
    assert "--vectors" not in annotate
    discover = command(config, "discover-discover")["script"][0]
    assert "--pipeline training/discover/model-routed" in discover
    assert "--encoder ${vars.encoder}" in discover
    assert "--paths.encoder ${vars.encoder}" in train
    # as many clusters as the data holds, by default
    assert "--clusters ${vars.discover_clusters}" in discover
    assert vars_["discover_clusters"] == "auto"
    # the near misses the router routed with a low confidence join the pool; the
    # loop adds each cluster with the 5 representatives it shows
    assert "--below ${vars.discover_below}" in discover and vars_["discover_below"] == 0.1
    assert "--representatives ${vars.discover_representatives}" in discover
    assert vars_["discover_representatives"] == 5
    add = command(config, "add-labels-discover")["script"][0]
    assert "--review annotations/discover_clusters/review.jsonl --accept-all" in add
    # the test split is for the loop only: evaluated, and scored
    for name in steps[1:]:
        if name not in ("convert-clinc150-discover", "evaluate-discover", "score-discover"):
            assert not any("test" in dep for dep in command(config, name)["deps"]), name
    evaluate = command(config, "evaluate-discover")["script"]
    assert (
        "evaluate training/discover/model-routed corpus/clinc150_discover/test.spacy" in evaluate[0]
    )
    assert (
        "evaluate training/discover/model-extended corpus/clinc150_discover/test.spacy"
        in (evaluate[1])
    )
    assert (
        "annotate training/discover/model-extended corpus/clinc150_discover/test_held_out"
        in (evaluate[2])
    )
    score = command(config, "score-discover")
    assert score["outputs"] == ["metrics/discover.json"]
    assert "--encoder ${vars.encoder}" in score["script"][0]
    report = command(config, "report-discover")
    assert "--discovery annotations/discover_clusters" in report["script"][0]
    assert all(out.startswith("reports/discover/") for out in report["outputs"])
