"""Out-of-scope scores and calibration of an exclusive classifier's probabilities.

An exclusive classifier spreads a softmax over the labels it knows, so a doc
that fits none of them still gets a top label. This module owns the math that
tells such docs apart and makes the probabilities honest; `bert_textcat` calls it.

Out-of-scope scores (higher: less like the training data), by `method`:
- "max_prob": one minus the top probability (after temperature scaling);
- "mahalanobis": the squared Mahalanobis distance of the doc's feature vector to
  the nearest class mean, under one covariance shared by all classes (Lee et
  al. 2018), fit on the in-scope training docs' vectors alone;
- "knn": one minus the cosine of the doc's vector with its k-th nearest
  training vector (Sun et al. 2022), also fit on in-scope docs alone; a
  remembered vector may carry a reach that divides its distances (a new label's
  few examples, `sample_reach`).
A raw score means little to a user, so `confidence` turns it into the share of
in-scope reference docs (held-out dev docs) whose score is at least as high: an
in-scope doc's confidence is about uniform on [0, 1], and abstaining below a
threshold t keeps about 1 - t of the in-scope docs, whatever the method. A
doc's raw score depends on its vector alone, not on the other docs of its batch
nor on the BLAS's threads (`fixed_order.py`): a score an ulp off would cross a
reference score now and then, and every engine of `annotate` must write the
same bytes.

Calibration: temperature scaling (Guo et al. 2017), one scalar T dividing the
log-probabilities, fit by likelihood on dev docs; the expected calibration
error (ECE) of the top probability in equal-width bins measures it
(`spacy_bert_pipes.scorers`).

The fitted state lives in the classifier model's attrs (`SCOPE_ATTR`,
`TEMPERATURE_ATTR`), so it is saved and loaded with the model. Plain numpy.
"""

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Literal, Optional, Tuple

import numpy
from thinc.api import Model

from .fixed_order import ROUNDING_SLACK, fixed_order_dots, fixed_order_quadratic, kth_smallest

ScopeMethod = Literal["max_prob", "mahalanobis", "knn"]
SCOPE_METHODS: Tuple[str, ...] = ("max_prob", "mahalanobis", "knn")
# model attrs that calibration writes (learned, kept when a pipeline loads)
SCOPE_ATTR = "scope"
TEMPERATURE_ATTR = "calibration_temperature"
# the smallest probability whose log is taken (fp32 softmax underflows to 0)
_TINY = 1e-30
# raw scores this close (relative; absolute below 1) are one score: the same doc
# in another batch differs by ~1e-6 in fp32
SCORE_TOLERANCE = 1e-5


@dataclass
class ScopeFit:
    """What `fit_scope` learned: the method's statistics and the reference scores.

    method (str): One of SCOPE_METHODS.
    means (numpy.ndarray): "mahalanobis": the class means. (n_labels, width)
    precision (numpy.ndarray): "mahalanobis": the inverse of the shared
        covariance. (width, width)
    vectors (numpy.ndarray): "knn": the training docs' unit vectors. (n, width)
    labels (numpy.ndarray): "knn": their label indices, when known (fits made
        before they were kept have none). (n,)
    reach (numpy.ndarray): "knn": what each vector's distances are divided by
        (None: 1 for all; `extend_fit`). (n,)
    k (int): "knn": which nearest neighbour's cosine counts.
    reference (numpy.ndarray): The raw scores of in-scope reference docs, sorted.
    """

    method: str
    reference: numpy.ndarray
    means: Optional[numpy.ndarray] = None
    precision: Optional[numpy.ndarray] = None
    vectors: Optional[numpy.ndarray] = None
    k: int = 1
    labels: Optional[numpy.ndarray] = None
    reach: Optional[numpy.ndarray] = None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "method": self.method,
            "reference": self.reference,
            "means": self.means,
            "precision": self.precision,
            "vectors": self.vectors,
            "k": self.k,
            "labels": self.labels,
            "reach": self.reach,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ScopeFit":
        method = data.get("method")
        if method not in SCOPE_METHODS:
            raise ValueError(f"saved out-of-scope fit has an unknown method {method!r}")

        def array(key: str) -> Optional[numpy.ndarray]:
            value = data.get(key)
            return None if value is None else numpy.asarray(value, dtype="f")

        reference = array("reference")
        if reference is None or reference.ndim != 1 or not len(reference):
            raise ValueError("saved out-of-scope fit has no reference scores")
        vectors, labels, reach = array("vectors"), array("labels"), array("reach")
        if labels is not None and (vectors is None or labels.shape != (len(vectors),)):
            raise ValueError("saved out-of-scope fit has labels that do not match its vectors")
        if reach is not None and (
            vectors is None or reach.shape != (len(vectors),) or not (reach > 0).all()
        ):
            raise ValueError("saved out-of-scope fit has a reach that does not match its vectors")
        return cls(
            method=str(method),
            reference=reference,
            means=array("means"),
            precision=array("precision"),
            vectors=vectors,
            k=int(data.get("k", 1)),
            labels=labels,
            reach=reach,
        )


