"""Where our encoder's forward spends its time on a device (not a test):
`torch.profiler` over `HFShim.predict` on the news paragraphs' batches, already
on the device, at each precision asked for.

    python bench/forward_profile.py [--gpu 0] [--precisions fp32,bf16]
        [--limit 500] [--max-batch-tokens 16384] [--output DIR]

Writes DIR/forward_profile_<precision>.txt: the device time of the batches, the
kernel launches, and the top operators by self device time (CPU time on a
CPU), so a forward bound by launches or by padding shows as such.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import typer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import extras  # noqa: E402  (bench/extras.py)
from speedlib.systems import count_batches, our_shim  # noqa: E402
from speedlib.workloads import DEFAULT_DATA, Settings, load_texts  # noqa: E402

extras.use()  # as bench/speed.py: the references here and in the commands it starts


def main(
    gpu: int = typer.Option(0, help="The GPU, or -1 for the CPU"),
    precisions: str = typer.Option("fp32,bf16", help="Comma-separated precisions"),
    limit: int = typer.Option(500, help="News paragraphs to run"),
    max_batch_tokens: int = typer.Option(16384, help="Padded wordpieces per batch"),
    data: Path = typer.Option(DEFAULT_DATA, help="The shared datasets folder"),
    output: Path = typer.Option(REPO / "bench" / "results", help="The folder to write"),
) -> None:
    import spacy
    from torch.profiler import ProfilerActivity, profile

    from spacy_bert_pipes.models.text.windows import pack_batches, window_spans

    if gpu >= 0:
        spacy.require_gpu(gpu)
    from thinc.api import get_current_ops

    xp = get_current_ops().xp
    texts = load_texts("news", limit, data)
    summary: Dict[str, Any] = {"texts": len(texts), "device": _device(gpu)}
    output.mkdir(parents=True, exist_ok=True)
    for precision in precisions.split(","):
        s = Settings(
            workload="news", limit=limit, precision=precision, threads=0,
            max_batch_tokens=max_batch_tokens, batch_size=256, hf_batch_size=128,
            max_length=128, stride=32, repeats=1, gpu=gpu, data=str(data),
        )  # fmt: skip
        shim = our_shim(s, precision)
        tokenizer = shim.tokenizer
        pieces = tokenizer(texts, add_special_tokens=False)["input_ids"]
        windows: List[List[int]] = []
        for ids in pieces:
            for start, end in window_spans(len(ids), s.max_length - 2, s.stride):
                windows.append([tokenizer.cls_token_id, *ids[start:end], tokenizer.sep_token_id])
        lengths = [len(w) for w in windows]
        batches = pack_batches(lengths, max_batch_tokens)
        counts = {"windows": 0, "wordpieces": 0, "padded_wordpieces": 0, "batches": 0}
        count_batches(counts, lengths, batches)
        built = []
        import numpy

        for batch in batches:
            width = max(lengths[i] for i in batch)
            mask = (
                numpy.arange(width)[None, :] < numpy.asarray([lengths[i] for i in batch])[:, None]
            )
            ids = numpy.zeros(mask.shape, dtype="i")
            ids[mask] = numpy.concatenate([windows[i] for i in batch])
            built.append(
                tuple(xp.asarray(a) for a in (ids, mask.astype("i"), numpy.zeros_like(ids)))
            )
        for arrays in built[:3]:  # warm-up: kernels chosen, reduced copy made
            shim.predict(arrays)
        _synchronize(gpu)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu >= 0 else [])
        start = time.perf_counter()
        with profile(activities=activities) as prof:
            for arrays in built:
                shim.predict(arrays)
            _synchronize(gpu)
        seconds = time.perf_counter() - start
        sort = "self_cuda_time_total" if gpu >= 0 else "self_cpu_time_total"
        table = prof.key_averages().table(sort_by=sort, row_limit=30)
        launches = sum(e.count for e in prof.key_averages() if e.key.startswith("cudaLaunch"))
        result = {
            **counts,
            "seconds_profiled": round(seconds, 3),
            "wordpieces_per_second_profiled": round(counts["wordpieces"] / seconds),
            "kernel_launches": launches,
        }
        summary[precision] = result
        path = output / f"forward_profile_{precision}.txt"
        path.write_text(json.dumps(result, indent=2) + "\n\n" + table + "\n", encoding="utf8")
        print(f"{precision}: {result}", flush=True)
    (output / "forward_profile.json").write_text(json.dumps(summary, indent=2) + "\n")


def _synchronize(gpu: int) -> None:
    if gpu >= 0:
        import torch

        torch.cuda.synchronize(gpu)


def _device(gpu: int) -> str:
    if gpu < 0:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(gpu)


if __name__ == "__main__":
    typer.run(main)
