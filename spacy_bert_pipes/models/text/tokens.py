"""Wordpieces of texts, and of a batch of docs cut into what is encoded apart.

`tokenize` runs the fast tokenizer once per batch of texts and keeps character
offsets (and, for an encoder with case embeddings, casing classes). A
`TokenizedBatch` is everything the encoder's forward needs before the
transformer: made by `tokenize_docs`, or ahead of time in a worker thread while
the previous batch runs (`provide_tokens`, `pipeline.common.prefetching_pipe`).
"""

from dataclasses import dataclass
from itertools import chain
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Ints1d, Ints2d

from .casing import piece_cases
from .segments import effective_context, learned_splitter, segments


class TokenizerSource(Protocol):
    """What tokenizing reads from an encoder's shim (`transformer.hf_shim.HFShim`,
    a floor above: the text layer knows the shim only by this)."""

    @property
    def tokenizer(self) -> Any: ...

    @property
    def uses_cases(self) -> bool: ...


@dataclass
class Pieces:
    """A text's wordpieces (no special tokens) and their character offsets."""

    ids: Ints1d  # (n_pieces,)
    offsets: Ints2d  # (n_pieces, 2)
    words: Optional[Ints1d] = None  # the tokenizer's word index of each piece (n_pieces,)
    # the casing class of each piece (`casing.piece_cases`), for an encoder with
    # case embeddings (n_pieces,)
    cases: Optional[Ints1d] = None


def tokenize(encoder: Model, texts: Sequence[str], with_words: bool = False) -> List[Pieces]:
    """Wordpieces and character offsets of each text (one tokenizer call per batch);
    with `with_words`, also the word (pre-tokenizer unit) of each wordpiece; for an
    encoder with case embeddings, also each wordpiece's casing class."""
    shim = cast(TokenizerSource, encoder.shims[0])
    with_cases = shim.uses_cases
    if not texts:  # the fast tokenizer fails on an empty batch
        return []
    # The Rust tokenizer itself: the transformers wrapper would turn every
    # encoding into Python lists in a dict first. As the wrapper does on every
    # call, no truncation and no padding.
    backend = shim.tokenizer.backend_tokenizer
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    encodings = backend.encode_batch(list(texts), add_special_tokens=False)
    counts = [len(enc) for enc in encodings]
    total = sum(counts)
    # one conversion per batch, then a view per text
    all_ids = numpy.fromiter(chain.from_iterable(e.ids for e in encodings), "i", count=total)
    flat_offsets = chain.from_iterable(chain.from_iterable(e.offsets for e in encodings))
    all_offsets = numpy.fromiter(flat_offsets, "i", count=2 * total).reshape((-1, 2))
    cuts = numpy.cumsum(counts)[:-1]
    out = []
    for i, (ids, offsets) in enumerate(
        zip(numpy.split(all_ids, cuts), numpy.split(all_offsets, cuts))
    ):
        words = None
        if with_words:
            word_ids = [-1 if w is None else w for w in encodings[i].word_ids]
            words = cast(Ints1d, numpy.asarray(word_ids, dtype="i"))
        piece_offsets = cast(Ints2d, offsets)
        cases = piece_cases(texts[i], piece_offsets) if with_cases else None
        out.append(Pieces(cast(Ints1d, ids), piece_offsets, words, cases))
    return out


@dataclass
class TokenizedBatch:
    """A batch's texts cut into the spans encoded apart, and their wordpieces:
    everything the forward needs before the transformer, made by
    `tokenize_docs`, possibly ahead of time in a worker thread (`provide_tokens`).

    docs (List[Doc]): The docs, in order.
    spans (List[List[Tuple[int, int]]]): Each doc's encoded character spans.
    pieces (List[Pieces]): The wordpieces of each span, all docs' spans in order.
    """

    docs: List[Doc]
    spans: List[List[Tuple[int, int]]]
    pieces: List[Pieces]


def segment_texts(
    encoder: Model, docs: Sequence[Doc]
) -> Tuple[List[List[Tuple[int, int]]], List[str]]:
    """Each doc's character spans that are encoded apart (`segments`), and their
    texts, all docs' spans in order. Reads the Docs: runs on the main thread."""
    context = effective_context(encoder)
    # doc.text joins the tokens anew on every call: once per doc, on this hot path
    doc_texts = [doc.text for doc in docs]
    splitter = learned_splitter(encoder) if context == "sentences" else None
    spans = [segments(doc, text, context, splitter) for doc, text in zip(docs, doc_texts)]
    # a slice of the whole text is the text itself, not a copy
    texts = [text[s:e] for text, doc_spans in zip(doc_texts, spans) for s, e in doc_spans]
    return spans, texts


def tokenize_docs(encoder: Model, docs: Sequence[Doc]) -> TokenizedBatch:
    """`segment_texts` then `tokenize` (see TokenizedBatch)."""
    spans, texts = segment_texts(encoder, docs)
    return TokenizedBatch(list(docs), spans, tokenize_texts(encoder, texts, spans))


def tokenize_texts(
    encoder: Model, texts: Sequence[str], spans: Sequence[Sequence[Tuple[int, int]]]
) -> List[Pieces]:
    """`tokenize` the texts of `segment_texts`, with an error that names the doc
    and text the tokenizer failed on. Touches no Doc, so it may run in a worker
    thread (the fast tokenizer releases the GIL while it works)."""
    try:
        return tokenize(encoder, texts)
    except Exception as error:
        doc_of_text = [i for i, doc_spans in enumerate(spans) for _ in doc_spans]
        for i, text in enumerate(texts):
            try:
                tokenize(encoder, [text])
            except Exception as text_error:
                shown = f"{text[:60]!r}{'...' if len(text) > 60 else ''}"
                raise ValueError(
                    f"The encoder's tokenizer failed on doc {doc_of_text[i]} of the batch "
                    f"({shown}): {text_error}"
                ) from text_error
        raise error


# Tokenized batches handed to an encoder ahead of its forward, by the encoder's
# Model.id: the components' `pipe` tokenizes batch k + 1 in a worker thread
# while batch k runs (`pipeline.common.prefetching_pipe`).
_PROVIDED: Dict[int, TokenizedBatch] = {}


def provide_tokens(encoder: Model, batch: Optional[TokenizedBatch]) -> None:
    """Give the encoder the wordpieces of the next docs it will see (None: drop
    them). The forward uses them only if called on exactly those Doc objects."""
    if batch is None:
        _PROVIDED.pop(encoder.id, None)
    else:
        _PROVIDED[encoder.id] = batch


def tokenized(model: Model, docs: List[Doc]) -> TokenizedBatch:
    provided = _PROVIDED.pop(model.id, None)
    if (
        provided is not None
        and len(provided.docs) == len(docs)
        and all(a is b for a, b in zip(provided.docs, docs))
    ):
        return provided
    return tokenize_docs(model, docs)
