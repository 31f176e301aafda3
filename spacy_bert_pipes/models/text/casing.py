"""Casing classes of wordpieces, for encoders with `case_embeddings` (no torch here).

An uncased encoder (the default MiniLM) lower-cases its input, so "Apple" and
"apple" are the same wordpiece to it. With `case_embeddings` the encoder adds a
learned vector for each wordpiece's casing class to its input embedding, and the
class comes from the original characters under the wordpiece's offsets.
"""

from typing import cast

import numpy
from thinc.types import Ints1d, Ints2d

# 0: no cased letter, and [CLS], [SEP], padding; 1: lower; 2: Title, or a single
# capital; 3: UPPER (two capitals or more); 4: mixed ("iPhone", "McD" pieces).
N_CASE_CLASSES = 5
NO_CASE, LOWER, TITLE, UPPER, MIXED = range(N_CASE_CLASSES)


def case_class(piece: str) -> int:
    """The casing class of one wordpiece's original characters."""
    if piece.islower():
        return LOWER
    if piece.isupper():
        return UPPER if sum(c.isupper() for c in piece) > 1 else TITLE
    if piece.istitle():
        return TITLE
    if any(c.isupper() for c in piece):
        return MIXED
    return NO_CASE


def piece_cases(text: str, offsets: Ints2d) -> Ints1d:
    """The casing class of each wordpiece of `text`, from its character offsets.
    (n_pieces,)"""
    classes = [case_class(text[start:end]) for start, end in offsets.tolist()]
    return cast(Ints1d, numpy.asarray(classes, dtype="i"))
