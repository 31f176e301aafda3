"""Resident memory of bert_textcat training over many steps (real encoder, Banking77).

    python bench/train_rss.py [--steps 60] [--batch-size 32] [--every 5]

Prints the process RSS every few steps. A flat line is the goal: variable-size
batches once fragmented glibc's heap until the kernel killed a full run.
"""

import csv
import json
import platform
from pathlib import Path

import spacy
import typer
from spacy.training import Example
from thinc.api import Adam

BANKING77 = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "banking77"


def rss_mb() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 // 2**20


def main(
    steps: int = typer.Option(60, help="Update steps"),
    batch_size: int = typer.Option(32, help="Docs per step"),
    every: int = typer.Option(5, help="Report every N steps"),
    data: Path = typer.Option(BANKING77 / "train.csv", help="Banking77 train.csv"),
) -> None:
    with data.open(encoding="utf8", newline="") as file_:
        rows = list(csv.DictReader(file_))
    labels = sorted({r["category"] for r in rows})
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"pooling": "mean"}})
    needed = rows[: steps * batch_size]
    examples = [
        Example.from_dict(
            nlp.make_doc(r["text"]), {"cats": {lb: float(lb == r["category"]) for lb in labels}}
        )
        for r in needed
    ]
    nlp.initialize(lambda: examples[:200])
    optimizer = Adam(learn_rate=1e-4, use_averages=False)
    trace = []
    for step in range(steps):
        start = (step * batch_size) % len(examples)
        nlp.update(examples[start : start + batch_size], sgd=optimizer, drop=0.1)
        if step % every == 0 or step == steps - 1:
            trace.append({"step": step, "rss_mb": rss_mb()})
            typer.echo(f"step {step:5d}  rss {trace[-1]['rss_mb']} MB")
    summary = {
        "machine": f"{platform.machine()} {platform.processor()}",
        "steps": steps,
        "batch_size": batch_size,
        "first_mb": trace[0]["rss_mb"],
        "last_mb": trace[-1]["rss_mb"],
    }
    typer.echo(json.dumps(summary))


if __name__ == "__main__":
    typer.run(main)
