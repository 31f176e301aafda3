"""qa_decode: training targets of a window, and answer spans from the logits:
per question as Hugging Face's pipeline scores them, and for a whole batch."""

import numpy
import pytest

from spacy_bert_pipes.models.heads.qa_decode import (
    SpanCandidates,
    answer_chars,
    answer_pieces,
    decode_batch,
    decode_question,
    window_targets,
)
from spacy_bert_pipes.models.heads.qa_types import DocQAScores, QABatch, WindowLogits


def test_answer_pieces_and_window_targets() -> None:
    offsets = numpy.asarray([[0, 4], [5, 10], [11, 13], [14, 16], [17, 22]], dtype="i")
    assert answer_pieces(offsets, (5, 13)) == (1, 2)
    assert answer_pieces(offsets, (6, 8)) == (1, 1)  # inside a piece
    assert answer_pieces(offsets, (4, 5)) == (-1, -1)  # only a space
    windows = [
        WindowLogits(0, 3, numpy.zeros(4, "f"), numpy.zeros(4, "f")),
        WindowLogits(2, 5, numpy.zeros(4, "f"), numpy.zeros(4, "f")),
    ]
    scores = DocQAScores(offsets, numpy.arange(5, dtype="i"), [windows], [False])
    # [CLS] is row 0, so piece p of a window starting at s is row 1 + p - s
    assert window_targets(scores, 0, (5, 13)) == [(2, 3), (0, 0)]
    assert window_targets(scores, 0, (11, 22)) == [(0, 0), (1, 3)]
    assert window_targets(scores, 0, None) == [(0, 0), (0, 0)]


def test_decode_question_scores_like_the_pipeline() -> None:
    start = numpy.log(numpy.asarray([0.1, 0.6, 0.2, 0.1], dtype="f"))
    end = numpy.log(numpy.asarray([0.2, 0.1, 0.2, 0.5], dtype="f"))
    window = WindowLogits(10, 13, start, end)
    candidates, null = decode_question([window], max_answer_len=15, top_k=2)
    assert null == pytest.approx(0.1 * 0.2)
    assert (candidates[0].first, candidates[0].last) == (10, 12)
    assert candidates[0].score == pytest.approx(0.6 * 0.5)
    assert candidates[1].score == pytest.approx(0.6 * 0.2)
    short, _ = decode_question([window], max_answer_len=1, top_k=1)
    assert (short[0].first, short[0].last) == (10, 10)  # the span of length 1 wins
    assert short[0].score == pytest.approx(0.6 * 0.1)


def brute_force(windows, max_answer_len, top_k):  # type: ignore[no-untyped-def]
    """Every valid span of every window, scored one by one."""
    out = []
    null = 1e6
    for w, window in enumerate(windows):
        p_start = numpy.exp(window.start_logits.astype("f8") - window.start_logits.max())
        p_start /= p_start.sum()
        p_end = numpy.exp(window.end_logits.astype("f8") - window.end_logits.max())
        p_end /= p_end.sum()
        null = min(null, p_start[0] * p_end[0])
        n = len(p_start) - 1
        spans = [
            (-p_start[1 + s] * p_end[1 + e], s, e)
            for s in range(n)
            for e in range(s, min(n, s + max_answer_len))
        ]
        for score, s, e in sorted(spans)[:top_k]:
            out.append((w, window.start + s, window.start + e, -score))
    return out, null


@pytest.mark.parametrize("top_k", [1, 3, 40])
@pytest.mark.parametrize("max_answer_len", [1, 4, 15])
def test_decode_batch_matches_brute_force(top_k: int, max_answer_len: int) -> None:
    rng = numpy.random.default_rng(top_k * 100 + max_answer_len)
    windows = []
    for n, start in [(7, 0), (0, 0), (12, 5), (1, 9), (30, 20)]:
        logits = rng.normal(size=(2, 1 + n)).astype("f") * 3
        windows.append(WindowLogits(start, start + n, logits[0], logits[1]))
    # two questions: windows 0-1 and 2-4
    scores = DocQAScores(
        numpy.zeros((50, 2), "i"), numpy.zeros((50,), "i"), [windows[:2], windows[2:]], [False] * 2
    )
    batch = QABatch.of([scores], numpy.asarray)
    found = decode_batch(batch, max_answer_len, top_k)
    got = list(
        zip(found.window.tolist(), found.first.tolist(), found.last.tolist(), found.score.tolist())
    )
    expected_a, null_a = brute_force(windows[:2], max_answer_len, top_k)
    expected_b, null_b = brute_force(windows[2:], max_answer_len, top_k)
    expected = expected_a + [(w + 2, s, e, p) for w, s, e, p in expected_b]
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    numpy.testing.assert_allclose([g[3] for g in got], [e[3] for e in expected], rtol=1e-12)
    numpy.testing.assert_allclose(found.null_score, [null_a, null_b], rtol=1e-12)


def test_decode_batch_ties_go_to_the_earlier_and_shorter_span() -> None:
    window = WindowLogits(0, 4, numpy.zeros(5, "f"), numpy.zeros(5, "f"))
    candidates, _ = decode_question([window], max_answer_len=3, top_k=3)
    assert [(c.first, c.last) for c in candidates] == [(0, 0), (0, 1), (0, 2)]


@pytest.mark.parametrize("ordered", [True, False])
def test_answer_chars_widen_to_words_within_the_window(ordered: bool) -> None:
    # "unbelievable things happen": un ##bel ##iev ##able things hap ##pen; the
    # second window starts at ##iev, so a span from there widens only to its start
    offsets = [[0, 2], [2, 5], [5, 8], [8, 12], [13, 19], [20, 23], [23, 27]]
    words = [0, 0, 0, 0, 1, 2, 2]
    if not ordered:  # offsets out of order inside a word: looked up one by one
        offsets[2], offsets[1] = offsets[1], offsets[2]
    doc_scores = DocQAScores(numpy.asarray(offsets, "i"), numpy.asarray(words, "i"), [[]], [False])
    other = DocQAScores(numpy.asarray([[0, 3]], "i"), numpy.asarray([0], "i"), [[]], [False])
    batch = QABatch.of([other, doc_scores], numpy.asarray)
    batch.pair_doc = numpy.asarray([0, 1])
    batch.window_pair = numpy.asarray([1, 1])
    batch.window_start = numpy.asarray([0, 2])  # the second window cuts "unbelievable"
    batch.window_end = numpy.asarray([7, 7])
    empty = numpy.zeros((0,))
    candidates = SpanCandidates(
        numpy.asarray([0, 1, 0]), numpy.asarray([1, 2, 4]), numpy.asarray([2, 5, 4]), empty, empty
    )
    start, end = answer_chars(batch, candidates, align_to_words=True)
    assert list(zip(start.tolist(), end.tolist())) == [(0, 12), (5 if ordered else 2, 27), (13, 19)]
    start, end = answer_chars(batch, candidates, align_to_words=False)
    assert list(zip(start.tolist(), end.tolist())) == [
        (offsets[1][0], offsets[2][1]),
        (offsets[2][0], 23),
        (13, 19),
    ]
