"""The one-pass pipeline beside the heads trained apart: each task's score on its
own test set and the docs/s of both pipelines.

Reads the metrics JSONs that `bert-pipes evaluate` writes in the workflow
(project.yml): the one-pass pipeline on each test set as
`multitask_<source>.json` (workflow `all`), the heads apart as `textcat.json`,
`multilabel.json`, `ner.json` and `qa_slots.json` (workflows `apart` and
`one-pass`) where they exist, and optionally the speed JSON of
`scripts/one_pass.py`.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional


class Task(NamedTuple):
    name: str
    apart: str  # metrics file stem of the head trained apart
    apart_key: str
    one_pass: str  # metrics file stem of the one-pass pipeline on the same test set
    one_pass_key: str


TASKS = (
    Task("Banking77 accuracy", "textcat", "cats_accuracy", "multitask_banking77", "cats_accuracy"),
    Task("NLU++ micro F1", "multilabel", "cats_micro_f", "multitask_nluplusplus", "nlu_micro_f"),
    Task("CoNLL-2003 F1", "ner", "ents_f", "multitask_conll2003", "ents_f"),
    Task("Restaurant-8k span F1", "qa_slots", "qa_span_f", "multitask_restaurant8k", "qa_span_f"),
    Task("Restaurant-8k SQuAD F1", "qa_slots", "qa_f1", "multitask_restaurant8k", "qa_f1"),
)


class CompareError(ValueError):
    """A metrics file is missing, unreadable or lacks the score it should hold."""


def _read(path: Path) -> Dict[str, Any]:
    if not path.exists():
        raise CompareError(f"{path}: no such metrics file (run `bert-pipes evaluate` first)")
    try:
        data = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError) as err:
        raise CompareError(f"{path}: not a metrics JSON ({err})") from err
    if not isinstance(data, dict):
        raise CompareError(f"{path}: not a metrics JSON (a {type(data).__name__})")
    return data


def _score(metrics_dir: Path, stem: str, key: str) -> float:
    path = metrics_dir / f"{stem}.json"
    value = _read(path).get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise CompareError(f"{path}: no score {key!r} (found {value!r})")
    return float(value) * 100


class Row(NamedTuple):
    task: str
    apart: Optional[float]  # None: the head apart was not scored in the folder
    one_pass: float

    def cells(self) -> List[str]:
        """The task, both scores and their difference, as a table shows them
        ("-" where the head apart was not scored)."""
        if self.apart is None:
            return [self.task, "-", f"{self.one_pass:.2f}", "-"]
        diff = self.one_pass - self.apart
        return [self.task, f"{self.apart:.2f}", f"{self.one_pass:.2f}", f"{diff:+.2f}"]


# Where the heads-apart scores come from, for a reader of a folder without them.
APART_SOURCE = (
    "`spacy project run one-pass` trains the four heads apart at the same budget, "
    "scores them on the same test sets and fills this column"
)


def compare(metrics_dir: Path) -> List[Row]:
    """Each task's one-pass score and, where its metrics file is in the folder,
    the score of the head trained apart."""
    rows = []
    for task in TASKS:
        one = _score(metrics_dir, task.one_pass, task.one_pass_key)
        apart_path = metrics_dir / f"{task.apart}.json"
        apart = _score(metrics_dir, task.apart, task.apart_key) if apart_path.exists() else None
        rows.append(Row(task.name, apart, one))
    return rows


def side_by_side(metrics_dir: Path, speed: Optional[Path] = None) -> str:
    """The Markdown table: one row per task, and one for the docs/s of the two
    pipelines when `speed` (scripts/one_pass.py's JSON) is given; a note under it
    when a head apart was not scored."""
    lines: List[str] = [
        "| task (own test set) | heads apart | one pass | difference |",
        "|---|---|---|---|",
    ]
    rows = compare(metrics_dir)
    lines += ["| " + " | ".join(row.cells()) + " |" for row in rows]
    if speed is not None:
        data = _read(speed)
        try:
            apart_dps = float(data["pipelines"]["assembled"]["docs_per_second"])
            one_dps = float(data["pipelines"]["one_pass"]["docs_per_second"])
            texts = int(data["texts"])
        except (KeyError, TypeError, ValueError) as err:
            raise CompareError(f"{speed}: not a scripts/one_pass.py result ({err!r})") from err
        lines.append(
            f"| docs/s ({texts} texts, {data.get('device', 'cpu')}) | {apart_dps:.1f} | "
            f"{one_dps:.1f} | {one_dps / apart_dps:.2f}x |"
        )
    if any(row.apart is None for row in rows):
        lines += ["", f"Heads apart: not scored in `{metrics_dir}`; {APART_SOURCE}."]
    return "\n".join(lines) + "\n"
