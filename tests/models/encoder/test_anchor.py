"""The vector anchor's loss and gradient (`models/encoder/anchor.py`)."""

import numpy

from spacy_bert_pipes.models.encoder.anchor import anchor_loss, mean_vector
from spacy_bert_pipes.models.types import DocEncoding


def encoding(rng: numpy.random.Generator, n_pieces: int = 3, width: int = 5) -> DocEncoding:
    return DocEncoding(
        cls=rng.normal(size=width).astype("f"),
        wordpieces=rng.normal(size=(n_pieces, width)).astype("f"),
        offsets=numpy.zeros((n_pieces, 2), dtype="i"),
    )


def test_no_loss_where_the_vectors_agree() -> None:
    enc = encoding(numpy.random.default_rng(0))
    loss, grads = anchor_loss([enc], [enc], weight=2.0)
    assert abs(loss) < 1e-6
    assert numpy.abs(grads[0].d_cls).max() < 1e-6


def test_gradient_matches_finite_differences() -> None:
    rng = numpy.random.default_rng(1)
    student, teacher = [encoding(rng), encoding(rng, 2)], [encoding(rng), encoding(rng, 2)]
    weight = 0.7
    _, grads = anchor_loss(student, teacher, weight)
    eps = 1e-3
    for d, (enc, grad) in enumerate(zip(student, grads)):
        for i, j in [(0, 0), (1, 3), (2, 4)][: len(enc.wordpieces)]:
            plus = enc.wordpieces.astype("f8").copy()
            minus = plus.copy()
            plus[i, j] += eps
            minus[i, j] -= eps
            losses = []
            for pieces in (plus, minus):
                moved = list(student)
                moved[d] = DocEncoding(cls=enc.cls, wordpieces=pieces, offsets=enc.offsets)
                losses.append(anchor_loss(moved, teacher, weight)[0])
            numeric = (losses[0] - losses[1]) / (2 * eps)
            assert abs(numeric - grad.d_wordpieces[i, j]) < 1e-4, (d, i, j)


def test_mean_vector_counts_cls_and_every_piece() -> None:
    enc = encoding(numpy.random.default_rng(2))
    expected = (enc.cls + enc.wordpieces.sum(axis=0)) / 4
    numpy.testing.assert_allclose(mean_vector(enc), expected, rtol=1e-6)
