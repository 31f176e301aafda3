"""How long workers take to start (not a test): `runtime.pipe_in_workers` of a
trained pipeline over a few texts, called several times in one process, with
its workers forked from the fork server (the pool's way) or spawned (the way
before it). Each start method runs in a fresh process of its own, so the first
fork-server call pays for starting the server.

Per call: the wall seconds from the call to its last Doc, and the CPU seconds
the whole machine spent meanwhile (from /proc/stat: the workers, and the
server, are not this process's children). Each worker loads the pipeline, so
both numbers include that.

    python bench/worker_start.py PIPELINE [--workers 2] [--calls 3] [--texts 8]
        [--output bench/results/worker_start.json]
"""

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import typer

REPO = Path(__file__).resolve().parents[1]
METHODS = ("forkserver", "spawn")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def busy_seconds() -> float:
    """CPU seconds the machine has spent outside idle and iowait since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def calls_in_this_process(
    method: str, pipeline: str, workers: int, calls: int, n_texts: int
) -> List[Dict[str, float]]:
    import multiprocessing

    from spacy_bert_pipes.runtime import pipe_in_workers, pool

    if method == "spawn":
        pool.start_context = lambda fork_server=True: multiprocessing.get_context("spawn")  # type: ignore
    texts = [f"my card number {i} is not working, what should I do?" for i in range(n_texts)]
    chunk = max(1, n_texts // workers)  # a chunk per worker: every worker starts
    timings = []
    for _ in range(calls):
        start, busy = time.perf_counter(), busy_seconds()
        docs = list(pipe_in_workers(pipeline, texts, workers=workers, chunk_size=chunk))
        assert len(docs) == n_texts and all(doc.cats for doc in docs)
        timings.append(
            {"seconds": time.perf_counter() - start, "machine_cpu_seconds": busy_seconds() - busy}
        )
    return timings


def main(
    pipeline: str = typer.Argument(..., help="A trained pipeline folder"),
    workers: int = typer.Option(2, help="Workers per call"),
    calls: int = typer.Option(3, help="Calls in one process"),
    texts: int = typer.Option(8, help="Texts per call"),
    output: Path = typer.Option(REPO / "bench" / "results" / "worker_start.json"),
    child: str = typer.Option("", hidden=True, help="Run one start method here"),
) -> None:
    if child:
        print(json.dumps(calls_in_this_process(child, pipeline, workers, calls, texts)))
        return
    results: Dict[str, Any] = {
        "benchmark": "worker_start",
        "command": " ".join(["bench/worker_start.py", *sys.argv[1:]]),
        "machine": cpu_name(),
        "cores": os.cpu_count(),
        "workers": workers,
        "texts": texts,
        "methods": {},
    }
    for method in METHODS:
        found = subprocess.run(
            [sys.executable, __file__, pipeline, "--workers", str(workers), "--calls",
             str(calls), "--texts", str(texts), "--child", method],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        results["methods"][method] = json.loads(found.stdout.strip().splitlines()[-1])
        for number, timing in enumerate(results["methods"][method], 1):
            print(
                f"{method:10s} call {number}: {timing['seconds']:6.2f} s, "
                f"machine CPU {timing['machine_cpu_seconds']:6.2f} s"
            )
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"Wrote {output}")


if __name__ == "__main__":
    typer.run(main)
