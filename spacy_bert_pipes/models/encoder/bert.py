"""The BERT encoder as a thinc Model: Docs in, one DocEncoding per Doc out.

Forward pass, in order:
1. tokenize each doc's text once with the fast tokenizer (character offsets kept),
   or with `context = "sentence"` each of its sentences apart (`context = "auto"`:
   as the training docs were, see `segments.py`);
2. split long texts (sentences) into overlapping windows, laid out end to end
   (`window_layout.layout_windows`, `windows.plan_windows`);
3. pack the windows of all docs into length-sorted batches under a padded-token
   budget (`windows.pack_batches`) and run each batch through the transformer;
4. merge each doc's windows: the [CLS] vectors are averaged, each wordpiece takes
   its vector from its max-context window (of its own sentence, by sentence).
The backward pass scatters the heads' gradients back into the batches.
"""

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
from thinc.types import Floats2d, Floats3d, Ints1d

from ..text.pairs import PairTemplate
from ..text.segments import CONTEXTS
from ..text.tokens import tokenized
from ..text.window_layout import layout_windows
from ..text.windows import (
    REPRODUCIBLE_TOKENS,
    bucket_length,
    copy_rows,
    pack_batches,
    pack_reproducible,
    padded_batch,
    reproducible_rows,
    segment_sums,
)
from ..types import BatchSlice, DocEncoding, DocEncodingGrad, Precision
from .oom import run_batch

if TYPE_CHECKING:  # torch is imported only when an encoder is built
    from ..transformer.hf_shim import HFShim


@registry.architectures("spacy-bert-pipes.BertEncoder.v1")
def BertEncoder(
    max_length: int = 128,
    stride: int = 32,
    max_batch_tokens: int = 4096,
    precision: Precision = "fp32",
    frozen_layers: Union[int, Literal["all"]] = 0,
    hidden_layers: Literal["last", "sum_last_four", "concat_last_four"] = "last",
    context: Literal["doc", "sentence", "auto"] = "doc",
    case_embeddings: bool = False,
) -> Model[List[Doc], List[DocEncoding]]:
    """BertEncoder.v2 with one `precision` for training and prediction (v2's
    predict_precision = precision), as saved pipelines of v1 were run."""
    return BertEncoderV2(
        max_length=max_length,
        stride=stride,
        max_batch_tokens=max_batch_tokens,
        precision=precision,
        predict_precision=precision,
        frozen_layers=frozen_layers,
        hidden_layers=hidden_layers,
        context=context,
        case_embeddings=case_embeddings,
    )


@registry.architectures("spacy-bert-pipes.BertEncoder.v2")
def BertEncoderV2(
    max_length: int = 128,
    stride: int = 32,
    max_batch_tokens: int = 4096,
    precision: Precision = "fp32",
    predict_precision: Precision = "auto",
    frozen_layers: Union[int, Literal["all"]] = 0,
    hidden_layers: Literal["last", "sum_last_four", "concat_last_four"] = "last",
    context: Literal["doc", "sentence", "auto"] = "doc",
    case_embeddings: bool = False,
    int8_checked: bool = False,
) -> Model[List[Doc], List[DocEncoding]]:
    """A BERT-family encoder (Hugging Face AutoModel) producing a DocEncoding per doc.

    The weights arrive in `initialize`, through the component's `encoder_loader`.
    Each setting (max_length, stride, max_batch_tokens, precision, predict_precision,
    frozen_layers, hidden_layers, context, case_embeddings, int8_checked) is
    documented once, in the encoder's table in docs/components.md.
    """
    from ..transformer.hf_shim import HFShim

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
        predict_precision=predict_precision,
        int8_checked=int8_checked,
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
            # what `context = "auto"` learned from the training docs (learn_context)
            "learned_context": None,
            # set at load time by `loading.set_reproducible`
            "reproducible": False,
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


def special_ids(encoder: Model) -> Tuple[int, int, int]:
    """(cls, sep, pad) token ids of the encoder's tokenizer."""
    tok = hf_shim(encoder).tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return int(tok.cls_token_id), int(tok.sep_token_id), int(pad)


def pair_template(encoder: Model) -> PairTemplate:
    """How the encoder's checkpoint lays out a (question, context) pair."""
    return hf_shim(encoder).pair_template(str(encoder.attrs.get("source") or "this encoder"))


class WindowOutputs(List[Floats2d]):
    """`run_windows`' outputs: one (length, width) view per window, in the order
    of the windows given, and the padded transformer batches they are views of,
    for batch-level gathers (`batches`: each batch's window indices and its
    (batch, length, width) output)."""

    def __init__(self, views: List[Floats2d], batches: List[Tuple[List[int], Floats3d]]) -> None:
        super().__init__(views)
        self.batches = batches


