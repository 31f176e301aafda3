"""The BERT encoder as a thinc Model: Docs in, one DocEncoding per Doc out.

Forward pass, in order:
1. tokenize each doc's text once with the fast tokenizer (character offsets kept),
   or with `context = "sentence"` each of its sentences apart;
2. split long texts (sentences) into overlapping windows (`windows.plan_windows`);
3. pack the windows of all docs into length-sorted batches under a padded-token
   budget (`windows.pack_batches`) and run each batch through the transformer;
4. merge each doc's windows: the [CLS] vectors are averaged, each wordpiece takes
   its vector from its max-context window (of its own sentence, by sentence).
The backward pass scatters the heads' gradients back into the batches.
"""

from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    List,
    Literal,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats2d, Floats3d, Ints1d, Ints2d

from .casing import NO_CASE, piece_cases
from .oom import run_batch
from .types import DocEncoding, DocEncodingGrad, Precision
from .windows import WindowPlan, pack_batches, plan_windows

if TYPE_CHECKING:  # torch is imported only when an encoder is built
    from .hf_shim import HFShim

CONTEXTS = ("doc", "sentence")


@dataclass
class Pieces:
    """A text's wordpieces (no special tokens) and their character offsets."""

    ids: Ints1d  # (n_pieces,)
    offsets: Ints2d  # (n_pieces, 2)
    words: Optional[Ints1d] = None  # the tokenizer's word index of each piece (n_pieces,)
    # the casing class of each piece (`casing.piece_cases`), for an encoder with
    # case embeddings (n_pieces,)
    cases: Optional[Ints1d] = None


@registry.architectures("spacy-bert-pipes.BertEncoder.v1")
def BertEncoder(
    max_length: int = 128,
    stride: int = 32,
    max_batch_tokens: int = 4096,
    precision: Precision = "fp32",
    frozen_layers: Union[int, Literal["all"]] = 0,
    hidden_layers: Literal["last", "sum_last_four", "concat_last_four"] = "last",
    context: Literal["doc", "sentence"] = "doc",
    case_embeddings: bool = False,
) -> Model[List[Doc], List[DocEncoding]]:
    """A BERT-family encoder (Hugging Face AutoModel) producing a DocEncoding per doc.

    The weights arrive in `initialize`, through the component's `encoder_loader`.
    Each setting (max_length, stride, max_batch_tokens, precision, frozen_layers,
    hidden_layers, context, case_embeddings) is documented once, in the encoder's
    table in docs/components.md.
    """
    from .hf_shim import HFShim

    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {', '.join(CONTEXTS)}: {context!r}")
    if max_length < 3:
        raise ValueError(f"max_length must leave room for text and 2 special tokens: {max_length}")
    if not 0 <= stride < max_length - 2:
        raise ValueError(
            f"stride must be >= 0 and smaller than max_length - 2 ({max_length - 2}): {stride}"
        )
    if case_embeddings and frozen_layers == "all":
        raise ValueError(
            "case_embeddings = true needs training, but frozen_layers = 'all' freezes the "
            "encoder: the case embeddings would stay zero"
        )
    shim = HFShim(
        hidden_layers=hidden_layers,
        precision=precision,
        frozen_layers=frozen_layers,
        case_embeddings=case_embeddings,
    )
    return Model(
        "bert_encoder",
        forward,
        init=init,
        shims=[shim],
        dims={"nO": None},
        attrs={
            "max_length": max_length,
            "stride": stride,
            "max_batch_tokens": max_batch_tokens,
            "source": "",
            "context": context,
        },
    )


def hf_shim(encoder: Model) -> "HFShim":
    """The HFShim holding the encoder's transformer and tokenizer."""
    return cast("HFShim", encoder.shims[0])


def init(model: Model, X: Optional[List[Doc]] = None, Y: Optional[Any] = None) -> None:
    shim = hf_shim(model)
    module = shim.module  # raises a clear error when no loader ran
    limit = module.max_positions
    if model.attrs["max_length"] > limit:
        raise ValueError(
            f"max_length={model.attrs['max_length']} exceeds the encoder's limit of {limit} "
            "positions"
        )
    model.set_dim("nO", module.width, force=True)


def is_loaded(encoder: Model) -> bool:
    return hf_shim(encoder).is_loaded


