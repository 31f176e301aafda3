"""Answers of extractive question answering: the training targets of a question
in each window, and the decoding of a batch's start/end logits into scored
spans and their character offsets, as Hugging Face's question-answering
pipeline scores them.
"""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
from thinc.types import Ints1d, Ints2d

from .qa_types import DocQAScores, QABatch, WindowLogits


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
