"""Which runtime computes the encoder fastest on this CPU, and how far each drifts
from torch fp32: the forward alone over the same batches (not a test).

    python bench/int8_backends.py [--rounds 3] [--threads 2]
        [--output bench/results/int8_backends_<cpu kind>.json]

Batches: the default encoder's windows (128 wordpieces, stride 32) of 200 SQuAD
news paragraphs and of 1,000 Banking77 test queries, length-sorted and packed
under 4,096 padded wordpieces, built before timing. Backends, each timed over all
batches once per round, in interleaved rounds (the median is reported):

  torch-fp32        the TransformerModule our encoder runs, fp32
  torch-int8        the same with torch's dynamic int8 linear layers (per-channel)
  ort-fp32          the module exported to ONNX, run by ONNX Runtime in fp32
  ort-int8-all      ONNX Runtime dynamic int8 of every weighted product
  ort-int8          ours (`onnx_int8.Int8Module`): int8 but the down projections
  openvino-fp32     the fp32 graph compiled by OpenVINO (where it is installed)

Drift: the cosine between each backend's mean-pooled window vectors and torch
fp32's (least, 1st percentile and mean over all windows).
"""

import copy
import csv
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_precisions  # noqa: E402
import speed  # noqa: E402

Batch = Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]


def batches(tokenizer: Any, texts: List[str]) -> List[Batch]:
    from spacy_bert_pipes.models.text.windows import pack_batches, window_spans

    windows = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        for start, end in window_spans(len(ids), 126, 32):
            windows.append([tokenizer.cls_token_id, *ids[start:end], tokenizer.sep_token_id])
    out = []
    for batch in pack_batches([len(w) for w in windows], 4096):
        width = max(len(windows[i]) for i in batch)
        ids = numpy.zeros((len(batch), width), dtype="int64")
        mask = numpy.zeros_like(ids)
        for row, i in enumerate(batch):
            ids[row, : len(windows[i])] = windows[i]
            mask[row, : len(windows[i])] = 1
        out.append((ids, mask, numpy.zeros_like(ids)))
    return out


def backends(module: Any) -> Dict[str, Callable[[Batch], numpy.ndarray]]:
    import onnxruntime
    import torch

    from spacy_bert_pipes.models.transformer import onnx_int8

    def torch_runner(mod: Any) -> Callable[[Batch], numpy.ndarray]:
        def run(batch: Batch) -> numpy.ndarray:
            with torch.inference_mode():
                return mod(*[torch.from_numpy(a) for a in batch]).numpy()

        return run

    def ort_runner(graph: bytes) -> Callable[[Batch], numpy.ndarray]:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        return lambda batch: session.run(None, dict(zip(names, batch)))[0]

    out = {"torch-fp32": torch_runner(module)}
    out["torch-int8"] = torch_runner(speed.torch_int8(copy.deepcopy(module)))
    fp32, _ = onnx_int8.export_fp32(module)
    out["ort-fp32"] = ort_runner(fp32)
    out["ort-int8-all"] = ort_runner(onnx_int8.quantize(fp32, keep_down_projections=False))
    out["ort-int8"] = ort_runner(onnx_int8.Int8Module.build(module).graph)
    try:
        import openvino

        core = openvino.Core()
        core.set_property("CPU", {"INFERENCE_NUM_THREADS": torch.get_num_threads()})
        compiled = core.compile_model(core.read_model(fp32), "CPU")
        out["openvino-fp32"] = lambda batch: compiled(list(batch))[0]
    except ImportError:
        pass
    return out


def pooled(hidden: numpy.ndarray, mask: numpy.ndarray) -> numpy.ndarray:
    weights = mask[..., None].astype("float32")
    return (hidden * weights).sum(1) / weights.sum(1)


def main(
    rounds: int = typer.Option(3, help="Interleaved rounds (the median is reported)"),
    threads: int = typer.Option(2, help="Intra-op threads of every backend"),
    output: Optional[Path] = typer.Option(None, help="JSON results"),
) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

    torch.set_num_threads(threads)
    folder = speed.encoder_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True)
    module = TransformerModule(model, "last", "fp32").eval()
    data = Path(speed.DEFAULT_DATA)
    squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf8"))
    news = [p["context"] for a in squad["data"] for p in a["paragraphs"]][:200]
    with open(data / "banking77" / "test.csv", encoding="utf8") as f:
        queries = [row["text"] for row in csv.DictReader(f)][:1000]
    workloads = {"news": batches(tokenizer, news), "short": batches(tokenizer, queries)}
    runners = backends(module)
    record: Dict[str, Any] = {
        "machine": speed.machine(),
        "cpu_kind": cpu_precisions.cpu_kind(),
        "command": " ".join(sys.argv),
        "workloads": {},
    }
    for workload, work in workloads.items():
        reference = [runners["torch-fp32"](b) for b in work]
        drift = {}
        for name, run in runners.items():
            cosines = []
            for batch, ref in zip(work, reference):
                a, b = pooled(run(batch), batch[1]), pooled(ref, batch[1])
                cosines.append(
                    (a * b).sum(1) / numpy.linalg.norm(a, axis=1) / numpy.linalg.norm(b, axis=1)
                )
            c = numpy.concatenate(cosines)
            drift[name] = {
                "min": float(c.min()),
                "p01": float(numpy.quantile(c, 0.01)),
                "mean": float(c.mean()),
            }
        seconds: Dict[str, List[float]] = {name: [] for name in runners}
        for _ in range(rounds):
            for name, run in runners.items():
                start = time.perf_counter()
                for batch in work:
                    run(batch)
                seconds[name].append(time.perf_counter() - start)
        medians = {name: statistics.median(v) for name, v in seconds.items()}
        base = medians["torch-fp32"]
        record["workloads"][workload] = {
            "windows": sum(len(b[0]) for b in work),
            "padded_wordpieces": int(sum(b[0].size for b in work)),
            "seconds": seconds,
            "median_seconds": medians,
            "speedup_over_torch_fp32": {n: base / m for n, m in medians.items()},
            "cosine_to_torch_fp32": drift,
        }
        for name in runners:
            print(
                f"{workload:5s} {name:14s} {medians[name]:7.2f} s  x{base / medians[name]:4.2f}  "
                f"cos min {drift[name]['min']:.4f} mean {drift[name]['mean']:.5f}"
            )
    out = output or speed.RESULTS / f"int8_backends_{cpu_precisions.cpu_kind()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
