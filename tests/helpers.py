"""What several test modules share, imported as a module (`from helpers import ...`).

Fixtures stay in conftest.py, which pytest loads by itself; conftest is not
imported by the tests.
"""

import json
from pathlib import Path
from typing import Any, List

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: List[Any]) -> Path:
    return write(path, "\n".join(json.dumps(record) for record in records) + "\n")
