"""Scorers, registered in spaCy's `scorers` registry."""

from typing import Any, Callable, Dict, Iterable, Sequence

from spacy.scorer import Scorer
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
