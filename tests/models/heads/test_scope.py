"""Out-of-scope scores and temperature scaling: the math against brute force."""

from dataclasses import replace

import numpy
import pytest
from blas_threads import needs_openblas, on_avx2_kernels
from thinc.api import Model

from spacy_bert_pipes.models.heads.scope import (
    ScopeFit,
    confidence,
    extend_fit,
    fit_gaussian,
    fit_scope,
    fit_temperature,
    get_fit,
    knn_scores,
    mahalanobis_scores,
    raw_scores,
    sample_reach,
    scale_probs,
    set_fit,
)


def clusters(seed: int = 0, n: int = 60, width: int = 5):
    rng = numpy.random.default_rng(seed)
    centres = rng.normal(0, 4, (3, width))
    y = numpy.arange(n) % 3
    X = centres[y] + rng.normal(0, 1, (n, width))
    return X.astype("f"), y, centres


def test_mahalanobis_matches_brute_force() -> None:
    X, y, _ = clusters()
    means, precision = fit_gaussian(X, y, 3, shrinkage=0.0)
    for label in range(3):
        assert numpy.allclose(means[label], X[y == label].mean(0), atol=1e-5)
    centred = X - means[y]
    cov = centred.T @ centred / (len(X) - 3)
    assert numpy.allclose(precision, numpy.linalg.inv(cov), atol=1e-3)
    queries = X[:7] + 0.5
    got = mahalanobis_scores(queries, means, precision)
    expected = [
        min(float((q - m) @ numpy.linalg.inv(cov) @ (q - m)) for m in means) for q in queries
    ]
    assert numpy.allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_a_label_without_docs_gets_no_mean() -> None:
    X, y, _ = clusters()
    means, _ = fit_gaussian(X, y, 4)
    assert means.shape == (3, X.shape[1])
    with pytest.raises(ValueError, match="at least one training doc"):
        fit_gaussian(X[:0], y[:0], 3)


def test_knn_takes_the_kth_most_similar() -> None:
    vectors = numpy.eye(3, dtype="f")
    query = numpy.asarray([[1.0, 0.5, 0.0]], dtype="f")
    unit = query / numpy.linalg.norm(query)
    assert knn_scores(query, vectors, 1)[0] == pytest.approx(1 - unit[0, 0], abs=1e-6)
    assert knn_scores(query, vectors, 2)[0] == pytest.approx(1 - unit[0, 1], abs=1e-6)
    assert knn_scores(query, vectors, 10)[0] == pytest.approx(1.0, abs=1e-6)


def test_knn_divides_each_distance_by_its_vectors_reach() -> None:
    vectors = numpy.eye(3, dtype="f")
    query = numpy.asarray([[1.0, 0.5, 0.0]], dtype="f")
    unit = query / numpy.linalg.norm(query)
    ones = numpy.ones(3, dtype="f")
    assert knn_scores(query, vectors, 1, ones)[0] == pytest.approx(
        knn_scores(query, vectors, 1)[0], abs=1e-7
    )
    # the second vector's distance divided by 8: it is now the nearest
    reach = numpy.asarray([1.0, 8.0, 1.0], dtype="f")
    assert knn_scores(query, vectors, 1, reach)[0] == pytest.approx((1 - unit[0, 1]) / 8, abs=1e-6)
    assert knn_scores(query, vectors, 2, reach)[0] == pytest.approx(1 - unit[0, 0], abs=1e-6)


def test_sample_reach_measures_how_far_a_few_examples_leave_a_labels_docs() -> None:
    X, y, _ = clusters(n=300, width=8)
    probs = numpy.full((len(X), 3), 1 / 3, dtype="f")
    fit = fit_scope(
        "knn", train_vectors=X, train_labels=y, n_labels=3, ref_vectors=X, ref_probs=probs
    )
    few, more = sample_reach(fit, 2, 0.9), sample_reach(fit, 30, 0.9)
    assert few > more > 1.0  # fewer examples leave the docs farther
    assert sample_reach(fit, 2, 0.9) == few  # seeded
    assert sample_reach(fit, 100, 0.9) == 1.0  # no label has more docs than that
    with pytest.raises(ValueError, match="calibrate"):
        sample_reach(replace(fit, labels=None), 2, 0.9)
    # the reach of added examples is kept, saved and checked
    extended = extend_fit(fit, X[:2] + 0.1, 1, reach=few)
    assert extended.reach is not None
    assert extended.reach.tolist() == [1.0] * len(X) + [pytest.approx(few)] * 2
    loaded = ScopeFit.from_dict(extended.to_dict())
    assert loaded.reach is not None and len(loaded.reach) == len(X) + 2
    with pytest.raises(ValueError, match="reach"):
        ScopeFit.from_dict({**extended.to_dict(), "reach": numpy.zeros(len(X) + 2, "f")})