def unit_rows(X: numpy.ndarray) -> numpy.ndarray:
    """X with each row scaled to length 1 (a zero row stays zero)."""
    return X / numpy.maximum(numpy.linalg.norm(X, axis=1, keepdims=True), 1e-12)


def fit_gaussian(
    X: numpy.ndarray, y: numpy.ndarray, n_labels: int, shrinkage: float = 0.01
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Class means and the precision of one covariance shared by all classes.

    X (numpy.ndarray): Feature vectors of in-scope training docs. (n, width)
    y (numpy.ndarray): Their label indices. (n,)
    n_labels (int): The number of labels (a label without docs gets no mean).
    shrinkage (float): The covariance is (1 - shrinkage) * S + shrinkage *
        mean(diag S) * I, so it can be inverted with few docs per class.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray]): means (n_present, width),
        precision (width, width).
    """
    X = numpy.asarray(X, dtype="float64")
    y = numpy.asarray(y, dtype="int64")
    if not len(X):
        raise ValueError("fitting class means needs at least one training doc")
    counts = numpy.bincount(y, minlength=n_labels)
    means = numpy.zeros((len(counts), X.shape[1]))
    numpy.add.at(means, y, X)
    present = counts > 0  # a label without training docs (described only) has no mean
    means[present] /= counts[present, None]
    centred = X - means[y]
    means = means[present]
    cov = centred.T @ centred / max(len(X) - len(means), 1)
    cov = (1 - shrinkage) * cov + shrinkage * numpy.trace(cov) / cov.shape[0] * numpy.eye(len(cov))
    precision = numpy.linalg.inv(cov)
    return means.astype("f"), ((precision + precision.T) / 2).astype("f")


def mahalanobis_scores(
    X: numpy.ndarray, means: numpy.ndarray, precision: numpy.ndarray
) -> numpy.ndarray:
    """The squared Mahalanobis distance of each row of X to its nearest class
    mean; a row's score depends on that row alone, not on the other rows nor
    on the BLAS's threads (`fixed_order`). (n,)"""
    X = numpy.asarray(X, dtype="float64")
    M = numpy.asarray(means, dtype="float64")
    P = numpy.asarray(precision, dtype="float64")
    # the screen: every class at once, in the BLAS's order (n, n_labels)
    XP = X @ P  # (n, width)
    d = (XP * X).sum(1)[:, None] - 2 * XP @ M.T + ((M @ P) * M).sum(1)[None, :]
    # its rounding (and that of the fixed-order forms) stays within a few
    # width * eps times (|x| + |m|) |P| (|x| + |m|) <= |P|_F (||x|| + ||m||)^2
    radius = numpy.linalg.norm(X, axis=1) + numpy.linalg.norm(M, axis=1).max()  # (n,)
    size = numpy.sqrt((P * P).sum())
    slack = 2 * ROUNDING_SLACK * X.shape[1] * numpy.finfo("float64").eps * size * radius**2
    rows, cols = numpy.nonzero(d <= (d.min(axis=1) + 2 * slack)[:, None])
    exact = fixed_order_quadratic(X[rows] - M[cols], P)
    return numpy.maximum(kth_smallest(len(X), rows, exact, 1), 0.0).astype("f")


def knn_scores(
    X: numpy.ndarray, vectors: numpy.ndarray, k: int, reach: Optional[numpy.ndarray] = None
) -> numpy.ndarray:
    """One minus the cosine of each row of X with its k-th most similar row of
    `vectors` (unit rows); with `reach` ((n_vectors,)), each distance to a row
    divided by that row's reach first. A row's score depends on that row alone,
    not on the other rows nor on the BLAS's threads (`fixed_order`). (n,)"""
    X = unit_rows(numpy.asarray(X, dtype="f"))
    n_vectors, k = len(vectors), min(k, len(vectors))
    # unit rows: the product's rounding (and that of 1 - cos) is within width * eps
    slack = ROUNDING_SLACK * X.shape[1] * float(numpy.finfo("f").eps)
    # the screen: the float32 product, in the BLAS's order, and the rows that
    # may be a doc's k-th nearest (n, n_vectors)
    sims = X @ vectors.T
    if reach is None:
        kth = numpy.partition(sims, n_vectors - k, axis=1)[:, n_vectors - k]
        rows, cols = numpy.nonzero(sims >= (kth - 2 * slack)[:, None])
    else:
        distances = (1.0 - sims) / reach[None, :]
        kth = numpy.partition(distances, k - 1, axis=1)[:, k - 1]
        slack /= float(reach.min())
        rows, cols = numpy.nonzero(distances <= (kth + 2 * slack)[:, None])
    # those rows' distances again, each summed in one fixed order
    exact = 1.0 - fixed_order_dots(X, rows, vectors, cols)
    if reach is not None:
        exact /= reach[cols]
    return kth_smallest(len(X), rows, exact, k).astype("f")


