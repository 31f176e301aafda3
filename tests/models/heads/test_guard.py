"""The guard of a new label's bias (models/heads/guard.py), on small arrays."""

import numpy
import pytest
from helpers import unit
from thinc.api import Model

from spacy_bert_pipes.models.heads.guard import RememberedBest, guard_bias, remembered_logits
from spacy_bert_pipes.models.heads.prototypes import cosine_output, remember_examples


def near_label_zero(seed: int, n_docs: int, scale: float):  # type: ignore[no-untyped-def]
    """The logits of n_docs docs around 3 prototypes, and their cosines with a
    new prototype next to label 0's."""
    rng = numpy.random.default_rng(seed)
    W = unit(rng.normal(size=(3, 8)))
    docs = unit(W[rng.integers(0, 3, n_docs)] + 0.3 * rng.normal(size=(n_docs, 8)))
    new = unit(W[:1] + 0.2 * rng.normal(size=(1, 8)))[0]
    return scale * docs @ W.T, docs @ new


def test_guard_bias_keeps_every_reference_doc_with_its_label() -> None:
    scale = 20.0
    # a new prototype next to label 0: with no bias it takes some of its docs
    logits, cos = near_label_zero(4, 60, scale)
    assert (scale * cos > logits.max(axis=1)).any()
    bias = guard_bias(logits, cos, scale)
    assert bias < 0
    assert (scale * cos + bias < logits.max(axis=1)).all()
    # as high as it can be: a little more and a doc changes label
    assert (scale * cos + bias + 0.01 > logits.max(axis=1)).any()
    # a prototype far from every doc keeps the zero bias; no docs, no guard
    assert guard_bias(logits, cos - 5.0, scale) == 0.0
    assert guard_bias(logits[:0], cos[:0], scale) == 0.0


def test_guard_bias_with_an_allowance_lets_that_share_of_docs_change_label() -> None:
    scale = 20.0
    logits, cos = near_label_zero(5, 400, scale)
    strict = guard_bias(logits, cos, scale)
    loose = guard_bias(logits, cos, scale, allowance=0.05)
    assert strict < loose <= 0.0
    taken = (scale * cos + loose > logits.max(axis=1)).mean()
    assert 0 < taken <= 0.05
    with pytest.raises(ValueError, match="allowance"):
        guard_bias(logits, cos, scale, allowance=1.0)


def test_remembered_logits_are_the_prediction_logits_without_the_doc_itself() -> None:
    rng = numpy.random.default_rng(6)
    layer = cosine_output(exclusive=True, scale=10.0, nO=2, example_weight=1.0, example_top=2)
    layer.set_dim("nI", 4)
    layer.initialize()
    layer.set_param("W", unit(rng.normal(size=(2, 4))))
    layer.set_param("b", numpy.asarray([0.0, -0.5], "f"))
    X = unit(rng.normal(size=(9, 4)))
    remember_examples(layer, list(range(9)), X, [0, 0, 0, 0, 1, 1, 1, 1, 1])
    logits = remembered_logits(layer, batch=4)
    for i in range(9):
        # the layer without example i predicts for it what remembered_logits gives
        alone = cosine_output(exclusive=True, scale=10.0, nO=2, example_weight=1.0, example_top=2)
        alone.set_dim("nI", 4)
        alone.initialize()
        alone.set_param("W", layer.get_param("W"))
        alone.set_param("b", layer.get_param("b"))
        others = [j for j in range(9) if j != i]
        remember_examples(
            alone,
            others,
            X[others],
            [0, 0, 0, 0, 1, 1, 1, 1, 1][:i] + [0, 0, 0, 0, 1, 1, 1, 1, 1][i + 1 :],
        )
        probs = alone.predict(X[i : i + 1])
        expected = numpy.exp(logits[i] - logits[i].max())
        numpy.testing.assert_allclose(probs[0], expected / expected.sum(), atol=1e-5)


def test_remembered_best_follows_a_label_added_as_a_full_pass_would() -> None:
    rng = numpy.random.default_rng(7)

    def layer_with(W: numpy.ndarray, b: numpy.ndarray) -> Model:
        layer = cosine_output(
            exclusive=True, scale=10.0, nO=len(W), example_weight=1.0, example_top=2
        )
        layer.set_dim("nI", 4)
        layer.initialize()
        layer.set_param("W", W)
        layer.set_param("b", b)
        return layer

    X = unit(rng.normal(size=(8, 4)))
    W = unit(rng.normal(size=(2, 4)))
    layer = layer_with(W, numpy.zeros(2, "f"))
    remember_examples(layer, list(range(8)), X, [0, 0, 0, 0, 1, 1, 1, 1])
    remembered = RememberedBest()
    best = remembered.current(layer)
    numpy.testing.assert_allclose(best, remembered_logits(layer).max(axis=1), atol=1e-5)
    # a third label near some of the docs, with a bias that lets it win there
    new = unit(X[:2] + 0.1 * rng.normal(size=(2, 4)))
    grown = layer_with(
        numpy.concatenate([W, unit(new.mean(0, keepdims=True))]), numpy.asarray([0, 0, 6.0], "f")
    )
    grown.set_param("E", layer.get_param("E").copy())
    grown.set_param("E_label", layer.get_param("E_label").copy())
    grown.attrs["example_keys"] = list(layer.attrs["example_keys"])
    remember_examples(grown, [8, 9], new, [2, 2])
    full = remembered_logits(grown)
    assert (full[:8].argmax(axis=1) == 2).any()
    remembered.added(grown, full[:8, 2])
    numpy.testing.assert_allclose(remembered.best, full.max(axis=1), atol=1e-5)
    # a row remembered again under another label: computed again, not carried
    remember_examples(grown, [0], X[:1], [1])
    numpy.testing.assert_allclose(
        remembered.current(grown), remembered_logits(grown).max(axis=1), atol=1e-5
    )
