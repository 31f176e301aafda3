"""Attention weights of the encoder for one window of a text (torch side of `explain`).

The window is built exactly as the encoder builds it: [CLS] text [SEP] for a text
(`encoder.forward`), or [CLS] question [SEP] context [SEP] with segment ids 0 / 1
for a question and context pair (`qa._qa_forward`), with the same window size and
stride, so the weights are those of the pass a component runs. The transformer runs
in eval mode (no dropout), without autocast (fp32) and with eager attention, since
fused (SDPA, flash) attention kernels never materialize the weights. (An encoder set
to predict in bf16 or int8 runs a reduced-precision copy of these fp32 weights, whose
attention differs slightly.)
"""

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple, cast

import numpy
from thinc.api import Model
from thinc.types import Ints1d, Ints2d

from ..models.encoder.bert import hf_shim, pair_template, special_ids
from ..models.text.casing import NO_CASE
from ..models.text.tokens import Pieces, tokenize
from ..models.text.windows import window_spans


@dataclass
class AttentionMaps:
    """The attention weights of one input window.

    tokens (List[str]): The window's wordpieces as the tokenizer writes them, special
        tokens included. (seq,)
    input_ids (Ints1d): Their ids: what the transformer ran on. (seq,)
    token_type_ids (Ints1d): Segment ids: 0, or 1 for the context of a pair. (seq,)
    offsets (Ints2d): Character offsets (end exclusive) of each wordpiece in the text,
        or in the question for question rows; (-1, -1) for special tokens. (seq, 2)
    is_question (Ints1d): 1 for the question's wordpieces, else 0. (seq,)
    weights (numpy.ndarray): float32 attention probabilities, (layers, heads, seq, seq):
        weights[l, h, i, j] is how much position i attends to position j in head h
        of layer l; each row sums to 1.
    window (int): Which window of the text this is (0-based).
    n_windows (int): How many windows the text needs.
    pieces (Tuple[int, int]): The text's wordpieces in this window, (start, end).
    n_pieces (int): The text's wordpieces in all (without special tokens).
    question_truncated (bool): Whether the question was cut to `max_question_length`.
    """

    tokens: List[str]
    input_ids: Ints1d
    token_type_ids: Ints1d
    offsets: Ints2d
    is_question: Ints1d
    weights: numpy.ndarray
    window: int
    n_windows: int
    pieces: Tuple[int, int]
    n_pieces: int
    question_truncated: bool = False

    @property
    def n_layers(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.weights.shape[1])


def encoder_attention(
    encoder: Model,
    text: str,
    *,
    question: Optional[str] = None,
    max_length: Optional[int] = None,
    stride: Optional[int] = None,
    max_question_length: int = 64,
    window: int = 0,
) -> AttentionMaps:
    """Run one window of a text through an encoder's transformer and return the
    attention weights of every layer and head.

    encoder (Model): A loaded spacy-bert-pipes.BertEncoder.v1.
    text (str): The text (the context, for a question and context pair).
    question (Optional[str]): Encode the pair (question, text) as `bert_qa` does.
    max_length (Optional[int]): Wordpieces per window, special tokens included
        (default: the encoder's `max_length`; bert_qa's is its `max_seq_len`).
    stride (Optional[int]): Wordpieces shared by consecutive windows (default: the
        encoder's; bert_qa's is its `doc_stride`).
    max_question_length (int): A longer question is cut, as bert_qa cuts it.
    window (int): Which window of a long text to run (0-based; negative counts
        from the end).
    RETURNS (AttentionMaps): The window's wordpieces and attention weights.
    """
    max_length = encoder.attrs["max_length"] if max_length is None else max_length
    stride = encoder.attrs["stride"] if stride is None else stride
    cls_id, sep_id, _ = special_ids(encoder)
    text_pieces = tokenize(encoder, [text])[0]
    q_pieces: Optional[Pieces] = None
    truncated = False
    # the special tokens before, between and after: [CLS] text [SEP], or the
    # checkpoint's own pair layout ([CLS] question [SEP] text [SEP], <s> q </s></s> t </s>)
    before, middle, after, second_type = [cls_id], [], [sep_id], 0
    if question is not None:
        q_pieces = tokenize(encoder, [question])[0]
        truncated = len(q_pieces.ids) > max_question_length
        q_cases = q_pieces.cases
        q_pieces = Pieces(
            cast(Ints1d, q_pieces.ids[:max_question_length]),
            cast(Ints2d, q_pieces.offsets[:max_question_length]),
            cases=None if q_cases is None else cast(Ints1d, q_cases[:max_question_length]),
        )
        template = pair_template(encoder)
        before, middle, after = [template.cls_id], list(template.middle), list(template.end)
        second_type = template.second_type
    n_head = 0 if q_pieces is None else len(q_pieces.ids) + len(middle)  # question, separators
    size = max_length - len(before) - len(after) - n_head
    if size < 1:
        raise ValueError(
            f"A window of {max_length} wordpieces leaves no room for the text after "
            f"{n_head} question wordpieces and the special tokens"
        )
    spans = window_spans(len(text_pieces.ids), size, min(stride, size - 1))
    if not -len(spans) <= window < len(spans):
        raise ValueError(
            f"window {window} is out of range: the text has {len(spans)} window"
            f"{'s' if len(spans) != 1 else ''} of {max_length} wordpieces "
            f"(0 to {len(spans) - 1}, or -1 for the last)"
        )
    window = window % len(spans)
    start, end = spans[window]

    def no_offsets(n: int) -> numpy.ndarray:
        return numpy.full((n, 2), -1, dtype="i")

    # (ids, offsets, is the question, casing classes) of each part, in order
    parts: List[Tuple[Any, Any, Any, Any]] = [
        (before, no_offsets(len(before)), [0] * len(before), [NO_CASE] * len(before))
    ]
    if q_pieces is not None:
        parts.append(
            (q_pieces.ids, q_pieces.offsets, numpy.ones(len(q_pieces.ids), "i"), q_pieces.cases)
        )
        parts.append((middle, no_offsets(len(middle)), [0] * len(middle), [NO_CASE] * len(middle)))
    context_start = sum(len(part[0]) for part in parts)
    piece_cases = None if text_pieces.cases is None else text_pieces.cases[start:end]
    parts.append(
        (
            text_pieces.ids[start:end],
            text_pieces.offsets[start:end],
            numpy.zeros(end - start, "i"),
            piece_cases,
        )
    )
    parts.append((after, no_offsets(len(after)), [0] * len(after), [NO_CASE] * len(after)))
    ids = numpy.concatenate([part[0] for part in parts]).astype("i")
    offset_parts = [part[1] for part in parts]
    question_flags = [part[2] for part in parts]
    types = numpy.zeros(len(ids), dtype="i")
    types[context_start:] = second_type  # the context and what follows it
    cases = None
    if text_pieces.cases is not None:  # an encoder with case embeddings
        cases = numpy.concatenate([numpy.asarray(part[3], "i") for part in parts])
    weights = _run_with_attentions(encoder, ids, types, cases)
    tokenizer = hf_shim(encoder).tokenizer
    return AttentionMaps(
        tokens=[str(t) for t in tokenizer.convert_ids_to_tokens(ids.tolist())],
        input_ids=cast(Ints1d, ids),
        token_type_ids=cast(Ints1d, types),
        offsets=cast(Ints2d, numpy.concatenate(offset_parts).astype("i")),
        is_question=cast(Ints1d, numpy.concatenate(question_flags).astype("i")),
        weights=weights,
        window=window,
        n_windows=len(spans),
        pieces=(start, end),
        n_pieces=len(text_pieces.ids),
        question_truncated=truncated,
    )


