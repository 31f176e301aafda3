"""How fast our pipes can go when the encoder costs nothing (not a test).

`nlp.pipe` of the trained bert_encoder + bert_textcat + bert_ner pipeline
(bench/trained.py's textcat-ner, the benches' ours-textcat-ner) timed with the real
forward, then with the transformer's forward replaced by one that returns zeros of
the right shape. The second number is the ceiling set by the host-side work
(tokenizing, windows, batching, heads, decoding, writing Docs): what a fast
accelerator leaves. Both are given per CPU-second of torch's threads (default 1
thread) and per wall second.

`--processes k` shards the texts over k processes (started with "spawn", each on
`--threads` torch threads, texts dealt round-robin) and reports the aggregate
words/s of k processes next to one process over the same texts, in the same run.

    python bench/host_overhead.py [--workloads short,news,long] [--threads 1]
        [--processes 1] [--repeats 3] [--limit 0] [--trained /work/trained]
        [--precision default|fp32|bf16|auto]

Writes bench/results/host_overhead_<workload>_t<threads>_p<processes>.json.
"""

import json
import multiprocessing
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trained as trained_pipelines  # noqa: E402
from speed import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_LIMITS,
    RESULTS,
    count_words,
    load_texts,
    machine,
    versions,
    warmup_texts,
)

PIPELINE = "ours-textcat-ner"
BATCH_SIZE = 128  # texts per nlp.pipe batch, as bench/speed.py


