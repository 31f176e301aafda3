"""`bert-pipes evaluate`: the scores of `spacy evaluate`, and per-doc predictions."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
import torch
from helpers import FP32_ENCODER, NER_TEXTS, SMALL_ENCODER, TRAIN_TEXTS, loader_config
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()
NER_LABELS = {"PER", "LOC", "ORG"}
# (context, {key: (question, answer or None)})
QA_DATA = [
    (
        "john smith is in paris",
        {"who": ("who is it ?", "john smith"), "where": ("where ?", "paris")},
    ),
    ("hello world", {"who": ("who is it ?", None)}),
    ("google is in new york", {"where": ("where ?", "new york")}),
]


@pytest.fixture(scope="module")
def textcat_ner(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A pipeline with a text classifier and an entity recognizer (each with its
    own encoder), and a corpus with both annotations."""
    root = tmp_path_factory.mktemp("textcat_ner")
    nlp = spacy.blank("en")
    for name in ("bert_textcat", "bert_ner"):  # fp32: compared with spaCy's other batches
        nlp.add_pipe(name, config={"model": {"encoder": FP32_ENCODER}})
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    docs = []
    for text, ents in NER_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {"card": 0.0, "fx": 0.0, "other": 1.0}
        doc.ents = [doc.char_span(s, e, label=lb) for s, e, lb in ents]
        docs.append(doc)
    for text, label in TRAIN_TEXTS:  # no entity annotation: NER scores leave them out
        doc = nlp.make_doc(text)
        doc.cats = {lb: float(lb == label) for lb in ("card", "fx", "other")}
        docs.append(doc)
    from spacy.training import Example

    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    nlp.to_disk(root / "nlp")
    DocBin(docs=docs).to_disk(root / "data.spacy")
    return {"pipeline": str(root / "nlp"), "data": str(root / "data.spacy"), "n": str(len(docs))}


