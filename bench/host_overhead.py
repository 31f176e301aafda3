"""How fast our pipes can go when the encoder costs nothing: `nlp.pipe` of
bert_encoder + bert_textcat + bert_ner (bench/speed.py's ours-textcat-ner) timed
with the real forward, then with the transformer's forward replaced by one that
returns zeros of the right shape. The second number is the ceiling set by the
host-side work (tokenizing, windows, batching, heads, decoding, writing Docs),
which is what a GPU leaves (not a test).

    python bench/host_overhead.py [--workload news] [--limit 200] [--repeats 3]

Writes bench/results/host_overhead_<workload>.json.
"""

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import torch
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_LIMITS,
    RESULTS,
    Settings,
    build_ours,
    count_words,
    load_texts,
    machine,
    versions,
)


def best_seconds(run: Any, texts: List[str], repeats: int) -> float:
    run(texts[:20])  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(texts)
        times.append(time.perf_counter() - start)
    return min(times)


def main(
    workload: str = typer.Option("news", help="short, news or long (as bench/speed.py)"),
    limit: int = typer.Option(0, help="Texts (0: speed.py's default sample size)"),
    repeats: int = typer.Option(3, help="Timed runs of each variant (the fastest is kept)"),
    threads: int = typer.Option(2, help="torch.set_num_threads"),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder"),
) -> None:
    from spacy_bert_pipes.models import hf_shim

    torch.set_num_threads(threads)
    limit = limit or DEFAULT_LIMITS[workload]
    s = Settings(workload, limit, "fp32", threads, 4096, 128, 32, 128, 32, repeats, -1, str(data))
    texts = load_texts(workload, limit, data)
    words = count_words(texts)
    run, settings = build_ours(s, "ours-textcat-ner")
    with_forward = best_seconds(run, texts, repeats)
    forward = hf_shim.TransformerModule.forward

    def zeros(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        # (batch, length, width): what the real forward returns, without computing it
        return torch.zeros(*input_ids.shape, self.width)

    hf_shim.TransformerModule.forward = zeros  # type: ignore[method-assign]
    try:
        without = best_seconds(run, texts, repeats)
    finally:
        hf_shim.TransformerModule.forward = forward  # type: ignore[method-assign]
    record: Dict[str, Any] = {
        "benchmark": "host_overhead",
        "command": "python bench/host_overhead.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "versions": versions(),
        "python": platform.python_version(),
        "workload": workload,
        "texts": len(texts),
        "words": words,
        "settings": settings,
        "seconds_with_forward": round(with_forward, 3),
        "seconds_without_forward": round(without, 3),
        "words_per_second_with_forward": round(words / with_forward, 1),
        "words_per_second_without_forward": round(words / without, 1),
        "host_share_of_time": round(without / with_forward, 3),
    }
    path = RESULTS / f"host_overhead_{workload}.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    typer.echo(
        f"{words} words: {record['words_per_second_with_forward']:.0f} words/s with the "
        f"forward, {record['words_per_second_without_forward']:.0f} without (host work "
        f"{100 * record['host_share_of_time']:.1f}% of the time); wrote {path}"
    )


if __name__ == "__main__":
    typer.run(main)
