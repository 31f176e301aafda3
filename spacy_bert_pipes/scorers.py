"""Scorers, registered in spaCy's `scorers` registry: text classification
(with the routing scores of an exclusive classifier), entities and extractive
question answering (SQuAD's exact match and token F1). The measures of
confidence the routing scores use (calibration error, AUROC, risk-coverage)
are `confidence.py`."""

import re
import string
from collections import Counter
from typing import (
    Any,
    Callable,
    Collection,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
)

from spacy.scorer import PRFScore, Scorer
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry

from .confidence import (
    auroc,
    expected_calibration_error,
    fpr_at_recall,
    reliability,
    risk_coverage,
)


def score_textcat(
    examples: Iterable[Example],
    *,
    labels: Sequence[str],
    multi_label: bool,
    threshold: float = 0.5,
    prefix: str = "cats",
    route_attr: Optional[str] = None,
    oos_label: Optional[str] = None,
) -> Dict[str, Any]:
    """spaCy's textcat scores (cats_score, cats_micro_f, cats_macro_f,
    cats_macro_auc, per-label P/R/F and AUC), plus `cats_accuracy` for exclusive
    classes: the share of docs whose top label is the gold label, over the docs
    with a positive gold label. `prefix` replaces "cats" in the keys, so that
    two classifiers of one pipeline keep their scores apart (`nlu_micro_f`, ...).

    Exclusive classes count P/R/F per label from each doc's decision
    (`exclusive_prf`): the routed label where the doc has a route, else the top
    label. A doc without a positive gold label (or with `oos_label`) is out of
    scope: routed, it is a false positive of its label; not routed, it counts
    for no label.

    route_attr (Optional[str]): The doc._ attribute of an exclusive
        classifier's routes (`bert_textcat`): adds the routing scores
        (`score_routes`).
    oos_label (Optional[str]): A gold label that means out of scope.
    """
    examples = list(examples)
    scores = Scorer.score_cats(
        examples,
        "cats",
        labels=labels,
        multi_label=multi_label,
        # Exclusive classes: the top label is the prediction, whatever its probability.
        threshold=threshold if multi_label else 0.0,
    )
    if not multi_label:
        scores.update(exclusive_prf(examples, labels, route_attr, oos_label))
        correct = total = 0
        for eg in examples:
            gold = {k: v for k, v in eg.reference.cats.items() if k in labels}
            # a doc without a positive label fits none (out of scope): not counted
            if not gold or max(gold.values()) < 0.5 or not eg.predicted.cats:
                continue
            total += 1
            top_gold = max(gold, key=lambda k: gold[k])
            # other classifiers of the pipeline write their labels to doc.cats too
            predicted = {k: v for k, v in eg.predicted.cats.items() if k in labels}
            if not predicted:
                continue
            top_pred = max(predicted, key=lambda k: predicted[k])
            correct += int(top_gold == top_pred)
        scores["cats_accuracy"] = correct / total if total else None
        if route_attr is not None:
            scores.update(score_routes(examples, labels, route_attr, oos_label))
    if prefix != "cats":
        scores = {prefix + key[len("cats") :]: value for key, value in scores.items()}
    return scores


def gold_label(
    example: Example, labels: Collection[str], oos_label: Optional[str] = None
) -> Optional[str]:
    """An exclusive classifier's gold label of an example: its most probable
    reference label among `labels`, or None when the doc is out of scope (no
    positive label among them, or its label is `oos_label`)."""
    gold_cats = {k: v for k, v in example.reference.cats.items() if k in labels}
    gold = max(gold_cats, key=gold_cats.__getitem__) if gold_cats else None
    if gold is None or gold_cats[gold] < 0.5 or gold == oos_label:
        return None
    return gold


def decided_label(
    doc: Doc, labels: Collection[str], route_attr: Optional[str] = None
) -> Optional[str]:
    """What an exclusive classifier decided for a doc: the routed label (None
    when not routed) where the doc has a route, else the top label of
    `doc.cats` among `labels` (None without any)."""
    route = doc._.get(route_attr) if route_attr and doc.has_extension(route_attr) else None
    if route:
        return route["label"] if route["decision"] == "routed" else None
    predicted = {k: v for k, v in doc.cats.items() if k in labels}
    return max(predicted, key=predicted.__getitem__) if predicted else None


