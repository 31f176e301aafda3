"""Extractive question answering: `[CLS] question [SEP] context [SEP]` windows
through the encoder, a start and an end logit per wordpiece.

Windows follow Hugging Face's question-answering pipeline (fast tokenizers):
the question comes first (segment 0), the context is cut into chunks of
`max_seq_len - len(question) - 3` wordpieces overlapping by `doc_stride`
(segment 1), so the same checkpoint sees the same inputs. Each doc's context
is tokenized once, however many questions it is asked.
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init
from thinc.types import Floats1d, Floats2d, Ints1d, Ints2d

from .casing import NO_CASE
from .encoder import hf_shim, special_ids, tokenize

# When predicting, windows go through the encoder in groups of at most this many
# wordpieces, and only their logits are kept: 32,768 wordpieces of hidden states
# are 50 MB at width 384.
PREDICT_GROUP_WORDPIECES = 32_768


@dataclass
class QAQuery:
    """The questions asked of one doc (the model's input, one per doc)."""

    doc: Doc
    questions: List[str]


@dataclass
class WindowLogits:
    """Start/end logits of one question over one window of the context.

    start, end (int): The context wordpieces [start, end) in the window.
    start_logits, end_logits (Floats1d): Index 0 is the [CLS] token (the "no
        answer" position); index 1 + i is context wordpiece `start + i`. (1 + end - start,)
    """

    start: int
    end: int
    start_logits: Floats1d
    end_logits: Floats1d


@dataclass
class DocQAScores:
    """The model's output for one doc.

    offsets (Ints2d): Character offsets of the context wordpieces. (n_pieces, 2)
    words (Ints1d): The tokenizer's word index of each context wordpiece. (n_pieces,)
    questions (List[List[WindowLogits]]): For each question, its windows in order.
    truncated (List[bool]): Whether each question was cut to `max_question_len`.
    """

    offsets: Ints2d
    words: Ints1d
    questions: List[List[WindowLogits]]
    truncated: List[bool]
    # Set by prediction: the arrays of the whole batch (the windows above are
    # views into them) and the doc's index in it.
    batch: Optional["QABatch"] = None
    index: int = 0


@dataclass
class QABatch:
    """Prediction output of a batch of docs as flat host arrays, for decoding all
    questions at once. Pairs (doc, question) are in doc order, then question
    order; windows in pair order, then along the context.

    pair_doc (numpy.ndarray): The doc of each pair. (n_pairs,)
    window_pair (numpy.ndarray): The pair of each window. (n_windows,)
    window_start, window_end (numpy.ndarray): The context wordpieces [start, end)
        of each window, indices into its doc's. (n_windows,)
    start_logits, end_logits (Floats1d): Each window's rows in turn: its [CLS],
        then its context wordpieces. (n_windows + sum(end - start),)
    offsets (Ints2d): Character offsets of all docs' context wordpieces, doc
        after doc. (n_pieces, 2)
    words (Ints1d): The tokenizer's word index of each of them. (n_pieces,)
    piece_bounds (numpy.ndarray): Doc d's wordpieces are rows piece_bounds[d] to
        piece_bounds[d + 1] of offsets and words. (n_docs + 1,)
    """

    pair_doc: numpy.ndarray
    window_pair: numpy.ndarray
    window_start: numpy.ndarray
    window_end: numpy.ndarray
    start_logits: Floats1d
    end_logits: Floats1d
    offsets: Ints2d
    words: Ints1d
    piece_bounds: numpy.ndarray

    @classmethod
    def of(
        cls, scores: Sequence["DocQAScores"], to_numpy: Callable[[Any], numpy.ndarray]
    ) -> "QABatch":
        """The batch arrays of these docs' scores: those prediction made, when the
        scores are exactly its batch, else gathered window by window."""
        shared = scores[0].batch if scores else None
        if (
            shared is not None
            and len(scores) == len(shared.piece_bounds) - 1
            and all(s.batch is shared and s.index == d for d, s in enumerate(scores))
        ):
            return shared
        pair_doc: List[int] = []
        window_pair: List[int] = []
        bounds: List[Tuple[int, int]] = []
        logits: List[Any] = [numpy.zeros((0,), "f")]
        end_logits: List[Any] = [numpy.zeros((0,), "f")]
        for d, doc_scores in enumerate(scores):
            for windows in doc_scores.questions:
                pair_doc.append(d)
                for w in windows:
                    window_pair.append(len(pair_doc) - 1)
                    bounds.append((w.start, w.end))
                    logits.append(to_numpy(w.start_logits).astype("f", copy=False))
                    end_logits.append(to_numpy(w.end_logits).astype("f", copy=False))
        spans = numpy.asarray(bounds, dtype="int64").reshape((-1, 2))
        counts = [len(s.offsets) for s in scores]
        offsets: List[Any] = [numpy.asarray(s.offsets).reshape((-1, 2)) for s in scores]
        words: List[Any] = [numpy.asarray(s.words) for s in scores]
        return cls(
            pair_doc=numpy.asarray(pair_doc, dtype="int64"),
            window_pair=numpy.asarray(window_pair, dtype="int64"),
            window_start=spans[:, 0],
            window_end=spans[:, 1],
            start_logits=cast(Floats1d, numpy.concatenate(logits)),
            end_logits=cast(Floats1d, numpy.concatenate(end_logits)),
            offsets=cast(Ints2d, numpy.concatenate(offsets + [numpy.zeros((0, 2), "i")])),
            words=cast(Ints1d, numpy.concatenate(words + [numpy.zeros((0,), "i")])),
            piece_bounds=numpy.concatenate(([0], numpy.cumsum(counts))).astype("int64"),
        )


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
    from .encoder import run_windows  # module attribute: benchmarks count its calls

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
        first = int(plan.question_len[pair]) + 2  # [CLS] question [SEP]
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
    cls_id, sep_id, _ = special_ids(encoder)
    max_seq_len = model.attrs["max_seq_len"]
    stride = model.attrs["doc_stride"]
    max_q = model.attrs["max_question_len"]
    if stride < 0:
        raise ValueError(f"doc_stride must be at least 0, got {stride}")
    contexts = tokenize(encoder, [q.doc.text for q in queries], with_words=True)
    all_questions = [text for q in queries for text in q.questions]
    distinct = list(dict.fromkeys(all_questions))
    question_pieces = tokenize(encoder, distinct)
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
    size = max_seq_len - q_len - 3  # context wordpieces per window
    step = size - stride
    n_ctx = ctx_counts[pair_doc]
    # window_spans, for every pair at once
    n_windows = numpy.where(n_ctx <= size, 1, 1 + -(-(n_ctx - size) // numpy.maximum(step, 1)))
    window_pair = numpy.repeat(numpy.arange(n_pairs), n_windows)
    k = numpy.arange(len(window_pair)) - numpy.repeat(
        numpy.cumsum(n_windows) - n_windows, n_windows
    )
    window_start = k * step[window_pair]
    window_end = numpy.minimum(window_start + size[window_pair], n_ctx[window_pair])
    # every window as [CLS] question [SEP] context [SEP], all end to end
    w_q = q_len[window_pair]
    full = w_q + 3 + window_end - window_start
    full_starts = numpy.cumsum(full) - full
    total = int(full.sum())
    pos = numpy.arange(total, dtype="int64") - numpy.repeat(full_starts, full)
    pos_q = numpy.repeat(w_q, full)
    in_question = (pos >= 1) & (pos <= pos_q)
    in_context = (pos >= pos_q + 2) & (pos < numpy.repeat(full, full) - 1)
    q_source = numpy.repeat(q_bases[pair_text][window_pair], full) + pos - 1
    c_source = numpy.repeat(ctx_bases[pair_doc][window_pair] + window_start, full) + pos - pos_q - 2
    source = numpy.where(in_question, q_source, numpy.where(in_context, c_source, n_all))
    id_parts: List[Any] = [c.ids for c in contexts] + [p.ids for p in question_pieces]
    all_ids = numpy.concatenate(id_parts + [numpy.zeros((1,), "i")])
    flat_ids = all_ids[source].astype("i")
    is_cls = pos == 0
    flat_ids[is_cls] = cls_id
    flat_ids[~(is_cls | in_question | in_context)] = sep_id
    flat_types = (pos >= pos_q + 2).astype("i")
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
    from .encoder import run_windows  # module attribute: benchmarks count its calls

    ops = model.ops
    xp = ops.xp
    n_context = plan.window_end - plan.window_start
    counts = 1 + n_context  # [CLS] and the context rows of each window
    first = plan.question_len[plan.window_pair] + 2  # the first context row of each window
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


def window_targets(
    scores: DocQAScores, question: int, answer: Optional[Tuple[int, int]]
) -> List[Tuple[int, int]]:
    """Training targets of a question in each of its windows: the (start, end)
    row of the answer's first and last wordpiece when the window holds the whole
    answer, else (0, 0), the [CLS] row ("no answer here").

    answer (Optional[Tuple[int, int]]): Character offsets of the gold answer, or None.
    """
    windows = scores.questions[question]
    if answer is None:
        return [(0, 0)] * len(windows)
    first, last = answer_pieces(scores.offsets, answer)
    targets = []
    for w in windows:
        if first >= 0 and w.start <= first and last < w.end:
            targets.append((1 + first - w.start, 1 + last - w.start))
        else:
            targets.append((0, 0))
    return targets


def answer_pieces(offsets: Ints2d, answer: Tuple[int, int]) -> Tuple[int, int]:
    """The first and last wordpieces overlapping characters [start, end); (-1, -1)
    when no wordpiece does (e.g. an answer of dropped characters)."""
    spans = numpy.asarray(offsets).reshape((-1, 2))
    start, end = answer
    overlap = numpy.nonzero(
        (spans[:, 1] > start) & (spans[:, 0] < end) & (spans[:, 1] > spans[:, 0])
    )[0]
    if len(overlap) == 0:
        return -1, -1
    return int(overlap[0]), int(overlap[-1])


def softmax(x: numpy.ndarray) -> numpy.ndarray:
    e = numpy.exp(x - x.max())
    return e / e.sum()


# Span scores are computed for at most this many (start, length) cells at a time.
DECODE_CHUNK_CELLS = 1 << 20


@dataclass
class SpanCandidates:
    """Candidate answers of a batch: up to top_k per window, windows in batch
    order, best first within a window.

    window (numpy.ndarray): The window of each candidate. (n,)
    first, last (numpy.ndarray): Its first and last context wordpiece, indices
        into its doc's wordpieces. (n,)
    score (numpy.ndarray): p_start[first] * p_end[last], float64. (n,)
    null_score (numpy.ndarray): The null ([CLS]) score of each pair, float64. (n_pairs,)
    """

    window: numpy.ndarray
    first: numpy.ndarray
    last: numpy.ndarray
    score: numpy.ndarray
    null_score: numpy.ndarray


def decode_batch(batch: QABatch, max_answer_len: int, top_k: int) -> SpanCandidates:
    """The best spans of every window of a batch, scored as Hugging Face's
    question-answering pipeline does: per window, softmax of the start logits and
    of the end logits over [CLS] and the context; a pair's null score is the
    lowest p_start[CLS] * p_end[CLS] over its windows; a span (s, e) with s <= e
    < s + max_answer_len scores p_start[s] * p_end[e]. Ties go to the earlier
    start, then the earlier end. Whole-array numpy over all windows at once.
    """
    n_pairs = len(batch.pair_doc)
    n_context = (batch.window_end - batch.window_start).astype("int64")  # (n_windows,)
    counts = 1 + n_context  # rows of each window: [CLS], then its context
    n_windows = len(counts)
    null_score = numpy.full((n_pairs,), 1e6)
    if n_windows == 0:
        empty = numpy.zeros((0,), dtype="int64")
        return SpanCandidates(empty, empty, empty, numpy.zeros((0,)), null_score)
    row_start = numpy.cumsum(counts) - counts
    p_start = _segment_softmax(numpy.asarray(batch.start_logits, dtype="f8"), row_start, counts)
    p_end = _segment_softmax(numpy.asarray(batch.end_logits, dtype="f8"), row_start, counts)
    null_window = p_start[row_start] * p_end[row_start]  # (n_windows,)
    pairs, pair_first = numpy.unique(batch.window_pair, return_index=True)
    null_score[pairs] = numpy.minimum(1e6, numpy.minimum.reduceat(null_window, pair_first))
    # context rows: (window, position s in its context) of every possible start
    window_of = numpy.repeat(numpy.arange(n_windows), n_context)  # (n_starts,)
    local = numpy.arange(len(window_of)) - numpy.repeat(
        numpy.cumsum(n_context) - n_context, n_context
    )
    rows = row_start[window_of] + 1 + local
    remaining = n_context[window_of] - local  # valid lengths: 1 .. min(remaining, max)
    if len(rows) == 0:  # empty contexts only
        empty = numpy.zeros((0,), dtype="int64")
        return SpanCandidates(empty, empty, empty, numpy.zeros((0,)), null_score)
    length = min(max_answer_len, int(n_context.max()))
    k = min(top_k, length)
    chunk = max(1, DECODE_CHUNK_CELLS // max(length, 1))
    best_of_row: List[Any] = []
    offset_of_row: List[Any] = []
    for lo in range(0, len(rows), chunk):
        r = rows[lo : lo + chunk]
        ends = numpy.minimum(r[:, None] + numpy.arange(length), len(p_end) - 1)
        valid = numpy.arange(length) < remaining[lo : lo + chunk, None]
        cells = numpy.where(valid, p_start[r][:, None] * p_end[ends], -1.0)  # (rows, length)
        if k == 1:
            top = cells.argmax(axis=1)[:, None]  # the first best: the shortest
        elif k == length:
            top = numpy.broadcast_to(numpy.arange(length), cells.shape)
        else:
            top = numpy.sort(numpy.argpartition(-cells, k - 1, axis=1)[:, :k], axis=1)
        best_of_row.append(numpy.take_along_axis(cells, top, axis=1))
        offset_of_row.append(top)
    values = numpy.concatenate(best_of_row)  # (n_starts, k)
    offsets = numpy.concatenate(offset_of_row)
    if top_k == 1:
        # per window, the first row holding its best value
        has = n_context > 0
        best = numpy.zeros((n_windows,))
        best[has] = numpy.maximum.reduceat(values[:, 0], (numpy.cumsum(n_context) - n_context)[has])
        hits = numpy.flatnonzero(values[:, 0] == best[window_of])
        _, firsts = numpy.unique(window_of[hits], return_index=True)
        chosen = hits[firsts]
        window = window_of[chosen]
        first = local[chosen]
        span = offsets[chosen, 0]
        score = values[chosen, 0]
    else:
        start_of = numpy.repeat(numpy.arange(len(values)), k)
        flat_values, flat_offsets = values.ravel(), offsets.ravel()
        keep = flat_values >= 0.0
        start_of, flat_values, flat_offsets = start_of[keep], flat_values[keep], flat_offsets[keep]
        cand_window = window_of[start_of]
        order = numpy.lexsort((flat_offsets, start_of, -flat_values, cand_window))
        cand_window = cand_window[order]
        rank = numpy.arange(len(order)) - numpy.searchsorted(cand_window, cand_window)
        chosen = order[rank < top_k]
        window = cand_window[rank < top_k]
        first = local[start_of[chosen]]
        span = flat_offsets[chosen]
        score = flat_values[chosen]
    first = batch.window_start[window] + first
    return SpanCandidates(window, first, first + span, score, null_score)


def _segment_softmax(x: numpy.ndarray, starts: numpy.ndarray, counts: numpy.ndarray) -> Any:
    """softmax over consecutive runs of `counts[i]` values (each at least 1)."""
    e = numpy.exp(x - numpy.repeat(numpy.maximum.reduceat(x, starts), counts))
    return e / numpy.repeat(numpy.add.reduceat(e, starts), counts)


def answer_chars(
    batch: QABatch, candidates: SpanCandidates, align_to_words: bool
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Character offsets [start, end) of each candidate in its doc's text. With
    `align_to_words`, widened to the whole words (of the tokenizer) of its first
    and last wordpiece, within the candidate's window only (a word cut by the
    window edge stays cut), as Hugging Face's pipeline does."""
    offsets = numpy.asarray(batch.offsets).reshape((-1, 2))
    words = numpy.asarray(batch.words)
    window = candidates.window
    base = batch.piece_bounds[batch.pair_doc[batch.window_pair[window]]]
    first, last = base + candidates.first, base + candidates.last
    start, end = offsets[first, 0].astype("int64"), offsets[last, 1].astype("int64")
    if not align_to_words or len(window) == 0:
        return start, end
    n = len(words)
    window_lo = base + batch.window_start[window]
    window_hi = base + batch.window_end[window] - 1
    widen = (words[first] >= 0) & (words[last] >= 0)
    # runs of wordpieces of one word, never across docs
    doc_starts = batch.piece_bounds[:-1][batch.piece_bounds[:-1] < n]
    new_run = numpy.ones((n,), dtype=bool)
    new_run[1:] = words[1:] != words[:-1]
    new_run[doc_starts] = True
    run = numpy.cumsum(new_run) - 1
    run_first = numpy.flatnonzero(new_run)
    run_last = numpy.append(run_first[1:] - 1, n - 1)
    # A word's pieces are one run with ordered offsets (what fast tokenizers
    # give); otherwise, the word's pieces are looked up one candidate at a time.
    inner = ~new_run[1:]  # piece i + 1 continues piece i's word
    ordered = (
        bool(numpy.all(numpy.diff(offsets[:, 0])[inner] >= 0))
        and bool(numpy.all(numpy.diff(offsets[:, 1])[inner] >= 0))
        and _words_increase(words, new_run, doc_starts)
    )
    if ordered:
        lo = numpy.maximum(run_first[run[first]], window_lo)
        hi = numpy.minimum(run_last[run[last]], window_hi)
        start = numpy.where(widen, offsets[lo, 0], start)
        end = numpy.where(widen, offsets[hi, 1], end)
        return start, end
    for i in numpy.flatnonzero(widen).tolist():
        span = slice(int(window_lo[i]), int(window_hi[i]) + 1)
        w_offsets, w_words = offsets[span], words[span]
        start[i] = w_offsets[w_words == words[first[i]], 0].min()
        end[i] = w_offsets[w_words == words[last[i]], 1].max()
    return start, end


def _words_increase(words: numpy.ndarray, new_run: numpy.ndarray, doc_starts: Any) -> bool:
    """Whether, within each doc, every run starts a new, higher word index (so
    that a word's pieces are all in one run)."""
    boundary = new_run.copy()
    boundary[doc_starts] = False
    index = numpy.flatnonzero(boundary)
    return bool(numpy.all(words[index] > words[index - 1]))


@dataclass
class SpanCandidate:
    """A candidate answer: context wordpieces [first, last] and its score, found
    in the window holding pieces [window_start, window_end)."""

    first: int
    last: int
    score: float
    window_start: int
    window_end: int


def decode_question(
    windows: Sequence[WindowLogits],
    max_answer_len: int,
    top_k: int,
    xp_to_numpy: Callable[[Any], numpy.ndarray] = numpy.asarray,
) -> Tuple[List[SpanCandidate], float]:
    """`decode_batch` for the windows of one question.

    RETURNS: up to `top_k` candidates per window (best first, in the window
        order they were found), and the null score.
    """
    scores = DocQAScores(
        offsets=cast(Ints2d, numpy.zeros((0, 2), "i")),
        words=cast(Ints1d, numpy.zeros((0,), "i")),
        questions=[list(windows)],
        truncated=[False],
    )
    batch = QABatch.of([scores], xp_to_numpy)
    found = decode_batch(batch, max_answer_len, top_k)
    starts, ends = batch.window_start.tolist(), batch.window_end.tolist()
    candidates = [
        SpanCandidate(first, last, score, starts[w], ends[w])
        for w, first, last, score in zip(
            found.window.tolist(), found.first.tolist(), found.last.tolist(), found.score.tolist()
        )
    ]
    return candidates, float(found.null_score[0])
