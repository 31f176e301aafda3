"""`bert-pipes annotate` with 1, 2, 4... worker processes on one machine (not a
test): words per second of the whole command, and whether OUTPUT is the same
bytes for every number of workers.

    python bench/annotate_workers.py PIPELINE --workload news|short
        [--repeat 5] [--limit 0] [--workers 1,2,4,8] [--gpu-id -1]
        [--batch-size 256] [--chunk-size 1000] [--precision fp32]
        [--data ../shared/datasets] [--work /tmp/annotate_workers]
        [--output bench/results/annotate_workers_<workload>.json]

The input is the workload's texts (`bench/speed.py`'s: news = SQuAD dev
paragraphs, short = Banking77 test queries) repeated `--repeat` times, as a
JSONL collection. Each run is the CLI in a fresh process, timed from start to
exit (loading the pipeline in every worker included); "words" are spaCy
tokens (`spacy.blank("en")`).
"""

import hashlib
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
sys.path.insert(0, str(REPO / "bench"))

import extras  # noqa: E402  (bench/extras.py)
from speedlib.workloads import DEFAULT_DATA, load_texts  # noqa: E402

extras.use()  # as bench/speed.py: the references here and in the commands it starts


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(
    pipeline: str = typer.Argument(..., help="A trained pipeline folder"),
    workload: str = typer.Option("news", help="news or short"),
    repeat: int = typer.Option(5, help="Times the workload's texts are repeated"),
    limit: int = typer.Option(0, help="The workload's first N texts (0: all)"),
    workers: str = typer.Option("1,2,4,8", help="Comma-separated numbers of workers (or auto)"),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="The GPU, or -1 for the CPU"),
    batch_size: int = typer.Option(256, help="--batch-size of annotate"),
    chunk_size: int = typer.Option(1000, help="--chunk-size of annotate"),
    precision: str = typer.Option("fp32", help="--precision of annotate"),
    data: Path = typer.Option(DEFAULT_DATA, help="The shared datasets folder"),
    work: Path = typer.Option(Path("/tmp/annotate_workers"), help="Where inputs and outputs go"),
    output: Path = typer.Option(None, help="The JSON results file"),
) -> None:
    import spacy

    texts = load_texts(workload, limit, data) * repeat
    tokenizer = spacy.blank("en").tokenizer
    words = sum(len(doc) for doc in tokenizer.pipe(texts))
    work.mkdir(parents=True, exist_ok=True)
    input_path = work / f"{workload}.jsonl"
    with input_path.open("w", encoding="utf8") as file_:
        for i, text in enumerate(texts):
            file_.write(json.dumps({"id": f"{workload}-{i}", "text": text}) + "\n")
    print(f"{workload}: {len(texts)} texts, {words} words", flush=True)
    runs: List[Dict[str, Any]] = []
    first_digest = None
    output = output or REPO / "bench" / "results" / f"annotate_workers_{workload}.json"
    output.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:  # after every run: a run cut off keeps the ones before
        result = {
            "command": " ".join(sys.argv),
            "machine": {
                "platform": platform.platform(),
                "cpus": len(os.sched_getaffinity(0)),
                "gpu": _gpu_name(gpu_id),
            },
            "workload": workload,
            "texts": len(texts),
            "words": words,
            "settings": {
                "batch_size": batch_size,
                "chunk_size": chunk_size,
                "precision": precision,
                "gpu_id": gpu_id,
            },
            "runs": runs,
        }
        output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")

    for text in [w.strip() for w in workers.split(",") if w.strip()]:
        n: Any = int(text) if text.isdigit() else text  # "auto": the engine decides
        out = work / f"out_{workload}_{n}.jsonl"
        command = [
            sys.executable, "-m", "spacy_bert_pipes", "annotate", pipeline, str(input_path),
            str(out), "--workers", str(n), "--gpu-id", str(gpu_id), "--batch-size",
            str(batch_size), "--chunk-size", str(chunk_size), "--precision", precision,
            "--overwrite",
        ]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            runs.append({"workers": n, "error": done.stderr[-2000:]})
            print(f"  workers {n}: failed\n{done.stderr[-2000:]}", flush=True)
            write()
            continue
        sha = digest(out)
        first_digest = first_digest or sha
        run = {
            "workers": n,
            "seconds": round(seconds, 2),
            "words_per_second": round(words / seconds),
            "output_sha256": sha,
            "same_bytes_as_first": sha == first_digest,
        }
        runs.append(run)
        write()
        print(
            f"  workers {n}: {run['words_per_second']} words/s, {seconds:.1f} s, "
            f"same bytes: {run['same_bytes_as_first']}",
            flush=True,
        )
    print(f"wrote {output}")


def _gpu_name(gpu_id: int) -> str:
    if gpu_id < 0:
        return ""
    import torch

    return torch.cuda.get_device_name(gpu_id)


if __name__ == "__main__":
    typer.run(main)