def exclusive_prf(
    examples: Sequence[Example],
    labels: Sequence[str],
    route_attr: Optional[str] = None,
    oos_label: Optional[str] = None,
) -> Dict[str, Any]:
    """P/R/F per label, micro and macro, and cats_score (the macro F) of an
    exclusive classifier's decisions (`decided_label`) against the gold labels
    (`gold_label`): a doc decided for a label other than its gold one is a false
    positive of that label; an in-scope doc not decided for its gold label is a
    false negative of it. A doc not routed is a prediction of no label, so an
    out-of-scope doc sent to "none of these" counts for nothing. The oos_label
    is no label of its own here (the routing keys score it).

    spaCy's `Scorer.score_cats` takes the top label of an all-zero reference as
    its gold label, which makes every out-of-scope doc a false negative of the
    first label.
    """
    own = [label for label in labels if label != oos_label]
    labels_set = set(labels)
    prf = {label: PRFScore() for label in own}
    for eg in examples:
        gold = gold_label(eg, labels_set, oos_label)
        predicted = decided_label(eg.predicted, labels_set, route_attr)
        if predicted == oos_label:
            predicted = None
        if gold is not None and gold == predicted:
            prf[gold].tp += 1
            continue
        if gold is not None:
            prf[gold].fn += 1
        if predicted is not None:
            prf[predicted].fp += 1
    micro = PRFScore()
    for score in prf.values():
        micro.tp, micro.fp, micro.fn = micro.tp + score.tp, micro.fp + score.fp, micro.fn + score.fn
    n = len(prf) + 1e-100  # as spaCy: labels without gold docs count, with F 0
    macro_f = sum(s.fscore for s in prf.values()) / n
    return {
        "cats_score": macro_f,
        "cats_score_desc": "macro F",
        "cats_micro_p": micro.precision,
        "cats_micro_r": micro.recall,
        "cats_micro_f": micro.fscore,
        "cats_macro_p": sum(s.precision for s in prf.values()) / n,
        "cats_macro_r": sum(s.recall for s in prf.values()) / n,
        "cats_macro_f": macro_f,
        "cats_f_per_type": {label: score.to_dict() for label, score in prf.items()},
    }


# The routing scores that need out-of-scope docs in the data (else None).
OOS_SCORE_KEYS = (
    "cats_oos_p",
    "cats_oos_r",
    "cats_oos_f",
    "cats_oos_f2",
    "cats_oos_auroc",
    "cats_oos_fpr95",
)
# The routing scores a component declares (spaCy's score weights), all numbers.
ROUTING_SCORE_KEYS = (
    "cats_routed_accuracy",
    "cats_coverage",
    "cats_routed_share",
    "cats_routed_precision",
    *OOS_SCORE_KEYS,
    "cats_ece",
)


def f_beta(precision: float, recall: float, beta: float) -> float:
    """The F-score that weights recall beta times as much as precision."""
    b2 = beta * beta
    denominator = b2 * precision + recall
    return (1 + b2) * precision * recall / denominator if denominator else 0.0


