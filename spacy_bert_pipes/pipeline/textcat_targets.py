"""The training targets of `bert_textcat`: gold `doc.cats`, or a teacher's
probabilities stored on a distilled corpus (`corpus_attrs.py`), the labels and
their counts in the training examples, the loss weight of each label (the
class_weights setting) and the loss itself."""

from typing import Any, Dict, List, Literal, Optional, Sequence, Set, Tuple, Union

import numpy
from spacy.training import Example

from ..corpus_attrs import SOURCE_ATTR, soft_targets

# The class_weights setting: none, "balanced", or label -> weight.
ClassWeights = Optional[Union[Literal["balanced"], Dict[str, float]]]


def gold_targets(
    examples: Sequence[Example], labels: Sequence[str], exclusive: bool, name: str
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Gold labels (n_docs, n_labels) and a mask of the labels that are annotated.

    A doc whose `cats` hold none of the component's labels is not annotated
    for it (e.g. a doc of another head's corpus in multi-task training): its
    row is all unknown, never negative, unless a teacher's probabilities for
    this component are stored on it (a distilled corpus,
    `corpus_attrs.py`): they are its soft targets. A doc that does
    annotate them may not hold labels the component does not know.

    labels (Sequence[str]): The component's labels, in order.
    exclusive (bool): Whether exactly one label is positive per doc.
    name (str): The component's name, for messages and teacher targets.
    """
    label_set = set(labels)
    truths = numpy.zeros((len(examples), len(labels)), dtype="f")
    known = numpy.zeros((len(examples), len(labels)), dtype="f")
    for i, eg in enumerate(examples):
        cats = eg.reference.cats
        if not any(label in label_set for label in cats):
            targets = soft_targets(eg.reference, name)
            if targets is not None:
                truths[i] = soft_row(i, targets, labels, exclusive, name)
                known[i] = 1.0
            continue
        for label in cats:
            if label not in label_set:
                raise ValueError(
                    f"Example {i} of the batch has unknown label {label!r} for "
                    f"'{name}' (known: {list(labels)[:10]}...). Add every label "
                    "to the training data or the initialize labels."
                )
        for j, label in enumerate(labels):
            if label in cats:
                truths[i, j] = cats[label]
                known[i, j] = 1.0
        if exclusive and known[i].all() and truths[i].sum() != 1.0:
            raise ValueError(
                f"Example {i} of the batch has {truths[i].sum():g} positive labels, but "
                f"'{name}' has exclusive classes: exactly one must be 1.0 "
                "(set exclusive_classes = false for multi-label data)"
            )
    return truths, known


def soft_row(
    i: int, targets: Dict[str, float], labels: Sequence[str], exclusive: bool, name: str
) -> numpy.ndarray:
    """A teacher's probabilities as a row of targets, in the component's label
    order (summing to 1 for exclusive classes)."""
    if set(targets) != set(labels):
        missing = sorted(set(labels) - set(targets))[:5]
        extra = sorted(set(targets) - set(labels))[:5]
        raise ValueError(
            f"Example {i} of the batch has teacher targets for '{name}' whose "
            f"labels are not its labels (missing: {missing}, unknown: {extra}): "
            "distill with a teacher trained on the same labels"
        )
    row = numpy.asarray([targets[label] for label in labels], dtype="f")
    if not numpy.isfinite(row).all() or (row < 0).any() or (row > 1).any():
        raise ValueError(
            f"Example {i} of the batch has teacher targets for '{name}' outside "
            "[0, 1]: they must be probabilities"
        )
    if exclusive:
        total = float(row.sum())
        if total <= 0:
            raise ValueError(
                f"Example {i} of the batch has teacher targets for '{name}' that "
                "are all 0: exclusive classes need a distribution"
            )
        row /= total
    return row


def classifier_loss(
    probs: numpy.ndarray,
    truths: numpy.ndarray,
    known: numpy.ndarray,
    weights: numpy.ndarray,
    exclusive: bool,
) -> Tuple[float, numpy.ndarray]:
    """Weighted cross-entropy (softmax, `exclusive`) or binary cross-entropy
    (sigmoid) of a batch: the mean loss per doc and its gradient with respect
    to the logits. (n_docs, n_labels) arrays; `weights`: (n_labels,)."""
    n = max(len(probs), 1)
    eps = 1e-8
    if exclusive:
        # a gold one-hot row, or a teacher's distribution (sums to 1 up to rounding)
        has_gold = known.all(axis=1) & numpy.isclose(truths.sum(axis=1), 1.0, atol=1e-4)
        row_weight = (truths * weights).sum(axis=1) * has_gold  # (n_docs,)
        d_logits = (probs - truths) * row_weight[:, None]
        # cross-entropy with the target distribution (one-hot for gold labels)
        loss = -(row_weight * (truths * numpy.log(probs + eps)).sum(axis=1)).sum()
    else:
        pos = truths * weights
        d_logits = (probs * (pos + 1.0 - truths) - pos) * known
        loss = -(
            (pos * numpy.log(probs + eps) + (1.0 - truths) * numpy.log(1.0 - probs + eps)) * known
        ).sum()
    return float(loss / n), d_logits / n


def count_labels(examples: List[Example], labels: Sequence[str]) -> Dict[str, Any]:
    """For each label, how many initialize docs annotate it and how many have it
    positive (a doc that does not annotate a label is not counted for it)."""
    annotated = {label: 0 for label in labels}
    positives = {label: 0 for label in labels}
    for eg in examples:
        for label, value in eg.reference.cats.items():
            if label in annotated:
                annotated[label] += 1
                positives[label] += int(value >= 0.5)
    return {"annotated": annotated, "positives": positives}


def labels_of_one_source(examples: Sequence[Example], name: str) -> Set[str]:
    """Every label in the examples' `cats`, which must come from one corpus:
    with several (multi-task training), which labels are the component's
    cannot be told from the docs. `name` is the component's, for messages."""
    by_source: Dict[Optional[str], Set[str]] = {}
    for eg in examples:
        if eg.reference.cats:
            source = eg.reference._.get(SOURCE_ATTR)
            by_source.setdefault(source, set()).update(eg.reference.cats)
    if len(by_source) > 1:
        sources = ", ".join(sorted(str(source) for source in by_source))
        raise ValueError(
            f"'{name}' found doc.cats in the docs of several corpora ({sources}): "
            f"list its labels in [initialize.components.{name}.labels] (or read "
            "them with spacy.read_labels.v1), so that it learns only its own"
        )
    return set().union(*by_source.values())


def class_weights_of(
    setting: Any,
    counts: Optional[Dict[str, Any]],
    saved: Optional[Dict[str, float]],
    *,
    labels: Sequence[str],
    exclusive: bool,
    name: str,
) -> Optional[Dict[str, float]]:
    """The loss weight of each of a component's labels from its class_weights
    setting: None, a mapping, or "balanced" (from the label `counts` of the
    initialize examples, or the weights `saved` by pipelines older than them).
    `name` is the component's, for messages."""
    if setting is None:
        return None
    if isinstance(setting, dict):
        unknown = set(setting) - set(labels)
        if unknown:
            raise ValueError(f"class_weights has labels not in '{name}': {sorted(unknown)}")
        return {label: float(setting.get(label, 1.0)) for label in labels}
    if setting != "balanced":
        raise ValueError(f"class_weights must be 'balanced' or a mapping, got {setting!r}")
    if counts is None:
        if saved is not None:  # saved before label counts were kept
            return dict(saved)
        raise ValueError(
            f"class_weights = 'balanced' needs the label counts of '{name}', which "
            "nlp.initialize() gathers from the training examples"
        )
    annotated, positives = counts["annotated"], counts["positives"]
    n_docs = max(annotated.values(), default=0)  # exclusive: docs with gold cats
    weights = {}
    for label in labels:
        count = int(positives.get(label, 0))
        if not count:
            weights[label] = 1.0
        elif exclusive:
            weights[label] = n_docs / (len(labels) * count)
        else:
            weights[label] = (int(annotated.get(label, 0)) - count) / count
    return weights
