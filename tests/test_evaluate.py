"""Library-level tests of spacy_bert_pipes.evaluate (the command is tested in
tests/cli/test_cli_evaluate.py)."""

import json
from pathlib import Path
from typing import Any, Dict

import pytest
import spacy
from helpers import LABELS, NER_TEXTS, SMALL_ENCODER, TRAIN_TEXTS, loader_config
from spacy.language import Language
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_bert_pipes.evaluate import (
    EvaluateError,
    evaluate,
    prediction_records,
    question_scores,
    read_examples,
    routing_summary,
    summary_rows,
    write_predictions,
    write_scores,
)


@pytest.fixture(scope="module")
def nlp_and_corpus(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """A bert_textcat and a bert_ner initialized from the tiny BERT, and a corpus
    with the gold cats of TRAIN_TEXTS and the entities of NER_TEXTS."""
    root = tmp_path_factory.mktemp("evaluate")
    nlp = spacy.blank("en")
    for name in ("bert_textcat", "bert_ner"):
        nlp.add_pipe(name, config={"model": {"encoder": SMALL_ENCODER}})
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    docs = []
    for text, label in TRAIN_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {lb: float(lb == label) for lb in LABELS}
        docs.append(doc)
    for text, ents in NER_TEXTS:
        doc = nlp.make_doc(text)
        doc.cats = {lb: float(lb == "other") for lb in LABELS}
        doc.ents = [doc.char_span(s, e, label=lb) for s, e, lb in ents]
        docs.append(doc)
    nlp.initialize(lambda: [Example(nlp.make_doc(d.text), d) for d in docs])
    DocBin(docs=docs).to_disk(root / "data.spacy")
    return {"nlp": nlp, "path": root / "data.spacy", "n": len(docs)}


def test_read_examples_in_corpus_order(nlp_and_corpus: Dict[str, Any]) -> None:
    nlp: Language = nlp_and_corpus["nlp"]
    examples = read_examples(nlp, nlp_and_corpus["path"])
    assert len(examples) == nlp_and_corpus["n"]
    assert [eg.reference.text for eg in examples[: len(TRAIN_TEXTS)]] == [
        text for text, _ in TRAIN_TEXTS
    ]
    # the predicted docs are tokenized only
    assert all(not eg.predicted.cats and not eg.predicted.ents for eg in examples)


def test_read_examples_sample_is_seeded_and_keeps_the_corpus_order(
    nlp_and_corpus: Dict[str, Any],
) -> None:
    nlp: Language = nlp_and_corpus["nlp"]
    every = [eg.reference.text for eg in read_examples(nlp, nlp_and_corpus["path"])]

    def drawn(seed: int) -> list:
        examples = read_examples(nlp, nlp_and_corpus["path"], sample=3, seed=seed)
        return [eg.reference.text for eg in examples]

    assert len(drawn(0)) == 3 and drawn(0) == drawn(0)
    assert drawn(0) == sorted(drawn(0), key=every.index)  # in the corpus's order
    assert any(drawn(seed) != drawn(0) for seed in range(1, 5))
    bigger = read_examples(nlp, nlp_and_corpus["path"], sample=len(every) + 1)
    assert [eg.reference.text for eg in bigger] == every
    with pytest.raises(EvaluateError, match="sample = -1: it must be 0"):
        read_examples(nlp, nlp_and_corpus["path"], sample=-1)


def test_read_examples_errors(nlp_and_corpus: Dict[str, Any], tmp_path: Path) -> None:
    nlp: Language = nlp_and_corpus["nlp"]
    with pytest.raises(EvaluateError, match="missing.spacy: no such corpus"):
        read_examples(nlp, tmp_path / "missing.spacy")
    DocBin().to_disk(tmp_path / "empty.spacy")
    with pytest.raises(EvaluateError, match="empty.spacy: the corpus has no docs"):
        read_examples(nlp, tmp_path / "empty.spacy")


def test_evaluate_scores_as_nlp_evaluate_and_keeps_annotated_copies(
    nlp_and_corpus: Dict[str, Any],
) -> None:
    nlp: Language = nlp_and_corpus["nlp"]
    examples = read_examples(nlp, nlp_and_corpus["path"])
    result = evaluate(nlp, examples, batch_size=4)
    expected = nlp.evaluate(read_examples(nlp, nlp_and_corpus["path"]), batch_size=4)
    for key in ("cats_macro_f", "cats_macro_auc", "ents_f", "ents_p", "ents_r"):
        assert result.scores[key] == pytest.approx(expected[key]), key
    assert len(result.examples) == len(examples)
    # the kept examples are annotated; the ones given are not changed
    assert all(set(eg.predicted.cats) == set(LABELS) for eg in result.examples)
    assert all(not eg.predicted.cats for eg in examples)


def test_prediction_records_beside_gold(nlp_and_corpus: Dict[str, Any]) -> None:
    nlp: Language = nlp_and_corpus["nlp"]
    result = evaluate(nlp, read_examples(nlp, nlp_and_corpus["path"]))
    records = list(prediction_records(nlp, result.examples))
    assert [r["index"] for r in records] == list(range(nlp_and_corpus["n"]))
    first = records[0]
    assert first["text"] == TRAIN_TEXTS[0][0]
    textcat = first["components"]["bert_textcat"]
    assert textcat["task"] == "textcat" and textcat["exclusive"] is True
    assert textcat["gold"] == [TRAIN_TEXTS[0][1]]
    assert len(textcat["predicted"]) == 1 and textcat["predicted"][0] in LABELS
    assert set(textcat["scores"]) == set(textcat["gold"]) | set(textcat["predicted"])
    ner = records[len(TRAIN_TEXTS)]["components"]["bert_ner"]
    text, ents = NER_TEXTS[0]
    assert ner["task"] == "ner"
    assert ner["gold"] == [
        {"start": s, "end": e, "label": lb, "text": text[s:e]} for s, e, lb in ents
    ]
    assert all("score" in entity for entity in ner["predicted"])


def test_write_predictions_and_scores(tmp_path: Path) -> None:
    records = [{"index": 0, "text": "café"}, {"index": 1, "text": "b"}]
    path = tmp_path / "new" / "predictions.jsonl"
    assert write_predictions(path, iter(records)) == 2
    lines = path.read_text(encoding="utf8").splitlines()
    assert [json.loads(line) for line in lines] == records and "café" in lines[0]
    write_scores(tmp_path / "other" / "metrics.json", {"cats_macro_f": 0.5})
    assert json.loads((tmp_path / "other" / "metrics.json").read_text()) == {"cats_macro_f": 0.5}


def test_summary_rows() -> None:
    scores = {
        "cats_macro_f": 0.81234,
        "ents_f": None,
        "speed": 1234.6,
        "spans_sc_f": 0.5,
        "spans_sc_p": None,
    }
    assert summary_rows(scores) == [
        ("Textcat macro F", "81.23"),
        ("NER F", "-"),
        ("Words per second", "1235"),
        ("Spans sc F", "50.00"),
        ("Spans sc P", "-"),
    ]


def test_routing_summary() -> None:
    scores = {
        "cats_routed_accuracy": 0.938,
        "cats_coverage": 0.971,
        "cats_oos_r": 0.924,
        "nlu_routed_accuracy": 0.5,
        "nlu_coverage": 1.0,
        "nlu_oos_r": None,
        "other_routed_accuracy": None,  # another head's test set: no line
    }
    assert routing_summary(scores) == [
        "routed right 93.80, coverage 97.10, out-of-scope recall 92.40",
        "nlu: routed right 50.00, coverage 100.00, out-of-scope recall - (no out-of-scope docs)",
    ]
    rows = summary_rows(scores)
    # the routing figures lead the printed table
    assert [name for name, _ in rows[:3]] == [
        "Routed right (in-scope docs)",
        "In-scope docs routed (coverage)",
        "Out-of-scope recall",
    ]


@pytest.mark.parametrize(
    "prediction,answers,expected",
    [
        ("paris", [{"text": "Paris"}, {"text": "in Paris"}], (1.0, 1.0)),
        ("in london", [{"text": "london"}], (0.0, 2 / 3)),
        ("", [{"text": "the"}], (1.0, 1.0)),  # normalizes to nothing: no answer
        ("paris", [], (0.0, 0.0)),
    ],
)
def test_question_scores(prediction: str, answers: list, expected: tuple) -> None:
    assert question_scores(prediction, answers) == pytest.approx(expected)
