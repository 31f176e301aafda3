"""The losses on a batch's sentence vectors (models/heads/vector_losses.py), on
small arrays."""

import numpy
import pytest
from helpers import numeric_grad, unit

from spacy_bert_pipes.models.heads.vector_losses import anchor_to_teacher, contrastive_loss


def test_contrastive_loss_gradient_matches_finite_differences() -> None:
    rng = numpy.random.default_rng(0)
    vectors = unit(rng.normal(size=(6, 4))).astype("f8")
    ids = [0, 0, 1, 1, 2, -1]
    loss, grad = contrastive_loss(vectors, ids, 0.5)
    expected = numeric_grad(lambda v: contrastive_loss(v, ids, 0.5)[0], vectors.copy())
    assert loss > 0
    assert grad == pytest.approx(expected, abs=1e-4)


def test_contrastive_loss_pulls_pairs_together() -> None:
    rng = numpy.random.default_rng(1)
    vectors = unit(rng.normal(size=(4, 8)))
    ids = [0, 0, 1, 1]
    before, _ = contrastive_loss(vectors, ids, 0.1)
    for _ in range(50):
        _, grad = contrastive_loss(vectors, ids, 0.1)
        vectors = unit(vectors - 0.05 * grad)
    after, _ = contrastive_loss(vectors, ids, 0.1)
    assert after < before
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])


def test_contrastive_loss_without_pairs_is_zero() -> None:
    vectors = unit(numpy.eye(3, dtype="f"))
    loss, grad = contrastive_loss(vectors, [0, 1, -1], 0.1)
    assert loss == 0.0 and not grad.any()


def test_anchor_to_teacher_gradient_and_pull() -> None:
    rng = numpy.random.default_rng(2)
    vectors = unit(rng.normal(size=(5, 4))).astype("f8")
    teacher = unit(rng.normal(size=(5, 4))).astype("f8")
    loss, grad = anchor_to_teacher(vectors, teacher, 0.5)
    expected = numeric_grad(lambda v: anchor_to_teacher(v, teacher, 0.5)[0], vectors.copy())
    assert loss == pytest.approx(0.5 * float((1 - (vectors * teacher).sum(axis=1)).mean()))
    assert grad == pytest.approx(expected, abs=1e-4)
    for _ in range(100):  # gradient steps on the unit sphere end at the teacher
        vectors = unit(vectors - 0.5 * anchor_to_teacher(vectors, teacher, 1.0)[1])
    assert anchor_to_teacher(vectors, teacher, 1.0)[0] < 1e-3
    assert anchor_to_teacher(teacher, teacher, 1.0)[0] == pytest.approx(0.0, abs=1e-7)
