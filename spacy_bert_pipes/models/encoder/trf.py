"""Heads on a spacy-transformers `transformer` component: its output as DocEncodings.

`TrfListenerEncoder.v1` stands in for the encoder of `bert_textcat` or `bert_ner`.
It wraps spacy-transformers' `TransformerListener`, so the `transformer` pipe runs
the model once per batch for all its listeners and, in training, receives their
gradients; each doc's `TransformerData` is then converted into a `DocEncoding`:

cls: the first row of each span (the [CLS] / <s> of BERT- and RoBERTa-style
    models), averaged over the doc's spans, as `BertEncoder` averages its windows.
wordpieces: one row per wordpiece of the text, with special tokens, padding and
    window overlaps removed. Overlapping spans (`strided_spans`) hold some tokens
    twice: each spaCy token takes the span where it has the most context (its
    wordpieces are farthest from the span's nearer edge; the earlier span on a
    tie), and each wordpiece is taken once, from the span chosen by the first
    token it belongs to.
offsets: the character span of the spaCy tokens that each wordpiece belongs to
    (the wordpieces of one token share it). `TransformerData` keeps no exact
    offsets, and the heads only need to know which wordpieces overlap a token, in
    order (see `align.align_tokens`).

spacy-transformers is an optional dependency (the `baseline` extra); it is imported
when the architecture is built.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Ints2d

from ..types import DocEncoding, DocEncodingGrad

if TYPE_CHECKING:
    from spacy_transformers.data_classes import TransformerData

TRF_ENCODER_NAME = "trf_listener_encoder"


@registry.architectures("spacy-bert-pipes.TrfListenerEncoder.v1")
def TrfListenerEncoder(
    upstream: str = "*", grad_factor: float = 1.0
) -> Model[List[Doc], List[DocEncoding]]:
    """Read features from an upstream spacy-transformers `transformer` component.

    upstream (str): The name of the `transformer` component, or "*" for any.
    grad_factor (float): Scales the gradients sent back to the transformer: 1.0
        fine-tunes it with this head's loss, 0.0 leaves it to the other listeners
        (the transformer still runs once per batch).
    """
    try:
        from spacy_transformers.layers.listener import TransformerListener
    except ImportError as err:
        raise ImportError(
            "spacy-bert-pipes.TrfListenerEncoder.v1 reads the output of a spacy-transformers "
            "`transformer` component: install spacy-transformers "
            "(pip install 'spacy-bert-pipes[baseline]')"
        ) from err
    # Registers the fork handler that keeps nlp.pipe(n_process=N) from deadlocking
    # in torch (one intra-op thread per worker); the transformer runs torch too.
    from ..transformer import hf_shim  # noqa: F401

    listener = TransformerListener(upstream_name=upstream)
    return Model(
        TRF_ENCODER_NAME,
        _forward,
        init=_init,
        layers=[listener],
        dims={"nO": None},
        attrs={"upstream": upstream, "grad_factor": grad_factor},
    )


def is_trf_encoder(model: Model) -> bool:
    """Whether a head's encoder is a `TrfListenerEncoder` (it has no weights of its own)."""
    return model.name == TRF_ENCODER_NAME


def _upstream_label(model: Model) -> str:
    upstream = model.attrs["upstream"]
    return "the transformer component" if upstream == "*" else f"the component '{upstream}'"


def _init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    listener = model.layers[0]
    # The transformer component sets its listeners' width in its own initialize.
    if listener.has_dim("nO") is not True:
        raise ValueError(
            f"The width of {_upstream_label(model)} is unknown: a spacy-transformers "
            "`transformer` component must come before this component in the pipeline and be "
            "initialized first"
        )
    model.set_dim("nO", listener.get_dim("nO"), force=True)


@dataclass
class WordpieceRows:
    """Where a doc's DocEncoding rows are in its TransformerData.

    rows (numpy.ndarray): Row of each wordpiece in the doc's hidden states
        flattened to (n_spans * padded_length, width). (n_pieces,)
    offsets (Ints2d): Character offsets of each wordpiece in `doc.text`, end
        exclusive: those of the spaCy tokens it belongs to. (n_pieces, 2)
    """

    rows: numpy.ndarray
    offsets: Ints2d


