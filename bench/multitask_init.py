"""Initialization time of configs/multitask.cfg, with MultiCorpus reading its files
once per nlp and re-reading them at every call as it did before (not a test).

    python bench/multitask_init.py [--rounds 1] [--output bench/results/multitask_init.json]

Each round initializes the pipeline twice, once each way, in turns, in this process
(`spacy.training.initialize.init_nlp` with the config and the corpora of
project.yml, as `spacy train` does before its first step). Run it from a checkout
whose corpus/ the workflow's convert steps have written.
"""

import json
import platform
import time
from pathlib import Path
from typing import Any, Dict, List

import typer
from spacy.training.initialize import init_nlp
from spacy.util import load_config

from spacy_bert_pipes.multitask.corpus import MultiCorpus

REPO = Path(__file__).resolve().parents[1]


def init_seconds(cache: bool) -> float:
    original = MultiCorpus._read

    def read_every_call(self: MultiCorpus, nlp: Any) -> Any:
        self._read_for = None
        return original(self, nlp)

    if not cache:
        MultiCorpus._read = read_every_call  # type: ignore[method-assign]
    try:
        config = load_config(REPO / "configs" / "multitask.cfg")
        start = time.perf_counter()
        init_nlp(config)
        return time.perf_counter() - start
    finally:
        MultiCorpus._read = original  # type: ignore[method-assign]


def main(
    rounds: int = typer.Option(1, help="Rounds of both ways"),
    output: Path = typer.Option(REPO / "bench" / "results" / "multitask_init.json"),
) -> None:
    times: Dict[str, List[float]] = {"read_once": [], "read_every_call": []}
    for _ in range(rounds):
        for cache in (False, True):
            seconds = init_seconds(cache)
            times["read_once" if cache else "read_every_call"].append(round(seconds, 1))
            typer.echo(f"read {'once' if cache else 'every call'}: {seconds:.1f} s")
    result = {
        "command": "python bench/multitask_init.py " + f"--rounds {rounds}",
        "machine": f"{platform.machine()} {platform.processor()}",
        "seconds": times,
        "best_ratio": round(min(times["read_every_call"]) / min(times["read_once"]), 2),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
