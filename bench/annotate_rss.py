"""Resident memory of `bert-pipes annotate` over many short docs (not a test).

    python bench/annotate_rss.py PIPELINE [--n-docs 200000] [--chunk-size 1000]
        [--batch-size 64] [--precision fp32|bf16|int8|auto] [--workdir DIR]
        [--output annotate_rss.json] [--plot annotate_rss.png]

Writes N short docs to a JSONL file, each with a number of its own (so that
spaCy's string store would grow with every doc without `nlp.memory_zone`),
annotates them in-process with `spacy_bert_pipes.annotate.annotate`, samples
the process RSS after every chunk and writes JSON: the RSS after the first
10,000 docs, the peak of the samples, the last one, the kernel's high-water
mark, and the whole trace, and whether the peak stays within 10% of the RSS
after the first 10,000 docs. Flat is the goal; what may grow is the set of ids
kept to report duplicates (roughly 100 bytes per id). --precision runs
every bert encoder of the pipeline at that precision (memory does not depend
on it; time does). --plot draws RSS against docs annotated (needs matplotlib).
"""

import json
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

from spacy_bert_pipes.annotate import AnnotateOptions, annotate
from spacy_bert_pipes.loading import Precision

WORDS = "my card payment refund transfer account bank cash pin new arrived still waiting".split()
NAMES = ["john smith", "angela merkel", "apple", "google", "paris", "london", "new york"]
FIRST_POINT = 10_000


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def write_docs(path: Path, n_docs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf8") as file_:
        for i in range(n_docs):
            words = rng.sample(WORDS, rng.randint(3, 8))
            text = f"{' '.join(words)} {rng.choice(NAMES)} order {i * 7919 % 10**7}"
            file_.write(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")


def main(
    pipeline: str = typer.Argument(..., help="A trained pipeline (folder or package)"),
    n_docs: int = typer.Option(200_000, help="Docs to generate and annotate"),
    chunk_size: int = typer.Option(1000, help="Rows per chunk (--chunk-size)"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch size (--batch-size)"),
    workdir: Optional[Path] = typer.Option(
        None, help="Where to write the input and output (default: a temporary folder)"
    ),
    precision: Optional[Precision] = typer.Option(
        None, help="Run the pipeline's encoders at this precision (default: as saved)"
    ),
    output: Path = typer.Option(Path("annotate_rss.json"), help="The JSON summary to write"),
    plot: Optional[Path] = typer.Option(None, help="A PNG of RSS against docs annotated"),
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        input_path = folder / "docs.jsonl"
        write_docs(input_path, n_docs)
        trace: List[Dict[str, Any]] = []
        started = time.perf_counter()

        def sample(rows_done: int) -> None:
            trace.append({"docs": rows_done, "rss_mb": round(rss_mb(), 1)})
            if len(trace) % 10 == 1:
                typer.echo(f"{rows_done:>9} docs  rss {trace[-1]['rss_mb']} MB", err=True)

        options = AnnotateOptions(
            chunk_size=chunk_size, batch_size=batch_size, overwrite=True, precision=precision
        )
        summary = annotate(
            pipeline, input_path, folder / "annotated.jsonl", options, on_chunk=sample
        )
        seconds = time.perf_counter() - started
    after_first = next((t["rss_mb"] for t in trace if t["docs"] >= FIRST_POINT), None)
    peak = max(t["rss_mb"] for t in trace) if trace else None
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()} {platform.processor()}".strip(),
        "pipeline": pipeline,
        "precision": precision or "as saved",
        "n_docs": n_docs,
        "chunk_size": chunk_size,
        "batch_size": batch_size,
        "docs_per_second": round(summary.input_rows / seconds, 1),
        "rss_mb_after_first_10000_docs": after_first,
        "rss_mb_peak": peak,
        "peak_within_10_percent_of_first_10000": (
            None if after_first is None or peak is None else peak <= 1.1 * after_first
        ),
        "rss_mb_last": trace[-1]["rss_mb"] if trace else None,
        # ru_maxrss is in KiB on Linux: the process's high-water mark, loading included.
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trace": trace,
    }
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    typer.echo(json.dumps({k: v for k, v in result.items() if k != "trace"}))
    if plot is not None:
        draw(plot, trace, after_first)


def draw(path: Path, trace: List[Dict[str, Any]], after_first: Optional[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 3.5))
    axes.plot([t["docs"] for t in trace], [t["rss_mb"] for t in trace], label="RSS")
    if after_first is not None:
        axes.axhline(after_first * 1.1, color="tab:red", linestyle="--", label="+10% of RSS at 10k")
    axes.set_xlabel("docs annotated")
    axes.set_ylabel("RSS (MB)")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower right")
    axes.set_title("bert-pipes annotate: resident memory")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


if __name__ == "__main__":
    typer.run(main)
