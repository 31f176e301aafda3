"""The math of label prototypes (models/heads/prototypes.py) and the pair batches
(pipeline/pair_batches.py), on small arrays."""

import random
from typing import Tuple

import numpy
import pytest
import spacy
from blas_threads import needs_openblas, on_avx2_kernels
from helpers import numeric_grad, unit
from spacy.training import Example
from thinc.api import Model, NumpyOps

from spacy_bert_pipes.models.heads.prototypes import (
    calibrate_scale,
    cosine_logits,
    cosine_output,
    label_prototypes,
    nearest_examples,
    remember_examples,
    self_trained_prototypes,
)
from spacy_bert_pipes.pipeline.pair_batches import configure_label_pairs_batcher


def test_cosine_output_gradients() -> None:
    ops = NumpyOps()
    rng = numpy.random.default_rng(2)
    layer = cosine_output(exclusive=True, scale=5.0, nO=3)
    layer.set_dim("nI", 4)
    layer.initialize()
    layer.set_param("W", rng.normal(size=(3, 4)).astype("f"))
    X = rng.normal(size=(2, 4)).astype("f")
    target = numpy.asarray([[1, 0, 0], [0, 0, 1]], dtype="f")

    def loss_of(x: numpy.ndarray) -> float:
        Y = layer.predict(x.astype("f"))
        return float(-(target * numpy.log(Y)).sum())

    Y, backprop = layer.begin_update(X)
    dX = backprop(ops.asarray2f(Y - target))  # cross-entropy: d_logits = Y - target
    assert dX == pytest.approx(numeric_grad(loss_of, X.copy()), abs=2e-2)


def test_cosine_logits_are_the_softmax_inputs() -> None:
    rng = numpy.random.default_rng(3)
    layer = cosine_output(exclusive=True, scale=5.0, nO=3)
    layer.set_dim("nI", 4)
    layer.initialize()
    layer.set_param("W", rng.normal(size=(3, 4)).astype("f"))
    layer.set_param("b", numpy.asarray([0.5, -1.0, 0.0], dtype="f"))
    X = rng.normal(size=(5, 4)).astype("f")
    logits = cosine_logits(layer, X)
    shifted = numpy.exp(logits - logits.max(axis=1, keepdims=True))
    numpy.testing.assert_allclose(
        shifted / shifted.sum(axis=1, keepdims=True), layer.predict(X), atol=1e-5
    )


def test_label_prototypes_mix_examples_and_descriptions() -> None:
    vectors = numpy.asarray([[1, 0], [0.8, 0.6]], dtype="f")
    targets = numpy.asarray([[1, 0], [1, 0]], dtype="f")
    described = [None, numpy.asarray([[0, 1]], dtype="f")]
    P = label_prototypes(vectors, targets, described, description_weight=1.0)
    assert P[0] == pytest.approx(unit(numpy.asarray([[0.9, 0.3]]))[0])
    assert P[1] == pytest.approx([0, 1])
    empty = label_prototypes(vectors, targets, [None, None], 1.0)
    assert not empty[1].any()


def test_calibrate_scale_prefers_sharp_when_right_and_soft_when_wrong() -> None:
    cos = numpy.asarray([[0.9, 0.1], [0.2, 0.8]], dtype="f")
    right = numpy.asarray([[1, 0], [0, 1]], dtype="f")
    wrong = numpy.asarray([[1, 0], [1, 0]], dtype="f")
    scales = [1.0, 5.0, 50.0]
    assert calibrate_scale(cos, right, scales) == 50.0
    assert calibrate_scale(cos, wrong, scales) < 50.0


def test_pair_batches_hold_pairs_of_labels() -> None:
    nlp = spacy.blank("en")
    labels = [f"L{i}" for i in range(10)]
    examples = []
    for label in labels:
        for j in range(4):
            doc = nlp.make_doc(f"text {label} {j}")
            examples.append(
                Example.from_dict(doc, {"cats": {lb: float(lb == label) for lb in labels}})
            )
    random.seed(0)
    batches = list(configure_label_pairs_batcher(size=8, per_label=2)(examples))
    assert sum(len(b) for b in batches) == len(examples)
    for batch in batches:
        golds = [max(eg.reference.cats, key=eg.reference.cats.__getitem__) for eg in batch]
        assert all(golds.count(g) >= 2 for g in golds)
    with pytest.raises(ValueError, match="per_label"):
        configure_label_pairs_batcher(size=8, per_label=1)