def wordpiece_rows(
    doc: Doc, align_data: Any, align_lengths: Any, shape: Tuple[int, int]
) -> WordpieceRows:
    """Pick one hidden row per wordpiece of a doc (see the module docstring).

    align_data, align_lengths: `TransformerData.align`: each token's rows.
    shape (Tuple[int, int]): (n_spans, padded_length) of the doc's hidden states.
    """
    n_spans, padded = shape
    n_tokens = len(doc)
    flat = numpy.asarray(align_data, dtype="i").reshape((-1,))
    lengths = numpy.asarray(align_lengths, dtype="i").reshape((-1,))
    if n_tokens == 0 or len(flat) == 0:
        return WordpieceRows(numpy.zeros((0,), dtype="i"), cast(Ints2d, numpy.zeros((0, 2), "i")))
    token = numpy.repeat(numpy.arange(n_tokens, dtype="i"), lengths)  # token of each entry
    span, position = flat // padded, flat % padded
    # Context of each (token, span) pair: how far its wordpieces are from the
    # nearer end of the span's text (its first and last aligned positions).
    span_first = numpy.full(n_spans, padded, dtype="i")
    span_last = numpy.full(n_spans, -1, dtype="i")
    numpy.minimum.at(span_first, span, position)
    numpy.maximum.at(span_last, span, position)
    pairs, pair_of_entry = numpy.unique(token * n_spans + span, return_inverse=True)
    pair_of_entry = pair_of_entry.reshape((-1,))
    lowest = numpy.full(len(pairs), padded, dtype="i")
    highest = numpy.full(len(pairs), -1, dtype="i")
    numpy.minimum.at(lowest, pair_of_entry, position)
    numpy.maximum.at(highest, pair_of_entry, position)
    pair_token, pair_span = pairs // n_spans, pairs % n_spans
    context = numpy.minimum(lowest - span_first[pair_span], span_last[pair_span] - highest)
    # Per token, its pair with the most context, the earliest span on ties.
    order = numpy.lexsort((pair_span, -context, pair_token))
    is_first = numpy.ones(len(order), dtype=bool)
    is_first[1:] = pair_token[order][1:] != pair_token[order][:-1]
    chosen = numpy.full(n_tokens, -1, dtype="i")
    chosen[pair_token[order][is_first]] = pair_span[order][is_first]
    # The first and last token of each row, for the ownership rule and the offsets.
    first_token = numpy.full(n_spans * padded, n_tokens, dtype="i")
    last_token = numpy.full(n_spans * padded, -1, dtype="i")
    numpy.minimum.at(first_token, flat, token)
    numpy.maximum.at(last_token, flat, token)
    # Entries are in token order, each token's rows ascending: the kept rows are
    # in text order and, since a row is kept only for its first token, unique.
    keep = (span == chosen[token]) & (first_token[flat] == token)
    rows = flat[keep]
    starts = numpy.fromiter((t.idx for t in doc), dtype="i", count=n_tokens)
    ends = starts + numpy.fromiter((len(t) for t in doc), dtype="i", count=n_tokens)
    offsets = numpy.stack([starts[first_token[rows]], ends[last_token[rows]]], axis=1)
    return WordpieceRows(rows.astype("i"), cast(Ints2d, offsets.astype("i")))


@dataclass
class _Converted:
    encoding: DocEncoding
    rows: Optional[WordpieceRows] = None  # None: the transformer gave no states
    shape: Tuple[int, ...] = ()  # the doc's hidden states (n_spans, padded_length, width)
    dtype: Any = "f"  # theirs (float16 under mixed precision); the encoding is float32


def _convert(model: Model, doc: Doc, trf_data: "TransformerData", width: int) -> _Converted:
    xp = model.ops.xp
    hidden = trf_data.model_output.get("last_hidden_state")
    if hidden is None or hidden.size == 0:  # an empty doc: the transformer skipped it
        empty = DocEncoding(
            cls=cast(Floats1d, xp.zeros((width,), dtype="f")),
            wordpieces=cast(Floats2d, xp.zeros((0, width), dtype="f")),
            offsets=cast(Ints2d, numpy.zeros((0, 2), dtype="i")),
        )
        shape = () if hidden is None else tuple(hidden.shape)
        return _Converted(empty, None, shape, "f" if hidden is None else hidden.dtype)
    n_spans, padded, width = hidden.shape  # (n_spans, padded_length, width)
    align = trf_data.align
    rows = wordpiece_rows(
        doc,
        model.ops.to_numpy(align.dataXd),
        model.ops.to_numpy(align.lengths),
        (n_spans, padded),
    )
    flat = hidden.reshape((n_spans * padded, width)).astype("f", copy=False)
    encoding = DocEncoding(
        cls=flat[xp.arange(n_spans) * padded].mean(axis=0),
        wordpieces=flat[xp.asarray(rows.rows)],
        offsets=rows.offsets,
    )
    return _Converted(encoding, rows, tuple(hidden.shape), hidden.dtype)


def _forward(
    model: Model[List[Doc], List[DocEncoding]], docs: List[Doc], is_train: bool
) -> Tuple[List[DocEncoding], Callable[[List[DocEncodingGrad]], List[Doc]]]:
    from spacy_transformers.data_classes import TransformerData
    from transformers.utils import ModelOutput

    if not is_train:
        for i, doc in enumerate(docs):
            if getattr(doc._, "trf_data", None) is None:
                raise ValueError(
                    f"Doc {i} has no doc._.trf_data: {_upstream_label(model)} must run "
                    "before its listeners (is it disabled or missing from the pipeline?)"
                )
    trf_datas, backprop_listener = model.layers[0](docs, is_train)
    width = model.get_dim("nO")
    converted = [_convert(model, doc, data, width) for doc, data in zip(docs, trf_datas)]
    grad_factor = model.attrs["grad_factor"]

    def backprop(d_encodings: List[DocEncodingGrad]) -> List[Doc]:
        xp = model.ops.xp
        d_trf_datas = []
        for conv, d_enc, trf_data in zip(converted, d_encodings, trf_datas):
            # Like spacy-transformers' own poolers: a gradient for every doc that
            # has hidden states, in order; none for the docs it skipped.
            if not conv.shape:
                continue
            n_spans, padded, width = conv.shape
            d_flat = xp.zeros((n_spans * padded, width), dtype="f")  # (rows, width)
            if conv.rows is not None and d_enc.d_wordpieces is not None:
                d_flat[xp.asarray(conv.rows.rows)] += d_enc.d_wordpieces  # rows are unique
            if conv.rows is not None and d_enc.d_cls is not None:
                d_flat[xp.arange(n_spans) * padded] += d_enc.d_cls / n_spans
            d_flat *= grad_factor
            d_hidden = d_flat.reshape(conv.shape).astype(conv.dtype, copy=False)
            d_trf_datas.append(
                TransformerData(
                    wordpieces=trf_data.wordpieces,
                    model_output=ModelOutput(last_hidden_state=d_hidden),
                    align=trf_data.align,
                )
            )
        return backprop_listener(d_trf_datas)

    return [conv.encoding for conv in converted], backprop
