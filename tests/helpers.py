"""What several test modules share, imported as a module (`from helpers import ...`).

Fixtures stay in conftest.py, which pytest loads by itself; conftest is not
imported by the tests.
"""

import json
import random
from pathlib import Path
from typing import Any, List

WORDS = (
    "the a an of to in and is was for on with card my i you it this that what how why "
    "money bank transfer account payment refund pin new top up cash exchange rate "
    "hello world paris london new york apple google john smith is in city company "
    "not work working arrive arrived still waiting"
).split()

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: List[Any]) -> Path:
    return write(path, "\n".join(json.dumps(record) for record in records) + "\n")


def write_texts(path: Path, n: int = 60, seed: int = 0) -> Path:
    """A JSONL file of n random texts of WORDS, with ids "t0", "t1"..."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30)))
        lines.append(json.dumps({"id": f"t{i}", "text": words}))
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path
