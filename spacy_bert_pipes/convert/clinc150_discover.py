"""CLINC150 with intents held out, for new intent discovery (issue 47): a
router is trained on the known intents, routes traffic in which the held-out
intents turn up, and `bert-pipes discover` clusters what it did not route.

`held_out_intents` chooses the held-out intents with the seed (the choice of
bench/discover_frozen.py); `build_clinc150_discover` makes the parts, each
query of the traffic given an id. Out-of-scope rows have no labels, as
`read_clinc150` writes them:

    train          the known intents' training queries
    val            the known intents' val queries, then `oos_val`
    test           the known intents' test queries
    traffic        what the router sees: the held-out intents' training
                   queries, the known intents' val queries, `oos_train` and
                   `oos_val`, shuffled with the seed; ids and texts only
    test_held_out  the held-out intents' test queries, with their intents

The test split is never traffic: it is kept to score the router after the
clusters it did not route become labels. The known intents' val queries are
both val (the threshold is chosen there) and traffic, as the issue asks.
"""

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..io.digest import file_sha256
from ..io.errors import ConversionError
from .textcat import CLINC150_OOS_INTENT, TextcatRow, read_clinc150

DEFAULT_HELD_OUT = 30
# The files `bert-pipes convert clinc150-discover` writes besides the .spacy ones.
TRAFFIC = "traffic.jsonl"
TRAFFIC_GOLD = "traffic_gold.jsonl"
TEST_HELD_OUT = "test_held_out.jsonl"
MANIFEST = "clinc150_discover.json"


@dataclass(frozen=True)
class Query:
    """A query of the traffic or of the held-out test, with its true intent.

    id (str): Its id in the files written ("traffic-0042", "test-007").
    text (str): The query.
    intent (str): Its CLINC150 intent; "oos" for an out-of-scope query.
    source (str): Where it was read, e.g. "data_full.json:train[12]".
    """

    id: str
    text: str
    intent: str
    source: str


@dataclass
class Clinc150Discover:
    """The parts of CLINC150 with intents held out.

    labels (List[str]): The known intents, sorted.
    held_out (List[str]): The held-out intents, sorted.
    train, val, test (List[TextcatRow]): The known intents' splits; val ends
        with `oos_val`, whose rows have no labels.
    traffic (List[Query]): The queries the router routes, shuffled.
    test_held_out (List[Query]): The held-out intents' test queries.
    seed (int): The seed of the held-out choice and of the traffic's order.
    source (Path): The data_full.json read.
    """

    labels: List[str]
    held_out: List[str]
    train: List[TextcatRow]
    val: List[TextcatRow]
    test: List[TextcatRow]
    traffic: List[Query]
    test_held_out: List[Query]
    seed: int
    source: Path

    def counts(self) -> Dict[str, Dict[str, int]]:
        """Per part, its queries of known intents, held-out intents and out of scope."""

        def kinds(intents: List[str]) -> Dict[str, int]:
            held = set(self.held_out)
            n_oos = intents.count(CLINC150_OOS_INTENT)
            n_held = sum(intent in held for intent in intents)
            return {"known": len(intents) - n_oos - n_held, "held_out": n_held, "oos": n_oos}

        splits = {"train": self.train, "val": self.val, "test": self.test}
        counts = {
            name: kinds([row.labels[0] if row.labels else CLINC150_OOS_INTENT for row in rows])
            for name, rows in splits.items()
        }
        counts["traffic"] = kinds([query.intent for query in self.traffic])
        counts["test_held_out"] = kinds([query.intent for query in self.test_held_out])
        return counts

    def manifest(self) -> Dict[str, Any]:
        """What was built and from what: the counts, the intents, the seed and
        the source's sha256."""
        return {
            "dataset": "CLINC150 Full with intents held out, for new intent discovery",
            "seed": self.seed,
            "counts": self.counts(),
            "known_intents": self.labels,
            "held_out_intents": self.held_out,
            "source": {"path": str(self.source), "sha256": file_sha256(self.source)},
        }


def held_out_intents(intents: Sequence[str], n: int, seed: int) -> List[str]:
    """`n` of the intents, chosen with the seed from their sorted list; sorted.

    RAISES (ValueError): `n` is not between 1 and all but one of the intents.
    """
    names = sorted(set(intents))
    if not 1 <= n < len(names):
        raise ValueError(
            f"hold out between 1 and {len(names) - 1} of the {len(names)} intents, not {n}"
        )
    return sorted(random.Random(seed).sample(names, n))


def build_clinc150_discover(
    path: Path, *, held_out: int = DEFAULT_HELD_OUT, seed: int = 0
) -> Clinc150Discover:
    """Split CLINC150 into known and held-out intents, and make the traffic.

    path (Path): CLINC150's data_full.json.
    held_out (int): How many intents to hold out.
    seed (int): Chooses the held-out intents and shuffles the traffic.
    RETURNS (Clinc150Discover): The parts.
    RAISES (ConversionError): A bad row of the file, named; or `held_out` that
        leaves no intent known.
    """
    path = Path(path)
    train, val, test = (read_clinc150(path, split) for split in ("train", "val", "test"))
    intents = sorted({row.labels[0] for row in train if row.labels})
    try:
        held = held_out_intents(intents, held_out, seed)
    except ValueError as err:
        raise ConversionError(str(path), f"{err} (--held-out)") from None
    labels = [intent for intent in intents if intent not in held]
    known, hidden = set(labels), set(held)
    for rows in (val, test):
        for row in rows:
            if row.labels and row.labels[0] not in intents:
                raise ConversionError(
                    row.source, f"intent {row.labels[0]!r} has no training queries"
                )
    traffic_rows = [row for row in train if row.labels and row.labels[0] in hidden]
    traffic_rows += [row for row in val if row.labels and row.labels[0] in known]
    traffic_rows += [row for rows in (train, val) for row in rows if not row.labels]
    random.Random(f"{seed}:traffic").shuffle(traffic_rows)
    width = len(str(max(len(traffic_rows) - 1, 0)))
    traffic = [
        Query(f"traffic-{n:0{width}d}", row.text, _intent(row), row.source)
        for n, row in enumerate(traffic_rows)
    ]
    held_test = [row for row in test if row.labels and row.labels[0] in hidden]
    width = len(str(max(len(held_test) - 1, 0)))
    test_held_out = [
        Query(f"test-{n:0{width}d}", row.text, row.labels[0], row.source)
        for n, row in enumerate(held_test)
    ]
    return Clinc150Discover(
        labels=labels,
        held_out=held,
        train=[row for row in train if row.labels and row.labels[0] in known],
        # the known intents' val queries, then oos_val (as read_clinc150 orders them)
        val=[row for row in val if not row.labels or row.labels[0] in known],
        test=[row for row in test if row.labels and row.labels[0] in known],
        traffic=traffic,
        test_held_out=test_held_out,
        seed=seed,
        source=path,
    )


def _intent(row: TextcatRow) -> str:
    return row.labels[0] if row.labels else CLINC150_OOS_INTENT
