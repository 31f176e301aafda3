"""How fast our pipes can go when the encoder costs nothing (not a test).

`nlp.pipe` of the trained bert_encoder + bert_textcat + bert_ner pipeline
(bench/trained.py's textcat-ner, the benches' ours-textcat-ner) timed with the real
forward, then with the transformer's forward replaced by one that computes
nothing. The second number is the ceiling set by the host-side work
(tokenizing, windows, batching, heads, decoding, writing Docs): what a fast
accelerator leaves.

`--stub replay` (the default) makes the stubbed forward return the real hidden
states, recorded in an untimed pass over the same texts and looked up by the
batch's input ids, so the heads write the entities and labels a real run writes;
`--stub zeros` returns zeros (a trained NER head then finds almost no entities,
which understates decoding and Doc writing). Misses of the replay (a batch not
seen in the recording pass; there should be none) are counted in the results.
Both are given per CPU-second of torch's threads (default 1
thread) and per wall second.

`--baseline DIR` also times, alternating with ours, the stubbed run of a checkout of
an earlier commit (its package imported from DIR) on the same trained pipeline.

`--processes k` shards the texts over k processes (started with "spawn", each on
`--threads` torch threads, texts dealt round-robin) and reports the aggregate
words/s of k processes next to one process over the same texts, in the same run.
With k > 1 each process also tokenizes on one thread (TOKENIZERS_PARALLELISM=false):
k processes share the machine's cores as they share its torch threads.

    python bench/host_overhead.py [--workloads short,news,long] [--threads 1]
        [--processes 1] [--repeats 3] [--limit 0] [--trained /work/trained]
        [--precision default|fp32|bf16|auto] [--stub replay|zeros]
        [--baseline CHECKOUT]

Writes bench/results/host_overhead_<workload>_t<threads>_p<processes>.json.
"""

import json
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extras  # noqa: E402  (bench/extras.py)
import trained as trained_pipelines  # noqa: E402
from speedlib.timing import machine, versions  # noqa: E402
from speedlib.workloads import (  # noqa: E402
    DEFAULT_DATA,
    DEFAULT_LIMITS,
    RESULTS,
    count_words,
    load_texts,
    warmup_texts,
)

extras.use()  # as bench/speed.py: the references here and in the commands it starts

PIPELINE = "ours-textcat-ner"
BATCH_SIZE = 128  # texts per nlp.pipe batch, as bench/speed.py