@pytest.mark.parametrize("method", ["max_prob", "mahalanobis", "knn"])
def test_confidence_is_the_share_of_reference_docs_less_typical(method: str) -> None:
    X, y, centres = clusters()
    # held-out docs of the same clusters
    held_out = (centres[y] + numpy.random.default_rng(1).normal(0, 1, X.shape)).astype("f")
    probs = numpy.full((len(X), 3), 0.1, dtype="f")
    probs[numpy.arange(len(X)), y] = 0.8
    fit = fit_scope(
        method,
        train_vectors=X,
        train_labels=y,
        n_labels=3,
        ref_vectors=held_out,
        ref_probs=probs,
    )
    X = held_out
    assert (numpy.diff(fit.reference) >= 0).all()
    conf = confidence(fit, method, raw_scores(fit, method, X, probs))
    assert ((conf > 0) & (conf <= 1)).all()
    if method != "max_prob":
        # the reference docs' confidences spread over (0, 1]; far docs get 0
        assert numpy.quantile(conf, 0.5) == pytest.approx(0.5, abs=0.1)
        far = centres.mean(0, keepdims=True) + 100.0
        far_conf = confidence(fit, method, raw_scores(fit, method, far, probs[:1]))
        assert far_conf[0] == 0.0


def test_without_a_fit_the_confidence_is_the_top_probability() -> None:
    probs = numpy.asarray([[0.7, 0.2, 0.1], [0.4, 0.35, 0.25]], dtype="f")
    for method in ("max_prob", "mahalanobis", "knn"):
        conf = confidence(None, method, raw_scores(None, method, None, probs))
        assert numpy.allclose(conf, [0.7, 0.4])


def test_a_fit_is_saved_in_the_model_and_read_back() -> None:
    X, y, _ = clusters()
    probs = numpy.full((len(X), 3), 1 / 3, dtype="f")
    fit = fit_scope(
        "mahalanobis", train_vectors=X, train_labels=y, n_labels=3, ref_vectors=X, ref_probs=probs
    )
    model: Model = Model("m", lambda model, X, is_train: (X, lambda d: d))
    assert get_fit(model) is None
    set_fit(model, fit)
    copy: Model = Model("m", lambda model, X, is_train: (X, lambda d: d))
    copy.from_bytes(model.to_bytes())
    loaded = get_fit(copy)
    assert loaded is not None and loaded.method == "mahalanobis"
    assert numpy.array_equal(loaded.reference, fit.reference)
    assert loaded.means is not None and numpy.allclose(loaded.means, fit.means)
    with pytest.raises(ValueError, match="unknown method"):
        ScopeFit.from_dict({"method": "guess", "reference": [0.0]})
    with pytest.raises(ValueError, match="unknown out-of-scope method"):
        fit_scope(
            "guess", train_vectors=X, train_labels=y, n_labels=3, ref_vectors=X, ref_probs=probs
        )


def test_temperature_scaling_recovers_the_temperature_of_the_data() -> None:
    rng = numpy.random.default_rng(0)
    logits = rng.normal(0, 3, (4000, 5))
    true = numpy.exp(logits / 2.5)
    true /= true.sum(1, keepdims=True)
    gold = numpy.asarray([rng.choice(5, p=row) for row in true])
    over_confident = numpy.exp(logits) / numpy.exp(logits).sum(1, keepdims=True)
    temperature = fit_temperature(over_confident, gold)
    assert temperature == pytest.approx(2.5, rel=0.1)
    scaled = scale_probs(over_confident, temperature)
    assert numpy.allclose(scaled.sum(1), 1.0, atol=1e-5)
    assert (scaled.argmax(1) == over_confident.argmax(1)).all()
    assert numpy.allclose(scaled, true, atol=0.05)


def test_extend_fit_adds_a_labels_examples_as_training_docs() -> None:
    X, y, _ = clusters()
    probs = numpy.full((len(X), 3), 1 / 3, dtype="f")
    new = numpy.asarray([[50.0, 0, 0, 0, 0], [52.0, 1, 0, 0, 0]], dtype="f")
    for method in ("knn", "mahalanobis"):
        fit = fit_scope(
            method, train_vectors=X, train_labels=y, n_labels=3, ref_vectors=X, ref_probs=probs
        )
        extended = extend_fit(fit, new, 2)
        assert extended is not fit and (extended.reference == fit.reference).all()
        if method == "knn":  # the training docs' labels, then the new label's
            assert extended.labels is not None
            assert extended.labels.tolist() == y.tolist() + [2.0, 2.0]
            with pytest.raises(ValueError, match="new label's index"):
                extend_fit(fit, new)
        # the examples score as in scope as the training docs do, not before
        assert raw_scores(extended, method, new, probs[:2]).max() < fit.reference.max()
        assert raw_scores(fit, method, new, probs[:2]).min() > fit.reference.max()
    fit = fit_scope(
        "max_prob",
        train_vectors=None,
        train_labels=None,
        n_labels=3,
        ref_vectors=None,
        ref_probs=probs,
    )
    assert extend_fit(fit, new) is fit


