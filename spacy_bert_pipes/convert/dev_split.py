"""`split_dev`: labelled rows split into train and dev, stratified by label, for
`bert-pipes convert textcat --dev-share` (the dev file `calibrate` and
`threshold` read; docs/routing.md, "How many dev docs").

Each stratum gives round(share * n) of its n rows to dev, drawn by a generator
of its own seeded with the seed and the stratum's name, so a stratum's draw
does not change when another label comes or goes; a stratum keeps at least one
row for train. The strata:

- exclusive rows: one per label;
- multi-label rows: the row's rarest label (ties by name); a label that ends
  with no train row then gets one of its dev rows back;
- out-of-scope rows (no label): one stratum of their own, so dev holds its
  share of them.

Rows keep their file order in both splits; none is lost or repeated.
"""

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple, TypeVar

from .textcat import TextcatRow

# The stratum of out-of-scope rows; not a label (labels are non-blank).
OOS_STRATUM = ""
T = TypeVar("T")


@dataclass(frozen=True)
class DevSplit:
    """Rows split into train and dev.

    rows (Tuple[TextcatRow, ...]): All rows, in file order.
    in_dev (Tuple[bool, ...]): Per row, whether it went to dev.
    share (float): The share of each stratum asked for dev.
    seed (int): The seed of the draw.
    """

    rows: Tuple[TextcatRow, ...]
    in_dev: Tuple[bool, ...]
    share: float
    seed: int

    @property
    def train(self) -> List[TextcatRow]:
        """The training rows, in file order."""
        return self.part(self.rows, dev=False)

    @property
    def dev(self) -> List[TextcatRow]:
        """The dev rows, in file order."""
        return self.part(self.rows, dev=True)

    def part(self, items: Sequence[T], *, dev: bool) -> List[T]:
        """The items (one per row, e.g. the rows' Docs) of the train or dev split."""
        if len(items) != len(self.rows):
            raise ValueError(f"{len(items)} items for {len(self.rows)} rows")
        return [item for item, in_dev in zip(items, self.in_dev) if in_dev == dev]

    def label_counts(self) -> Dict[str, Tuple[int, int]]:
        """label -> (train rows, dev rows) holding it, sorted by label."""
        train = Counter(label for row in self.train for label in set(row.labels))
        dev = Counter(label for row in self.dev for label in set(row.labels))
        return {label: (train[label], dev[label]) for label in sorted(train | dev)}

    def n_oos(self) -> Tuple[int, int]:
        """The out-of-scope rows (no label) in train and in dev."""
        return (
            sum(1 for row in self.train if not row.labels),
            sum(1 for row in self.dev if not row.labels),
        )

    def summary(self) -> str:
        """One line: the dev docs, the share, the seed and the fewest per label."""
        in_dev = sorted((dev, label) for label, (_, dev) in self.label_counts().items() if dev)
        fewest = f"; fewest per label: {in_dev[0][0]} ({in_dev[0][1]!r})" if in_dev else ""
        return (
            f"Dev split: {len(self.dev)} of {len(self.rows)} docs (share {self.share:g} of "
            f"each label, seed {self.seed}){fewest}"
        )

    def warnings(self, *, routing: bool = True) -> List[str]:
        """What `calibrate` and `threshold` will lack: labels without a dev
        doc, and (`routing`: exclusive labels) out-of-scope dev docs."""
        found = []
        counts = self.label_counts()
        missing = [label for label, (_, dev) in counts.items() if dev == 0]
        if missing:
            shown = ", ".join(repr(label) for label in missing[:10])
            more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            have = "has" if len(missing) == 1 else "have"
            found.append(
                f"{len(missing)} of {len(counts)} labels {have} too few docs to spare one for "
                f"dev at the share {self.share:g} (all kept for training): {shown}{more}; "
                "calibrate and threshold will not see them: a larger share, or more docs "
                "of these labels, gives them some"
            )
        if routing and not self.n_oos()[1]:
            found.append(
                "the dev split has no out-of-scope docs (rows that fit no label): threshold "
                "can then choose only by coverage (docs/routing.md); convert some with "
                "--empty-oos or --oos-label to see what each threshold catches"
            )
        return found


def check_dev_share(share: float) -> None:
    """Raise a ValueError for a share that leaves train or dev empty."""
    if not 0.0 < share < 1.0:
        raise ValueError(
            f"the dev share must be between 0 and 1 (the share of each label's docs "
            f"written to dev, e.g. 0.2), got {share!r}"
        )


def split_dev(rows: Sequence[TextcatRow], share: float, *, seed: int = 0) -> DevSplit:
    """Split labelled rows into train and dev, stratified by label (see the
    module's docstring).

    rows (Sequence[TextcatRow]): The rows, in file order.
    share (float): The share of each stratum to write to dev, in (0, 1).
    seed (int): Seeds the draw.
    RETURNS (DevSplit): The two splits; every label of the rows keeps a train row.
    """
    check_dev_share(share)
    counts = Counter(label for row in rows for label in set(row.labels))
    strata: Dict[str, List[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        strata[_stratum(row, counts)].append(i)
    dev = set()
    for name in sorted(strata):
        members = strata[name]
        n_dev = min(int(round(share * len(members))), len(members) - 1)
        dev.update(random.Random(f"{seed}:{name}").sample(members, n_dev))
    # multi-label: a label whose rows all went to dev from other labels' strata
    in_train = {label for i, row in enumerate(rows) if i not in dev for label in row.labels}
    for i in sorted(dev):
        missing = set(rows[i].labels) - in_train
        if missing:
            dev.discard(i)
            in_train.update(rows[i].labels)
    in_dev = tuple(i in dev for i in range(len(rows)))
    return DevSplit(rows=tuple(rows), in_dev=in_dev, share=share, seed=seed)


def _stratum(row: TextcatRow, counts: Counter) -> str:
    """The row's rarest label (ties: the first by name), or OOS_STRATUM."""
    if not row.labels:
        return OOS_STRATUM
    return min(set(row.labels), key=lambda label: (counts[label], label))
