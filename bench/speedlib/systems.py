"""The systems of bench/speed.py that run our encoder or its bare forward, and
`build`, which makes any system's runner (the references we compare with are in
`references.py`). Each builder returns a runner (texts -> correctness counters)
and the settings it ran with."""

import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from speedlib.timing import DeviceTimer
from speedlib.workloads import Settings, encoder_folder, intent_labels

SYSTEMS = (
    "bare",
    "bare-device",
    "ours-device",
    "bare-qa",
    "ours-textcat",
    "ours-ner",
    "ours-textcat-ner",
    "ours-qa",
    "ours-pipeline",
    "trf-textcat-ner",
    "hf-textcat",
    "hf-ner",
    "hf-textcat-ner",
    "hf-qa",
)
# Asked of every text by the QA systems.
QUESTIONS = {
    "topic": "What is this about?",
    "who": "Who is involved?",
    "when": "When did it happen?",
}
NER_LABELS = ["LOC", "MISC", "ORG", "PER"]
BIO_TAGS = ["O"] + [f"{p}-{label}" for label in NER_LABELS for p in ("B", "I")]
QA_MAX_SEQ_LEN = 384
QA_DOC_STRIDE = 128

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
    if system == "ours-pipeline":  # --trained is a saved pipeline: every head, as saved
        from spacy_bert_pipes.loading import load_pipeline

        precision = None if s.precision == "default" else s.precision
        nlp = load_pipeline(
            Path(s.trained),
            precision=precision,  # type: ignore[arg-type]
            exclude=left_out(Path(s.trained), s.keep),
        )
    elif system == "ours-qa":  # no trained QA pipeline: an untrained head
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
    # a pipeline of any heads: cats of its own labels, and every answer counted
    any_pipeline = system == "ours-pipeline"

    def run(texts: List[str]) -> Dict[str, Any]:
        checks = {"docs": 0, "docs_with_cats": 0, "entities": 0, "answers": 0}
        with counter:
            # Stream: keeping every Doc (and its encoder output) would grow memory.
            for doc in nlp.pipe(texts, batch_size=s.batch_size):
                checks["docs"] += 1
                checks["docs_with_cats"] += (
                    bool(doc.cats) if any_pipeline else len(doc.cats) == len(labels)
                )
                checks["entities"] += len(doc.ents)
                if system in ("ours-qa", "ours-pipeline") and doc.has_extension("answers"):
                    checks["answers"] += len(doc._.get("answers") or [])
        checks.update(counter.counts)
        counter.counts = dict.fromkeys(counter.counts, 0)
        want = {
            "ours-qa": checks["answers"] == len(QUESTIONS) * len(texts),
            "ours-ner": True,
            "ours-pipeline": True,
        }.get(system, checks["docs_with_cats"] == len(texts))
        return {**checks, "ok": checks["docs"] == len(texts) and want}

    settings = {
        "pipeline": nlp.pipe_names,
        "precision": s.precision,
        "encoder_precisions": encoder_precisions(nlp),
        "batch_size": s.batch_size,
        "trained": s.trained if any_pipeline else "",
    }
    if system == "ours-qa":
        settings.update(max_seq_len=QA_MAX_SEQ_LEN, doc_stride=QA_DOC_STRIDE)
    elif any_pipeline:
        settings.update(max_length="as saved", stride="as saved")
    else:
        settings.update(
            trained=str(trained_path(s, system)), max_length=s.max_length, stride=s.stride
        )
    return run, settings


def trained_module() -> Any:
    """bench/trained.py (imported from its folder)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import trained

    return trained


def trained_path(s: Settings, system: str) -> Path:
    return trained_module().pipeline_path(Path(s.trained), system)


def left_out(pipeline: Path, keep: str) -> List[str]:
    """The components of a saved pipeline to leave out so that only the heads in
    `keep` (comma-separated; "": every component) and the bert encoders run."""
    if not keep:
        return []
    import spacy

    config = spacy.util.load_config(pipeline / "config.cfg", interpolate=False)
    heads = [name for name in keep.split(",") if name]
    unknown = [name for name in heads if name not in config["nlp"]["pipeline"]]
    if unknown:
        names = ", ".join(config["nlp"]["pipeline"])
        raise ValueError(
            f"--keep {', '.join(unknown)}: not in {pipeline} (its components: {names})"
        )
    return [
        name
        for name in config["nlp"]["pipeline"]
        if name not in heads and config["components"][name].get("factory") != "bert_encoder"
    ]


def encoder_precisions(nlp: Any) -> Dict[str, str]:
    """What each encoder of a pipeline predicts in, as resolved on its device."""
    from spacy_bert_pipes.models.transformer import hf_shim

    out = {}
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        for node in model.walk() if model is not None else []:
            for shim in node.shims:
                if isinstance(shim, hf_shim.HFShim) and shim.is_loaded:
                    setting = shim.predict_precision or shim.precision
                    out[name] = f"{setting} -> {shim.prediction_precision}"
    return out


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


def build(system: str, s: Settings, texts: List[str]) -> Tuple[Runner, Dict[str, Any]]:
    """The runner of `system` and the settings it runs with (in this process)."""
    if system in ("bare", "bare-qa", "bare-device", "ours-device"):
        return build_bare(
            s,
            qa=system == "bare-qa",
            device_ceiling=system in ("bare-device", "ours-device"),
            ours=system == "ours-device",
        )
    if system.startswith("ours"):
        return build_ours(s, system)
    from speedlib.references import build_hf, build_trf

    if system == "trf-textcat-ner":
        return build_trf(s, texts)
    if system.startswith("hf"):
        return build_hf(s, system)
    raise ValueError(f"Unknown system {system!r}: choose from {', '.join(SYSTEMS)}")