def tokenize(encoder: Model, texts: Sequence[str], with_words: bool = False) -> List[Pieces]:
    """Wordpieces and character offsets of each text (one tokenizer call per batch);
    with `with_words`, also the word (pre-tokenizer unit) of each wordpiece; for an
    encoder with case embeddings, also each wordpiece's casing class."""
    shim = hf_shim(encoder)
    tokenizer = shim.tokenizer
    with_cases = shim.uses_cases
    if not texts:  # the fast tokenizer fails on an empty batch
        return []
    encoded = tokenizer(
        list(texts),
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    out = []
    for i, (ids, offsets) in enumerate(zip(encoded["input_ids"], encoded["offset_mapping"])):
        words = None
        if with_words:
            word_ids = [-1 if w is None else w for w in encoded.word_ids(i)]
            words = cast(Ints1d, numpy.asarray(word_ids, dtype="i"))
        piece_offsets = cast(Ints2d, numpy.asarray(offsets, dtype="i").reshape((-1, 2)))
        cases = piece_cases(texts[i], piece_offsets) if with_cases else None
        out.append(Pieces(cast(Ints1d, numpy.asarray(ids, dtype="i")), piece_offsets, words, cases))
    return out


def special_ids(encoder: Model) -> Tuple[int, int, int]:
    """(cls, sep, pad) token ids of the encoder's tokenizer."""
    tok = hf_shim(encoder).tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return int(tok.cls_token_id), int(tok.sep_token_id), int(pad)


def run_windows(
    encoder: Model,
    windows: Sequence[Tuple[Ints1d, Ints1d]],
    is_train: bool,
    cases: Optional[Sequence[Ints1d]] = None,
) -> Tuple[List[Floats2d], Callable[[List[Optional[Floats2d]]], None]]:
    """Run full input sequences (ids and segment ids, specials included) through the
    transformer, packed into length-sorted batches. An encoder with case embeddings
    also needs each window's casing classes (`cases`, 0 for the specials).

    RETURNS: one (length, width) array per window, views into the batch outputs,
    and a callback taking one gradient (or None) per window.
    """
    shim = hf_shim(encoder)
    xp = encoder.ops.xp
    pad = special_ids(encoder)[2]
    if shim.uses_cases and cases is None:
        raise ValueError("An encoder with case embeddings needs the windows' casing classes")
    lengths = [len(ids) for ids, _ in windows]
    batches = pack_batches(lengths, encoder.attrs["max_batch_tokens"])
    multiple = shim.length_multiple(is_train)
    outputs: List[Any] = [None] * len(windows)
    callbacks = []
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        width = -(-longest // multiple) * multiple
        ids = numpy.full((len(batch), width), pad, dtype="i")
        types = numpy.zeros((len(batch), width), dtype="i")
        mask = numpy.zeros((len(batch), width), dtype="i")
        for row, i in enumerate(batch):
            n = lengths[i]
            ids[row, :n] = windows[i][0]
            types[row, :n] = windows[i][1]
            mask[row, :n] = 1
        inputs = [ids, mask, types]
        if shim.uses_cases:
            case_ids = numpy.zeros((len(batch), width), dtype="i")
            for row, i in enumerate(batch):
                case_ids[row, : lengths[i]] = cast(Sequence[Ints1d], cases)[i]
            inputs.append(case_ids)
        # (batch, length, width)
        hidden, backprop = run_batch(shim, tuple(xp.asarray(a) for a in inputs), is_train)
        for row, i in enumerate(batch):
            outputs[i] = hidden[row, : lengths[i]]
        callbacks.append((batch, hidden.shape, backprop))

    def backprop_windows(d_windows: List[Optional[Floats2d]]) -> None:
        for batch, shape, backprop in callbacks:
            if all(d_windows[i] is None for i in batch):
                continue
            d_hidden: Floats3d = xp.zeros(shape, dtype="f")
            for row, i in enumerate(batch):
                d_window = d_windows[i]
                if d_window is not None:
                    d_hidden[row, : lengths[i]] = d_window
            backprop(d_hidden)

    return outputs, backprop_windows


def with_special_cases(*parts: Ints1d) -> Ints1d:
    """Casing classes of a window's pieces with [CLS] before and [SEP] after each
    part (a question and a context: [CLS] q [SEP] c [SEP]); the specials get 0."""
    pieces: List[Any] = [[NO_CASE]]
    for part in parts:
        pieces.extend([part, [NO_CASE]])
    return cast(Ints1d, numpy.concatenate(pieces).astype("i"))


def segments(doc: Doc, text: str, context: str) -> List[Tuple[int, int]]:
    """The character spans of `doc` (whose text is `text`) that are encoded apart:
    the whole text, or with context "sentence" each sentence that is not blank (a
    doc without sentence boundaries, or with only blank ones, is one span)."""
    if context == "sentence" and doc.has_annotation("SENT_START"):
        spans = [(s.start_char, s.end_char) for s in doc.sents]
        spans = [(start, end) for start, end in spans if text[start:end].strip()]
        if spans:
            return spans
    return [(0, len(text))]


@dataclass
class _Segment:
    """One encoded span of a doc: its wordpieces, window plan and first window."""

    start_char: int
    pieces: Pieces
    plan: WindowPlan
    first_window: int


def forward(
    model: Model[List[Doc], List[DocEncoding]], docs: List[Doc], is_train: bool
) -> Tuple[List[DocEncoding], Callable[[List[DocEncodingGrad]], List[Doc]]]:
    xp = model.ops.xp
    cls_id, sep_id, _ = special_ids(model)
    size = model.attrs["max_length"] - 2
    stride = model.attrs["stride"]
    context = model.attrs.get("context", "doc")
    # doc.text joins the tokens anew on every call: once per doc, on this hot path
    doc_texts = [doc.text for doc in docs]
    spans = [segments(doc, text, context) for doc, text in zip(docs, doc_texts)]
    # a slice of the whole text is the text itself, not a copy
    texts = [text[s:e] for text, doc_spans in zip(doc_texts, spans) for s, e in doc_spans]
    pieces = iter(tokenize(model, texts))
    doc_segments: List[List[_Segment]] = []
    windows: List[Tuple[Ints1d, Ints1d]] = []
    window_cases: List[Ints1d] = []
    for doc_spans in spans:
        segs = []
        for start_char, _ in doc_spans:
            seg_pieces = next(pieces)
            plan = plan_windows(len(seg_pieces.ids), size, stride)
            segs.append(_Segment(start_char, seg_pieces, plan, len(windows)))
            for start, end in plan.spans:
                body = cast(numpy.ndarray, seg_pieces.ids[start:end])
                ids = cast(Ints1d, numpy.concatenate(([cls_id], body, [sep_id])).astype("i"))
                windows.append((ids, cast(Ints1d, numpy.zeros(len(ids), dtype="i"))))
                if seg_pieces.cases is not None:
                    window_cases.append(with_special_cases(seg_pieces.cases[start:end]))
        doc_segments.append(segs)
    cases = window_cases if hf_shim(model).uses_cases else None
    hidden, backprop_windows = run_windows(model, windows, is_train, cases)

    encodings = []
    for segs in doc_segments:
        merged = [_merge_windows(xp, hidden, seg, size) for seg in segs]
        if len(segs) == 1:
            cls, wordpieces = merged[0]
            offsets = segs[0].pieces.offsets
        else:
            n_windows = [len(seg.plan.spans) for seg in segs]
            cls = sum(c * n for (c, _), n in zip(merged, n_windows)) / sum(n_windows)
            wordpieces = xp.concatenate([w for _, w in merged])
            offsets = cast(
                Ints2d,
                numpy.concatenate([seg.pieces.offsets + seg.start_char for seg in segs]),
            )
        encodings.append(DocEncoding(cls=cls, wordpieces=wordpieces, offsets=offsets))

    def backprop(d_encodings: List[DocEncodingGrad]) -> List[Doc]:
        d_windows: List[Optional[Floats2d]] = [None] * len(windows)
        for d_enc, segs in zip(d_encodings, doc_segments):
            if d_enc.d_cls is None and d_enc.d_wordpieces is None:
                continue
            n_win = sum(len(seg.plan.spans) for seg in segs)
            piece_start = 0
            for seg in segs:
                plan, w0 = seg.plan, seg.first_window
                n_pieces = len(seg.pieces.ids)
                grads = [xp.zeros(hidden[w0 + w].shape, dtype="f") for w in range(len(plan.spans))]
                if d_enc.d_cls is not None:
                    for g in grads:
                        g[0] += d_enc.d_cls / n_win
                if d_enc.d_wordpieces is not None:
                    d_pieces = d_enc.d_wordpieces[piece_start : piece_start + n_pieces]
                    for w in range(len(plan.spans)):
                        own = numpy.nonzero(plan.owner == w)[0]
                        rows = xp.asarray(1 + numpy.asarray(plan.position)[own])
                        # index arrays live with the data (cupy on GPU)
                        grads[w][rows] += d_pieces[xp.asarray(own)]
                for w in range(len(plan.spans)):
                    d_windows[w0 + w] = grads[w]
                piece_start += n_pieces
        backprop_windows(d_windows)
        return []

    return encodings, backprop


def _merge_windows(xp: Any, hidden: List[Floats2d], seg: _Segment, size: int) -> Tuple[Any, Any]:
    """A segment's [CLS] vector (mean over its windows) and its wordpiece vectors,
    each from the window that owns the wordpiece."""
    plan, w0 = seg.plan, seg.first_window
    seg_hidden = hidden[w0 : w0 + len(plan.spans)]
    if plan.single:
        return seg_hidden[0][0], seg_hidden[0][1 : 1 + len(seg.pieces.ids)]
    cls = xp.stack([h[0] for h in seg_hidden]).mean(0)
    # +1 skips the window's [CLS]
    stacked = xp.stack([h[1 : 1 + size] for h in _padded(xp, seg_hidden, size)])
    return cls, stacked[xp.asarray(plan.owner), xp.asarray(plan.position)]


def _padded(xp: Any, windows: List[Floats2d], size: int) -> List[Floats2d]:
    """Pad each window's output to size + 2 rows so they can be stacked."""
    out = []
    for h in windows:
        if h.shape[0] < size + 2:
            pad = xp.zeros((size + 2 - h.shape[0], h.shape[1]), dtype=h.dtype)
            h = xp.concatenate([h, pad])
        out.append(h)
    return out