def score_routes(
    examples: Sequence[Example],
    labels: Sequence[str],
    route_attr: str,
    oos_label: Optional[str] = None,
    n_bins: int = 15,
) -> Dict[str, Any]:
    """Routing scores of an exclusive classifier from `doc._.<route_attr>`
    (keys with the "cats" prefix, renamed by the caller):

    - cats_routed_accuracy: in-scope docs routed to their gold label, over all
      in-scope docs (a doc not routed counts as wrong);
    - cats_coverage: the share of in-scope docs routed;
    - cats_routed_share, cats_routed_precision: the share of all docs routed,
      and the share of those routed to their gold label (an out-of-scope doc
      routed is wrong): the threshold's point on the risk-coverage curve;
    - cats_oos_p, cats_oos_r, cats_oos_f, cats_oos_f2: precision, recall, F1
      and F2 (recall weighted twice) of the docs not routed as the out-of-scope
      class (None without out-of-scope docs);
    - cats_oos_auroc, cats_oos_fpr95: how well the confidence separates
      in-scope from out-of-scope docs, whatever the threshold: the area under
      the ROC curve, and the share of out-of-scope docs kept at the threshold
      that keeps 95% of the in-scope docs;
    - cats_ece: the in-scope docs' expected calibration error of the top
      probability (n_bins equal-width bins);
    - cats_reliability: those bins ({"low", "high", "docs", "confidence",
      "accuracy"}); cats_route_reliability: the same bins of the routing
      confidence, all docs, "accuracy" the share whose top label is their gold
      label (an out-of-scope doc is wrong);
    - cats_risk_coverage: the accuracy of the most confident docs against their
      share, all docs (an out-of-scope doc kept is wrong);
      cats_risk_coverage_in_scope: the same over the in-scope docs alone, whose
      share kept is the coverage a threshold gives.

    A doc is out of scope when its reference has no positive label among
    `labels` (or its positive label is `oos_label`).
    """
    labels_set = set(labels)
    confidences: List[float] = []
    in_conf: List[float] = []
    out_conf: List[float] = []
    in_correct: List[bool] = []
    ranked_correct: List[bool] = []
    top_probs: List[float] = []
    top_correct: List[bool] = []
    n_in = n_routed = n_routed_right = 0
    n_out = n_out_caught = n_not_routed = 0
    for eg in examples:
        route = eg.predicted._.get(route_attr) if eg.predicted.has_extension(route_attr) else None
        if not route:
            continue
        gold = gold_label(eg, labels_set, oos_label)
        conf = float(route["confidence"])
        routed = route["decision"] == "routed"
        confidences.append(conf)
        n_not_routed += int(not routed)
        if gold is None:
            n_out += 1
            n_out_caught += int(not routed)
            out_conf.append(conf)
            ranked_correct.append(False)
            continue
        n_in += 1
        n_routed += int(routed)
        n_routed_right += int(routed and route["label"] == gold)
        in_conf.append(conf)
        in_correct.append(route["top"] == gold)
        ranked_correct.append(route["top"] == gold)
        predicted = {k: v for k, v in eg.predicted.cats.items() if k in labels_set}
        if predicted:
            top_probs.append(max(predicted.values()))
            top_correct.append(route["top"] == gold)
    if not confidences:
        return {}
    scores: Dict[str, Any] = {
        "cats_routed_accuracy": n_routed_right / n_in if n_in else None,
        "cats_coverage": n_routed / n_in if n_in else None,
        "cats_routed_share": (n_routed + n_out - n_out_caught) / len(confidences),
        "cats_routed_precision": (
            n_routed_right / (len(confidences) - n_not_routed)
            if len(confidences) > n_not_routed
            else None
        ),
        **{key: None for key in OOS_SCORE_KEYS},
        "cats_ece": (
            expected_calibration_error(top_probs, top_correct, n_bins) if top_probs else None
        ),
        "cats_reliability": reliability(top_probs, top_correct, n_bins),
        "cats_route_reliability": reliability(confidences, ranked_correct, n_bins),
        "cats_risk_coverage": risk_coverage(confidences, ranked_correct),
        "cats_risk_coverage_in_scope": risk_coverage(in_conf, in_correct),
    }
    if n_out:
        precision = n_out_caught / n_not_routed if n_not_routed else 0.0
        recall = n_out_caught / n_out
        scores["cats_oos_p"] = precision
        scores["cats_oos_r"] = recall
        scores["cats_oos_f"] = f_beta(precision, recall, 1.0)
        scores["cats_oos_f2"] = f_beta(precision, recall, 2.0)
        if in_conf:
            scores["cats_oos_auroc"] = auroc(in_conf, out_conf)
            scores["cats_oos_fpr95"] = fpr_at_recall(in_conf, out_conf, 0.95)
    return scores


@registry.scorers("spacy-bert-pipes.textcat_scorer.v1")
def make_textcat_scorer() -> Callable[..., Dict[str, Any]]:
    return score_textcat


def score_ner(examples: Iterable[Example], *, spans_key: Optional[str] = None) -> Dict[str, Any]:
    """Entity precision, recall and F-score, overall and per label (exact span match).

    spans_key (Optional[str]): None scores `doc.ents` (keys `ents_p`, `ents_r`,
        `ents_f`, `ents_per_type`, as spaCy's `ner`). A key scores the span group
        `doc.spans[spans_key]` (keys `spans_<key>_p`, ...); a reference doc without
        that group is scored against its `doc.ents`.
    """
    if spans_key is None:
        return Scorer.score_spans(
            examples, "ents", has_annotation=lambda doc: doc.has_annotation("ENT_IOB")
        )

    def getter(doc: Doc, attr: str) -> List[Span]:
        return list(doc.spans[spans_key]) if spans_key in doc.spans else list(doc.ents)

    return Scorer.score_spans(examples, f"spans_{spans_key}", getter=getter)


@registry.scorers("spacy-bert-pipes.ner_scorer.v1")
def make_ner_scorer() -> Callable[..., Dict[str, Any]]:
    return score_ner


# The articles SQuAD's normalization removes, as whole words.
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Normalize an answer as the official SQuAD evaluation does: lowercase,
    remove ASCII punctuation, remove the articles "a", "an" and "the", and
    collapse whitespace.

    text (str): The answer.
    RETURNS (str): The normalized answer, e.g. "broncos" for "The Broncos!".
    """
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    """SQuAD's exact match of one prediction and one reference answer.

    prediction (str): The predicted answer; "" for no answer.
    reference (str): The reference answer; "" for no answer.
    RETURNS (float): 1.0 if the normalized answers are equal, else 0.0.
    """
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD's token F1 of one prediction and one reference answer: the F1 of
    the bags of normalized tokens they share. If either has no tokens (no
    answer), it is 1.0 when both have none and 0.0 otherwise.

    prediction (str): The predicted answer; "" for no answer.
    reference (str): The reference answer; "" for no answer.
    RETURNS (float): The F1, between 0.0 and 1.0.
    """
    predicted = normalize_answer(prediction).split()
    gold = normalize_answer(reference).split()
    if not predicted or not gold:
        return float(predicted == gold)
    n_shared = sum((Counter(predicted) & Counter(gold)).values())
    if n_shared == 0:
        return 0.0
    precision = n_shared / len(predicted)
    recall = n_shared / len(gold)
    return 2 * precision * recall / (precision + recall)