def test_sentence_vectors_are_bert_vectors_geometry() -> None:
    """The same vector as the checkpoint's sentence-transformers pooling (mean
    over [CLS], wordpieces and [SEP], unit length) that bert_vectors writes."""
    from spacy_bert_pipes.models.encoder.pooling import Pooling, pool_doc
    from spacy_bert_pipes.models.heads.prototypes import sentence_vectors
    from spacy_bert_pipes.models.types import DocEncoding

    rng = numpy.random.default_rng(3)
    encodings = [
        DocEncoding(
            cls=rng.normal(size=4).astype("f"),
            wordpieces=rng.normal(size=(n, 4)).astype("f"),
            offsets=numpy.zeros((n, 2), dtype="i"),
            sep=rng.normal(size=4).astype("f"),
        )
        for n in (3, 1, 5)
    ]
    X = sentence_vectors().predict(encodings)
    expected = [pool_doc(enc, Pooling(("mean",), normalize=True)) for enc in encodings]
    assert X == pytest.approx(numpy.stack(expected), abs=1e-6)


def test_nearest_examples_means_each_labels_top_cosines() -> None:
    rng = numpy.random.default_rng(3)
    X = unit(rng.normal(size=(4, 5)))
    E = unit(rng.normal(size=(6, 5)))
    E_label = numpy.asarray([0, 0, 0, 1, 2, 0], dtype="f")  # label 3 has no example
    cos = rng.uniform(-1, 1, size=(4, 4)).astype("f")
    near = nearest_examples(X, E, E_label, cos, top=2)
    sims = X @ E.T
    for i in range(4):
        assert near[i, 0] == pytest.approx(numpy.sort(sims[i, [0, 1, 2, 5]])[-2:].mean(), abs=1e-6)
        # fewer than top examples, or none: the prototype's cosine
        assert near[i, 1] == pytest.approx(cos[i, 1], abs=1e-6)
        assert near[i, 2] == pytest.approx(cos[i, 2], abs=1e-6)
        assert near[i, 3] == pytest.approx(cos[i, 3], abs=1e-6)
    near = nearest_examples(X, E, E_label, cos, top=1)
    assert near[:, 1] == pytest.approx(sims[:, 3], abs=1e-6)
    assert near[:, 0] == pytest.approx(sims[:, [0, 1, 2, 5]].max(axis=1), abs=1e-6)


def test_nearest_examples_leave_a_doc_out_of_its_own_nearest() -> None:
    E = unit(numpy.asarray([[1, 0], [1, 0.2], [1, 0.5], [0, 1], [0.2, 1]], "f"))
    E_label = numpy.asarray([0, 0, 0, 1, 1], "f")
    cos = numpy.zeros((len(E), 2), "f") - 7.0  # marks "the prototype's cosine"
    sims = E @ E.T
    near = nearest_examples(E, E, E_label, cos, top=2, leave_out=numpy.arange(len(E)))
    # example 0's own label: its two nearest others, not itself
    assert near[0, 0] == pytest.approx((sims[0, 1] + sims[0, 2]) / 2, abs=1e-6)
    # example 3 has one other example of its label, fewer than top: the prototype
    assert near[3, 1] == -7.0
    assert near[3, 0] == pytest.approx(numpy.sort(sims[3, :3])[-2:].mean(), abs=1e-6)
    # -1: nothing left out
    kept = nearest_examples(E, E, E_label, cos, top=2, leave_out=numpy.full(len(E), -1))
    assert kept[0, 0] == pytest.approx((1.0 + sims[0, 1]) / 2, abs=1e-6)


