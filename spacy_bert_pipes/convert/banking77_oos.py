"""BANKING77-OOS (Zhang et al., NLP4ConvAI 2022), rebuilt from Banking77 and
CLINC150: 50 of Banking77's intents are in scope, the other 27 are held out
and their queries are in-domain out-of-scope (ID-OOS), and CLINC150's
out-of-scope queries are out-of-domain (OOD-OOS).

The held-out intents are data, one name a line in a file
(`read_intent_list`). `build_banking77_oos` makes the splits, each a list of
`TextcatRow`s per kind ("in_scope", "id_oos", "ood_oos"); an out-of-scope row
has no labels, as `read_clinc150` writes CLINC150's out-of-scope queries:

    train     the in-scope intents' training queries, less the val sample
    val       `val_per_intent` training queries of each intent, in scope and
              held out (ID-OOS), and CLINC150's `oos_val` (OOD-OOS)
    test_id   the in-scope intents' test queries and the held-out intents' ones
    test_ood  the in-scope intents' test queries and CLINC150's `oos_test`
    test      all three kinds

The val sample of an intent is drawn by its own generator, seeded by the seed
and the intent's name: it does not change when another intent moves in or out
of scope. The held-out intents' other training queries are in no split.
"""

import difflib
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set

from ..io.digest import file_sha256
from ..io.errors import ConversionError
from .fields import read_text
from .textcat import TextcatRow, read_clinc150, read_labels_file, read_textcat_rows

# The kinds of query, in the order a split holds them.
KINDS = ("in_scope", "id_oos", "ood_oos")
SPLITS = ("train", "val", "test_id", "test_ood", "test")
# The file in the Banking77 folder that names the held-out intents.
ID_OOS_INTENTS_FILE = "id_oos_intents.txt"
# 30 per intent: val holds 1,500 in-scope queries (the paper's 1,506) and
# leaves 5,911 to train on (the paper's 5,905).
DEFAULT_VAL_PER_INTENT = 30


@dataclass
class Banking77OOS:
    """The rebuilt corpus.

    labels (List[str]): The in-scope intents, in categories.json order.
    id_oos_intents (List[str]): The held-out intents, in file order.
    splits (Dict[str, Dict[str, List[TextcatRow]]]): Per split (SPLITS), the
        rows of each kind (KINDS); out-of-scope rows have no labels.
    seed (int): The seed of the val sample.
    val_per_intent (int): Training queries of each intent in val.
    unused_id_oos (int): The held-out intents' training queries in no split.
    sources (Dict[str, Path]): The files read, by role.
    """

    labels: List[str]
    id_oos_intents: List[str]
    splits: Dict[str, Dict[str, List[TextcatRow]]]
    seed: int
    val_per_intent: int
    unused_id_oos: int
    sources: Dict[str, Path]

    def rows(self, split: str) -> List[TextcatRow]:
        """A split's rows: the in-scope ones, then ID-OOS, then OOD-OOS."""
        return [row for kind in KINDS for row in self.splits[split][kind]]

    def counts(self) -> Dict[str, Dict[str, int]]:
        """The rows of each kind per split."""
        return {split: {kind: len(self.splits[split][kind]) for kind in KINDS} for split in SPLITS}

    def manifest(self) -> Dict[str, Any]:
        """What was built and from what: counts per split and kind, the
        intents, the seed and each source file's sha256."""
        return {
            "dataset": "BANKING77-OOS (Zhang et al., NLP4ConvAI 2022), rebuilt",
            "seed": self.seed,
            "val_per_intent": self.val_per_intent,
            "counts": self.counts(),
            "unused_id_oos_training_queries": self.unused_id_oos,
            "in_scope_intents": self.labels,
            "id_oos_intents": self.id_oos_intents,
            "sources": {
                role: {"path": str(path), "sha256": file_sha256(path)}
                for role, path in self.sources.items()
            },
        }


def read_intent_list(path: Path, known: Sequence[str]) -> List[str]:
    """Read intent names, one a line (blank lines skipped), each one of `known`.

    path (Path): The file, UTF-8 encoded.
    known (Sequence[str]): The names allowed, e.g. Banking77's categories.
    RETURNS (List[str]): The names, in file order.
    """
    path = Path(path)
    names: Dict[str, int] = {}
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        name = line.strip()
        if not name:
            continue
        where = f"{path}:{number}"
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConversionError(
                where, f"unknown intent {name!r}: not one of the {len(known)} known intents{hint}"
            )
        if name in names:
            raise ConversionError(where, f"intent {name!r} repeats line {names[name]}")
        names[name] = number
    if not names:
        raise ConversionError(str(path), "no intent names: expected one a line")
    return list(names)


