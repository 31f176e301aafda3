"""A sentence splitter learned from the training docs themselves.

A model trained on one sentence per doc reads raw text in the units its training
docs were: where one training doc ends and the next begins. Headlines, bylines,
datelines and table rows often end without punctuation, so spaCy's rule-based
sentencizer runs them into the next sentence. This splitter learns, from
consecutive training docs, which gaps between two tokens are such ends:

1. every gap between two tokens (not spaces) of a stream of docs is an example,
   a boundary where one doc ends and the next begins;
2. each gap has a fixed number of hashed features of the tokens around it
   (lower case, shape, prefix, suffix, and pairs of them);
3. a logistic regression over those features is fit by full-batch gradient
   descent (numpy, deterministic);
4. a gap is cut where its probability reaches `threshold`.

The learned state is plain data (`to_dict` / `from_dict`) so it is saved with the
model's attributes.
"""

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Tuple

import numpy
from spacy.attrs import IS_SPACE, LOWER, PREFIX, SHAPE, SUFFIX
from spacy.tokens import Doc

# 2**BITS hashed feature weights (float32): 1 MiB saved with the model.
BITS = 18
# Chosen on CoNLL-2003 dev joined by spaces: the best of 0.2, 0.35 and 0.5 at
# keeping entities the same (see BENCHMARKS.md).
THRESHOLD = 0.35
EPOCHS = 60
LEARN_RATE = 0.5
L2 = 1e-6
# At most this many gaps are learned from (the first ones, in the docs' order).
MAX_GAPS = 500_000

_ATTRS = [LOWER, SHAPE, PREFIX, SUFFIX]
_LOWER, _SHAPE, _PREFIX, _SUFFIX = range(4)
# Each feature: (template id, ((token offset from the gap, attribute), ...)); offset
# 0 is the token before the gap, 1 the one after it.
_TEMPLATES: Tuple[Tuple[int, Tuple[Tuple[int, int], ...]], ...] = tuple(
    enumerate(
        [
            ((0, _LOWER),),
            ((1, _LOWER),),
            ((0, _SHAPE),),
            ((1, _SHAPE),),
            ((-1, _SHAPE),),
            ((2, _SHAPE),),
            ((0, _SUFFIX),),
            ((1, _PREFIX),),
            ((0, _SHAPE), (1, _SHAPE)),
            ((0, _LOWER), (1, _SHAPE)),
            ((0, _SHAPE), (1, _LOWER)),
            ((-1, _SHAPE), (0, _SHAPE), (1, _SHAPE)),
            ((0, _SHAPE), (1, _SHAPE), (2, _SHAPE)),
            ((-1, _LOWER), (0, _LOWER)),
            ((1, _LOWER), (2, _LOWER)),
        ]
    )
)
_MIX = numpy.uint64(0x9E3779B97F4A7C15)