def examples_around(n_labels: int, n: int, width: int) -> Tuple[numpy.ndarray, ...]:
    """Label centres (n_labels, width), n examples around them (unit rows) and
    their labels: the last label has a single example (fewer than top: its
    prototype's cosine), and examples 0 and n_labels - 1 are the same vector."""
    rng = numpy.random.default_rng(4)
    centres = unit(rng.normal(size=(n_labels, width)))
    E_label = numpy.arange(n) % (n_labels - 1)
    E_label[-1] = n_labels - 1
    E = unit(centres[E_label] + 0.1 * rng.normal(size=(n, width)))
    E[n_labels - 1] = E[0]  # a tie
    return centres, E, E_label.astype("f")


@pytest.mark.parametrize("top,leave_out", [(1, False), (3, False), (2, True)])
def test_a_docs_nearest_examples_do_not_depend_on_its_batch(top: int, leave_out: bool) -> None:
    """The same docs' term all at once and in batches of 1, 3 and 7 has the
    same bits: the BLAS rounds a product by the rows it is given (one row is
    a matrix-vector product) and by its threads, which moved a router's cats
    between the engines of `annotate`."""
    centres, E, E_label = examples_around(n_labels=7, n=3000, width=384)
    docs = unit(
        centres[E_label[:64].astype("i")] + numpy.random.default_rng(5).normal(size=(64, 384))
    )
    X = E[:64] if leave_out else docs
    own = numpy.arange(len(X)) if leave_out else None
    cos = X @ centres.T  # (64, 7)
    near = nearest_examples(X, E, E_label, cos, top, leave_out=own)
    for size in (1, 3, 7):
        batches = [
            nearest_examples(
                X[i : i + size],
                E,
                E_label,
                cos[i : i + size],
                top,
                leave_out=None if own is None else own[i : i + size],
            )
            for i in range(0, len(X), size)
        ]
        assert numpy.concatenate(batches).tobytes() == near.tobytes(), size
    # the values: the mean of each label's top cosines (not the doc's own)
    sims = X.astype("float64") @ E.astype("float64").T
    if own is not None:
        sims[own, own] = -numpy.inf
    for j in range(6):
        expected = numpy.sort(sims[:, E_label == j], axis=1)[:, -top:].mean(axis=1)
        assert near[:, j] == pytest.approx(expected, abs=1e-6)
    if top > 1:  # one example, fewer than top: the prototype's cosine
        assert near[:, 6].tobytes() == cos[:, 6].tobytes()
    else:
        assert near[:, 6] == pytest.approx(sims[:, -1], abs=1e-6)
    assert nearest_examples(X[:0], E, E_label, cos[:0], top).shape == (0, 7)


def test_a_docs_cats_with_nearest_examples_do_not_depend_on_its_batch() -> None:
    """A router's cats (prototypes and nearest examples) have the same bits
    whatever the other docs of the batch."""
    centres, E, E_label = examples_around(n_labels=7, n=3000, width=384)
    layer = cosine_output(exclusive=True, scale=20.0, nO=7, example_weight=1.0, example_top=2)
    layer.set_dim("nI", 384)
    layer.initialize()
    layer.set_param("W", centres)
    layer.set_param("E", E)
    layer.set_param("E_label", E_label)
    rng = numpy.random.default_rng(6)
    X = (centres[rng.integers(0, 7, 64)] + rng.normal(size=(64, 384))).astype("f")
    cats = layer.predict(X)
    for size in (1, 3, 7):
        batches = [layer.predict(X[i : i + size]) for i in range(0, len(X), size)]
        assert numpy.concatenate(batches).tobytes() == cats.tobytes(), size


# Each label's term for the same docs on 1 and on 2 threads of numpy's
# OpenBLAS; prints whether their bytes are equal.
NEAREST_ON_THREADS = """
from spacy_bert_pipes.models.heads.prototypes import nearest_examples, unit_with_norms
rng = numpy.random.default_rng(0)
E, _ = unit_with_norms(rng.normal(0, 1, (3000, 384)).astype("f"))
E_label = (numpy.arange(3000) % 7).astype("f")
docs, _ = unit_with_norms(rng.normal(0, 1, (64, 384)).astype("f"))
cos = numpy.zeros((64, 7), "f")
found = []
for threads in (1, 2):
    set_threads(threads)
    found.append(nearest_examples(docs, E, E_label, cos, 2).tobytes())
print(found[0] == found[1])
"""


