"""How padding batch lengths changes the bf16 (or fp32) forward on the CPU (not a test).

The windows our encoder runs on real texts (Banking77 test queries, SQuAD news
paragraphs), packed as `run_windows` packs them (length-sorted, under
max_batch_tokens), are run through the default encoder with bf16 weights (as our
encoder predicts in bf16) under each padding policy, in alternating rounds, on
`--threads` torch threads. Batches are built before timing; only the forward is
timed (CPU time of this process and wall time, best of the rounds).

Policies: "none" (each batch as long as its longest window), "m8" / "m16" (lengths
rounded up to a multiple of 8 / 16), and "shim" (what `HFShim.padded_length` does).
With `--profile`, a torch.profiler table of the first short batch, unpadded and
padded to 16, shows which operators the padding makes slower.

    python bench/pad_lengths.py [--workloads short,news] [--precision bf16]
        [--threads 1] [--rounds 3] [--profile]

Writes bench/results/pad_lengths_<precision>_t<threads>.json.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import DEFAULT_DATA, DEFAULT_LIMITS, RESULTS, encoder_folder, load_texts, machine  # noqa: E402


def windows(
    texts: List[str], tokenizer: Any, max_length: int = 128, stride: int = 32
) -> List[List[int]]:
    from spacy_bert_pipes.models.text.windows import window_spans

    out = []
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    pieces = tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
    for ids in pieces:
        for start, end in window_spans(len(ids), max_length - 2, stride):
            out.append([cls, *ids[start:end], sep])
    return out


def batches(
    wins: List[List[int]], max_batch_tokens: int, pad_to: Callable[[int], int]
) -> List[Any]:
    import torch

    from spacy_bert_pipes.models.text.windows import pack_batches

    lengths = [len(w) for w in wins]
    out = []
    for batch in pack_batches(lengths, max_batch_tokens):
        width = pad_to(max(lengths[i] for i in batch))
        rows = numpy.asarray([lengths[i] for i in batch])
        ids = numpy.zeros((len(batch), width), dtype="int64")
        mask = numpy.arange(width)[None, :] < rows[:, None]
        ids[mask] = numpy.concatenate([wins[i] for i in batch])
        out.append((torch.from_numpy(ids), torch.from_numpy(mask.astype("int64"))))
    return out


def main(
    workloads: str = typer.Option("short,news", help="Comma-separated: short, news, long"),
    precision: str = typer.Option("bf16", help="bf16 or fp32"),
    threads: int = typer.Option(1, help="torch threads"),
    rounds: int = typer.Option(3, help="Alternating rounds (the fastest is kept)"),
    max_batch_tokens: int = typer.Option(4096, help="As the encoder's max_batch_tokens"),
    short_limit: int = typer.Option(1024, help="Banking77 queries"),
    profile: bool = typer.Option(False, help="Profile a short batch unpadded and padded to 16"),
    counts_only: bool = typer.Option(
        False, help="Only count batches, shapes and padded wordpieces (no forward)"
    ),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder"),
) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from spacy_bert_pipes.models.transformer.precision import padded_length

    torch.set_num_threads(threads)
    folder = encoder_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True).eval()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    policies: Dict[str, Callable[[int], int]] = {
        "none": lambda n: n,
        "m8": lambda n: -(-n // 8) * 8,
        "m16": lambda n: -(-n // 16) * 16,
        "shim": lambda n: padded_length(n, precision, torch.device("cpu")),
    }
    record: Dict[str, Any] = {
        "benchmark": "pad_lengths",
        "command": "python bench/pad_lengths.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "precision": precision,
        "threads": threads,
        "workloads": {},
    }

    def forward(prepared: List[Any]) -> None:
        with torch.inference_mode():
            for ids, mask in prepared:
                model(input_ids=ids, attention_mask=mask)

    for workload in [w.strip() for w in workloads.split(",") if w.strip()]:
        limit = short_limit if workload == "short" else DEFAULT_LIMITS[workload]
        wins = windows(load_texts(workload, limit, data), tokenizer)
        prepared = {name: batches(wins, max_batch_tokens, pad) for name, pad in policies.items()}
        times: Dict[str, List[List[float]]] = {name: [] for name in policies}
        if not counts_only:
            for name in policies:  # first sight of each shape: oneDNN builds its kernels
                forward(prepared[name])
            for _ in range(rounds):
                for name in policies:
                    wall, cpu = time.perf_counter(), time.process_time()
                    forward(prepared[name])
                    times[name].append([time.process_time() - cpu, time.perf_counter() - wall])
        record["workloads"][workload] = {
            "windows": len(wins),
            "wordpieces": sum(len(w) for w in wins),
            "policies": {
                name: {
                    "batches": len(prepared[name]),
                    "shapes": len({tuple(ids.shape) for ids, _ in prepared[name]}),
                    "padded_wordpieces": sum(ids.numel() for ids, _ in prepared[name]),
                    "cpu_seconds": round(min(t[0] for t in times[name]), 3)
                    if times[name]
                    else None,
                    "wall_seconds": round(min(t[1] for t in times[name]), 3)
                    if times[name]
                    else None,
                }
                for name in policies
            },
        }
        typer.echo(f"{workload}: {json.dumps(record['workloads'][workload]['policies'])}")
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        wins = windows(load_texts("short", short_limit, data), tokenizer)
        tables = {}
        for name in ("none", "m16"):
            first = batches(wins, max_batch_tokens, policies[name])[len(wins) // 400]
            forward([first])
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    forward([first])
            tables[f"{name} {tuple(first[0].shape)}"] = prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=8
            )
        record["profile"] = tables
        for key, table in tables.items():
            typer.echo(f"--- {key}\n{table}")
    suffix = "_counts" if counts_only else ""
    path = RESULTS / f"pad_lengths_{precision}_t{threads}{suffix}.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    typer.echo(f"wrote {path}")


if __name__ == "__main__":
    typer.run(main)