def sample_reach(fit: ScopeFit, n_examples: int, coverage: float, seed: int = 0) -> float:
    """How much farther a label's docs lie from a sample of `n_examples` of
    them than from all its other docs, measured on the known labels of a "knn"
    fit that keeps its docs' labels: the ratio of the `coverage` quantiles of
    the two nearest-doc distances over each label's docs outside a seeded
    random sample. Dividing the distances to a new label's `n_examples`
    examples by it lets that label's docs pass the threshold about as often as
    a known label's docs do. At least 1; 1 when no label has more than
    n_examples + 1 docs.
    """
    if fit.method != "knn" or fit.vectors is None or fit.labels is None:
        raise ValueError(
            "the reach of a few examples is measured on a knn fit that keeps its docs' "
            "labels: calibrate the router again (bert-pipes calibrate)"
        )
    if n_examples < 1 or not 0.0 < coverage <= 1.0:
        raise ValueError(f"need n_examples >= 1 and coverage in (0, 1]: {n_examples}, {coverage}")
    rng = numpy.random.default_rng(seed)
    to_sample: List[numpy.ndarray] = []
    to_rest: List[numpy.ndarray] = []
    labels = fit.labels.astype("int64")
    for label in numpy.unique(labels):
        docs = fit.vectors[labels == label]
        if len(docs) <= n_examples + 1:
            continue
        chosen = numpy.zeros(len(docs), dtype=bool)
        chosen[rng.choice(len(docs), n_examples, replace=False)] = True
        rest = docs[~chosen]
        sims = rest @ docs.T  # (n_rest, n_docs)
        sims[numpy.arange(len(rest)), numpy.flatnonzero(~chosen)] = -2.0  # not itself
        to_rest.append(1.0 - sims.max(axis=1))
        to_sample.append(1.0 - sims[:, chosen].max(axis=1))
    if not to_rest:
        return 1.0
    near = float(numpy.quantile(numpy.concatenate(to_rest), coverage))
    sampled = float(numpy.quantile(numpy.concatenate(to_sample), coverage))
    return max(1.0, sampled / max(near, 1e-6))


def raw_scores(
    fit: Optional[ScopeFit], method: str, X: Optional[numpy.ndarray], probs: numpy.ndarray
) -> numpy.ndarray:
    """Raw out-of-scope scores (higher: more out of scope). Without a fit of
    `method` (not calibrated yet), every method scores by the top probability."""
    if fit is None or fit.method != method or method == "max_prob" or X is None:
        return 1.0 - numpy.asarray(probs, dtype="f").max(axis=1)
    if method == "mahalanobis":
        assert fit.means is not None and fit.precision is not None
        return mahalanobis_scores(X, fit.means, fit.precision)
    assert fit.vectors is not None
    return knn_scores(X, fit.vectors, fit.k, fit.reach)


def confidence(fit: Optional[ScopeFit], method: str, raw: numpy.ndarray) -> numpy.ndarray:
    """In-scope confidence in [0, 1] from raw scores: the share of the fit's
    reference scores that are at least as high, a reference within fp32
    rounding (SCORE_TOLERANCE) counting as equal. Without a fit of `method`, the
    top probability (1 - raw max_prob score)."""
    if fit is None or fit.method != method:
        return numpy.clip(1.0 - raw, 0.0, 1.0).astype("f")
    ref = fit.reference
    raw = numpy.asarray(raw, dtype="float64")
    # a reference doc scored again in another batch comes back a few ulps off
    # (other padding, other kernels); with the threshold at its confidence, it
    # would flip to out of scope
    tolerance = SCORE_TOLERANCE * numpy.maximum(numpy.abs(raw), 1.0)
    below = numpy.searchsorted(ref, raw - tolerance, side="left")  # clearly below raw
    return (1.0 - below / len(ref)).astype("f")


