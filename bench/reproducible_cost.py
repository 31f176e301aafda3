"""What `--reproducible` costs in speed (not a test): a trained pipeline over
Banking77 test queries, loaded with and without reproducible batches, timed in
alternating rounds in one process.

    python bench/reproducible_cost.py PIPELINE [--limit 1000] [--rounds 2]
        [--batch-size 64] [--precision fp32] [--output FILE]
"""

import json
import platform
import sys
import time
from pathlib import Path

import typer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from speed import DEFAULT_DATA, load_texts  # noqa: E402


def main(
    pipeline: str = typer.Argument(..., help="A trained pipeline folder"),
    limit: int = typer.Option(1000, help="Banking77 test queries"),
    rounds: int = typer.Option(2, help="Alternating rounds of each mode"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch size"),
    precision: str = typer.Option("fp32", help="Prediction precision"),
    output: Path = typer.Option(REPO / "bench" / "results" / "reproducible_cost.json"),
) -> None:
    from spacy_bert_pipes.loading import load_pipeline

    texts = load_texts("short", limit, DEFAULT_DATA)
    modes = {
        name: load_pipeline(pipeline, precision=precision, reproducible=name == "reproducible")
        for name in ("default", "reproducible")
    }
    for nlp in modes.values():  # warm-up
        list(nlp.pipe(texts[:64], batch_size=batch_size))
    seconds = {name: [] for name in modes}
    for _ in range(rounds):
        for name, nlp in modes.items():
            start = time.perf_counter()
            for _doc in nlp.pipe(texts, batch_size=batch_size):
                pass
            seconds[name].append(round(time.perf_counter() - start, 2))
            print(name, seconds[name][-1], flush=True)
    best = {name: min(values) for name, values in seconds.items()}
    result = {
        "command": " ".join(sys.argv),
        "machine": platform.platform(),
        "texts": len(texts),
        "seconds": seconds,
        "reproducible_over_default_time": round(best["reproducible"] / best["default"], 3),
    }
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    print(result)


if __name__ == "__main__":
    typer.run(main)
