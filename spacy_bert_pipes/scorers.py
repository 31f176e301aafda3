"""Scorers, registered in spaCy's `scorers` registry."""

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from spacy.scorer import Scorer
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry


def score_textcat(
    examples: Iterable[Example],
    *,
    labels: Sequence[str],
    multi_label: bool,
    threshold: float = 0.5,
) -> Dict[str, Any]:
    """spaCy's textcat scores (cats_score, cats_micro_f, cats_macro_f,
    cats_macro_auc, per-label P/R/F and AUC), plus `cats_accuracy` for exclusive
    classes: the share of docs whose top label is the gold label.
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
        correct = total = 0
        for eg in examples:
            gold = {k: v for k, v in eg.reference.cats.items() if k in labels}
            if not gold or not eg.predicted.cats:
                continue
            total += 1
            top_gold = max(gold, key=lambda k: gold[k])
            top_pred = max(eg.predicted.cats, key=lambda k: eg.predicted.cats[k])
            correct += int(top_gold == top_pred)
        scores["cats_accuracy"] = correct / total if total else None
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