@needs_openblas
def test_a_docs_nearest_examples_do_not_depend_on_the_blas_threads() -> None:
    """OpenBLAS's AVX2 kernels round a float32 product otherwise on 1 thread
    than on 2 (`blas_threads`): a Ray actor runs 1, the local engine all
    cores. The term must not see it."""
    assert on_avx2_kernels(NEAREST_ON_THREADS) == "True"


def test_remember_examples_replaces_by_key_and_skips_unlabelled() -> None:
    layer = cosine_output(exclusive=True, scale=5.0, nO=3, example_weight=1.0)
    layer.set_dim("nI", 2)
    layer.initialize()
    remember_examples(layer, [7, 8, 9], numpy.asarray([[3, 0], [0, 2], [1, 1]], "f"), [0, 1, -1])
    assert layer.attrs["example_keys"] == [7, 8]
    assert layer.get_param("E") == pytest.approx(numpy.asarray([[1, 0], [0, 1]], "f"))
    # key 8 seen again (twice: the last wins), key 10 is new
    rows = numpy.asarray([[0, -1], [1, 1], [-4, 0]], "f")
    remember_examples(layer, [8, 10, 8], rows, [2, 1, 2])
    assert layer.attrs["example_keys"] == [7, 8, 10]
    assert layer.get_param("E") == pytest.approx(unit(numpy.asarray([[1, 0], [-1, 0], [1, 1]])))
    assert layer.get_param("E_label").tolist() == [0.0, 2.0, 1.0]


def test_examples_count_in_prediction_not_in_training() -> None:
    layer = cosine_output(exclusive=True, scale=10.0, nO=2, example_weight=1.0, example_top=1)
    layer.set_dim("nI", 2)
    layer.initialize()
    layer.set_param("W", numpy.asarray([[1, 0], [0, 1]], "f"))
    X = numpy.asarray([[1, 0.9]], "f")  # nearer the prototype of label 0
    assert layer.predict(X)[0, 0] > 0.5
    remember_examples(layer, [1], numpy.asarray([[0.5, 1]], "f"), [1])  # an example of 1 near X
    assert layer.predict(X)[0, 1] > 0.5
    Y, _ = layer.begin_update(X)
    assert Y[0, 0] > 0.5  # training sees the prototypes alone


def test_example_weight_needs_exclusive_classes() -> None:
    from spacy_bert_pipes.models.heads.prototypes import PrototypeCatModel

    with pytest.raises(ValueError, match="exclusive_classes"):
        PrototypeCatModel(Model("encoder", lambda m, X, t: (X, None)), False, example_weight=0.5)
    with pytest.raises(ValueError, match="example_top"):
        PrototypeCatModel(Model("encoder", lambda m, X, t: (X, None)), example_top=0)


def test_self_trained_prototypes_move_towards_their_docs() -> None:
    start = unit(numpy.asarray([[1, 0.2, 0], [0.2, 1, 0], [0, 0, 1]]))
    # docs around (1, 1, 0.3) lean to label 1; docs around (1, -0.2, 0) to label 0
    docs = unit(numpy.asarray([[1, 1.1, 0.3], [0.9, 1.0, 0.3], [1, -0.2, 0], [1, -0.3, 0.05]]))
    prototypes, counts = self_trained_prototypes(start, docs, rounds=3, weight=2.0)
    assert counts.tolist() == [2.0, 2.0, 0.0]
    expected = start[1] + 2.0 * unit(docs[:2].sum(axis=0, keepdims=True))[0]
    assert prototypes[1] == pytest.approx(expected / numpy.linalg.norm(expected), abs=1e-6)
    assert prototypes[2] == pytest.approx(start[2], abs=1e-6)  # no docs: its start
    assert numpy.linalg.norm(prototypes, axis=1) == pytest.approx(1.0, abs=1e-6)
