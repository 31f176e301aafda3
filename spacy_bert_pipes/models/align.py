"""Alignment of wordpieces to spaCy tokens, by character offsets.

A wordpiece belongs to every token whose characters it overlaps, so:
* a whitespace token, or a token whose characters the tokenizer dropped
  (control characters, some symbols), has no wordpiece;
* a wordpiece that spans several tokens is shared by each of them;
* a token split into several wordpieces has all of them, in order.
"""

from dataclasses import dataclass
from typing import cast

import numpy
from spacy.tokens import Doc
from thinc.types import Ints1d, Ints2d


@dataclass(frozen=True)
class TokenAlignment:
    """Wordpieces of each token, as ragged arrays.

    starts (Ints1d): First wordpiece index of each token. (n_tokens,)
    lengths (Ints1d): Number of wordpieces of each token (0 for none). (n_tokens,)
    """

    starts: Ints1d
    lengths: Ints1d

    def first_piece(self) -> Ints1d:
        """Index of each token's first wordpiece, -1 for a token without one."""
        return cast(
            Ints1d,
            numpy.where(numpy.asarray(self.lengths) > 0, numpy.asarray(self.starts), -1).astype(
                "i"
            ),
        )


def align_tokens(doc: Doc, offsets: Ints2d) -> TokenAlignment:
    """Align a doc's tokens with wordpieces given their (start, end) character
    offsets in `doc.text`, end exclusive, in text order.

    Works on whole arrays: the wordpieces overlapping token [s, e) are those with
    end > s and start < e, which form one contiguous run because both the starts
    and the ends of wordpieces increase along the text.
    """
    n_tokens = len(doc)
    if n_tokens == 0:
        empty = cast(Ints1d, numpy.zeros((0,), dtype="i"))
        return TokenAlignment(empty, empty)
    token_starts: numpy.ndarray = numpy.fromiter((t.idx for t in doc), dtype="i", count=n_tokens)
    token_lengths = numpy.fromiter((len(t) for t in doc), dtype="i", count=n_tokens)
    token_ends: numpy.ndarray = token_starts + token_lengths
    spans: numpy.ndarray = numpy.asarray(offsets, dtype="i").reshape((-1, 2))
    # Tokenizers give (0, 0) to pieces with no characters; running maxima keep
    # both arrays sorted so that such pieces sit at their neighbour's position.
    piece_starts: numpy.ndarray = (
        numpy.maximum.accumulate(spans[:, 0]) if len(spans) else spans[:, 0]
    )
    piece_ends: numpy.ndarray = numpy.maximum.accumulate(spans[:, 1]) if len(spans) else spans[:, 1]
    first = numpy.searchsorted(piece_ends, token_starts, side="right")
    last = numpy.searchsorted(piece_starts, token_ends, side="left")
    lengths = numpy.maximum(last - first, 0)
    # A whitespace token has no characters a wordpiece could cover.
    is_space = numpy.fromiter((t.is_space for t in doc), dtype=bool, count=n_tokens)
    lengths[is_space | (token_lengths == 0)] = 0
    return TokenAlignment(cast(Ints1d, first.astype("i")), cast(Ints1d, lengths.astype("i")))