@dataclass
class Splitter:
    """Weights of a logistic regression over hashed features of the gap between
    two tokens; a gap is a sentence boundary where the probability reaches
    `threshold`."""

    weights: numpy.ndarray  # (2**bits,) float32
    bias: float
    threshold: float = THRESHOLD

    @property
    def bits(self) -> int:
        return int(self.weights.shape[0]).bit_length() - 1

    def to_dict(self) -> Dict[str, Any]:
        return {
            "weights": self.weights.astype("<f4").tobytes(),
            "bias": float(self.bias),
            "threshold": float(self.threshold),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Splitter":
        weights = numpy.frombuffer(data["weights"], dtype="<f4")  # read-only, no copy
        return cls(weights, float(data["bias"]), float(data["threshold"]))

    def probabilities(self, doc: Doc) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """The indices (into `doc`) of the non-space tokens that follow a gap, and
        each gap's probability of being a sentence boundary."""
        tokens, indices = _tokens(doc)
        rows = _features(tokens, self.bits)
        scores = self.weights[rows].sum(axis=1) + self.bias  # (gaps,)
        return indices[1:], _sigmoid(scores)

    def starts(self, doc: Doc) -> List[int]:
        """The indices of the tokens of `doc` that start a sentence (cut before)."""
        after, probs = self.probabilities(doc)
        return [int(i) for i in after[probs >= self.threshold]]


def learn_splitter(docs: Iterable[Doc], bits: int = BITS) -> Splitter:
    """A Splitter fit on `docs` read in order as one stream (the first MAX_GAPS
    gaps): the gap between the last token of a doc and the first of the next is a
    boundary, every gap inside a doc is not. Deterministic: the same docs give the
    same weights."""
    arrays = []
    n_tokens = 0
    for doc in docs:
        tokens, _ = _tokens(doc)
        if len(tokens):
            arrays.append(tokens)
            n_tokens += len(tokens)
        if n_tokens > MAX_GAPS:
            break
    size = 2**bits
    weights = numpy.zeros(size, dtype=numpy.float64)
    if len(arrays) < 2:  # no boundary seen: never cut
        return Splitter(weights.astype(numpy.float32), -30.0)
    rows = _features(numpy.concatenate(arrays), bits)  # (gaps, templates)
    labels = numpy.zeros(len(rows))
    labels[numpy.cumsum([len(a) for a in arrays[:-1]]) - 1] = 1.0
    # Adagrad on the mean log loss, full batch: deterministic, no sampling.
    bias = 0.0
    sum_sq = numpy.zeros(size)
    sum_sq_bias = 0.0
    flat = rows.ravel()
    for _ in range(EPOCHS):
        probs = _sigmoid(weights[rows].sum(axis=1) + bias)
        error = (probs - labels) / len(labels)  # (gaps,)
        counts = numpy.bincount(flat, weights=numpy.repeat(error, rows.shape[1]), minlength=size)
        grad = counts + L2 * weights  # (2**bits,)
        sum_sq += grad**2
        weights -= LEARN_RATE * grad / (numpy.sqrt(sum_sq) + 1e-8)
        grad_bias = float(error.sum())
        sum_sq_bias += grad_bias**2
        bias -= LEARN_RATE * grad_bias / (sum_sq_bias**0.5 + 1e-8)
    return Splitter(weights.astype(numpy.float32), bias)


def _tokens(doc: Doc) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The attributes, (tokens, 4), of the tokens of `doc` that are not spaces,
    and their indices in `doc`."""
    if not len(doc):
        return numpy.zeros((0, len(_ATTRS)), dtype=numpy.uint64), numpy.zeros(0, dtype=int)
    array = doc.to_array(_ATTRS + [IS_SPACE])
    keep = array[:, -1] == 0
    return array[keep, :-1].astype(numpy.uint64), numpy.flatnonzero(keep)


def _features(tokens: numpy.ndarray, bits: int) -> numpy.ndarray:
    """Hashed feature rows, (gaps, templates), of the gaps between consecutive
    tokens (rows of `_tokens`' attributes)."""
    n_gaps = max(len(tokens) - 1, 0)
    rows = numpy.empty((n_gaps, len(_TEMPLATES)), dtype=numpy.int64)
    if not n_gaps:
        return rows
    # a padding row before and two after: offsets -1 and 2 at the stream's edges
    pad = numpy.zeros((1, len(_ATTRS)), dtype=numpy.uint64)
    padded = numpy.concatenate([pad, tokens, pad, pad])
    with numpy.errstate(over="ignore"):
        for column, (template, parts) in enumerate(_TEMPLATES):
            key = numpy.full(n_gaps, template + 1, dtype=numpy.uint64)
            for offset, attr in parts:
                # gap g lies between tokens g and g + 1: padded rows g + 1, g + 2
                key = (key * _MIX) ^ padded[offset + 1 : offset + 1 + n_gaps, attr]
            rows[:, column] = ((key * _MIX) >> numpy.uint64(64 - bits)).astype(numpy.int64)
    return rows


def _sigmoid(x: numpy.ndarray) -> numpy.ndarray:
    return 1.0 / (1.0 + numpy.exp(-numpy.clip(x, -30.0, 30.0)))
