"""The dev docs of a router's calibration and of its threshold apart
(`bert-pipes calibrate --hold-out`, `bert-pipes threshold`; docs/routing.md).

A calibrated confidence is a doc's rank among the in-scope dev docs the
calibration saw, so on those docs a threshold routes exactly the coverage it
was chosen for: they cannot show how it carries to new traffic. `split_dev`
holds out a seeded share of each label's in-scope dev docs (and every
out-of-scope one, which calibration does not use) for the threshold;
`record_calibration` notes in the pipeline's meta which file the calibration
saw, so that `threshold` can say when it is given that file again.
"""

import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from spacy.language import Language
from spacy.training import Example

from ..io.digest import file_sha256

# The pipeline meta's key for what `bert-pipes calibrate` fit on.
META_KEY = "bert_pipes_calibration"


def split_dev(
    examples: List[Example],
    gold_index: Callable[[Example], Optional[int]],
    share: float,
    seed: int = 0,
) -> Tuple[List[Example], List[Example]]:
    """Split dev examples into the calibration's and the threshold's: of each
    label's in-scope docs, round(share * n) are held out, drawn with `seed`
    (a label of one doc keeps it for the calibration); every out-of-scope doc
    (gold_index None) is held out.

    RETURNS (Tuple[List[Example], List[Example]]): (calibration, held out),
        each in the input order.
    """
    if not 0.0 < share < 1.0:
        raise ValueError(f"the held-out share must be in (0, 1), got {share!r}")
    by_label: Dict[int, List[int]] = defaultdict(list)
    held = set()
    for i, eg in enumerate(examples):
        index = gold_index(eg)
        if index is None:
            held.add(i)
        else:
            by_label[index].append(i)
    rng = random.Random(seed)
    for label in sorted(by_label):
        rows = by_label[label]
        n_held = min(int(round(share * len(rows))), len(rows) - 1)
        held.update(rng.sample(rows, n_held))
    kept = [eg for i, eg in enumerate(examples) if i not in held]
    return kept, [eg for i, eg in enumerate(examples) if i in held]


def record_calibration(
    nlp: Language, component: str, dev: Path, held_out: Optional[Path] = None
) -> None:
    """Note in `nlp.meta` (saved with the pipeline) the dev file a
    component's calibration read and the file its held-out docs went to."""
    record = {"component": component, "dev": str(dev), "dev_sha256": file_sha256(dev)}
    if held_out is not None:
        record.update(held_out=str(held_out), held_out_sha256=file_sha256(held_out))
    nlp.meta[META_KEY] = record


def calibration_overlap(nlp: Language, component: str, dev: Path) -> Optional[str]:
    """The dev file `component`'s calibration read, when `dev` is that file
    (the same bytes); None when it is not, or when no calibration is recorded."""
    record = nlp.meta.get(META_KEY)
    if not isinstance(record, dict) or record.get("component") != component:
        return None
    return str(record["dev"]) if record.get("dev_sha256") == file_sha256(dev) else None


def margin_95(share: float, n: int) -> float:
    """Half the width of a 95% interval (Agresti-Coull) of a share measured on
    `n` docs: how far the share of new docs may lie from it. 1.0 when n is 0."""
    if n <= 0:
        return 1.0
    adjusted = (share * n + 2.0) / (n + 4.0)
    return 1.96 * math.sqrt(adjusted * (1.0 - adjusted) / (n + 4.0))