def fit_scope(
    method: str,
    *,
    train_vectors: Optional[numpy.ndarray],
    train_labels: Optional[numpy.ndarray],
    n_labels: int,
    ref_vectors: Optional[numpy.ndarray],
    ref_probs: numpy.ndarray,
    k: int = 1,
) -> ScopeFit:
    """Fit an out-of-scope method on in-scope docs only.

    train_vectors, train_labels: the training docs' features and label indices
        (the feature methods' statistics come from them).
    ref_vectors, ref_probs: held-out in-scope docs (dev), whose scores become
        the reference of `confidence`; ref_probs already temperature-scaled.
    """
    if method not in SCOPE_METHODS:
        raise ValueError(f"unknown out-of-scope method {method!r}; choose one of {SCOPE_METHODS}")
    fit = ScopeFit(method=method, reference=numpy.zeros(1, dtype="f"), k=k)
    if method == "mahalanobis":
        assert train_vectors is not None and train_labels is not None
        fit.means, fit.precision = fit_gaussian(train_vectors, train_labels, n_labels)
    elif method == "knn":
        assert train_vectors is not None
        fit.vectors = unit_rows(numpy.asarray(train_vectors, dtype="f"))
        if train_labels is not None:
            fit.labels = numpy.asarray(train_labels, dtype="f")
    fit.reference = numpy.sort(raw_scores(fit, method, ref_vectors, ref_probs)).astype("f")
    return fit


def extend_fit(
    fit: ScopeFit, vectors: numpy.ndarray, label: Optional[int] = None, reach: float = 1.0
) -> ScopeFit:
    """The fit with a new label's example docs added, as if they had been
    training docs: "knn" keeps their vectors beside the training docs' (and
    `label`, the new label's index, beside their labels when it keeps them;
    `reach`, what their distances are divided by, `sample_reach`), and
    "mahalanobis" takes their mean as the new label's class mean (under the
    covariance fit before); "max_prob" has nothing to add. The reference
    scores stay: they are the in-scope dev docs' of the calibration.

    vectors (numpy.ndarray): The example docs' features. (n, width)
    RETURNS (ScopeFit): A new fit; `fit` is not changed.
    """
    X = numpy.asarray(vectors, dtype="f")
    if not len(X) or fit.method == "max_prob":
        return fit
    if fit.method == "knn":
        assert fit.vectors is not None
        labels = fit.labels
        if labels is not None:
            if label is None:
                raise ValueError("the fit keeps its docs' labels: give the new label's index")
            labels = numpy.concatenate([labels, numpy.full(len(X), float(label), dtype="f")])
        spans = fit.reach
        if spans is not None or reach != 1.0:
            before = spans if spans is not None else numpy.ones(len(fit.vectors), dtype="f")
            spans = numpy.concatenate([before, numpy.full(len(X), reach, dtype="f")])
        return replace(
            fit,
            vectors=numpy.concatenate([fit.vectors, unit_rows(X)]),
            labels=labels,
            reach=spans,
        )
    assert fit.means is not None
    return replace(fit, means=numpy.concatenate([fit.means, X.mean(axis=0, keepdims=True)]))


def get_fit(model: Model) -> Optional[ScopeFit]:
    """The out-of-scope fit saved in a classifier model's attrs, if any."""
    data = model.attrs.get(SCOPE_ATTR)
    return ScopeFit.from_dict(data) if data else None


def set_fit(model: Model, fit: ScopeFit) -> None:
    model.attrs[SCOPE_ATTR] = fit.to_dict()


# --- temperature scaling -----------------------------------------------------------


def log_probs(probs: numpy.ndarray) -> numpy.ndarray:
    return numpy.log(numpy.maximum(numpy.asarray(probs, dtype="float64"), _TINY))


def scale_probs(probs: numpy.ndarray, temperature: float) -> numpy.ndarray:
    """softmax(log(probs) / T): the same ranking, sharper (T < 1) or flatter."""
    if temperature == 1.0:
        return numpy.asarray(probs, dtype="f")
    z = log_probs(probs) / temperature
    z -= z.max(axis=1, keepdims=True)
    e = numpy.exp(z)
    return (e / e.sum(axis=1, keepdims=True)).astype("f")


def fit_temperature(probs: numpy.ndarray, gold: numpy.ndarray) -> float:
    """The temperature that minimizes the negative log-likelihood of the gold
    label indices (a golden-section search on log T in [1/20, 20])."""
    logp = log_probs(probs)
    rows = numpy.arange(len(gold))

    def nll(log_t: float) -> float:
        z = logp / numpy.exp(log_t)
        z -= z.max(axis=1, keepdims=True)
        lse = numpy.log(numpy.exp(z).sum(axis=1))
        return float((lse - z[rows, gold]).mean())

    low, high = numpy.log(1 / 20), numpy.log(20.0)
    ratio = (numpy.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = nll(a), nll(b)
    for _ in range(60):
        if fa < fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = nll(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = nll(b)
    return float(numpy.exp((low + high) / 2))


def get_temperature(model: Model) -> float:
    return float(model.attrs.get(TEMPERATURE_ATTR) or 1.0)
