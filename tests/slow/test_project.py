"""The workflows end to end on the real data, with small vars: `one-pass` (every
command of `all`, then the heads trained apart, assembled and compared), then
`all`, which finds everything up to date. One run of each command: what `all`
leaves out is checked on project.yml itself (tests/test_project_yml.py)."""

import json
from pathlib import Path

import pytest
from helpers import copy_project, run_workflow, yaml_workflow
from spacy.tokens import DocBin
from spacy.util import load_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


SHARED = ROOT.parent / "shared" / "datasets"
SMALL = {
    "textcat_steps": 8,
    "textcat_warmup": 2,
    "textcat_dev_size": 40,
    "multilabel_steps": 8,
    "multilabel_warmup": 2,
    "multilabel_dev_size": 40,
    "ner_steps": 6,
    "ner_warmup": 2,
    "ner_eval_frequency": 100,
    "ner_dev_docs": 10,
    "qa_slots_steps": 4,
    "qa_slots_warmup": 1,
    "qa_slots_eval_frequency": 100,
    "qa_slots_dev_size": 20,
    "qa_slots_test_size": 40,
    "multitask_steps": 8,
    "multitask_warmup": 2,
    "multitask_epoch_size": 256,
    "one_pass_texts": 20,
    "collection_banking77": 30,
    "collection_squad": 4,
    "eval_sample": 200,
    "shared_datasets": str(SHARED),
}


ALL = yaml_workflow("all")


def run_all(project: Path, workflow: str = "all") -> str:
    return run_workflow(project, workflow, SMALL)


def test_workflow_runs_and_skips_what_is_up_to_date(tmp_path: Path) -> None:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the workflow test needs ../shared/datasets")
    project = copy_project(tmp_path)
    first = run_all(project, "one-pass")
    assert "Skipping" not in first, first
    metrics = project / "metrics"

    def scores(stem: str) -> dict:
        return json.loads((metrics / f"{stem}.json").read_text())

    # each head of the one-pass pipeline scored on its own test set, None elsewhere
    banking77 = scores("multitask_banking77")
    assert 0.0 <= banking77["cats_accuracy"] <= 1.0 and banking77["ents_f"] is None
    assert "cats_macro_auc" in banking77
    assert 0.0 <= scores("multitask_nluplusplus")["nlu_micro_f"] <= 1.0
    ner = scores("multitask_conll2003")
    assert 0.0 <= ner["ents_f"] <= 1.0 and ner["cats_accuracy"] is None
    assert set(ner["ents_per_type"]) <= {"LOC", "MISC", "ORG", "PER"}
    slots = scores("multitask_restaurant8k")
    assert slots["qa_n"] == 40 * 5  # every slot question of every request is scored
    assert 0.0 <= slots["qa_f1"] <= 1.0
    assert scores("multitask_train_time")["seconds"] > 0
    # bert-pipes evaluate kept each doc's predictions; one per scored request
    lines = (metrics / "multitask_restaurant8k_predictions.jsonl").read_text().splitlines()
    assert len(lines) == 40
    nlp_config = load_config(project / "training" / "multitask" / "model-last" / "config.cfg")
    assert nlp_config["nlp"]["pipeline"] == [
        "bert_encoder",
        "intents",
        "nluplusplus",
        "bert_ner",
        "slots",
        "bert_vectors",
    ]
    covid = DocBin().from_disk(project / "corpus" / "covidqa" / "test.spacy")  # for apart-gpu
    assert len(covid) == 98
    # the collection: every row annotated once, in input order, with all the heads' output
    inputs = [json.loads(line) for line in (project / "corpus" / "collection.jsonl").open()]
    assert len(inputs) == 34 and len({row["id"] for row in inputs}) == 34
    rows = [json.loads(line) for line in (project / "annotations" / "collection.jsonl").open()]
    assert [row["id"] for row in rows] == [row["id"] for row in inputs]
    assert (project / "annotations" / "collection.jsonl.errors.jsonl").read_text() == ""
    slot_keys = {"people", "date", "time", "first_name", "last_name"}
    for row in rows:
        assert len(row["cats"]) == 77 + 48  # Banking77 intents and NLU++ labels
        assert len(row["vector"]) == 384  # all-MiniLM-L6-v2's sentence embedding
        assert {answer["key"] for answer in row["answers"]} == slot_keys
    assert scores("collection_time")["seconds"] > 0
    # similar: every row's 5 most similar rows, and the near-duplicate pairs
    neighbours = (project / "annotations" / "collection_neighbours.jsonl").read_text()
    assert [json.loads(line)["id"] for line in neighbours.splitlines()] == [
        row["id"] for row in inputs
    ]
    assert all(len(json.loads(line)["neighbours"]) == 5 for line in neighbours.splitlines())
    similar = json.loads((project / "annotations" / "collection_similar.json").read_text())
    assert similar["rows"] == 34 and similar["threshold"] == 0.95
    pairs = (project / "annotations" / "collection_duplicates.jsonl").read_text().splitlines()
    assert len(pairs) == similar["pairs"]
    report = (project / "reports" / "report.md").read_text()
    assert (
        "![Map of collection, coloured by predicted intent](annotated_collection_map.png)" in report
    )
    assert "![F1 per label, multitask_banking77](multitask_banking77_textcat_f1.png)" in report
    assert "## Annotated collection: collection.jsonl" in report
    assert "## One encoder pass and the heads trained apart" in report
    png = project / "reports" / "multitask_banking77_intents_confusion_top.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    # the heads apart, assembled, timed beside the one-pass pipeline and shown
    # beside its heads in the report
    assert 0.0 <= scores("textcat")["cats_accuracy"] <= 1.0
    assembled = json.loads((project / "training" / "assembled" / "assemble.json").read_text())
    assert assembled["pipeline"] == [
        "sentencizer",  # bert_ner reads each sentence apart (configs/ner.cfg)
        "bert_textcat",
        "bert_textcat_2",
        "bert_ner",
        "bert_qa",
        "vectors_encoder",  # assemble --vectors: doc.vector for annotate --vectors
        "bert_vectors",
    ]
    speed = scores("one_pass")
    assert speed["texts"] == 20
    report = (project / "reports" / "report.md").read_text()
    assert "Heads apart: not scored" not in report
    apart_f = scores("ner")["ents_f"] * 100
    assert f"| CoNLL-2003 F1 | {apart_f:.2f} | {ner['ents_f'] * 100:.2f} |" in report
    assert "| CoNLL-2003 F1 |" in (project / "reports" / "one_pass.md").read_text()
    # Nothing changed: `all` skips every command but the report (which always runs).
    second = run_all(project)
    assert second.count("Skipping") == len(ALL) - 1, second
    assert "Skipping 'train-multitask': nothing changed" in second, second