def stub_forward() -> None:
    """Replace the transformer's forward (in this process) by zeros of its shape."""
    import torch

    from spacy_bert_pipes.models import hf_shim

    def zeros(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        # (batch, length, width): what the real forward returns, without computing it
        return torch.zeros(*input_ids.shape, self.width)

    hf_shim.TransformerModule.forward = zeros  # type: ignore[method-assign]


def load(pipeline: str, precision: str) -> Any:
    from spacy_bert_pipes.loading import load_pipeline

    return load_pipeline(pipeline, precision=None if precision == "default" else precision)


def worker(
    rank: int,
    texts: List[str],
    pipeline: str,
    precision: str,
    threads: int,
    stub: bool,
    repeats: int,
    barrier: Any,
    results: Any,
) -> None:
    """One process: load, warm up, then `repeats` timed passes over its shard, each
    started together with the other workers' (barrier)."""
    try:
        import torch

        torch.set_num_threads(threads)
        nlp = load(pipeline, precision)
        if stub:
            stub_forward()
        for _ in nlp.pipe(warmup_texts(texts), batch_size=BATCH_SIZE):
            pass
        runs = []
        for _ in range(repeats):
            barrier.wait()
            wall, cpu = time.perf_counter(), time.process_time()
            entities = 0
            for doc in nlp.pipe(texts, batch_size=BATCH_SIZE):
                entities += len(doc.ents)
            runs.append(
                {
                    "start": wall,
                    "end": time.perf_counter(),
                    "cpu_seconds": time.process_time() - cpu,
                    "entities": entities,
                }
            )
        results.put({"rank": rank, "runs": runs, "threads": torch.get_num_threads()})
    except BaseException as error:  # the parent reports it
        barrier.abort()
        results.put({"rank": rank, "error": f"{type(error).__name__}: {error}"})


def run_processes(
    texts: List[str],
    pipeline: str,
    precision: str,
    threads: int,
    processes: int,
    stub: bool,
    repeats: int,
) -> Dict[str, Any]:
    """Time `processes` workers over round-robin shards of the texts: per repeat the
    span from the first start to the last end; the fastest repeat is kept."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    shards = [texts[rank::processes] for rank in range(processes)]
    workers = [
        context.Process(
            target=worker,
            args=(rank, shard, pipeline, precision, threads, stub, repeats, barrier, results),
        )
        for rank, shard in enumerate(shards)
    ]
    for process in workers:
        process.start()
    got = [results.get() for _ in workers]
    for process in workers:
        process.join()
    errors = [r["error"] for r in got if "error" in r]
    if errors:
        raise RuntimeError(f"{len(errors)} worker(s) failed: {errors[0]}")
    spans = []
    for r in range(repeats):
        runs = [g["runs"][r] for g in got]
        spans.append(
            {
                "seconds": max(run["end"] for run in runs) - min(run["start"] for run in runs),
                "cpu_seconds": sum(run["cpu_seconds"] for run in runs),
                "entities": sum(run["entities"] for run in runs),
            }
        )
    best = min(spans, key=lambda span: span["seconds"])
    return {
        "processes": processes,
        "threads_per_process": got[0]["threads"],
        "seconds": round(best["seconds"], 3),
        "cpu_seconds": round(best["cpu_seconds"], 3),
        "seconds_per_repeat": [round(span["seconds"], 3) for span in spans],
        "entities": best["entities"],
    }


def measure(
    texts: List[str],
    words: int,
    pipeline: str,
    precision: str,
    threads: int,
    processes: int,
    stub: bool,
    repeats: int,
) -> Dict[str, Any]:
    out = run_processes(texts, pipeline, precision, threads, processes, stub, repeats)
    out["words_per_second"] = round(words / out["seconds"], 1)
    out["words_per_cpu_second"] = round(words / out["cpu_seconds"], 1)
    return out


def main(
    workloads: str = typer.Option("short,news,long", help="Comma-separated: short, news, long"),
    limit: int = typer.Option(0, help="Texts per workload (0: speed.py's default sample size)"),
    repeats: int = typer.Option(3, help="Timed passes of each variant (the fastest is kept)"),
    threads: int = typer.Option(1, help="torch threads of each process"),
    processes: int = typer.Option(1, help="Also run the texts sharded over this many processes"),
    forward: bool = typer.Option(True, help="Also time the real forward (not only the stub)"),
    precision: str = typer.Option(
        "default", help="Encoder prediction precision: default (as saved), fp32, bf16, auto"
    ),
    trained: Optional[Path] = typer.Option(
        None,
        help="bench/trained.py's folder (default: $BERT_PIPES_TRAINED or /work/trained, "
        "trained first when not READY)",
    ),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder"),
) -> None:
    folder = trained_pipelines.ensure(trained)
    pipeline = str(trained_pipelines.pipeline_path(folder, PIPELINE))
    scores = json.loads((folder / "trained.json").read_text(encoding="utf8"))
    counts = sorted({1, processes})
    for workload in [w.strip() for w in workloads.split(",") if w.strip()]:
        texts = load_texts(workload, limit or DEFAULT_LIMITS[workload], data)
        words = count_words(texts)
        variants: Dict[str, Any] = {}
        for k in counts:
            variants[f"stub_p{k}"] = measure(
                texts, words, pipeline, precision, threads, k, True, repeats
            )
            if forward:
                variants[f"forward_p{k}"] = measure(
                    texts, words, pipeline, precision, threads, k, False, repeats
                )
        record: Dict[str, Any] = {
            "benchmark": "host_overhead",
            "command": "python bench/host_overhead.py " + " ".join(sys.argv[1:]),
            "machine": machine(),
            "versions": versions(),
            "python": platform.python_version(),
            "workload": workload,
            "texts": len(texts),
            "words": words,
            "pipeline": pipeline,
            "precision": precision,
            "trained_test_scores": scores.get("test_scores_textcat_ner"),
            "definitions": {
                "stub_pK / forward_pK": "K processes, the transformer's forward stubbed "
                "(zeros) / real",
                "seconds": "wall time from the first worker's start to the last one's end "
                "(fastest of the repeats)",
                "words_per_cpu_second": "words over the CPU time of all workers' processes",
            },
            "variants": variants,
        }
        if processes > 1:
            one, many = variants["stub_p1"], variants[f"stub_p{processes}"]
            record[f"stub_speedup_p{processes}"] = round(
                many["words_per_second"] / one["words_per_second"], 3
            )
        path = RESULTS / f"host_overhead_{workload}_t{threads}_p{processes}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
        typer.echo(f"{workload}: {words} words, {len(texts)} texts -> {path}")
        for name, v in variants.items():
            typer.echo(
                f"  {name}: {v['words_per_second']:.0f} words/s, "
                f"{v['words_per_cpu_second']:.0f} words/CPU-s"
            )
        if processes > 1:
            typer.echo(
                f"  stub speed-up with {processes} processes: "
                f"{record[f'stub_speedup_p{processes}']:.2f}x"
            )


if __name__ == "__main__":
    typer.run(main)
