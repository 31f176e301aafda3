"""`context = "auto"`: what the encoder learns from the training docs, and how it
cuts a doc into the spans it encodes apart (`models/text/segments.py`)."""

import spacy
from spacy.tokens import Doc

from spacy_bert_pipes.models.encoder.bert import BertEncoderV2
from spacy_bert_pipes.models.text.segments import (
    effective_context,
    learn_context,
    learned_splitter,
    segments,
)
from spacy_bert_pipes.models.text.tokens import segment_texts

nlp = spacy.blank("en")


def texts_of(doc: Doc, context: str) -> list:
    return [doc.text[start:end] for start, end in segments(doc, doc.text, context)]


def test_sentence_level_training_docs_make_auto_read_sentences() -> None:
    encoder = BertEncoderV2(context="auto")
    assert effective_context(encoder) == "doc"  # nothing learned yet
    learn_context(encoder, [nlp("John lives in Paris ."), nlp("ROME 1996-12-06")] * 5)
    assert encoder.attrs["learned_context"] == "sentence"
    assert effective_context(encoder) == "sentences"


def test_multi_sentence_training_docs_keep_auto_on_the_doc() -> None:
    encoder = BertEncoderV2(context="auto")
    learn_context(encoder, [nlp("John lives in Paris. He likes it.")] * 5 + [nlp("Hi")])
    assert encoder.attrs["learned_context"] == "doc"
    assert effective_context(encoder) == "doc"


def test_own_sentence_boundaries_decide_when_a_doc_has_them() -> None:
    encoder = BertEncoderV2(context="auto")
    doc = Doc(nlp.vocab, words=["a", ".", "b", "."], sent_starts=[True, False, False, False])
    learn_context(encoder, [doc] * 3)
    assert encoder.attrs["learned_context"] == "sentence"


def test_explicit_contexts_learn_nothing() -> None:
    encoder = BertEncoderV2(context="sentence")
    learn_context(encoder, [nlp("John lives in Paris .")])
    assert encoder.attrs["learned_context"] is None
    assert effective_context(encoder) == "sentence"


def test_sentences_without_boundaries_are_cut_by_rule_and_at_line_breaks() -> None:
    doc = nlp("SOCCER - JAPAN WIN .\nAL-AIN 1996-12-06\nJapan began well . It won .")
    assert not doc.has_annotation("SENT_START")
    assert texts_of(doc, "sentences") == [
        "SOCCER - JAPAN WIN .",
        "AL-AIN 1996-12-06",
        "Japan began well .",
        "It won .",
    ]
    # an explicit "sentence" context reads a doc without boundaries whole
    assert texts_of(doc, "sentence") == [doc.text]
    assert texts_of(doc, "doc") == [doc.text]
    assert texts_of(nlp(""), "sentences") == [""]


UNITS = [
    "LONDON 1996-12-06",
    "Japan beat Syria 2-1 on Friday .",
    "Peter Blackburn",
    "Plymouth 4 Exeter 1",
    "Oleg Salenko scored twice in the second half .",
    "PARIS 1996-08-22",
]


def test_sentence_level_training_docs_teach_a_splitter() -> None:
    encoder = BertEncoderV2(context="auto")
    assert learned_splitter(encoder) is None
    learn_context(encoder, (nlp(text) for text in UNITS * 30))
    splitter = learned_splitter(encoder)
    assert splitter is not None
    doc = nlp("ROME 1996-12-07 Italy beat Wales 3-0 on Sunday . Anna Smith")
    # the rule cuts only after the full stop; the splitter also after the dateline
    assert texts_of(doc, "sentences") == [
        "ROME 1996-12-07 Italy beat Wales 3-0 on Sunday .",
        "Anna Smith",
    ]
    assert [doc.text[s:e] for s, e in segments(doc, doc.text, "sentences", splitter)] == [
        "ROME 1996-12-07",
        "Italy beat Wales 3-0 on Sunday .",
        "Anna Smith",
    ]
    # an explicit "sentence" context, or a doc with boundaries, ignores it
    assert segments(doc, doc.text, "sentence", splitter) == [(0, len(doc.text))]
    # and the encoder's forward cuts raw text with it
    spans, texts = segment_texts(encoder, [doc])
    assert texts == ["ROME 1996-12-07", "Italy beat Wales 3-0 on Sunday .", "Anna Smith"]


def test_multi_sentence_or_few_training_docs_teach_no_splitter() -> None:
    encoder = BertEncoderV2(context="auto")
    learn_context(encoder, [nlp("John lives in Paris. He likes it.")] * 500)
    assert encoder.attrs["learned_splitter"] is None
    assert learned_splitter(encoder) is None
    learn_context(encoder, [nlp(text) for text in UNITS] * 16)  # 96 docs: too few
    assert encoder.attrs["learned_context"] == "sentence"
    assert learned_splitter(encoder) is None


def test_text_in_lines_is_cut_at_line_breaks_and_by_rule_not_the_splitter() -> None:
    encoder = BertEncoderV2(context="auto")
    learn_context(encoder, (nlp(text) for text in UNITS * 30))
    doc = nlp("ROME 1996-12-07 Italy beat Wales 3-0 on Sunday .\nAnna Smith")
    expected = ["ROME 1996-12-07 Italy beat Wales 3-0 on Sunday .", "Anna Smith"]
    splitter = learned_splitter(encoder)
    assert [doc.text[s:e] for s, e in segments(doc, doc.text, "sentences", splitter)] == expected
