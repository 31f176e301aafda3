"""Alignment of wordpieces to spaCy tokens, by character offsets.

A wordpiece belongs to every token whose characters it overlaps, so:
* a whitespace token, or a token whose characters the tokenizer dropped
  (control characters, some symbols), has no wordpiece;
* a wordpiece that spans several tokens is shared by each of them;
* a token split into several wordpieces has all of them, in order.

A batch of docs is aligned at once: the docs' tokens and wordpieces are laid end
to end (each doc's characters shifted past the previous doc's), so one
`searchsorted` aligns every token of the batch, with no Python per token.
"""

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, cast

import numpy
from spacy.attrs import IDX, IS_SPACE, LENGTH, ORTH, SENT_START
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


@dataclass(frozen=True)
class TokenArrays:
    """The token attributes alignment and decoding need, for a batch of docs laid
    end to end (from `Doc.to_array`, one call per doc).

    idx (numpy.ndarray): Character offset of each token in its doc. (n_tokens,)
    length (numpy.ndarray): Characters of each token. (n_tokens,)
    is_space (numpy.ndarray): Whether the token is whitespace. (n_tokens,)
    orth (numpy.ndarray): The hash of each token's text (uint64). (n_tokens,)
    sent_start (numpy.ndarray): 1 at a sentence start, -1 inside, 0 unknown. (n_tokens,)
    sizes (numpy.ndarray): Tokens per doc. (n_docs,)
    """

    idx: numpy.ndarray
    length: numpy.ndarray
    is_space: numpy.ndarray
    orth: numpy.ndarray
    sent_start: numpy.ndarray
    sizes: numpy.ndarray

    @property
    def doc_starts(self) -> numpy.ndarray:
        """Index of each doc's first token in the batch. (n_docs,)"""
        return (numpy.cumsum(self.sizes) - self.sizes).astype("i")


_ATTRS = [IDX, LENGTH, IS_SPACE, ORTH, SENT_START]


def token_arrays(docs: Sequence[Doc]) -> TokenArrays:
    """The token attributes of `docs`, concatenated (one `Doc.to_array` per doc)."""
    arrays = [doc.to_array(_ATTRS) for doc in docs]
    sizes = numpy.asarray([len(a) for a in arrays], dtype="i")
    if not arrays or not sizes.sum():
        empty = numpy.zeros((0,), dtype="i")
        orth = numpy.zeros((0,), dtype="uint64")
        return TokenArrays(empty, empty, empty.astype(bool), orth, empty, sizes)
    table = numpy.concatenate(arrays)  # (n_tokens, 5), uint64
    return TokenArrays(
        idx=table[:, 0].astype("i"),
        length=table[:, 1].astype("i"),
        is_space=table[:, 2] != 0,
        orth=table[:, 3],
        sent_start=table[:, 4].astype("int64").astype("i"),  # -1 wraps around in uint64
        sizes=sizes,
    )


def space_tokens(docs: Sequence[Doc]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Whether each token of the batch is whitespace (n_tokens,), and the tokens of
    each doc (n_docs,): what decoding tags needs, at a third of `token_arrays`' cost."""
    sizes = numpy.asarray([len(doc) for doc in docs], dtype="i")
    if not sizes.sum():
        return numpy.zeros((0,), dtype=bool), sizes
    flags = numpy.concatenate([doc.to_array([IS_SPACE]) for doc in docs])  # (n_tokens, 1)
    return flags.reshape((-1,)) != 0, sizes


def align_tokens(doc: Doc, offsets: Ints2d) -> TokenAlignment:
    """Align a doc's tokens with wordpieces given their (start, end) character
    offsets in `doc.text`, end exclusive, in text order."""
    return align_batch([doc], [offsets])


def align_batch(
    docs: Sequence[Doc], offsets: Sequence[Ints2d], tokens: Optional[TokenArrays] = None
) -> TokenAlignment:
    """Align the tokens of several docs with their wordpieces in one pass.

    offsets (Sequence[Ints2d]): Each doc's wordpiece offsets in its `doc.text`.
        (n_pieces, 2)
    tokens (Optional[TokenArrays]): `token_arrays(docs)`, if already made.
    RETURNS (TokenAlignment): For every token of the batch (docs in order), its
        first wordpiece as an index into the docs' wordpieces concatenated, and
        its number of wordpieces.

    The wordpieces overlapping token [s, e) are those with end > s and start < e,
    which form one contiguous run because both the starts and the ends of
    wordpieces increase along the text; shifting each doc past the end of the
    previous one keeps that true for the whole batch.
    """
    if tokens is None:
        tokens = token_arrays(docs)
    n_tokens = len(tokens.idx)
    if n_tokens == 0:
        empty = cast(Ints1d, numpy.zeros((0,), dtype="i"))
        return TokenAlignment(empty, empty)
    spans = [numpy.asarray(o, dtype="int64").reshape((-1, 2)) for o in offsets]
    # Each doc's characters start after the previous doc's last token and pieces.
    token_ends = (tokens.idx + tokens.length).astype("int64")
    last_token = numpy.maximum(tokens.doc_starts + tokens.sizes - 1, 0)
    doc_ends = numpy.where(tokens.sizes > 0, token_ends[last_token], 0)
    piece_max = numpy.asarray([o[:, 1].max() if len(o) else 0 for o in spans], dtype="int64")
    ends = numpy.maximum(doc_ends, piece_max)
    shift = numpy.concatenate(([0], numpy.cumsum(ends + 1)[:-1]))
    n_pieces = numpy.asarray([len(o) for o in spans], dtype="int64")
    all_spans = (
        numpy.concatenate(spans) + numpy.repeat(shift, n_pieces)[:, None]
        if n_pieces.sum()
        else numpy.zeros((0, 2), dtype="int64")
    )
    token_starts = tokens.idx.astype("int64") + numpy.repeat(shift, tokens.sizes)
    token_ends = token_ends + numpy.repeat(shift, tokens.sizes)
    # Tokenizers give (0, 0) to pieces with no characters; running maxima keep
    # both arrays sorted so that such pieces sit at their neighbour's position.
    piece_starts = numpy.maximum.accumulate(all_spans[:, 0]) if len(all_spans) else all_spans[:, 0]
    piece_ends = numpy.maximum.accumulate(all_spans[:, 1]) if len(all_spans) else all_spans[:, 1]
    first = numpy.searchsorted(piece_ends, token_starts, side="right")
    last = numpy.searchsorted(piece_starts, token_ends, side="left")
    lengths = numpy.maximum(last - first, 0)
    # A whitespace token has no characters a wordpiece could cover.
    lengths[tokens.is_space | (tokens.length == 0)] = 0
    return TokenAlignment(cast(Ints1d, first.astype("i")), cast(Ints1d, lengths.astype("i")))