@pytest.fixture(scope="module")
def qa(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A bert_qa with no fixed questions: the corpus's docs bring their own."""
    from spacy.training import Example

    root = tmp_path_factory.mktemp("qa")
    nlp = spacy.blank("en")
    model = {"encoder": SMALL_ENCODER, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}
    nlp.add_pipe("bert_qa", config={"model": model, "handle_impossible_answer": True})
    nlp.config["initialize"]["components"]["bert_qa"] = loader_config(tiny_bert)
    docs = []
    for text, asked in QA_DATA:
        doc = nlp.make_doc(text)
        doc._.questions = {k: q for k, (q, _) in asked.items()}
        gold: Dict[str, List[Dict[str, Any]]] = {}
        for key, (_, answer) in asked.items():
            start = text.index(answer) if answer else 0
            gold[key] = (
                [{"text": answer, "start": start, "end": start + len(answer)}] if answer else []
            )
        doc._.gold_answers = gold
        docs.append(doc)
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    nlp.to_disk(root / "nlp")
    DocBin(docs=docs, store_user_data=True).to_disk(root / "data.spacy")
    return {"pipeline": str(root / "nlp"), "data": str(root / "data.spacy")}


def read_jsonl(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()]


def flatten(scores: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    flat: Dict[str, Any] = {}
    for key, value in scores.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, list):  # e.g. the reliability bins
            flat.update(flatten(dict(enumerate(value)), f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat


def test_help_names_every_option() -> None:
    result = runner.invoke(app, ["evaluate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    options = ("--output", "--predictions", "--gpu-id", "--precision", "--batch-size", "--sample")
    for option in options:
        assert option in result.output


def test_scores_are_those_of_spacy_evaluate(textcat_ner: Dict[str, str], tmp_path: Path) -> None:
    from spacy.cli.evaluate import evaluate as spacy_evaluate

    output = tmp_path / "metrics" / "run.json"
    args = ["evaluate", textcat_ner["pipeline"], textcat_ner["data"], "--output", str(output)]
    result = runner.invoke(app, args + ["--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "Textcat accuracy" in result.output and "NER F" in result.output
    ours = json.loads(output.read_text(encoding="utf8"))
    theirs = spacy_evaluate(textcat_ner["pipeline"], Path(textcat_ner["data"]))
    assert set(ours) == set(theirs)
    flat_ours, flat_theirs = flatten(ours), flatten(theirs)
    assert flat_ours.keys() == flat_theirs.keys()
    for key in set(flat_ours) - {"speed"}:
        assert flat_ours[key] == pytest.approx(flat_theirs[key], abs=1e-9), key
    assert f"({textcat_ner['n']} docs)" in result.output


def test_sample_scores_that_many_docs(textcat_ner: Dict[str, str], tmp_path: Path) -> None:
    predictions = tmp_path / "predictions.jsonl"
    args = ["evaluate", textcat_ner["pipeline"], textcat_ner["data"], "--sample", "2"]
    result = runner.invoke(app, args + ["--predictions", str(predictions)])
    assert result.exit_code == 0, result.output
    assert "(a sample of 2 docs)" in result.output
    assert len(predictions.read_text(encoding="utf8").splitlines()) == 2


def test_several_corpora_are_scored_each_with_its_own_files(
    textcat_ner: Dict[str, str], tmp_path: Path
) -> None:
    """One process, the pipeline loaded once: each DATA's scores and predictions
    are those of an evaluation of it alone."""
    nlp = spacy.blank("en")
    docs = list(DocBin().from_disk(textcat_ner["data"]).get_docs(nlp.vocab))
    DocBin(docs=docs[:3]).to_disk(tmp_path / "first3.spacy")
    corpora = [textcat_ner["data"], str(tmp_path / "first3.spacy")]
    outputs = [tmp_path / "all.json", tmp_path / "first3.json"]
    predictions = [tmp_path / "all.jsonl", tmp_path / "first3.jsonl"]
    args = ["evaluate", textcat_ner["pipeline"], *corpora, "--batch-size", "2"]
    for output, prediction in zip(outputs, predictions):
        args += ["--output", str(output), "--predictions", str(prediction)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"({textcat_ner['n']} docs)" in result.output and "(3 docs)" in result.output
    for corpus, output, prediction in zip(corpora, outputs, predictions):
        alone = tmp_path / "alone"
        single = ["evaluate", textcat_ner["pipeline"], corpus, "--batch-size", "2"]
        single += ["--output", str(alone / "s.json"), "--predictions", str(alone / "p.jsonl")]
        assert runner.invoke(app, single).exit_code == 0
        ours, theirs = json.loads(output.read_text()), json.loads((alone / "s.json").read_text())
        ours.pop("speed"), theirs.pop("speed")
        assert ours == theirs
        assert prediction.read_bytes() == (alone / "p.jsonl").read_bytes()
    assert len(read_jsonl(predictions[1])) == 3


@pytest.mark.parametrize(
    "options,message",
    [
        (["--output", "a.json"], "--output is given once for 2 DATA files"),
        (["--predictions", "a", "--predictions", "b", "--predictions", "c"], "given 3 times"),
        (["--output", "a.json", "--output", "a.json"], "--output a.json is given for more"),
    ],
)
def test_files_for_several_corpora_must_pair_up(
    textcat_ner: Dict[str, str], options: List[str], message: str
) -> None:
    data = textcat_ner["data"]
    result = runner.invoke(app, ["evaluate", textcat_ner["pipeline"], data, data, *options])
    assert result.exit_code == 1
    assert message in result.output
    assert "give one" in result.output or "needs its own file" in result.output


def test_a_router_s_summary_and_per_label_table_count_its_decisions(
    textcat_ner: Dict[str, str], tmp_path: Path
) -> None:
    # the pipeline with a threshold that routes some docs, on data with
    # out-of-scope docs (no positive label)
    nlp = spacy.load(textcat_ner["pipeline"])
    confidences = sorted(nlp(text)._.route["confidence"] for text, _ in TRAIN_TEXTS)
    threshold = (confidences[2] + confidences[3]) / 2  # routes about half of them
    nlp = spacy.load(
        textcat_ner["pipeline"],
        config={"components": {"bert_textcat": {"oos_threshold": threshold}}},
    )
    nlp.to_disk(tmp_path / "router")
    docs = []
    for text, label in TRAIN_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {lb: float(lb == label) for lb in ("card", "fx", "other")}
        docs.append(doc)
    for text in ("the weather in rome", "play some jazz", "book a table", "paris"):
        doc = nlp.make_doc(text)
        doc.cats = {"card": 0.0, "fx": 0.0, "other": 0.0}
        docs.append(doc)
    DocBin(docs=docs).to_disk(tmp_path / "mixed.spacy")
    output = tmp_path / "metrics.json"
    args = ["evaluate", str(tmp_path / "router"), str(tmp_path / "mixed.spacy"), "-o", str(output)]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    scores = json.loads(output.read_text())
    right, coverage, oos = (scores[f"cats_{k}"] for k in ("routed_accuracy", "coverage", "oos_r"))
    assert 0 < coverage < 1
    line = (
        f"Routing: routed right {right * 100:.2f}, coverage {coverage * 100:.2f}, "
        f"out-of-scope recall {oos * 100:.2f}"
    )
    assert line in " ".join(result.output.split())  # wasabi wraps long lines
    # a label's recall is the share of its docs routed right: never above coverage
    routes = [doc._.route for doc in nlp.pipe(text for text, _ in TRAIN_TEXTS)]
    for label, prf in scores["cats_f_per_type"].items():
        gold = [r for r, (_, lb) in zip(routes, TRAIN_TEXTS) if lb == label]
        right_here = sum(r["label"] == label for r in gold)
        assert prf["r"] == pytest.approx(right_here / len(gold))
        # out-of-scope docs not routed are no false positive of their top label
        foreign = [nlp(d.text)._.route for d in docs[len(TRAIN_TEXTS) :]]
        wrong = sum(r["label"] == label for r in foreign)
        wrong += sum(r["label"] == label for r, (_, lb) in zip(routes, TRAIN_TEXTS) if lb != label)
        predicted = right_here + wrong
        assert prf["p"] == pytest.approx(right_here / predicted if predicted else 0.0)


def test_precision_scores_the_pipeline_with_its_encoders_at_it(
    textcat_ner: Dict[str, str], tmp_path: Path
) -> None:
    scores = {}
    for precision in ("fp32", "int8"):
        output = tmp_path / f"{precision}.json"
        args = ["evaluate", textcat_ner["pipeline"], textcat_ner["data"], "-o", str(output)]
        result = runner.invoke(app, args + ["--precision", precision])
        assert result.exit_code == 0, result.output
        scores[precision] = json.loads(output.read_text(encoding="utf8"))
    # Dynamic int8 changes the encoder's outputs a little, not the set of scores.
    assert scores["int8"].keys() == scores["fp32"].keys()
    assert scores["int8"]["cats_score"] == pytest.approx(scores["fp32"]["cats_score"], abs=0.25)
    result = runner.invoke(
        app, ["evaluate", textcat_ner["pipeline"], textcat_ner["data"], "--precision", "fp64"]
    )
    assert result.exit_code != 0 and "fp64" in result.output


def test_precision_needs_a_bert_encoder(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "plain")
    DocBin(docs=[nlp("a b. c d.")]).to_disk(tmp_path / "data.spacy")
    args = ["evaluate", str(tmp_path / "plain"), str(tmp_path / "data.spacy")]
    result = runner.invoke(app, args + ["--precision", "bf16"])
    assert result.exit_code == 1
    assert "no spacy-bert-pipes.BertEncoder.v1" in result.output and "sentencizer" in result.output


def test_predictions_beside_gold(textcat_ner: Dict[str, str], tmp_path: Path) -> None:
    predictions = tmp_path / "run_predictions.jsonl"
    args = ["evaluate", textcat_ner["pipeline"], textcat_ner["data"], "-p", str(predictions)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = read_jsonl(predictions)
    assert len(records) == int(textcat_ner["n"])
    assert [r["index"] for r in records] == list(range(len(records)))
    first = records[0]
    assert first["text"] == NER_TEXTS[0][0]
    textcat = first["components"]["bert_textcat"]
    assert textcat["task"] == "textcat" and textcat["exclusive"] is True
    assert textcat["gold"] == ["other"] and len(textcat["predicted"]) == 1
    assert set(textcat["scores"]) == set(textcat["gold"] + textcat["predicted"])
    ner = first["components"]["bert_ner"]
    assert ner["task"] == "ner"
    assert ner["gold"] == [
        {"start": 0, "end": 10, "label": "PER", "text": "john smith"},
        {"start": 17, "end": 22, "label": "LOC", "text": "paris"},
    ]
    for entity in ner["predicted"]:
        assert entity["label"] in NER_LABELS
        assert first["text"][entity["start"] : entity["end"]] == entity["text"]
        assert 0.0 <= entity["score"] <= 1.0


def test_qa_asks_the_reference_questions(qa: Dict[str, str], tmp_path: Path) -> None:
    output, predictions = tmp_path / "qa.json", tmp_path / "qa.jsonl"
    args = ["evaluate", qa["pipeline"], qa["data"], "-o", str(output), "-p", str(predictions)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    scores = json.loads(output.read_text(encoding="utf8"))
    assert scores["qa_n"] == 4 and scores["qa_has_ans_n"] == 3 and scores["qa_no_ans_n"] == 1
    records = read_jsonl(predictions)
    questions = [q for r in records for q in r["components"]["bert_qa"]["questions"]]
    assert [(q["key"], q["question"]) for q in questions] == [
        ("who", "who is it ?"),
        ("where", "where ?"),
        ("who", "who is it ?"),
        ("where", "where ?"),
    ]
    assert [q["gold"] for q in questions] == [["john smith"], ["paris"], [], ["new york"]]
    # the per-question scores average to the scorer's
    assert sum(q["exact"] for q in questions) / 4 == pytest.approx(scores["qa_exact"])
    assert sum(q["f1"] for q in questions) / 4 == pytest.approx(scores["qa_f1"])
    for record, q in zip(records, [questions[0], questions[2], questions[3]]):
        assert q["predicted"] == "" or q["predicted"] in record["text"]


@pytest.mark.parametrize(
    "pipeline,data,message",
    [
        ("nope", None, "nope"),
        (None, "empty", "the corpus has no docs"),
    ],
)
def test_errors(
    textcat_ner: Dict[str, str], tmp_path: Path, pipeline: Any, data: Any, message: str
) -> None:
    if data == "empty":
        DocBin().to_disk(tmp_path / "empty.spacy")
        data = str(tmp_path / "empty.spacy")
    args = ["evaluate", pipeline or textcat_ner["pipeline"], data or textcat_ner["data"]]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in result.output