def run_windows(
    encoder: Model,
    windows: Sequence[Tuple[Ints1d, Ints1d]],
    is_train: bool,
    cases: Optional[Sequence[Ints1d]] = None,
) -> Tuple[WindowOutputs, Callable[[List[Optional[Floats2d]]], None]]:
    """Run full input sequences (ids and segment ids, specials included) through the
    transformer, packed into length-sorted batches. An encoder with case embeddings
    also needs each window's casing classes (`cases`, 0 for the specials).

    Each batch's padded inputs are built with a few numpy calls (the windows
    concatenated, then written under the batch's mask), and go to the device in
    one transfer per input.

    RETURNS: one (length, width) array per window, views into the batch outputs
    (a WindowOutputs), and a callback taking one gradient (or None) per window.
    """
    shim = hf_shim(encoder)
    xp = encoder.ops.xp
    pad = special_ids(encoder)[2]
    if shim.uses_cases and cases is None:
        raise ValueError("An encoder with case embeddings needs the windows' casing classes")
    lengths = [len(ids) for ids, _ in windows]
    # reproducible: each window padded as it would be alone (set at load time)
    reproducible = encoder.attrs.get("reproducible", False) and not is_train
    # int8 quantizes activations with one scale per call: rows share it, so a
    # reproducible window runs alone (one row per call)
    tokens = 1 if reproducible and shim.rows_share_scales else REPRODUCIBLE_TOKENS
    if reproducible:
        batches = pack_reproducible(lengths, tokens=tokens)
    else:
        batches = pack_batches(lengths, encoder.attrs["max_batch_tokens"])
    outputs: List[Any] = [None] * len(windows)
    callbacks = []
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        width = bucket_length(longest) if reproducible else shim.padded_length(longest, is_train)
        rows = batch
        if reproducible:  # every call of a width has one shape: copies of row 0 fill it
            rows = batch + [batch[0]] * (reproducible_rows(width, tokens) - len(batch))
        inputs = padded_batch(
            [windows[i][0] for i in rows],
            [windows[i][1] for i in rows],
            width,
            pad,
            [cast(Sequence[Ints1d], cases)[i] for i in rows] if shim.uses_cases else None,
        )
        # (batch, length, width)
        hidden, backprop = run_batch(shim, tuple(xp.asarray(a) for a in inputs), is_train)
        hidden = hidden[: len(batch)]  # the copies' rows are dropped (prediction only)
        for row, i in enumerate(batch):
            outputs[i] = hidden[row, : lengths[i]]
        callbacks.append((batch, hidden, backprop))

    def backprop_windows(d_windows: List[Optional[Floats2d]]) -> None:
        for batch, hidden, backprop in callbacks:
            if all(d_windows[i] is None for i in batch):
                continue
            d_hidden: Floats3d = xp.zeros(hidden.shape, dtype="f")
            for row, i in enumerate(batch):
                d_window = d_windows[i]
                if d_window is not None:
                    d_hidden[row, : lengths[i]] = d_window
            backprop(d_hidden)

    batch_outputs = [(batch, hidden) for batch, hidden, _ in callbacks]
    return WindowOutputs(outputs, batch_outputs), backprop_windows