def test_a_saved_knn_fit_keeps_its_labels_and_checks_them() -> None:
    X, y, _ = clusters()
    probs = numpy.full((len(X), 3), 1 / 3, dtype="f")
    fit = fit_scope(
        "knn", train_vectors=X, train_labels=y, n_labels=3, ref_vectors=X, ref_probs=probs
    )
    loaded = ScopeFit.from_dict(fit.to_dict())
    assert loaded.labels is not None and loaded.labels.tolist() == y.tolist()
    bad = {**fit.to_dict(), "labels": numpy.zeros(len(X) - 1, dtype="f")}
    with pytest.raises(ValueError, match="labels that do not match"):
        ScopeFit.from_dict(bad)
    # a fit saved before the labels were kept loads without them
    old = {key: value for key, value in fit.to_dict().items() if key != "labels"}
    assert ScopeFit.from_dict(old).labels is None


def test_a_reference_score_a_few_ulps_off_keeps_its_confidence() -> None:
    fit = ScopeFit(method="knn", reference=numpy.asarray([0.1, 0.2, 7075.3447], dtype="f"))
    ref = fit.reference.astype("float64")
    # the same docs scored again in another batch (fp32 noise) keep their confidence
    again = confidence(fit, "knn", ref * (1 + 3e-7))
    assert again.tolist() == pytest.approx(confidence(fit, "knn", ref).tolist())
    assert again.tolist() == pytest.approx([1.0, 2 / 3, 1 / 3])
    # a score clearly above a reference is less in scope
    assert confidence(fit, "knn", ref * (1 + 1e-3)).tolist() == pytest.approx([2 / 3, 1 / 3, 0.0])


@pytest.mark.parametrize(
    "method,k,reach",
    [("knn", 1, False), ("knn", 3, False), ("knn", 2, True), ("mahalanobis", 1, False)],
)
def test_a_docs_score_does_not_depend_on_its_batch(method: str, k: int, reach: bool) -> None:
    """The same docs scored all at once and in batches of 1, 3 and 7 get the
    same bits: the BLAS tiles (and threads) each product its own way, which
    moved a knn score by an ulp on a Ray actor, across a reference score."""
    X, y, centres = clusters(n=600, width=48)
    docs = (centres[y[:64]] + numpy.random.default_rng(1).normal(0, 1, (64, 48))).astype("f")
    probs = numpy.full((len(docs), 3), 1 / 3, dtype="f")
    fit = fit_scope(
        method, train_vectors=X, train_labels=y, n_labels=3, ref_vectors=docs, ref_probs=probs, k=k
    )
    if reach:  # a new label's few examples, reaching farther
        fit = extend_fit(fit, docs[:3] + 0.5, 2, reach=2.5)
    scores = raw_scores(fit, method, docs, probs)
    for size in (1, 3, 7):
        batches = [
            raw_scores(fit, method, docs[i : i + size], probs[i : i + size])
            for i in range(0, len(docs), size)
        ]
        assert numpy.concatenate(batches).tobytes() == scores.tobytes(), size
        again = [confidence(fit, method, raw) for raw in batches]
        assert numpy.concatenate(again).tobytes() == confidence(fit, method, scores).tobytes()
    assert raw_scores(fit, method, docs[:0], probs[:0]).shape == (0,)


# Scores the same docs on 1 and on 2 threads of numpy's OpenBLAS and prints
# whether their bytes are equal.
SCORE_ON_THREADS = """
from spacy_bert_pipes.models.heads.scope import fit_scope, knn_scores, mahalanobis_scores
rng = numpy.random.default_rng(0)
X = rng.normal(0, 1, (2000, 48)).astype("f")
y = numpy.arange(2000) % 7
docs = rng.normal(0, 1, (64, 48)).astype("f")
probs = numpy.full((64, 7), 1 / 7, dtype="f")
fits = [
    fit_scope(method, train_vectors=X, train_labels=y, n_labels=7, ref_vectors=docs,
              ref_probs=probs)
    for method in ("knn", "mahalanobis")
]
scores = []
for threads in (1, 2):
    set_threads(threads)
    knn, gauss = fits
    found = [knn_scores(docs, knn.vectors, 1), knn_scores(docs, knn.vectors, 3, 1 + knn.labels)]
    found.append(mahalanobis_scores(docs, gauss.means, gauss.precision))
    scores.append(numpy.concatenate(found).tobytes())
print(scores[0] == scores[1])
"""


@needs_openblas
def test_a_docs_score_does_not_depend_on_the_blas_threads() -> None:
    """OpenBLAS's AVX2 kernels round a float32 product otherwise on 1 thread
    than on 2 (`blas_threads`): the scores must not see it."""
    assert on_avx2_kernels(SCORE_ON_THREADS) == "True"