def build_banking77_oos(
    banking77_dir: Path,
    clinc150_json: Path,
    *,
    id_oos_intents: Optional[Path] = None,
    val_per_intent: int = DEFAULT_VAL_PER_INTENT,
    seed: int = 0,
) -> Banking77OOS:
    """Rebuild BANKING77-OOS from Banking77 and CLINC150.

    banking77_dir (Path): The folder of Banking77's train.csv, test.csv (columns
        text, category) and categories.json.
    clinc150_json (Path): CLINC150's data_full.json.
    id_oos_intents (Optional[Path]): The held-out intents, one a line (default:
        id_oos_intents.txt in `banking77_dir`).
    val_per_intent (int): Training queries of each intent that go to val.
    seed (int): Seeds the val sample.
    RETURNS (Banking77OOS): The splits.
    """
    if val_per_intent < 0:
        raise ValueError(f"val_per_intent must be 0 or more, got {val_per_intent}")
    banking77_dir = Path(banking77_dir)
    id_oos_path = Path(id_oos_intents or banking77_dir / ID_OOS_INTENTS_FILE)
    sources = {
        "banking77_train": banking77_dir / "train.csv",
        "banking77_test": banking77_dir / "test.csv",
        "banking77_categories": banking77_dir / "categories.json",
        "id_oos_intents": id_oos_path,
        "clinc150": Path(clinc150_json),
    }
    categories = read_labels_file(sources["banking77_categories"])
    held_out = read_intent_list(id_oos_path, categories)
    if len(held_out) == len(categories):
        raise ConversionError(str(id_oos_path), "every intent is held out: none is left in scope")
    labels = [intent for intent in categories if intent not in held_out]
    scope = set(labels)
    train = _read_banking77(sources["banking77_train"], categories)
    test = _read_banking77(sources["banking77_test"], categories)
    in_val = _val_sample(train, categories, scope, val_per_intent, seed, sources["banking77_train"])
    splits: Dict[str, Dict[str, List[TextcatRow]]] = {
        split: {kind: [] for kind in KINDS} for split in SPLITS
    }
    unused = 0
    for index, row in enumerate(train):
        in_scope = row.labels[0] in scope
        if index in in_val:
            kind = "in_scope" if in_scope else "id_oos"
            splits["val"][kind].append(row if in_scope else _out_of_scope(row))
        elif in_scope:
            splits["train"]["in_scope"].append(row)
        else:
            unused += 1
    in_scope_test = [row for row in test if row.labels[0] in scope]
    id_oos_test = [_out_of_scope(row) for row in test if row.labels[0] not in scope]
    splits["val"]["ood_oos"] = _clinc150_out_of_scope(sources["clinc150"], "val")
    ood_oos_test = _clinc150_out_of_scope(sources["clinc150"], "test")
    splits["test_id"].update(in_scope=in_scope_test, id_oos=id_oos_test)
    splits["test_ood"].update(in_scope=in_scope_test, ood_oos=ood_oos_test)
    splits["test"].update(in_scope=in_scope_test, id_oos=id_oos_test, ood_oos=ood_oos_test)
    return Banking77OOS(
        labels=labels,
        id_oos_intents=held_out,
        splits=splits,
        seed=seed,
        val_per_intent=val_per_intent,
        unused_id_oos=unused,
        sources=sources,
    )


def _read_banking77(path: Path, categories: Sequence[str]) -> List[TextcatRow]:
    known = set(categories)
    rows = list(read_textcat_rows(path, label_column="category"))
    for row in rows:
        if len(row.labels) != 1 or row.labels[0] not in known:
            close = difflib.get_close_matches(row.labels[0], categories, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConversionError(
                row.source,
                f"category {'|'.join(row.labels)!r} is not one of the {len(categories)} in "
                f"categories.json{hint}",
            )
    return rows


def _val_sample(
    train: List[TextcatRow],
    categories: Sequence[str],
    in_scope: Set[str],
    val_per_intent: int,
    seed: int,
    train_path: Path,
) -> Set[int]:
    """The indices of the training rows that go to val."""
    by_intent: Dict[str, List[int]] = defaultdict(list)
    for index, row in enumerate(train):
        by_intent[row.labels[0]].append(index)
    chosen: Set[int] = set()
    for intent in categories:
        indices = by_intent[intent]
        # an in-scope intent keeps at least one query to train on
        needed = val_per_intent + (intent in in_scope)
        if len(indices) < needed:
            kind = "in-scope" if intent in in_scope else "held-out"
            raise ConversionError(
                str(train_path),
                f"the {kind} intent {intent!r} has {len(indices)} training queries, "
                f"fewer than the {needed} it needs for {val_per_intent} in val"
                + (" and one to train on" if intent in in_scope else "")
                + "; lower --val-per-intent",
            )
        # one generator per intent: its sample does not depend on the others
        chosen.update(random.Random(f"{seed}:{intent}").sample(indices, val_per_intent))
    return chosen


def _out_of_scope(row: TextcatRow) -> TextcatRow:
    return TextcatRow(row.text, (), row.source)


def _clinc150_out_of_scope(path: Path, split: str) -> List[TextcatRow]:
    return [row for row in read_clinc150(path, split) if not row.labels]
