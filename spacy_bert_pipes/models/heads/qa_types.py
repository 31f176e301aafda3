"""The plain data between the QA model and its decoding: the questions asked of
each doc (`QAQuery`), and the start/end logits of every window over its context
(`WindowLogits`, per doc `DocQAScores`, per batch `QABatch`). No torch."""

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from thinc.types import Floats1d, Ints1d, Ints2d


@dataclass
class QAQuery:
    """The questions asked of one doc (the model's input, one per doc)."""

    doc: Doc
    questions: List[str]


@dataclass
class WindowLogits:
    """Start/end logits of one question over one window of the context.

    start, end (int): The context wordpieces [start, end) in the window.
    start_logits, end_logits (Floats1d): Index 0 is the [CLS] token (the "no
        answer" position); index 1 + i is context wordpiece `start + i`. (1 + end - start,)
    """

    start: int
    end: int
    start_logits: Floats1d
    end_logits: Floats1d


@dataclass
class DocQAScores:
    """The model's output for one doc.

    offsets (Ints2d): Character offsets of the context wordpieces. (n_pieces, 2)
    words (Ints1d): The tokenizer's word index of each context wordpiece. (n_pieces,)
    questions (List[List[WindowLogits]]): For each question, its windows in order.
    truncated (List[bool]): Whether each question was cut to `max_question_len`.
    """

    offsets: Ints2d
    words: Ints1d
    questions: List[List[WindowLogits]]
    truncated: List[bool]
    # Set by prediction: the arrays of the whole batch (the windows above are
    # views into them) and the doc's index in it.
    batch: Optional["QABatch"] = None
    index: int = 0


@dataclass
class QABatch:
    """Prediction output of a batch of docs as flat host arrays, for decoding all
    questions at once. Pairs (doc, question) are in doc order, then question
    order; windows in pair order, then along the context.

    pair_doc (numpy.ndarray): The doc of each pair. (n_pairs,)
    window_pair (numpy.ndarray): The pair of each window. (n_windows,)
    window_start, window_end (numpy.ndarray): The context wordpieces [start, end)
        of each window, indices into its doc's. (n_windows,)
    start_logits, end_logits (Floats1d): Each window's rows in turn: its [CLS],
        then its context wordpieces. (n_windows + sum(end - start),)
    offsets (Ints2d): Character offsets of all docs' context wordpieces, doc
        after doc. (n_pieces, 2)
    words (Ints1d): The tokenizer's word index of each of them. (n_pieces,)
    piece_bounds (numpy.ndarray): Doc d's wordpieces are rows piece_bounds[d] to
        piece_bounds[d + 1] of offsets and words. (n_docs + 1,)
    """

    pair_doc: numpy.ndarray
    window_pair: numpy.ndarray
    window_start: numpy.ndarray
    window_end: numpy.ndarray
    start_logits: Floats1d
    end_logits: Floats1d
    offsets: Ints2d
    words: Ints1d
    piece_bounds: numpy.ndarray

    @classmethod
    def of(
        cls, scores: Sequence["DocQAScores"], to_numpy: Callable[[Any], numpy.ndarray]
    ) -> "QABatch":
        """The batch arrays of these docs' scores: those prediction made, when the
        scores are exactly its batch, else gathered window by window."""
        shared = scores[0].batch if scores else None
        if (
            shared is not None
            and len(scores) == len(shared.piece_bounds) - 1
            and all(s.batch is shared and s.index == d for d, s in enumerate(scores))
        ):
            return shared
        pair_doc: List[int] = []
        window_pair: List[int] = []
        bounds: List[Tuple[int, int]] = []
        logits: List[Any] = [numpy.zeros((0,), "f")]
        end_logits: List[Any] = [numpy.zeros((0,), "f")]
        for d, doc_scores in enumerate(scores):
            for windows in doc_scores.questions:
                pair_doc.append(d)
                for w in windows:
                    window_pair.append(len(pair_doc) - 1)
                    bounds.append((w.start, w.end))
                    logits.append(to_numpy(w.start_logits).astype("f", copy=False))
                    end_logits.append(to_numpy(w.end_logits).astype("f", copy=False))
        spans = numpy.asarray(bounds, dtype="int64").reshape((-1, 2))
        counts = [len(s.offsets) for s in scores]
        offsets: List[Any] = [numpy.asarray(s.offsets).reshape((-1, 2)) for s in scores]
        words: List[Any] = [numpy.asarray(s.words) for s in scores]
        return cls(
            pair_doc=numpy.asarray(pair_doc, dtype="int64"),
            window_pair=numpy.asarray(window_pair, dtype="int64"),
            window_start=spans[:, 0],
            window_end=spans[:, 1],
            start_logits=cast(Floats1d, numpy.concatenate(logits)),
            end_logits=cast(Floats1d, numpy.concatenate(end_logits)),
            offsets=cast(Ints2d, numpy.concatenate(offsets + [numpy.zeros((0, 2), "i")])),
            words=cast(Ints1d, numpy.concatenate(words + [numpy.zeros((0,), "i")])),
            piece_bounds=numpy.concatenate(([0], numpy.cumsum(counts))).astype("int64"),
        )