def stub_forward(nlp: Any, texts: List[str], stub: str) -> List[int]:
    """Replace the transformer's forward (in this process) by one that computes
    nothing: zeros of its shape, or (`replay`) the outputs recorded by a real pass
    of `nlp` over `texts` now. RETURNS: a one-item list counting replay misses."""
    import torch

    from spacy_bert_pipes.models.transformer import hf_shim

    module = hf_shim.TransformerModule
    real = module.forward
    recorded: Dict[bytes, torch.Tensor] = {}
    misses = [0]

    def record(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        hidden = real(self, input_ids, *args, **kwargs)
        recorded[input_ids.cpu().numpy().tobytes()] = hidden.detach().clone()
        return hidden

    def replay(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        hidden = recorded.get(input_ids.cpu().numpy().tobytes())
        if hidden is None:
            misses[0] += 1
            return torch.zeros(*input_ids.shape, self.width)
        return hidden

    def zeros(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        # (batch, length, width): what the real forward returns, without computing it
        return torch.zeros(*input_ids.shape, self.width)

    if stub == "replay":
        module.forward = record  # type: ignore[method-assign]
        for _ in nlp.pipe(texts, batch_size=BATCH_SIZE):
            pass
        module.forward = replay  # type: ignore[method-assign]
    else:
        module.forward = zeros  # type: ignore[method-assign]
    return misses


def load(pipeline: str, precision: str, root: str) -> Any:
    """Load the pipeline with this checkout's package, or with the one under
    `root` (a checkout of an earlier commit, `--baseline`)."""
    if root:
        sys.path.insert(0, root)
    import spacy_bert_pipes

    if root and not spacy_bert_pipes.__file__.startswith(root):
        raise RuntimeError(f"imported {spacy_bert_pipes.__file__}, not the package under {root}")
    try:
        from spacy_bert_pipes.loading import load_pipeline
    except ImportError:  # earlier commits: util.load_pipeline
        from spacy_bert_pipes.util import load_pipeline  # type: ignore[no-redef]
    return load_pipeline(pipeline, precision=None if precision == "default" else precision)


def baseline_pipeline(pipeline: str, root: Path, folder: Path) -> str:
    """The pipeline for a baseline checkout that predates BertEncoder.v2: a copy
    whose config names BertEncoder.v1 (the same model, prediction in fp32)."""
    if "BertEncoder.v2" in (root / "spacy_bert_pipes" / "models" / "encoder.py").read_text():
        return pipeline
    copy = folder / "baseline-pipeline"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(pipeline, copy)
    config = copy / "config.cfg"
    lines = config.read_text(encoding="utf8").replace("BertEncoder.v2", "BertEncoder.v1")
    kept = [line for line in lines.splitlines() if not line.startswith("predict_precision")]
    config.write_text("\n".join(kept) + "\n", encoding="utf8")
    return str(copy)


def worker(
    rank: int,
    texts: List[str],
    pipeline: str,
    precision: str,
    threads: int,
    stub: str,
    repeats: int,
    barrier: Any,
    results: Any,
    root: str,
    one_tokenizer_thread: bool,
) -> None:
    """One process: load, warm up, then `repeats` timed passes over its shard, each
    started together with the other workers' (barrier)."""
    try:
        if one_tokenizer_thread:
            # k processes share the cores: the Rust tokenizer of each runs on its own
            # thread (read at every call), as torch runs on `threads`
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
        import torch

        torch.set_num_threads(threads)
        nlp = load(pipeline, precision, root)
        misses = stub_forward(nlp, texts, stub) if stub else [0]
        for _ in nlp.pipe(warmup_texts(texts), batch_size=BATCH_SIZE):
            pass
        misses[0] = 0  # the warm-up texts were not recorded
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
        results.put(
            {"rank": rank, "runs": runs, "threads": torch.get_num_threads(), "misses": misses[0]}
        )
    except BaseException as error:  # the parent reports it
        barrier.abort()
        results.put({"rank": rank, "error": f"{type(error).__name__}: {error}"})


def run_processes(
    texts: List[str],
    pipeline: str,
    precision: str,
    threads: int,
    processes: int,
    stub: str,
    repeats: int,
    root: str = "",
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
            args=(
                rank,
                shard,
                pipeline,
                precision,
                threads,
                stub,
                repeats,
                barrier,
                results,
                root,
                processes > 1,
            ),
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
        # the least CPU time of the repeats, which may not be the fastest one's
        "cpu_seconds": round(min(span["cpu_seconds"] for span in spans), 3),
        "seconds_per_repeat": [round(span["seconds"], 3) for span in spans],
        "cpu_seconds_per_repeat": [round(span["cpu_seconds"], 3) for span in spans],
        "entities": best["entities"],
        "replay_misses": sum(g["misses"] for g in got),
    }


def measure(
    texts: List[str],
    words: int,
    pipeline: str,
    precision: str,
    threads: int,
    processes: int,
    stub: str,
    repeats: int,
    root: str = "",
) -> Dict[str, Any]:
    out = run_processes(texts, pipeline, precision, threads, processes, stub, repeats, root)
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
    stub: str = typer.Option(
        "replay", help="The stubbed forward: replay (recorded real outputs) or zeros"
    ),
    precision: str = typer.Option(
        "default", help="Encoder prediction precision: default (as saved), fp32, bf16, auto"
    ),
    trained: Optional[Path] = typer.Option(
        None,
        help="bench/trained.py's folder (default: $BERT_PIPES_TRAINED or /work/trained, "
        "trained first when not READY)",
    ),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder"),
    baseline: Optional[Path] = typer.Option(
        None,
        help="A checkout of an earlier commit: its stubbed run alternates with ours "
        "(--rounds times each), one process",
    ),
    rounds: int = typer.Option(2, help="With --baseline: alternating rounds of both"),
) -> None:
    if stub not in ("replay", "zeros"):
        raise typer.BadParameter(f"--stub must be replay or zeros, got {stub!r}")
    folder = trained_pipelines.ensure(trained)
    pipeline = str(trained_pipelines.pipeline_path(folder, PIPELINE))
    scores = json.loads((folder / "trained.json").read_text(encoding="utf8"))
    counts = sorted({1, processes})
    for workload in [w.strip() for w in workloads.split(",") if w.strip()]:
        texts = load_texts(workload, limit or DEFAULT_LIMITS[workload], data)
        words = count_words(texts)
        variants: Dict[str, Any] = {}
        if baseline is not None:
            root = str(baseline.resolve())
            old = baseline_pipeline(pipeline, baseline.resolve(), Path(tempfile.mkdtemp()))
            runs = {"baseline_stub_p1": [], "stub_p1": []}  # type: Dict[str, List[Any]]
            for _ in range(rounds):
                runs["baseline_stub_p1"].append(
                    measure(texts, words, old, precision, threads, 1, stub, repeats, root)
                )
                runs["stub_p1"].append(
                    measure(texts, words, pipeline, precision, threads, 1, stub, repeats)
                )
            for name, measured in runs.items():
                variants[name] = max(measured, key=lambda m: m["words_per_cpu_second"])
                variants[name]["words_per_cpu_second_per_round"] = [
                    m["words_per_cpu_second"] for m in measured
                ]
        for k in counts:
            if f"stub_p{k}" in variants:
                continue
            variants[f"stub_p{k}"] = measure(
                texts, words, pipeline, precision, threads, k, stub, repeats
            )
            if forward:
                variants[f"forward_p{k}"] = measure(
                    texts, words, pipeline, precision, threads, k, "", repeats
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
                f"({stub}) / real",
                "seconds": "wall time from the first worker's start to the last one's end "
                "(fastest of the repeats)",
                "words_per_cpu_second": "words over the CPU time of all workers' processes "
                "(the least of the repeats)",
            },
            "variants": variants,
        }
        if baseline is not None:
            record["baseline"] = str(baseline.resolve())
            record["stub_vs_baseline_cpu"] = round(
                variants["stub_p1"]["words_per_cpu_second"]
                / variants["baseline_stub_p1"]["words_per_cpu_second"],
                3,
            )
        if processes > 1:
            one, many = variants["stub_p1"], variants[f"stub_p{processes}"]
            record[f"stub_speedup_p{processes}"] = round(
                many["words_per_second"] / one["words_per_second"], 3
            )
        suffix = "_baseline" if baseline is not None else ""
        path = RESULTS / f"host_overhead_{workload}_t{threads}_p{processes}{suffix}.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
        typer.echo(f"{workload}: {words} words, {len(texts)} texts -> {path}")
        for name, v in variants.items():
            typer.echo(
                f"  {name}: {v['words_per_second']:.0f} words/s, "
                f"{v['words_per_cpu_second']:.0f} words/CPU-s"
            )
        if baseline is not None:
            typer.echo(f"  ours / baseline, words per CPU-s: {record['stub_vs_baseline_cpu']:.2f}x")
        if processes > 1:
            typer.echo(
                f"  stub speed-up with {processes} processes: "
                f"{record[f'stub_speedup_p{processes}']:.2f}x"
            )


if __name__ == "__main__":
    typer.run(main)