def _run_with_attentions(
    encoder: Model,
    ids: numpy.ndarray,
    types: numpy.ndarray,
    cases: Optional[numpy.ndarray] = None,
) -> Any:
    """The attention probabilities of every layer for one sequence, as float32
    numpy (layers, heads, seq, seq). `cases`: the casing classes, for an encoder
    with case embeddings."""
    import torch

    shim = hf_shim(encoder)
    module = shim.module
    transformer = module.transformer
    device = shim.device
    # (1, seq)
    input_ids = torch.as_tensor(ids, dtype=torch.long, device=device)[None]
    case_ids = (
        None if cases is None else torch.as_tensor(cases, dtype=torch.long, device=device)[None]
    )
    kwargs = {"attention_mask": torch.ones((1, len(ids)), dtype=torch.long, device=device)}
    if module.uses_token_types:
        kwargs["token_type_ids"] = torch.as_tensor(types, dtype=torch.long, device=device)[None]
    with torch.inference_mode():
        kwargs.update(module.inputs(input_ids, case_ids))
    was_training = transformer.training
    transformer.eval()
    try:
        with _eager_attention(transformer), torch.inference_mode():
            with torch.autocast(device_type=device.type, enabled=False):
                output = transformer(**kwargs, output_attentions=True, return_dict=True)
    finally:
        transformer.train(was_training)
    attentions = getattr(output, "attentions", None)
    if not attentions or any(a is None for a in attentions):
        raise ValueError(
            f"The {type(transformer).__name__} encoder returned no attention weights "
            "(output_attentions=True): its attention implementation does not provide them"
        )
    # each (1, heads, seq, seq) -> (layers, heads, seq, seq)
    stacked = torch.stack([a[0].float() for a in attentions])
    return numpy.ascontiguousarray(stacked.cpu().numpy(), dtype="float32")


@contextlib.contextmanager
def _eager_attention(transformer: Any) -> Iterator[None]:
    """Run with eager attention, which returns the weights, and restore the
    configured implementation after. Models that pick their attention function at
    each call (most in transformers >= 4.48) follow the config; BERT's SDPA layers
    fall back to eager by themselves when asked for the weights (and warn, which is
    silenced here)."""
    from transformers.utils import logging as hf_logging

    config = transformer.config
    previous = getattr(config, "_attn_implementation", None)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    if previous not in (None, "eager"):
        config._attn_implementation = "eager"
    try:
        yield
    finally:
        if previous not in (None, "eager"):
            config._attn_implementation = previous
        hf_logging.set_verbosity(verbosity)