def score_qa(
    examples: Iterable[Example],
    *,
    top_k_key: str = "answers",
    component: Optional[str] = None,
) -> Dict[str, Any]:
    """Extractive question answering scores with the official SQuAD (v2.0)
    semantics: per question, the exact match and token F1 of the top
    prediction against its best-matching reference answer, averaged.

    The questions are the keys of the reference Docs' `doc._.gold_answers`
    (reference answers as {"text", "start", "end"}; an empty list means no
    answer). The predictions are the predicted Docs' answers (dicts with at
    least "key", "text" and "rank"); the best-ranked one per key is scored.
    A question without a prediction counts as answered with "" (no answer),
    so no question is ever left out. A question without an answer scores 1.0
    exactly when the prediction is empty (after normalization).

    examples (Iterable[Example]): The examples to score.
    top_k_key (str): The Doc extension holding the predictions, e.g. "answers"
        for `doc._.answers`.
    component (Optional[str]): Score only the answers of this `bert_qa` (their
        "component"), when a pipeline has several; None scores them all.
    RETURNS (Dict[str, Any]): "qa_exact" and "qa_f1" over all questions,
        "qa_has_ans_exact" and "qa_has_ans_f1" over those with an answer,
        "qa_no_ans_exact" and "qa_no_ans_f1" over those without (between 0.0
        and 1.0; None where there are no such questions), and the numbers of
        questions "qa_n", "qa_has_ans_n" and "qa_no_ans_n". Also span
        precision, recall and F-score as used for slot filling (Restaurant-8k):
        "qa_span_p", "qa_span_r", "qa_span_f", where a non-empty prediction
        is a true positive when it exactly matches (normalized) a reference,
        else a false positive (and a false negative when there was an answer),
        and an empty prediction for a question with an answer is a false negative.
    """
    exact: Dict[bool, List[float]] = {True: [], False: []}  # has an answer -> scores
    f1: Dict[bool, List[float]] = {True: [], False: []}
    tp = fp = fn = 0
    for eg in examples:
        gold = eg.reference._.gold_answers or {}
        given = getattr(eg.predicted._, top_k_key) or []
        if component is not None:
            given = answers_of(given, component)
        predicted = _top_answers(given)
        for key, answers in gold.items():
            prediction = predicted.get(key, "")
            # As the official script: references that normalize to nothing
            # (e.g. "the") are dropped; none left means no answer.
            references = [a["text"] for a in answers if normalize_answer(a["text"])] or [""]
            matched = max(exact_match(prediction, r) for r in references)
            exact[bool(answers)].append(matched)
            f1[bool(answers)].append(max(token_f1(prediction, r) for r in references))
            has_answer = references != [""]
            if normalize_answer(prediction):
                if has_answer and matched:
                    tp += 1
                else:
                    fp += 1
                    fn += int(has_answer)
            elif has_answer:
                fn += 1
    return {
        "qa_exact": _mean(exact[True] + exact[False]),
        "qa_f1": _mean(f1[True] + f1[False]),
        "qa_has_ans_exact": _mean(exact[True]),
        "qa_has_ans_f1": _mean(f1[True]),
        "qa_no_ans_exact": _mean(exact[False]),
        "qa_no_ans_f1": _mean(f1[False]),
        "qa_n": len(exact[True]) + len(exact[False]),
        "qa_has_ans_n": len(exact[True]),
        "qa_no_ans_n": len(exact[False]),
        "qa_span_p": tp / (tp + fp) if tp + fp else None,
        "qa_span_r": tp / (tp + fn) if tp + fn else None,
        "qa_span_f": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None,
    }


def answers_of(answers: Iterable[Dict[str, Any]], component: str) -> List[Dict[str, Any]]:
    """The answers a `bert_qa` component gave (their "component"); an answer that
    names no component counts as any component's."""
    return [a for a in answers if a.get("component", component) == component]


@registry.scorers("spacy-bert-pipes.qa_scorer.v1")
def make_qa_scorer() -> Callable[..., Dict[str, Any]]:
    return score_qa


def _top_answers(answers: Iterable[Dict[str, Any]]) -> Dict[str, str]:
    # The text of the best-ranked (lowest "rank") answer per key.
    best: Dict[str, Tuple[int, str]] = {}
    for answer in answers:
        key, rank = answer["key"], answer["rank"]
        if key not in best or rank < best[key][0]:
            best[key] = (rank, answer["text"] or "")
    return {key: text for key, (_, text) in best.items()}


def _mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None
