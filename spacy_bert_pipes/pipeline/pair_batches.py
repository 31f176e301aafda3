"""Training batches that hold pairs of docs of the same label, for the pair loss
of few-shot `bert_textcat` training (`label_prototypes.contrastive_step`): with
10 examples per label and 77 labels, a random batch of 32 gives most docs no
other doc of their label to be pulled towards."""

import random
from typing import Callable, Dict, Iterable, Iterator, List, Optional

from spacy.training import Example
from spacy.util import registry


def gold_label(example: Example) -> Optional[str]:
    """The example's label for pairing: its highest gold category (None without)."""
    cats = example.reference.cats
    if not cats:
        return None
    label = max(cats, key=cats.__getitem__)
    return label if cats[label] >= 0.5 else None


def pair_groups(examples: Iterable[Example], per_label: int) -> List[List[Example]]:
    """The examples in groups of up to `per_label` of one label (examples
    without a label alone), the groups in random order."""
    by_label: Dict[Optional[str], List[Example]] = {}
    groups: List[List[Example]] = []
    for eg in examples:
        label = gold_label(eg)
        if label is None:
            groups.append([eg])
        else:
            by_label.setdefault(label, []).append(eg)
    for items in by_label.values():
        groups.extend(items[i : i + per_label] for i in range(0, len(items), per_label))
    random.shuffle(groups)
    return groups


@registry.batchers("spacy-bert-pipes.label_pairs_batcher.v1")
def configure_label_pairs_batcher(
    size: int = 32, per_label: int = 2
) -> Callable[[Iterable[Example]], Iterator[List[Example]]]:
    """Batch examples so that each batch holds `per_label` docs of each of its
    labels (fewer where a label has run out), about `size` docs a batch. spaCy
    shuffles the examples every epoch, so the pairs change from epoch to epoch.

    size (int): Docs per batch (a batch ends at the first group that reaches it).
    per_label (int): Docs of one label that go into a batch together (>= 2).
    """
    if per_label < 2 or size < per_label:
        raise ValueError(f"label_pairs_batcher needs 2 <= per_label <= size, got {per_label}")

    def batcher(examples: Iterable[Example]) -> Iterator[List[Example]]:
        batch: List[Example] = []
        for group in pair_groups(examples, per_label):
            batch.extend(group)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch

    return batcher
