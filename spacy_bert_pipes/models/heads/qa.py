"""Extractive question answering: `[CLS] question [SEP] context [SEP]` windows
through the encoder, a start and an end logit per wordpiece.

Windows follow Hugging Face's question-answering pipeline (fast tokenizers):
the question comes first (segment 0), the context is cut into chunks of
`max_seq_len - len(question) - (special tokens)` wordpieces overlapping by
`doc_stride` (segment 1 where the checkpoint has one), with the special tokens
of the checkpoint's own pair template (`text/pairs.py`: `</s></s>` between the
two for RoBERTa and XLM-R), so the same checkpoint sees the same inputs. Each doc's context
is tokenized once, however many questions it is asked. Training targets and the
decoding of the logits into answers are in `qa_decode`.
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init
from thinc.types import Floats1d, Floats2d, Ints1d, Ints2d

from ..encoder.bert import hf_shim, pair_template
from ..text.casing import NO_CASE
from ..text.tokens import tokenize
from .qa_types import DocQAScores, QABatch, QAQuery, WindowLogits

# When predicting, windows go through the encoder in groups of at most this many
# wordpieces, and only their logits are kept: 32,768 wordpieces of hidden states
# are 50 MB at width 384.
PREDICT_GROUP_WORDPIECES = 32_768


@registry.architectures("spacy-bert-pipes.QAModel.v1")
def QAModel(
    encoder: Model[List[Doc], Any],
    max_seq_len: int = 384,
    doc_stride: int = 128,
    max_question_len: int = 64,
) -> Model[List[QAQuery], List[DocQAScores]]:
    """Start/end logits for every (doc, question) pair, over windows of the context.

    encoder (Model): A spacy-bert-pipes.BertEncoder.v1 (its tokenizer, transformer,
        batch budget and precision are used; its own window settings are not).
    max_seq_len (int): Wordpieces per window: [CLS] question [SEP] context [SEP].
    doc_stride (int): Context wordpieces shared by consecutive windows.
    max_question_len (int): Longer questions are cut to this many wordpieces.
    """
    if max_question_len < 1:
        raise ValueError(f"max_question_len must be at least 1, got {max_question_len}")
    if max_seq_len - max_question_len - 3 <= doc_stride:
        raise ValueError(
            f"max_seq_len ({max_seq_len}) leaves {max_seq_len - max_question_len - 3} context "
            f"wordpieces after a question of max_question_len ({max_question_len}) and 3 "
            f"special tokens: must be more than doc_stride ({doc_stride})"
        )
    return Model(
        "qa_model",
        _qa_forward,
        init=_qa_init,
        layers=[encoder],
        refs={"encoder": encoder},
        dims={"nI": None, "nO": 2},
        params={"W": None, "b": None},
        attrs={
            "max_seq_len": max_seq_len,
            "doc_stride": doc_stride,
            "max_question_len": max_question_len,
        },
    )


def _qa_init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    encoder = model.get_ref("encoder")
    if encoder.has_dim("nO") is not True:
        encoder.initialize()
    width = encoder.get_dim("nO")
    model.set_dim("nI", width, force=True)
    model.set_param("W", glorot_uniform_init(model.ops, (2, width)))
    model.set_param("b", model.ops.alloc1f(2))


def _qa_forward(
    model: Model, queries: List[QAQuery], is_train: bool
) -> Tuple[List[DocQAScores], Callable]:
    encoder = model.get_ref("encoder")
    from ..encoder.bert import run_windows  # module attribute: benchmarks count its calls

    plan = _plan_windows(model, encoder, queries)
    W = cast(Floats2d, model.get_param("W"))  # (2, width)
    b = cast(Floats1d, model.get_param("b"))  # (2,)
    ops = model.ops
    if not is_train:
        # Only logits are kept, so the hidden states are dropped group by group:
        # many questions over long documents (COVID-QA: 98 articles, 1,380
        # questions, 11,000 windows per 32 docs) would otherwise hold gigabytes.
        return _predict_logits(model, encoder, plan, W, b), _no_backprop

    hidden, backprop_windows = run_windows(encoder, plan.windows, is_train, plan.cases)
    outputs = plan.outputs()
    rows_of: List[Any] = []
    inputs: List[Floats2d] = []
    for index, h in enumerate(hidden):
        pair = int(plan.window_pair[index])
        start, end = int(plan.window_start[index]), int(plan.window_end[index])
        # Rows that can hold an answer: [CLS], then the context pieces.
        first = int(plan.context_first[index])  # after [CLS] question [SEP]
        rows = ops.xp.concatenate(
            [ops.xp.zeros((1,), dtype="i"), ops.xp.arange(first, first + end - start, dtype="i")]
        )
        X = h[rows]  # (1 + n_context, width)
        logits = ops.affine(X, W, b)  # (1 + n_context, 2)
        doc = int(plan.pair_doc[pair])
        outputs[doc].questions[int(plan.pair_question[pair])].append(
            WindowLogits(start, end, logits[:, 0].copy(), logits[:, 1].copy())
        )
        rows_of.append(rows)
        inputs.append(X)

    def backprop(d_outputs: List[List[List[Optional[Floats2d]]]]) -> List[Doc]:
        """d_outputs[doc][question][window]: d(logits) (1 + n_context, 2), or None."""
        d_windows: List[Optional[Floats2d]] = []
        flat = [g for doc_grads in d_outputs for q_grads in doc_grads for g in q_grads]
        for g, X, rows, h in zip(flat, inputs, rows_of, hidden):
            if g is None:
                d_windows.append(None)
                continue
            model.inc_grad("W", ops.gemm(g, X, trans1=True))
            model.inc_grad("b", g.sum(axis=0))
            d_h = ops.xp.zeros(h.shape, dtype="f")
            d_h[rows] = ops.gemm(g, W)
            d_windows.append(d_h)
        backprop_windows(d_windows)
        return []

    return outputs, backprop


@dataclass
class _WindowPlan:
    """Every window of every (doc, question) pair of a batch, as flat arrays (host).

    Pairs are in doc order, then question order; windows in pair order, then
    along the context. Doc d's context wordpieces are rows piece_bounds[d] to
    piece_bounds[d + 1] of `offsets` and `words`.
    """

    windows: List[Tuple[Ints1d, Ints1d]]  # ids and segment ids of each window
    cases: Optional[List[Ints1d]]  # casing classes of each window, if used
    pair_doc: numpy.ndarray  # (n_pairs,)
    pair_question: numpy.ndarray  # the question's index among its doc's (n_pairs,)
    question_len: numpy.ndarray  # question wordpieces kept (n_pairs,)
    truncated: numpy.ndarray  # (n_pairs,) bool
    window_pair: numpy.ndarray  # (n_windows,)
    window_start: numpy.ndarray  # first context wordpiece (n_windows,)
    window_end: numpy.ndarray  # (n_windows,)
    context_first: numpy.ndarray  # the row of the first context wordpiece (n_windows,)
    offsets: numpy.ndarray  # (n_pieces, 2)
    words: numpy.ndarray  # (n_pieces,)
    piece_bounds: numpy.ndarray  # (n_docs + 1,)
    doc_offsets: List[Ints2d]
    doc_words: List[Ints1d]
    questions_per_doc: List[int]

    def outputs(self) -> List["DocQAScores"]:
        """One DocQAScores per doc with no windows yet."""
        truncated = self.truncated.tolist()
        bounds = numpy.concatenate(([0], numpy.cumsum(self.questions_per_doc))).tolist()
        return [
            DocQAScores(
                offsets=offsets,
                words=words,
                questions=[[] for _ in range(n)],
                truncated=truncated[bounds[d] : bounds[d + 1]],
            )
            for d, (offsets, words, n) in enumerate(
                zip(self.doc_offsets, self.doc_words, self.questions_per_doc)
            )
        ]


def _plan_windows(model: Model, encoder: Model, queries: List[QAQuery]) -> _WindowPlan:
    """Tokenize the contexts and (distinct) questions, and lay out every window
    with whole-array numpy: the windows of `window_spans`, as Hugging Face's
    pipeline makes them."""
    template = pair_template(encoder)
    max_seq_len = model.attrs["max_seq_len"]
    stride = model.attrs["doc_stride"]
    max_q = model.attrs["max_question_len"]
    if stride < 0:
        raise ValueError(f"doc_stride must be at least 0, got {stride}")
    contexts = tokenize(encoder, [q.doc.text for q in queries], with_words=True)
    all_questions = [text for q in queries for text in q.questions]
    distinct = list(dict.fromkeys(all_questions))
    question_pieces = tokenize(encoder, distinct)
    for text, pieces in zip(distinct, question_pieces):
        if len(pieces.ids) == 0:
            doc = next(i for i, q in enumerate(queries) if text in q.questions)
            raise ValueError(
                f"Doc {doc} of the batch: the question {text!r} has no wordpieces (the "
                "encoder's tokenizer drops all its characters)"
            )
    which = {text: i for i, text in enumerate(distinct)}
    pair_text = numpy.asarray([which[text] for text in all_questions], dtype="int64")
    questions_per_doc = [len(q.questions) for q in queries]
    n_docs, n_pairs = len(queries), len(all_questions)
    pair_doc = numpy.repeat(numpy.arange(n_docs), questions_per_doc)
    pair_first = numpy.cumsum(questions_per_doc) - questions_per_doc
    pair_question = numpy.arange(n_pairs) - pair_first[pair_doc]
    # wordpieces: the contexts, then the distinct questions, then a 0 for the specials
    ctx_counts = numpy.asarray([len(c.ids) for c in contexts], dtype="int64")
    q_counts = numpy.asarray([len(p.ids) for p in question_pieces], dtype="int64")
    ctx_bases = numpy.cumsum(ctx_counts) - ctx_counts
    n_ctx_pieces = int(ctx_counts.sum())
    q_bases = n_ctx_pieces + numpy.cumsum(q_counts) - q_counts
    n_all = n_ctx_pieces + int(q_counts.sum())
    full_q = q_counts[pair_text]
    q_len = numpy.minimum(full_q, max_q)
    size = max_seq_len - q_len - template.n_special  # context wordpieces per window
    step = size - stride
    if n_pairs and int(step.min()) < 1:
        raise ValueError(
            f"max_seq_len ({max_seq_len}) leaves {int(size.min())} context wordpieces after "
            f"a question of {int(q_len.max())} and the {template.n_special} special tokens "
            f"of the encoder's pairs: must be more than doc_stride ({stride})"
        )
    n_ctx = ctx_counts[pair_doc]
    # window_spans, for every pair at once
    n_windows = numpy.where(n_ctx <= size, 1, 1 + -(-(n_ctx - size) // numpy.maximum(step, 1)))
    window_pair = numpy.repeat(numpy.arange(n_pairs), n_windows)
    k = numpy.arange(len(window_pair)) - numpy.repeat(
        numpy.cumsum(n_windows) - n_windows, n_windows
    )
    window_start = k * step[window_pair]
    window_end = numpy.minimum(window_start + size[window_pair], n_ctx[window_pair])
    # every window as [CLS] question middle context end ([SEP], or the checkpoint's
    # own separators), all end to end
    n_middle, n_end = len(template.middle), len(template.end)
    w_q = q_len[window_pair]
    context_first = w_q + 1 + n_middle
    full = context_first + window_end - window_start + n_end
    full_starts = numpy.cumsum(full) - full
    total = int(full.sum())
    pos = numpy.arange(total, dtype="int64") - numpy.repeat(full_starts, full)
    pos_q = numpy.repeat(w_q, full)
    first_c = numpy.repeat(context_first, full)
    length = numpy.repeat(full, full)
    in_question = (pos >= 1) & (pos <= pos_q)
    in_context = (pos >= first_c) & (pos < length - n_end)
    q_source = numpy.repeat(q_bases[pair_text][window_pair], full) + pos - 1
    c_source = numpy.repeat(ctx_bases[pair_doc][window_pair] + window_start, full) + pos - first_c
    source = numpy.where(in_question, q_source, numpy.where(in_context, c_source, n_all))
    id_parts: List[Any] = [c.ids for c in contexts] + [p.ids for p in question_pieces]
    all_ids = numpy.concatenate(id_parts + [numpy.zeros((1,), "i")])
    flat_ids = all_ids[source].astype("i")
    is_cls = pos == 0
    flat_ids[is_cls] = template.cls_id
    in_middle = (pos > pos_q) & (pos < first_c)
    if n_middle:
        flat_ids[in_middle] = numpy.asarray(template.middle, "i")[(pos - pos_q - 1)[in_middle]]
    in_end = pos >= length - n_end
    if n_end:
        flat_ids[in_end] = numpy.asarray(template.end, "i")[(pos - length + n_end)[in_end]]
    flat_types = numpy.where(pos >= first_c, template.second_type, 0).astype("i")
    bounds = numpy.concatenate((full_starts, [total])).tolist()
    windows = [
        (
            cast(Ints1d, flat_ids[bounds[w] : bounds[w + 1]]),
            cast(Ints1d, flat_types[bounds[w] : bounds[w + 1]]),
        )
        for w in range(len(window_pair))
    ]
    cases: Optional[List[Ints1d]] = None
    if hf_shim(encoder).uses_cases:
        case_parts: List[Any] = [c.cases for c in contexts] + [p.cases for p in question_pieces]
        all_cases = numpy.concatenate(case_parts + [numpy.full((1,), NO_CASE, "i")])
        flat_cases = all_cases[source].astype("i")
        cases = [
            cast(Ints1d, flat_cases[bounds[w] : bounds[w + 1]]) for w in range(len(window_pair))
        ]
    doc_offsets = [c.offsets for c in contexts]
    doc_words = [cast(Ints1d, c.words) for c in contexts]
    offset_parts: List[Any] = doc_offsets + [numpy.zeros((0, 2), "i")]
    word_parts: List[Any] = doc_words + [numpy.zeros((0,), "i")]
    return _WindowPlan(
        windows=windows,
        cases=cases,
        pair_doc=pair_doc,
        pair_question=pair_question,
        question_len=q_len,
        truncated=full_q > max_q,
        window_pair=window_pair,
        window_start=window_start,
        window_end=window_end,
        context_first=context_first,
        offsets=numpy.concatenate(offset_parts).reshape((-1, 2)),
        words=numpy.concatenate(word_parts),
        piece_bounds=numpy.concatenate(([0], numpy.cumsum(ctx_counts))),
        doc_offsets=doc_offsets,
        doc_words=doc_words,
        questions_per_doc=questions_per_doc,
    )


def _predict_logits(
    model: Model, encoder: Model, plan: _WindowPlan, W: Floats2d, b: Floats1d
) -> List["DocQAScores"]:
    """The logits of every window: per transformer batch one affine and one
    gather of the rows that can hold an answer; one copy to the host per call."""
    from ..encoder.bert import run_windows  # module attribute: benchmarks count its calls

    ops = model.ops
    xp = ops.xp
    n_context = plan.window_end - plan.window_start
    counts = 1 + n_context  # [CLS] and the context rows of each window
    first = plan.context_first  # the first context row of each window
    parts: List[Any] = []
    order: List[numpy.ndarray] = []  # the windows of each part, in its row order
    lengths = [len(ids) for ids, _ in plan.windows]
    for lo, hi in window_groups(lengths, PREDICT_GROUP_WORDPIECES):
        group_cases = None if plan.cases is None else plan.cases[lo:hi]
        hidden, _ = run_windows(encoder, plan.windows[lo:hi], False, group_cases)
        for members, output in hidden.batches:
            index = numpy.asarray(members, dtype="int64") + lo
            n_rows = counts[index]
            row = numpy.repeat(numpy.arange(len(index)), n_rows)
            j = numpy.arange(int(n_rows.sum())) - numpy.repeat(
                numpy.cumsum(n_rows) - n_rows, n_rows
            )
            col = numpy.where(j == 0, 0, numpy.repeat(first[index], n_rows) + j - 1)
            n_windows, length, width = output.shape
            # logits of every position, then the rows kept: cheaper than gathering
            # the rows' hidden states first (2 floats a row, not `width`)
            positions = cast(Floats2d, output.reshape((n_windows * length, width)))
            every = ops.affine(positions, W, b)  # (n_windows * length, 2)
            parts.append(every[xp.asarray(row * length + col)])  # (rows, 2)
            order.append(index)
    if parts:
        # (rows, 2), windows in the order they ran
        ran = ops.to_numpy(parts[0] if len(parts) == 1 else xp.concatenate(parts))
        ran_windows = numpy.concatenate(order)
        ran_starts = numpy.empty(len(counts), dtype="int64")
        ran_starts[ran_windows] = numpy.cumsum(counts[ran_windows]) - counts[ran_windows]
        # the same rows, windows in plan order
        starts = numpy.cumsum(counts) - counts
        rows = numpy.repeat(ran_starts - starts, counts) + numpy.arange(int(counts.sum()))
        logits = numpy.ascontiguousarray(ran[rows].astype("f", copy=False).T)  # (2, rows)
    else:
        logits = numpy.zeros((2, 0), dtype="f")
    batch = QABatch(
        pair_doc=plan.pair_doc,
        window_pair=plan.window_pair,
        window_start=plan.window_start,
        window_end=plan.window_end,
        start_logits=cast(Floats1d, logits[0]),
        end_logits=cast(Floats1d, logits[1]),
        offsets=cast(Ints2d, plan.offsets),
        words=cast(Ints1d, plan.words),
        piece_bounds=plan.piece_bounds,
    )
    outputs = plan.outputs()
    # the per-window views, for code that reads a doc's windows one by one
    bounds = numpy.concatenate(([0], numpy.cumsum(counts))).tolist()
    lists = [
        outputs[d].questions[q] for d, q in zip(plan.pair_doc.tolist(), plan.pair_question.tolist())
    ]
    starts_list, ends_list = plan.window_start.tolist(), plan.window_end.tolist()
    for w, pair in enumerate(plan.window_pair.tolist()):
        a, z = bounds[w], bounds[w + 1]
        lists[pair].append(
            WindowLogits(
                starts_list[w],
                ends_list[w],
                cast(Floats1d, logits[0, a:z]),
                cast(Floats1d, logits[1, a:z]),
            )
        )
    for d, doc_scores in enumerate(outputs):
        doc_scores.batch, doc_scores.index = batch, d
    return outputs


def window_groups(lengths: Sequence[int], budget: int) -> List[Tuple[int, int]]:
    """Consecutive [lo, hi) ranges of windows, each at most `budget` wordpieces
    long in all (a longer window is a group alone)."""
    groups: List[Tuple[int, int]] = []
    lo, total = 0, 0
    for index, length in enumerate(lengths):
        if index > lo and total + length > budget:
            groups.append((lo, index))
            lo, total = index, 0
        total += length
    if lo < len(lengths):
        groups.append((lo, len(lengths)))
    return groups


def _no_backprop(d_outputs: Any) -> List[Doc]:
    raise ValueError("bert_qa's model was run with is_train=False: it has no gradient")
