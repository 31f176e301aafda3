"""QAModel: pair windows as Hugging Face builds them, logits per window group
(the span decoding is tested in test_qa_decode.py)."""

from pathlib import Path

import numpy
import pytest
import spacy

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.heads.qa import QAModel, window_groups
from spacy_bert_pipes.models.heads.qa_types import QAQuery

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
    from spacy_bert_pipes.models.encoder import bert as encoder_module

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
    from spacy_bert_pipes.models.encoder import bert as encoder_module
    from spacy_bert_pipes.models.heads import qa as qa_module

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


def test_case_embeddings_reach_question_and_context_pieces(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy_bert_pipes.models.encoder import bert as encoder_module
    from spacy_bert_pipes.models.text.casing import LOWER, NO_CASE, TITLE, UPPER

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
