"""Casing classes of wordpieces for encoders with case embeddings."""

import numpy

from spacy_bert_pipes.models.text.casing import (
    LOWER,
    MIXED,
    NO_CASE,
    TITLE,
    UPPER,
    case_class,
    piece_cases,
)


def test_case_class_of_pieces():
    assert case_class("apple") == LOWER
    assert case_class("3rd") == LOWER
    assert case_class("Apple") == TITLE
    assert case_class("I") == TITLE  # one capital
    assert case_class("NASA") == UPPER
    assert case_class("U.S") == UPPER
    assert case_class("iPhone") == MIXED
    assert case_class("McD") == MIXED
    assert case_class("1996") == NO_CASE
    assert case_class(",") == NO_CASE
    assert case_class("") == NO_CASE


def test_piece_cases_read_the_original_characters_under_the_offsets():
    text = "EU rejects German call"
    offsets = numpy.asarray([[0, 2], [3, 10], [11, 17], [18, 22]], dtype="i")
    assert piece_cases(text, offsets).tolist() == [UPPER, LOWER, TITLE, LOWER]
    # a continuation piece ("##man" of "German") has its own characters' class
    offsets = numpy.asarray([[11, 14], [14, 17]], dtype="i")
    assert piece_cases(text, offsets).tolist() == [TITLE, LOWER]
    assert piece_cases(text, numpy.zeros((0, 2), dtype="i")).tolist() == []
