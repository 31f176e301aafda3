"""The SQuAD scorer: per-question helpers against hand-computed values, then
`score_qa` over Examples with `doc._.gold_answers` and `doc._.answers`."""

from typing import Dict, List, Optional

import pytest
import spacy
from spacy.scorer import Scorer
from spacy.training import Example
from spacy.util import registry

from spacy_bert_pipes.pipeline.common import ensure_qa_extensions
from spacy_bert_pipes.scorers import exact_match, normalize_answer, score_qa, token_f1

CONTEXT = "The Denver Broncos beat the Carolina Panthers 24-10 in Santa Clara."


@pytest.mark.parametrize(
    "text,normalized",
    [
        ("The Broncos", "broncos"),
        ("  Denver   Broncos!  ", "denver broncos"),
        ("a, an AND the...", "and"),
        ("theater and Anna", "theater and anna"),  # articles only as whole words
        ("24-10", "2410"),
        ("Santa\nClara's", "santa claras"),
        ("", ""),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match():
    assert exact_match("the Broncos", "Broncos") == 1.0
    assert exact_match("Denver Broncos.", "denver broncos") == 1.0
    assert exact_match("Denver Broncos", "Broncos") == 0.0
    assert exact_match("", "") == 1.0
    assert exact_match("", "Broncos") == 0.0


def test_token_f1():
    # 2 shared tokens: precision 2/3, recall 2/2, F1 = 2 * (2/3) / (5/3) = 0.8.
    assert token_f1("Denver Broncos won", "the Denver Broncos") == pytest.approx(0.8)
    # Bags of tokens: "x x y" and "x y y" share one x and one y: P = R = 2/3.
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert token_f1("the Broncos", "Broncos") == 1.0
    assert token_f1("Panthers", "Broncos") == 0.0
    # No answer: 1.0 only against no answer ("the" normalizes to nothing).
    assert token_f1("", "") == 1.0
    assert token_f1("the", "") == 1.0
    assert token_f1("", "Broncos") == 0.0
    assert token_f1("Broncos", "") == 0.0


def make_example(nlp, gold: Dict[str, List[str]], predicted: Optional[List[dict]]) -> Example:
    ensure_qa_extensions()
    reference = nlp.make_doc(CONTEXT)
    reference._.questions = {key: f"question {key}?" for key in gold}
    reference._.gold_answers = {
        key: [
            {"text": t, "start": CONTEXT.index(t), "end": CONTEXT.index(t) + len(t)} for t in texts
        ]
        for key, texts in gold.items()
    }
    doc = nlp.make_doc(CONTEXT)
    doc._.answers = predicted
    return Example(doc, reference)


def answer(key: str, text: str, rank: int = 0) -> dict:
    return {"key": key, "question": f"question {key}?", "text": text, "rank": rank}


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


def test_score_qa(nlp):
    examples = [
        make_example(
            nlp,
            {
                # Best of several references: exact with the second.
                "winner": ["Denver Broncos", "Broncos"],
                # Partial: F1 0.8 as in test_token_f1, exact 0.
                "loser": ["Carolina Panthers"],
                # No prediction at all: the empty answer, scored 0.
                "score": ["24-10"],
                "date": [],
            },
            [
                answer("winner", "the Broncos"),
                answer("loser", "the Carolina Panthers 24-10"),
                # The rank-0 answer is scored, not a better one below it.
                answer("date", "", rank=0),
                answer("date", "Santa Clara", rank=1),
            ],
        ),
        # No predictions on this doc: the unanswerable question is right.
        make_example(nlp, {"where": ["Santa Clara"], "when": []}, None),
    ]
    scores = score_qa(examples)
    # "carolina panthers 2410" against "carolina panthers": P = 2/3, R = 1.
    loser_f1 = 0.8
    assert scores["qa_n"] == 6
    assert scores["qa_has_ans_n"] == 4
    assert scores["qa_no_ans_n"] == 2
    assert scores["qa_has_ans_exact"] == pytest.approx(1 / 4)
    assert scores["qa_has_ans_f1"] == pytest.approx((1 + loser_f1) / 4)
    assert scores["qa_no_ans_exact"] == scores["qa_no_ans_f1"] == 1.0
    assert scores["qa_exact"] == pytest.approx(3 / 6)
    assert scores["qa_f1"] == pytest.approx((3 + loser_f1) / 6)


def test_score_qa_wrong_answer_to_unanswerable(nlp):
    examples = [make_example(nlp, {"date": []}, [answer("date", "24-10")])]
    scores = score_qa(examples)
    assert scores["qa_exact"] == scores["qa_f1"] == 0.0
    assert scores["qa_no_ans_exact"] == scores["qa_no_ans_f1"] == 0.0
    assert scores["qa_has_ans_exact"] is None and scores["qa_has_ans_f1"] is None
    assert (scores["qa_n"], scores["qa_has_ans_n"], scores["qa_no_ans_n"]) == (1, 0, 1)


def test_score_qa_no_questions(nlp):
    ensure_qa_extensions()
    doc = nlp.make_doc(CONTEXT)
    scores = score_qa([Example(doc, nlp.make_doc(CONTEXT))])
    assert scores["qa_n"] == 0
    assert scores["qa_exact"] is None and scores["qa_f1"] is None


def test_score_qa_other_prediction_attribute(nlp):
    from spacy.tokens import Doc

    if not Doc.has_extension("my_answers"):
        Doc.set_extension("my_answers", default=None)
    eg = make_example(nlp, {"winner": ["Broncos"]}, [answer("winner", "Panthers")])
    eg.predicted._.my_answers = [answer("winner", "Broncos")]
    assert score_qa([eg])["qa_exact"] == 0.0
    assert score_qa([eg], top_k_key="my_answers")["qa_exact"] == 1.0


def test_qa_scorer_is_registered():
    assert registry.scorers.get("spacy-bert-pipes.qa_scorer.v1")() is score_qa


def test_span_prf_for_slot_filling(nlp):
    """TP: right span; FP: a span where there is none, or a wrong span (also FN);
    FN: nothing where there is an answer."""
    eg = make_example(
        nlp,
        {"people": ["Broncos"], "date": [], "time": ["24-10"], "name": ["Denver"], "place": []},
        [
            answer("people", "the Broncos"),  # TP (normalized match)
            answer("date", "Santa Clara"),  # FP
            answer("time", "Carolina"),  # FP + FN
            answer("name", ""),  # FN
            answer("place", ""),  # correct null: nothing counted
        ],
    )
    scores = score_qa([eg])
    assert scores["qa_span_p"] == pytest.approx(1 / 3)
    assert scores["qa_span_r"] == pytest.approx(1 / 3)
    assert scores["qa_span_f"] == pytest.approx(2 / (2 + 2 + 2))


def test_score_qa_of_one_component(nlp):
    """With two bert_qa in a pipeline, each scores its own answers."""
    right = {**answer("who", "Denver Broncos"), "component": "reader"}
    wrong = {**answer("who", "Santa Clara"), "component": "slots"}
    eg = make_example(nlp, {"who": ["Denver Broncos"]}, [wrong, right])
    assert score_qa([eg], component="reader")["qa_exact"] == 1.0
    assert score_qa([eg], component="slots")["qa_exact"] == 0.0
    # a component with no answers here answered nothing
    assert score_qa([eg], component="other")["qa_exact"] == 0.0


# gold ("oos": the oos_label, None: no positive label), top, confidence, decision
ROUTED_ROWS = [
    ("a", "a", 0.9, "routed"),
    ("a", "b", 0.8, "routed"),
    ("b", "b", 0.1, "out_of_scope"),
    (None, "a", 0.05, "out_of_scope"),
    (None, "b", 0.7, "routed"),
    ("oos", "a", 0.02, "out_of_scope"),
]


def routed_examples(rows: list, with_routes: bool = True) -> List[Example]:
    from spacy.tokens import Doc

    if not Doc.has_extension("route"):
        Doc.set_extension("route", default=None)
    nlp = spacy.blank("en")
    examples = []
    for gold, top, conf, decision in rows:
        predicted = nlp.make_doc("x")
        predicted.cats = {"a": 0.6 if top == "a" else 0.4, "b": 0.4 if top == "a" else 0.6}
        if with_routes:
            predicted._.route = {
                "label": top if decision == "routed" else None,
                "top": top,
                "confidence": conf,
                "decision": decision,
            }
        reference = nlp.make_doc("x")
        reference.cats = {"a": float(gold == "a"), "b": float(gold == "b")}
        if gold == "oos":
            reference.cats["oos"] = 1.0
        examples.append(Example(predicted, reference))
    return examples


def test_routing_scores_count_out_of_scope_docs() -> None:
    from spacy_bert_pipes.scorers import score_textcat

    labels = ["a", "b"]
    examples = routed_examples(ROUTED_ROWS)
    scores = score_textcat(
        examples, labels=labels, multi_label=False, route_attr="route", oos_label="oos"
    )
    assert scores["cats_accuracy"] == pytest.approx(2 / 3)  # in-scope docs only
    assert scores["cats_routed_accuracy"] == pytest.approx(1 / 3)
    assert scores["cats_coverage"] == pytest.approx(2 / 3)
    # 3 of 6 docs routed (2 in scope, 1 out of scope), 1 to its gold label
    assert scores["cats_routed_share"] == pytest.approx(3 / 6)
    assert scores["cats_routed_precision"] == pytest.approx(1 / 3)
    # 3 out-of-scope docs (two without a positive label, one "oos"): 2 not routed;
    # 3 docs not routed, 2 of them out of scope
    assert scores["cats_oos_r"] == pytest.approx(2 / 3)
    assert scores["cats_oos_p"] == pytest.approx(2 / 3)
    assert scores["cats_oos_f"] == pytest.approx(2 / 3)
    assert scores["cats_oos_auroc"] == pytest.approx((3 + 3 + 2) / 9)
    assert len(scores["cats_risk_coverage"]) == 50
    assert scores["cats_ece"] is not None
    renamed = score_textcat(
        examples, labels=labels, multi_label=False, prefix="intent", route_attr="route"
    )
    assert "intent_oos_auroc" in renamed and "cats_oos_auroc" not in renamed


def test_per_label_scores_count_the_routing_decision() -> None:
    from spacy_bert_pipes.scorers import score_textcat

    scores = score_textcat(
        routed_examples(ROUTED_ROWS),
        labels=["a", "b"],
        multi_label=False,
        route_attr="route",
        oos_label="oos",
    )
    per_label = scores["cats_f_per_type"]
    # a: 1 routed right, 1 routed to b (a false negative of a, a false positive of b)
    assert per_label["a"] == pytest.approx({"p": 1.0, "r": 0.5, "f": 2 / 3})
    # b: its gold doc not routed (a false negative); two docs routed to b wrongly,
    # one in scope and one out of scope. The out-of-scope docs not routed count
    # for no label, though their top labels are a.
    assert per_label["b"] == pytest.approx({"p": 0.0, "r": 0.0, "f": 0.0})
    # a label's recall is its in-scope docs routed right
    assert per_label["a"]["r"] == pytest.approx(1 / 2)
    assert scores["cats_macro_f"] == pytest.approx(1 / 3)
    assert scores["cats_score"] == scores["cats_macro_f"]
    assert scores["cats_micro_p"] == pytest.approx(1 / 3)  # 1 right of 3 routed
    assert scores["cats_micro_r"] == pytest.approx(1 / 3)  # 1 right of 3 in scope


def test_per_label_scores_without_routes_leave_out_of_scope_docs_gold_less() -> None:
    from spacy_bert_pipes.scorers import score_textcat

    # no routes: every doc goes to its top label. spaCy's own score_cats makes
    # the first label the gold label of an all-zero reference: 3 false negatives of a.
    examples = routed_examples(ROUTED_ROWS, with_routes=False)
    scores = score_textcat(examples, labels=["a", "b"], multi_label=False, oos_label="oos")
    per_label = scores["cats_f_per_type"]
    assert per_label["a"]["r"] == pytest.approx(1 / 2)  # the 2 gold docs of a
    assert per_label["a"]["p"] == pytest.approx(1 / 3)  # 2 out-of-scope docs on top of a
    assert per_label["b"]["r"] == pytest.approx(1.0)
    assert per_label["b"]["p"] == pytest.approx(1 / 3)
    # in-scope docs alone: micro F is the accuracy, as in spaCy
    in_scope = [eg for eg, row in zip(examples, ROUTED_ROWS) if row[0] in ("a", "b")]
    alone = score_textcat(in_scope, labels=["a", "b"], multi_label=False)
    assert alone["cats_micro_f"] == pytest.approx(alone["cats_accuracy"])
    spacy_own = Scorer.score_cats(in_scope, "cats", labels=["a", "b"], multi_label=False)
    for label in ("a", "b"):
        assert alone["cats_f_per_type"][label] == pytest.approx(spacy_own["cats_f_per_type"][label])
    assert alone["cats_macro_f"] == pytest.approx(spacy_own["cats_macro_f"])


def test_routing_curves_over_in_scope_docs_and_the_routing_confidence() -> None:
    from spacy_bert_pipes.scorers import score_routes

    scores = score_routes(routed_examples(ROUTED_ROWS), ["a", "b"], "route", "oos")
    # in-scope docs by confidence 0.9 (right), 0.8 (wrong), 0.1 (right)
    in_scope = scores["cats_risk_coverage_in_scope"]
    assert in_scope[-1] == pytest.approx({"coverage": 1.0, "accuracy": 2 / 3})
    assert in_scope[0] == pytest.approx({"coverage": 1 / 3, "accuracy": 1.0})
    # all docs: the out-of-scope ones count as wrong
    assert scores["cats_risk_coverage"][-1] == pytest.approx({"coverage": 1.0, "accuracy": 2 / 6})
    bins = {round(b["low"] * 15): b for b in scores["cats_route_reliability"]}
    # bin 0 holds confidences 0.02 and 0.05 (both out of scope), bin 1 holds 0.1
    assert bins[0]["docs"] == 2 and bins[0]["accuracy"] == 0.0
    assert bins[1]["docs"] == 1 and bins[1]["accuracy"] == 1.0
    assert sum(b["docs"] for b in bins.values()) == len(ROUTED_ROWS)
