"""QAModel: pair windows as Hugging Face builds them, targets, span decoding."""

from pathlib import Path

import numpy
import pytest
import spacy

from spacy_bert_pipes.models.encoder import BertEncoder
from spacy_bert_pipes.models.loaders import HFCheckpoint
from spacy_bert_pipes.models.qa import (
    DocQAScores,
    QABatch,
    QAModel,
    QAQuery,
    WindowLogits,
    window_groups,
)
from spacy_bert_pipes.models.qa_decode import (
    SpanCandidates,
    answer_chars,
    answer_pieces,
    decode_batch,
    decode_question,
    window_targets,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def make_model(tiny_bert: Path, **kwargs):  # type: ignore[no-untyped-def]
    encoder = BertEncoder(max_length=16, stride=4)
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    model = QAModel(encoder, **kwargs)
    model.initialize()
    return model


def test_windows_match_transformers_overflowing_tokens(tiny_bert: Path) -> None:
    """The windows are exactly the tokenizer's question/context pairs with
    truncation="only_second", stride and return_overflowing_tokens."""
    from spacy_bert_pipes.models import encoder as encoder_module

    model = make_model(tiny_bert, max_seq_len=24, doc_stride=5, max_question_len=10)
    tokenizer = model.get_ref("encoder").shims[0].tokenizer
    nlp = spacy.blank("en")
    context = "john smith is in paris and the bank of london is a company . " * 3
    question = "where is the bank ?"
    seen = []
    original = encoder_module.run_windows

    def capture(encoder, windows, is_train, cases=None):  # type: ignore[no-untyped-def]
        seen.extend(windows)
        return original(encoder, windows, is_train, cases)

    encoder_module.run_windows = capture
    try:
        model.predict([QAQuery(nlp.make_doc(context), [question])])
    finally:
        encoder_module.run_windows = original
    expected = tokenizer(
        question,
        context,
        truncation="only_second",
        max_length=24,
        stride=5,
        return_overflowing_tokens=True,
        return_token_type_ids=True,
    )
    assert len(seen) == len(expected["input_ids"]) > 2
    for (ids, types), hf_ids, hf_types in zip(
        seen, expected["input_ids"], expected["token_type_ids"]
    ):
        assert list(ids) == hf_ids
        assert list(types) == hf_types


def test_output_layout_and_truncation(tiny_bert: Path) -> None:
    model = make_model(tiny_bert, max_seq_len=24, doc_stride=5, max_question_len=4)
    nlp = spacy.blank("en")
    queries = [
        QAQuery(
            nlp.make_doc("john smith is in paris " * 4), ["who ?", "where is the bank of london ?"]
        ),
        QAQuery(nlp.make_doc(""), ["who ?"]),
        QAQuery(nlp.make_doc("hello"), []),
    ]
    out = model.predict(queries)
    assert [len(o.questions) for o in out] == [2, 1, 0]
    assert out[0].truncated == [False, True]
    n_pieces = len(out[0].offsets)
    for windows in out[0].questions:
        covered = set()
        for w in windows:
            assert w.start_logits.shape == w.end_logits.shape == (1 + w.end - w.start,)
            covered.update(range(w.start, w.end))
        assert covered == set(range(n_pieces))
    empty = out[1].questions[0]
    assert len(empty) == 1 and empty[0].start_logits.shape == (1,)


def test_window_groups_are_consecutive_and_within_budget() -> None:
    assert window_groups([], 10) == []
    assert window_groups([4, 4, 4, 20, 1], 10) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert window_groups([3, 3, 3], 9) == [(0, 3)]


def test_predict_in_groups_keeps_logits_and_frees_hidden_states(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy_bert_pipes.models import encoder as encoder_module
    from spacy_bert_pipes.models import qa as qa_module

    model = make_model(tiny_bert, max_seq_len=24, doc_stride=5, max_question_len=8)
    nlp = spacy.blank("en")
    queries = [
        QAQuery(nlp.make_doc("john smith is in paris and london " * 6), ["who ?", "where ?"]),
        QAQuery(nlp.make_doc("hello world"), ["who ?"]),
    ]
    whole = model.predict(queries)
    calls = []
    original = encoder_module.run_windows

    def counting(encoder, windows, is_train, cases=None):  # type: ignore[no-untyped-def]
        calls.append(sum(len(ids) for ids, _ in windows))
        return original(encoder, windows, is_train, cases)

    monkeypatch.setattr(encoder_module, "run_windows", counting)
    monkeypatch.setattr(qa_module, "PREDICT_GROUP_WORDPIECES", 50)
    grouped = model.predict(queries)
    assert len(calls) > 2 and all(n <= 50 for n in calls)
    for a, b in zip(whole, grouped):
        for qa_windows, qb_windows in zip(a.questions, b.questions):
            assert [(w.start, w.end) for w in qa_windows] == [(w.start, w.end) for w in qb_windows]
            for wa, wb in zip(qa_windows, qb_windows):
                numpy.testing.assert_allclose(wb.start_logits, wa.start_logits, atol=1e-5)
                numpy.testing.assert_allclose(wb.end_logits, wa.end_logits, atol=1e-5)


def test_bad_window_settings() -> None:
    encoder = BertEncoder()
    with pytest.raises(ValueError, match="doc_stride"):
        QAModel(encoder, max_seq_len=64, doc_stride=40, max_question_len=30)


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


def test_case_embeddings_reach_question_and_context_pieces(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy_bert_pipes.models import encoder as encoder_module
    from spacy_bert_pipes.models.casing import LOWER, NO_CASE, TITLE, UPPER

    settings = {"max_seq_len": 24, "doc_stride": 5, "max_question_len": 8}
    plain = make_model(tiny_bert, **settings)
    encoder = BertEncoder(max_length=16, stride=4, case_embeddings=True)
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    cased = QAModel(encoder, **settings)
    cased.initialize()
    cased.set_param("W", plain.get_param("W"))
    nlp = spacy.blank("en")
    queries = [QAQuery(nlp.make_doc("John Smith is in PARIS " * 3), ["Who ?"])]
    seen = []
    original = encoder_module.run_windows

    def capture(encoder, windows, is_train, cases=None):  # type: ignore[no-untyped-def]
        if cases is not None:
            seen.extend(cases)
        return original(encoder, windows, is_train, cases)

    monkeypatch.setattr(encoder_module, "run_windows", capture)
    # zero case embeddings: the same logits as the encoder without them
    for a, b in zip(plain.predict(queries)[0].questions[0], cased.predict(queries)[0].questions[0]):
        numpy.testing.assert_allclose(b.start_logits, a.start_logits, atol=1e-5)
    assert len(seen) == 1
    # [CLS] w ##h ##o ? [SEP] john smith is in paris ... [SEP] ("who" is three
    # pieces in the tiny vocabulary)
    expected = [NO_CASE, TITLE, LOWER, LOWER, NO_CASE, NO_CASE, TITLE, TITLE, LOWER, LOWER, UPPER]
    assert seen[0][: len(expected)].tolist() == expected
    assert seen[0][-1] == NO_CASE


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
