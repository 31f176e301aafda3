"""Wordpiece-to-token alignment by character offsets."""

from pathlib import Path

import numpy
import spacy
from spacy.tokens import Doc

from spacy_bert_pipes.models.text.align import align_tokens, space_tokens, token_arrays


def pieces_of(doc: Doc, offsets: numpy.ndarray) -> list:
    alignment = align_tokens(doc, offsets)
    out = []
    for start, length in zip(alignment.starts, alignment.lengths):
        out.append([tuple(offsets[i]) for i in range(start, start + length)])
    return out


def test_wordpiece_spanning_two_tokens_is_shared() -> None:
    nlp = spacy.blank("en")
    doc = nlp.make_doc("don't go")
    assert [t.text for t in doc] == ["do", "n't", "go"]
    # "don" covers "do" and the "n" of "n't"
    offsets = numpy.asarray([[0, 3], [3, 4], [4, 5], [6, 8]])
    assert pieces_of(doc, offsets) == [[(0, 3)], [(0, 3), (3, 4), (4, 5)], [(6, 8)]]


def test_whitespace_tokens_and_dropped_characters_get_no_pieces() -> None:
    nlp = spacy.blank("en")
    doc = nlp.make_doc("card  \x07 \n\n ok")
    texts = [t.text for t in doc]
    offsets = numpy.asarray([[0, 4], [len(doc.text) - 2, len(doc.text)]])
    result = pieces_of(doc, offsets)
    assert result[0] == [(0, 4)]
    assert result[-1] == [offsets[1].tolist()] or result[-1] == [tuple(offsets[1])]
    for token, pieces in zip(doc, result):
        if token.is_space or token.text == "\x07":
            assert pieces == [], (texts, result)
    assert align_tokens(doc, offsets).first_piece()[0] == 0


def test_empty_doc_and_no_pieces() -> None:
    nlp = spacy.blank("en")
    alignment = align_tokens(nlp.make_doc(""), numpy.zeros((0, 2), dtype="i"))
    assert len(alignment.starts) == 0
    alignment = align_tokens(nlp.make_doc("hello"), numpy.zeros((0, 2), dtype="i"))
    assert alignment.lengths.tolist() == [0]
    assert alignment.first_piece().tolist() == [-1]


def test_real_tokenizer_offsets_cover_every_token(tiny_bert: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    nlp = spacy.blank("en")
    text = "My card, still not arrived!! 😀 Привет\tworld... (new york)"
    doc = nlp.make_doc(text)
    offsets = numpy.asarray(
        tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    )
    alignment = align_tokens(doc, offsets)
    for token, start, length in zip(doc, alignment.starts, alignment.lengths):
        covered = [tuple(offsets[i]) for i in range(start, start + length)]
        # every piece assigned to a token overlaps it...
        for s, e in covered:
            assert e > token.idx and s < token.idx + len(token)
        # ...and every overlapping piece is assigned
        overlapping = [
            tuple(o) for o in offsets if o[1] > token.idx and o[0] < token.idx + len(token)
        ]
        assert covered == overlapping


def test_space_tokens_agree_with_token_arrays() -> None:
    """Docs with whitespace tokens, an empty doc and a doc of one space."""
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(t) for t in ["a  b\n\nc ", "", " ", "plain text here"]]
    is_space, sizes = space_tokens(docs)
    tokens = token_arrays(docs)
    assert is_space.dtype == bool
    assert is_space.tolist() == tokens.is_space.tolist()
    assert sizes.tolist() == tokens.sizes.tolist() == [len(doc) for doc in docs]
    assert is_space.any() and not is_space.all()
    none, no_sizes = space_tokens([nlp.make_doc("")])
    assert none.shape == (0,) and no_sizes.tolist() == [0]
