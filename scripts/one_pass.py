"""Encoder passes and docs/s of two pipelines on the same texts (not a test).

    python scripts/one_pass.py ONE_PASS ASSEMBLED [--texts corpus/collection.jsonl]
        [--limit 300] [--batch-size 64] [--rounds 3] [--gpu-id -1]
        [--output metrics/one_pass.json]

Both pipelines annotate the same texts (the Banking77 queries of the workflow's
collection by default: its rows without "questions"), alternating in one process,
`nlp.pipe` with the given batch size, best of `--rounds`. Every encoder forward is
counted (calls of `models.encoder.run_windows`, which each encoder and each
question/context pass goes through once per batch) with the wordpieces it ran, so
the result says how many encoder passes each pipeline makes per batch and how many
wordpieces per doc (a forward that also runs heads' own top layers,
`EncoderListener.v3`, counts 1 + own_layers / L passes), next to its docs/s and
the ratio of the two. `--gpu-id N` runs
both pipelines on CUDA device N (`spacy.require_gpu`); each timed run ends with a
device synchronize. The workflow's `compare-one-pass` step (project.yml) runs it.
"""

import json
import platform
import time
from pathlib import Path
from typing import Any, Dict, List

import spacy
import typer

from spacy_bert_pipes.models.encoder import bert as encoder_module


def read_texts(path: Path, limit: int) -> List[str]:
    texts = []
    with path.open(encoding="utf8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("questions"):
                continue  # the SQuAD paragraphs bring their own questions
            texts.append(row["text"])
            if len(texts) == limit:
                break
    return texts


def count_passes(nlp: Any, texts: List[str], batch_size: int) -> Dict[str, float]:
    """Encoder forwards, full encoder passes (a forward counts 1 + own_layers / L
    with branches) and wordpieces per batch of one `nlp.pipe` run."""
    calls: List[int] = []
    passes: List[float] = []
    original = encoder_module.run_windows

    def counting(encoder: Any, windows: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(sum(len(ids) for ids, _ in windows))
        module = encoder_module.hf_shim(encoder).module
        n_layers = module.transformer.config.num_hidden_layers
        passes.append(1 + sum(module.branch_layers.values()) / n_layers)
        return original(encoder, windows, *args, **kwargs)

    encoder_module.run_windows = counting  # type: ignore[assignment]
    try:
        list(nlp.pipe(texts, batch_size=batch_size))
    finally:
        encoder_module.run_windows = original  # type: ignore[assignment]
    n_batches = -(-len(texts) // batch_size)
    return {
        "encoder_forwards_per_batch": len(calls) / n_batches,
        "encoder_passes_per_batch": sum(passes) / n_batches,
        "wordpieces_per_doc": sum(calls) / len(texts),
    }


def synchronize(gpu_id: int) -> None:
    """Wait for the GPU's queued work, so that a timed run ends when it is done."""
    if gpu_id >= 0:
        import torch

        torch.cuda.synchronize(gpu_id)


def device_name(gpu_id: int) -> str:
    if gpu_id < 0:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(gpu_id)


def main(
    one_pass: Path = typer.Argument(..., help="The one-pass pipeline (configs/multitask.cfg)"),
    assembled: Path = typer.Argument(..., help="The assembled pipeline (heads trained apart)"),
    texts_path: Path = typer.Option(Path("corpus/collection.jsonl"), "--texts"),
    limit: int = typer.Option(300, help="Texts to annotate"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch size"),
    rounds: int = typer.Option(3, help="Alternating rounds; the best is kept"),
    gpu_id: int = typer.Option(-1, help="CUDA device to run on (-1: the CPU)"),
    output: Path = typer.Option(Path("metrics/one_pass.json")),
) -> None:
    texts = read_texts(texts_path, limit)
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    pipelines = {"one_pass": spacy.load(one_pass), "assembled": spacy.load(assembled)}
    result: Dict[str, Any] = {
        "command": "python scripts/one_pass.py "
        f"{one_pass} {assembled} --texts {texts_path} --limit {limit} "
        f"--batch-size {batch_size} --rounds {rounds} --gpu-id {gpu_id}",
        "machine": f"{platform.machine()} {platform.processor()}, {platform.node()}",
        "device": device_name(gpu_id),
        "texts": len(texts),
        "pipelines": {},
    }
    for name, nlp in pipelines.items():
        list(nlp.pipe(texts[:batch_size], batch_size=batch_size))  # warm up
        result["pipelines"][name] = {
            "path": str(one_pass if name == "one_pass" else assembled),
            "components": nlp.pipe_names,
            **count_passes(nlp, texts, batch_size),
            "seconds": [],
        }
    for _ in range(rounds):
        for name, nlp in pipelines.items():
            start = time.perf_counter()
            list(nlp.pipe(texts, batch_size=batch_size))
            synchronize(gpu_id)
            result["pipelines"][name]["seconds"].append(round(time.perf_counter() - start, 3))
    for entry in result["pipelines"].values():
        entry["docs_per_second"] = round(len(texts) / min(entry["seconds"]), 1)
    one, apart = result["pipelines"]["one_pass"], result["pipelines"]["assembled"]
    result["speedup"] = round(one["docs_per_second"] / apart["docs_per_second"], 2)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
    for name, entry in result["pipelines"].items():
        typer.echo(
            f"{name}: {entry['encoder_forwards_per_batch']:.1f} encoder forwards "
            f"({entry['encoder_passes_per_batch']:.2f} passes) per batch, "
            f"{entry['wordpieces_per_doc']:.1f} wordpieces per doc, "
            f"{entry['docs_per_second']} docs/s"
        )
    typer.echo(f"one pass / assembled: {result['speedup']}x")


if __name__ == "__main__":
    typer.run(main)
