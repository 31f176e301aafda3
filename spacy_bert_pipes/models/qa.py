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

from .encoder import hf_shim, special_ids, tokenize, with_special_cases
from .windows import window_spans

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

    cls_id, sep_id, _ = special_ids(encoder)
    max_seq_len = model.attrs["max_seq_len"]
    stride = model.attrs["doc_stride"]
    max_q = model.attrs["max_question_len"]
    contexts = tokenize(encoder, [q.doc.text for q in queries], with_words=True)
    all_questions = [text for q in queries for text in q.questions]
    question_pieces = tokenize(encoder, all_questions)
    windows: List[Tuple[Ints1d, Ints1d]] = []
    # casing classes of each window, for an encoder with case embeddings
    cases: Optional[List[Ints1d]] = [] if hf_shim(encoder).uses_cases else None
    # (doc, question, start, end, question length) of each window
    layout: List[Tuple[int, int, int, int, int]] = []
    truncated: List[List[bool]] = []
    k = 0
    for d, (query, context) in enumerate(zip(queries, contexts)):
        truncated.append([])
        for qi in range(len(query.questions)):
            q_ids = numpy.asarray(question_pieces[k].ids)
            q_cases = question_pieces[k].cases
            k += 1
            truncated[-1].append(len(q_ids) > max_q)
            q_ids = q_ids[:max_q]
            if q_cases is not None:
                q_cases = cast(Ints1d, q_cases[:max_q])
            size = max_seq_len - len(q_ids) - 3
            head = numpy.concatenate(([cls_id], q_ids, [sep_id]))
            for start, end in window_spans(len(context.ids), size, stride):
                body = numpy.asarray(context.ids[start:end])
                ids = numpy.concatenate((head, body, [sep_id])).astype("i")
                types = numpy.zeros(len(ids), dtype="i")
                types[len(head) :] = 1
                windows.append((cast(Ints1d, ids), cast(Ints1d, types)))
                if cases is not None:
                    c_cases = cast(Ints1d, context.cases)[start:end]
                    cases.append(with_special_cases(cast(Ints1d, q_cases), c_cases))
                layout.append((d, qi, start, end, len(q_ids)))
    W = cast(Floats2d, model.get_param("W"))  # (2, width)
    b = cast(Floats1d, model.get_param("b"))  # (2,)
    ops = model.ops
    outputs = [
        DocQAScores(
            offsets=c.offsets,
            words=cast(Ints1d, c.words),
            questions=[[] for _ in q.questions],
            truncated=t,
        )
        for q, c, t in zip(queries, contexts, truncated)
    ]

    def window_logits(index: int, h: Floats2d) -> Tuple[Any, Floats2d]:
        """Start and end logits of window `index` from its hidden states h."""
        d, qi, start, end, q_len = layout[index]
        # Rows that can hold an answer: [CLS], then the context pieces.
        first = q_len + 2  # [CLS] question [SEP]
        rows = ops.xp.concatenate(
            [ops.xp.zeros((1,), dtype="i"), ops.xp.arange(first, first + end - start, dtype="i")]
        )
        X = h[rows]  # (1 + n_context, width)
        logits = ops.affine(X, W, b)  # (1 + n_context, 2)
        outputs[d].questions[qi].append(
            WindowLogits(start, end, logits[:, 0].copy(), logits[:, 1].copy())
        )
        return rows, X

    if not is_train:
        # Only logits are kept, so the hidden states are dropped group by group:
        # many questions over long documents (COVID-QA: 98 articles, 1,380
        # questions, 11,000 windows per 32 docs) would otherwise hold gigabytes.
        for lo, hi in window_groups([len(ids) for ids, _ in windows], PREDICT_GROUP_WORDPIECES):
            group_cases = None if cases is None else cases[lo:hi]
            hidden, _ = run_windows(encoder, windows[lo:hi], False, group_cases)
            for index, h in enumerate(hidden, start=lo):
                window_logits(index, h)
        return outputs, _no_backprop

    hidden, backprop_windows = run_windows(encoder, windows, is_train, cases)
    rows_of: List[Any] = []
    inputs: List[Floats2d] = []
    for index, h in enumerate(hidden):
        rows, X = window_logits(index, h)
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
    """The best spans of a question over its windows, scored as Hugging Face's
    question-answering pipeline does: per window, softmax of the start logits and
    of the end logits over [CLS] and the context; the null score is the lowest
    p_start[CLS] * p_end[CLS] over the windows; a span (s, e) with s <= e < s +
    max_answer_len scores p_start[s] * p_end[e].

    RETURNS: up to `top_k` candidates per window (best first, in the window
        order they were found), and the null score.
    """
    candidates: List[SpanCandidate] = []
    null_score = 1e6
    for w in windows:
        p_start = softmax(xp_to_numpy(w.start_logits).astype("f8"))
        p_end = softmax(xp_to_numpy(w.end_logits).astype("f8"))
        null_score = min(null_score, float(p_start[0] * p_end[0]))
        n = len(p_start) - 1
        if n == 0:
            continue
        s, e = p_start[1:], p_end[1:]
        outer = numpy.triu(numpy.tril(s[:, None] * e[None, :], max_answer_len - 1))  # (n, n)
        flat = outer.ravel()
        k = min(top_k, len(flat))
        if k == 1:
            best = numpy.asarray([int(flat.argmax())])
        else:
            best = numpy.argpartition(-flat, k - 1)[:k]
            best = best[numpy.argsort(-flat[best], kind="stable")]
        for index in best.tolist():
            first, last = divmod(index, n)
            if last < first or last - first >= max_answer_len:
                continue  # only when a window has fewer valid spans than top_k
            candidates.append(
                SpanCandidate(w.start + first, w.start + last, float(flat[index]), w.start, w.end)
            )
    return candidates, null_score
