"""What a training corpus puts on a doc beside its gold annotation.

* `doc._.bert_pipes_source` (SOURCE_ATTR): the name of the corpus a doc came
  from, set by the multi-task reader (`multitask/corpus.py`); a classifier
  reads it to tell which corpus its labels come from.
* `doc._.bert_pipes_targets` (TARGETS_ATTR): teachers' class probabilities for
  a classifier, keyed by the name of the student component. A distilled corpus
  (`multitask/distill.py`) gives every doc that has no gold labels for a
  `bert_textcat` the probabilities a teacher (the same head trained apart) gave
  it, as soft targets; `bert_textcat` trains on them (`pipeline/textcat_targets.py`).
  They live here, not in `doc.cats`: two classifiers of one pipeline share
  `doc.cats`, and a doc there holds one classifier's gold labels only.

Both the components (`pipeline/`) and the training recipes (`multitask/`) read
these, so they sit on a floor below both.
"""

from typing import Dict, Optional

from spacy.tokens import Doc

SOURCE_ATTR = "bert_pipes_source"
TARGETS_ATTR = "bert_pipes_targets"

for _attr in (SOURCE_ATTR, TARGETS_ATTR):
    if not Doc.has_extension(_attr):
        Doc.set_extension(_attr, default=None)


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