def forward(
    model: Model[List[Doc], List[DocEncoding]], docs: List[Doc], is_train: bool
) -> Tuple[List[DocEncoding], Callable[[List[DocEncodingGrad]], List[Doc]]]:
    xp = model.ops.xp
    cls_id, sep_id, _ = special_ids(model)
    size = model.attrs["max_length"] - 2
    layout = layout_windows(tokenized(model, docs), cls_id, sep_id, size, model.attrs["stride"])
    cases = layout.cases if hf_shim(model).uses_cases else None
    hidden, backprop_windows = run_windows(model, layout.windows, is_train, cases)
    # with branches (a head's own top layers) each branch's output follows the
    # shared one: every row is (1 + number of branches) * the encoder's width
    branch_names = list(hf_shim(model).module.branch_layers)
    width = model.get_dim("nO") * (1 + len(branch_names))
    n_windows = len(layout.windows)
    # which padded transformer batch and row holds each window
    window_batch = numpy.zeros((n_windows,), dtype="int64")
    window_row = numpy.zeros((n_windows,), dtype="int64")
    for b, (rows, _) in enumerate(hidden.batches):
        window_batch[rows] = b
        window_row[rows] = numpy.arange(len(rows))
    piece_batch = window_batch[layout.owner]
    dtype = hidden.batches[0][1].dtype if hidden.batches else "f"
    # every wordpiece from its owning window, every [CLS]: one gather per transformer batch
    pieces = xp.empty((len(layout.owner), width), dtype=dtype)  # (n_pieces, width)
    cls_windows = xp.empty((n_windows, width), dtype=dtype)  # (n_windows, width)
    # each window's final [SEP], for pooling that averages the specials too
    sep_windows = xp.empty((n_windows, width), dtype=dtype)  # (n_windows, width)
    full_lengths = numpy.asarray([len(ids) for ids, _ in layout.windows], dtype="int64")
    sources = []
    for b, (rows, batch_hidden) in enumerate(hidden.batches):
        selected = numpy.flatnonzero(piece_batch == b)
        # +1 skips the window's [CLS]
        flat_rows = (
            window_row[layout.owner[selected]] * batch_hidden.shape[1]
            + 1
            + layout.position[selected]
        )
        sources.append((selected, flat_rows))
        flat_hidden: Any = batch_hidden.reshape((-1, width))  # (batch * length, width)
        copy_rows(xp, pieces, selected, flat_hidden, flat_rows)
        cls_windows[xp.asarray(rows)] = cast(Any, batch_hidden)[:, 0]
        last = xp.asarray(full_lengths[rows] - 1)
        sep_windows[xp.asarray(rows)] = cast(Any, batch_hidden)[xp.arange(len(rows)), last]
    if (layout.windows_per_doc == 1).all():
        cls, sep = cls_windows, sep_windows  # windows are in doc order
    else:  # the mean [CLS] and [SEP] over each doc's windows
        counts = xp.asarray(layout.windows_per_doc, dtype="f")[:, None]
        cls = segment_sums(xp, cls_windows, layout.windows_per_doc) / counts
        sep = segment_sums(xp, sep_windows, layout.windows_per_doc) / counts
    bounds = layout.piece_bounds
    encodings = _doc_encodings(xp, layout, cls, pieces, sep, branch_names)

    def backprop(d_encodings: List[DocEncodingGrad]) -> List[Doc]:
        d_pieces = xp.zeros((len(layout.owner), width), dtype="f")
        d_cls = xp.zeros((len(d_encodings), width), dtype="f")
        has_grad = numpy.zeros((len(d_encodings),), dtype=bool)
        part = width // (1 + len(branch_names))
        for i, d_enc in enumerate(d_encodings):
            parts = [(0, d_enc)] + [
                (1 + b, d_enc.branches[name])
                for b, name in enumerate(branch_names)
                if name in d_enc.branches
            ]
            for b, grad in parts:
                columns = slice(b * part, (b + 1) * part)
                if grad.d_wordpieces is not None:
                    d_pieces[bounds[i] : bounds[i + 1], columns] += grad.d_wordpieces
                    has_grad[i] = True
                if grad.d_cls is not None:
                    d_cls[i, columns] += grad.d_cls
                    has_grad[i] = True
        # each window's [CLS] gets its doc's gradient over the doc's window count
        shares = xp.asarray(layout.windows_per_doc[layout.doc_of_window], dtype="f")[:, None]
        d_cls_windows = d_cls[xp.asarray(layout.doc_of_window)] / shares
        d_windows: List[Optional[Floats2d]] = [None] * n_windows
        for (rows, batch_hidden), (selected, flat_rows) in zip(hidden.batches, sources):
            d_hidden = xp.zeros(batch_hidden.shape, dtype="f")
            if len(selected):
                d_flat = d_hidden.reshape((-1, width))
                d_flat[xp.asarray(flat_rows)] = d_pieces[xp.asarray(selected)]
            d_hidden[:, 0] = d_cls_windows[xp.asarray(rows)]
            for row, w in enumerate(rows):
                if has_grad[layout.doc_of_window[w]]:
                    d_windows[w] = d_hidden[row, : len(layout.windows[w][0])]
        backprop_windows(d_windows)
        return []

    return encodings, backprop


def _doc_encodings(
    xp: Any,
    layout: Any,
    cls: Floats2d,
    pieces: Floats2d,
    sep: Floats2d,
    branch_names: List[str],
) -> List[DocEncoding]:
    """One DocEncoding per doc from the merged rows of the whole batch; with
    branches, the rows' first part is the shared encoding and each next part one
    branch's (copied apart, so that every array is contiguous)."""
    bounds = layout.piece_bounds
    n_docs = len(layout.offsets)
    parts: List[Tuple[Floats2d, Floats2d, Floats2d]] = [(cls, pieces, sep)]
    if branch_names:
        part = cls.shape[1] // (1 + len(branch_names))
        parts = [
            tuple(  # type: ignore[misc]
                xp.ascontiguousarray(a[:, b * part : (b + 1) * part]) for a in (cls, pieces, sep)
            )
            for b in range(1 + len(branch_names))
        ]

    def encoding(i: int, b: int) -> DocEncoding:
        b_cls, b_pieces, b_sep = parts[b]
        return DocEncoding(
            cls=b_cls[i],
            wordpieces=b_pieces[bounds[i] : bounds[i + 1]],
            offsets=layout.offsets[i],
            sep=b_sep[i],
            batch=BatchSlice(b_pieces, bounds[i]),
        )

    encodings = [encoding(i, 0) for i in range(n_docs)]
    for b, name in enumerate(branch_names):
        for i in range(n_docs):
            encodings[i].branches[name] = encoding(i, 1 + b)
    return encodings
