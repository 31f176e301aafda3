"""Properties of wordpiece-to-token alignment (models/text/align.py) on arbitrary
Unicode, with the tiny BERT's fast tokenizer and with synthetic offsets."""

from pathlib import Path
from typing import Any, List, Tuple

import numpy
import pytest
import spacy
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import PROPERTY, texts

from spacy_bert_pipes.models.text.align import align_tokens

NLP = spacy.blank("en")


@pytest.fixture(scope="module")
def tokenizer(tiny_bert: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert)


def expected_pieces(doc: Any, offsets: numpy.ndarray) -> List[List[int]]:
    """Brute force: the wordpieces with characters inside each token (a
    whitespace token has none)."""
    out = []
    for token in doc:
        start, end = token.idx, token.idx + len(token)
        if token.is_space:
            out.append([])
            continue
        out.append([i for i, (s, e) in enumerate(offsets) if e > s and s < end and e > start])
    return out


def check(doc: Any, offsets: numpy.ndarray) -> None:
    alignment = align_tokens(doc, offsets)
    starts, lengths = numpy.asarray(alignment.starts), numpy.asarray(alignment.lengths)
    assert starts.shape == lengths.shape == (len(doc),)
    assert (lengths >= 0).all()
    assert ((starts >= 0) & (starts + lengths <= len(offsets))).all()
    first = numpy.asarray(alignment.first_piece())
    assert ((first == -1) == (lengths == 0)).all()
    for token, want, start, length in zip(doc, expected_pieces(doc, offsets), starts, lengths):
        got = list(range(start, start + length))
        # the run may include zero-width pieces between covering ones; every
        # piece with characters in the token is there, and no other piece with
        # characters
        with_chars = [i for i in got if offsets[i][1] > offsets[i][0]]
        assert with_chars == want, (token.text, token.idx, offsets.tolist())


@PROPERTY
@given(text=texts())
@example(text="\u200b\u200bparis\u0301 \u202enew york\x00 ")
@example(text="a" * 700 + " \ufdfa\ufb03 \u0130")
def test_real_wordpieces_align_to_the_tokens_they_cover(tokenizer: Any, text: str) -> None:
    doc = NLP.make_doc(text)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = numpy.asarray(encoded["offset_mapping"], dtype="i").reshape((-1, 2))
    assert ((offsets[:, 0] <= offsets[:, 1]) & (offsets[:, 1] <= len(text))).all()
    check(doc, offsets)


@st.composite
def text_and_pieces(draw: Any) -> Tuple[str, numpy.ndarray]:
    """A text and increasing, non-overlapping wordpiece spans over it, some of
    them zero-width (0, 0) as tokenizers give added characters."""
    text = draw(texts(max_pieces=12))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=20)))
    pieces: List[Tuple[int, int]] = []
    for s, e in zip(cuts, cuts[1:]):
        if draw(st.booleans()):  # not every gap between cuts is a piece
            pieces.append((s, e))
        if draw(st.integers(0, 9)) == 0:
            pieces.append((0, 0))
    return text, numpy.asarray(pieces, dtype="i").reshape((-1, 2))


@PROPERTY
@given(case=text_and_pieces())
def test_synthetic_pieces_align_as_brute_force(case: Tuple[str, numpy.ndarray]) -> None:
    text, offsets = case
    check(NLP.make_doc(text), offsets)
