"""Words/s of ours, the bare forward and spacy-transformers at each CPU precision,
measured in one run: interleaved rounds, the median of each (not a test).

    python bench/cpu_precisions.py [--workloads news,short] [--rounds 3]
        [--precisions fp32,int8] [--trained DIR] [--output FILE]

Each round runs every (system, precision) once, each in a fresh subprocess of
`bench/speed.py` (`speedlib.timing.spawn`: its warm-up, timing and peak RSS), in the same
order; a system's figure is the median over the rounds, so a noisy neighbour
slows one round of every system rather than all rounds of one. Systems:

  bare              the Hugging Face forward over our windows (fp32; bf16 weights;
                    int8: torch's own dynamic int8, per-channel weights)
  ours-textcat-ner  bench/trained.py's textcat + NER on one encoder, at each
                    precision, and at "default" (as saved: predict_precision "auto",
                    what a user gets out of the box; it stands for the precision
                    "auto" resolves to, which is not run twice)
  trf-textcat-ner   spacy-transformers with spaCy's textcat and ner, fp32 (its default)

bf16 is measured only where the CPU has AMX or AVX-512 BF16 (elsewhere torch
emulates it). Writes bench/results/cpu_precisions_<cpu kind>.json.
"""

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extras  # noqa: E402  (bench/extras.py)
from speedlib import timing  # noqa: E402  (bench/speed.py's parts)
from speedlib import workloads as speed_workloads  # noqa: E402

from spacy_bert_pipes.models.transformer.precision import (  # noqa: E402
    cpu_flags,
    cpu_has_fast_bf16,
)

extras.use()  # as bench/speed.py: the references here and in the commands it starts


def cpu_kind() -> str:
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512bf16"
    return "avx512" if "avx512f" in flags else "avx2"


def runs(
    precisions: List[str], ours: str = "ours-textcat-ner", trf: bool = True
) -> List[Tuple[str, str]]:
    """(system, precision) pairs of one round, in order. Ours at the precision
    "auto" resolves to here is ours at "default" (as saved: "auto"), run once."""
    import torch

    from spacy_bert_pipes.models.transformer.precision import resolve_precision

    auto = resolve_precision("auto", torch.device("cpu"), predicting=True)
    pairs = [("bare", p) for p in precisions]
    pairs += [(ours, p) for p in precisions if p != auto]
    pairs += [(ours, "default")] + ([("trf-textcat-ner", "default")] if trf else [])
    return pairs


def int8_build_seconds(rounds: int, threads: int) -> List[float]:
    """Seconds to build the default encoder's int8 graph (export, quantize, first
    session), what the first int8 batch of a process waits for."""
    import time

    import torch
    from transformers import AutoModel

    from spacy_bert_pipes.models.transformer.onnx_int8 import Int8Module
    from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(speed_workloads.encoder_folder(), local_files_only=True)
    module = TransformerModule(model, "last", "fp32").eval()
    ids = torch.ones((1, 8), dtype=torch.long)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        Int8Module.build(module)(ids, torch.ones_like(ids), torch.zeros_like(ids))
        seconds.append(time.perf_counter() - start)
    return seconds


def main(
    workloads: str = typer.Option("news,short", help="Workloads of bench/speed.py"),
    limit: int = typer.Option(0, help="Texts per workload (0: speed.py's default)"),
    rounds: int = typer.Option(3, help="Interleaved rounds (the median is reported)"),
    precisions: str = typer.Option(
        "fp32,bf16,int8", help="Precisions to measure (bf16 is skipped without fast bf16)"
    ),
    trained: Optional[Path] = typer.Option(None, help="bench/trained.py's folder"),
    ours: str = typer.Option("ours-textcat-ner", help="Our system (a speed.py system)"),
    trf: bool = typer.Option(True, help="Also run spacy-transformers (trf-textcat-ner)"),
    threads: int = typer.Option(2, help="torch threads of every system"),
    output: Optional[Path] = typer.Option(None, help="JSON results"),
) -> None:
    wanted = [p for p in precisions.split(",") if p and (p != "bf16" or cpu_has_fast_bf16())]
    results: Dict[str, Any] = {
        "machine": timing.machine(),
        "versions": timing.versions(),
        "cpu_kind": cpu_kind(),
        "rounds": rounds,
        "command": " ".join(sys.argv),
        "workloads": {},
    }
    for workload in workloads.split(","):
        texts = speed_workloads.load_texts(
            workload,
            limit or speed_workloads.DEFAULT_LIMITS[workload],
            speed_workloads.DEFAULT_DATA,
        )
        n_words = speed_workloads.count_words(texts)
        timings: Dict[str, List[float]] = {}
        details: Dict[str, Any] = {}
        for round_ in range(rounds):
            for system, precision in runs(wanted, ours, trf):
                s = speed_workloads.Settings(
                    workload=workload,
                    limit=limit or speed_workloads.DEFAULT_LIMITS[workload],
                    precision=precision,
                    threads=threads,
                    max_batch_tokens=4096,
                    batch_size=128,
                    hf_batch_size=32,
                    max_length=128,
                    stride=32,
                    repeats=1,
                    gpu=-1,
                    data=str(speed_workloads.DEFAULT_DATA),
                    trained=str(trained or ""),
                )
                result = timing.spawn(system, s, timeout=1800)
                key = f"{system}@{precision}"
                if "error" in result:
                    print(f"{workload} round {round_} {key}: {result['error']}", file=sys.stderr)
                    continue
                result["words_per_second"] = n_words / result["seconds"]
                timings.setdefault(key, []).append(result["words_per_second"])
                details[key] = {
                    k: result.get(k) for k in ("words", "peak_rss_mb", "settings", "checks")
                }
                print(f"{workload} round {round_} {key}: {result['words_per_second']:,.0f} words/s")
        medians = {key: statistics.median(v) for key, v in timings.items()}
        results["workloads"][workload] = {
            "texts": len(texts),
            "words": n_words,
            "words_per_second_median": medians,
            "words_per_second_rounds": timings,
            "details": details,
        }
        for key, value in sorted(medians.items()):
            print(f"{workload}: {key:28s} {value:10,.0f} words/s")
    if "int8" in wanted:
        build = int8_build_seconds(rounds, threads)
        results["int8_build_seconds"] = {"rounds": build, "median": statistics.median(build)}
        print(f"int8 graph build: median {statistics.median(build):.1f} s ({build})")
    out = output or speed_workloads.RESULTS / f"cpu_precisions_{cpu_kind()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf8")
    print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
