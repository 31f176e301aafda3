"""Teachers' class probabilities for a classifier, stored on a doc.

A distilled corpus (`multitask/distill.py`) gives every doc that has no gold labels
for a `bert_textcat` the probabilities a teacher (the same head trained apart)
gave it, as soft targets. They live in `doc._.bert_pipes_targets`, keyed by the
name of the student component, not in `doc.cats`: two classifiers of one pipeline
share `doc.cats`, and a doc there holds one classifier's gold labels only.
"""

from typing import Dict, Optional

from spacy.tokens import Doc

TARGETS_ATTR = "bert_pipes_targets"

if not Doc.has_extension(TARGETS_ATTR):
    Doc.set_extension(TARGETS_ATTR, default=None)


def soft_targets(doc: Doc, component: str) -> Optional[Dict[str, float]]:
    """The teacher's probabilities for `component`'s labels on `doc`, if it has them."""
    targets = doc._.get(TARGETS_ATTR)
    if not isinstance(targets, dict):
        return None
    found = targets.get(component)
    return found if isinstance(found, dict) else None


def set_soft_targets(doc: Doc, component: str, probabilities: Dict[str, float]) -> None:
    targets = dict(doc._.get(TARGETS_ATTR) or {})
    targets[component] = {label: float(p) for label, p in probabilities.items()}
    doc._.set(TARGETS_ATTR, targets)
