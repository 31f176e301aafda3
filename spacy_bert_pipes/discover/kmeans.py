"""k-means on unit vectors and the number of clusters K from the data, in
numpy alone: `discover`'s default (`--clusters auto`) needs no extra package.

- `kmeans`: seeded k-means++ seeding (Arthur and Vassilvitskii, 2007, with
  2 + log K candidates per centre, as scikit-learn's greedy variant), then
  Lloyd's iterations until at most 0.1% of the docs change cluster; the best of `n_init`
  runs by inertia. Squared Euclidean distances, which on unit vectors order
  as cosines do.
- `silhouettes`: the mean cosine silhouette (Rousseeuw, 1987) of several
  labellings of one sample, its (n, n) distances computed once.
- `choose_k`: on a seeded sample of at most SILHOUETTE_SAMPLE docs, k-means
  for each K of a geometric grid (`k_grid`), scored by the silhouette; K is
  `smallest_near_best`: the smallest K whose silhouette is within 5% of the
  best. On a curve with a peak that is the peak (or a K just before it). On
  one with no peak below the grid's end, which pools of short texts among
  many scattered foreign requests give (0.098 to 0.121 from K = 5 to 198), it
  is the curve's knee (`knee`), where the old rule (the end of the best's
  plateau) ran to the grid's end: 128 clusters for 8 new intents. A reviewer
  merges over-split clusters (the review file proposes the merges), where
  splitting a mixed one means reading it all.
"""

from typing import Dict, List, Optional, Tuple

import numpy

from ..progress import progress_bar

# `choose_k`: the docs it samples, its grid's step, its tolerance and largest K
SILHOUETTE_SAMPLE = 4000
K_STEP = 1.15
K_TOLERANCE = 0.05
MAX_CLUSTERS = 200
# Lloyd's iterations at most per run; they stop when at most this share of
# the rows changed cluster (scikit-learn stops on a tolerance of the centres)
MAX_ITER = 100
MOVED_SHARE = 0.001
# Rows per distance block: (BLOCK, K) float32 at a time.
BLOCK = 8192


def kmeans(
    unit: numpy.ndarray, n_clusters: int, seed: int = 0, *, n_init: int = 3
) -> numpy.ndarray:
    """K clusters of unit vectors: the best of n_init seeded k-means++ and
    Lloyd runs (see the module's docstring).

    unit (numpy.ndarray): Unit-length rows. (n, width)
    n_clusters (int): K, at most n.
    RETURNS (numpy.ndarray): Each row's cluster, 0 .. K - 1. (n,)
    """
    x = numpy.ascontiguousarray(unit, dtype="float32")
    rng = numpy.random.default_rng(seed)
    best: Optional[Tuple[float, numpy.ndarray]] = None
    for _ in range(n_init):
        labels, inertia = _lloyd(x, _plus_plus(x, n_clusters, rng), rng)
        if best is None or inertia < best[0]:
            best = (inertia, labels)
    assert best is not None
    return best[1]


def _plus_plus(x: numpy.ndarray, k: int, rng: numpy.random.Generator) -> numpy.ndarray:
    """k-means++ seeding, greedy: of 2 + log(k) candidates drawn by squared
    distance, the one that lowers the total most. (k, width)"""
    n = len(x)
    trials = 2 + int(numpy.log(k))
    centers = numpy.empty((k, x.shape[1]), dtype="float32")
    centers[0] = x[rng.integers(n)]
    closest = numpy.maximum(2.0 - 2.0 * (x @ centers[0]), 0.0)  # (n,)
    for c in range(1, k):
        total = float(closest.sum())
        if total <= 0:  # fewer distinct rows than k: any row
            centers[c] = x[rng.integers(n)]
            continue
        picks = numpy.searchsorted(numpy.cumsum(closest), rng.random(trials) * total)
        picks = numpy.minimum(picks, n - 1)
        # (trials, n): each candidate's distances, kept where it is nearer
        candidate = numpy.minimum(closest, numpy.maximum(2.0 - 2.0 * (x[picks] @ x.T), 0.0))
        chosen = int(numpy.argmin(candidate.sum(axis=1)))
        centers[c] = x[picks[chosen]]
        closest = candidate[chosen]
    return centers


def _assign(x: numpy.ndarray, centers: numpy.ndarray) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Each row's nearest centre and its squared distance."""
    labels = numpy.empty(len(x), dtype="int64")
    distances = numpy.empty(len(x), dtype="float32")
    norms = (centers * centers).sum(axis=1)  # (k,)
    for start in range(0, len(x), BLOCK):
        d = norms[None, :] - 2.0 * (x[start : start + BLOCK] @ centers.T)  # (block, k)
        labels[start : start + BLOCK] = d.argmin(axis=1)
        distances[start : start + BLOCK] = d[numpy.arange(len(d)), labels[start : start + BLOCK]]
    return labels, numpy.maximum(distances + 1.0, 0.0)  # rows are unit: |x|^2 = 1


def _lloyd(
    x: numpy.ndarray, centers: numpy.ndarray, rng: numpy.random.Generator
) -> Tuple[numpy.ndarray, float]:
    k = len(centers)
    labels, distances = _assign(x, centers)
    for _ in range(MAX_ITER):
        counts = numpy.bincount(labels, minlength=k)
        sums = numpy.zeros_like(centers)
        numpy.add.at(sums, labels, x)
        empty = numpy.flatnonzero(counts == 0)
        centers = sums / numpy.maximum(counts, 1)[:, None]
        if len(empty):  # an empty cluster takes the rows farthest from theirs
            far = numpy.argsort(-distances, kind="stable")[: len(empty)]
            centers[empty] = x[far]
        new, distances = _assign(x, centers)
        moved = int((new != labels).sum())
        labels = new
        if moved <= len(x) * MOVED_SHARE and not len(empty):
            break
    return labels, float(distances.sum())


def silhouettes(unit: numpy.ndarray, labellings: List[numpy.ndarray]) -> List[float]:
    """The mean cosine silhouette of each labelling of the same rows; a doc
    alone in its cluster scores 0 (as scikit-learn's `silhouette_score`)."""
    distance = _distances(unit)
    return [float(_doc_silhouettes(distance, labels).mean()) for labels in labellings]


def cluster_silhouettes(
    unit: numpy.ndarray,
    labels: numpy.ndarray,
    *,
    sample: int = SILHOUETTE_SAMPLE,
    seed: int = 0,
) -> Dict[int, float]:
    """Each cluster's silhouette: the mean cosine silhouette of its docs, on
    a seeded sample of at most `sample` docs of the clustered ones (all of
    them in a smaller pool). A cluster none of whose docs were sampled is
    left out.

    unit (numpy.ndarray): Unit-length rows. (n, width)
    labels (numpy.ndarray): Each row's cluster, 0 .. K - 1, or -1 (in none:
        left out of the silhouettes). (n,)
    RETURNS (Dict[int, float]): cluster -> its silhouette.
    """
    rows = numpy.flatnonzero(labels >= 0)
    if len(rows) > sample:
        rng = numpy.random.default_rng(seed)
        rows = numpy.sort(rng.choice(rows, size=sample, replace=False))
    if len(rows) == 0:
        return {}
    part = labels[rows]
    numbers, dense = numpy.unique(part, return_inverse=True)
    scores = _doc_silhouettes(_distances(unit[rows]), dense.reshape(-1))
    return {
        int(c): float(scores[dense.reshape(-1) == i].mean()) for i, c in enumerate(numbers.tolist())
    }


def _distances(unit: numpy.ndarray) -> numpy.ndarray:
    """Cosine distances between unit rows, 0 on the diagonal. (n, n)"""
    distance = numpy.maximum(1.0 - unit @ unit.T, 0.0).astype("float32")  # (n, n)
    numpy.fill_diagonal(distance, 0.0)
    return distance


def _doc_silhouettes(distance: numpy.ndarray, labels: numpy.ndarray) -> numpy.ndarray:
    """Each doc's silhouette under a labelling 0 .. K - 1; a doc alone in its
    cluster scores 0 (as scikit-learn's `silhouette_samples`). (n,)"""
    if int(labels.max()) < 1:  # one cluster: no other to be nearer
        return numpy.zeros(len(labels), dtype="float32")
    k = int(labels.max()) + 1
    onehot = numpy.zeros((len(labels), k), dtype="float32")
    onehot[numpy.arange(len(labels)), labels] = 1.0
    sums = distance @ onehot  # (n, k): each doc's total distance to each cluster
    counts = onehot.sum(axis=0)  # (k,)
    own = counts[labels]
    a = sums[numpy.arange(len(labels)), labels] / numpy.maximum(own - 1, 1)
    means = sums / numpy.maximum(counts, 1)[None, :]
    means[numpy.arange(len(labels)), labels] = numpy.inf
    means[:, counts == 0] = numpy.inf
    b = means.min(axis=1)
    s = (b - a) / numpy.maximum(numpy.maximum(a, b), 1e-12)
    s[own <= 1] = 0.0
    return s


def choose_k(
    unit: numpy.ndarray,
    *,
    min_cluster_size: int = 5,
    max_clusters: int = MAX_CLUSTERS,
    sample: int = SILHOUETTE_SAMPLE,
    seed: int = 0,
    progress: bool = False,
) -> Tuple[int, Dict[int, float]]:
    """The number of clusters the data holds, by the cosine silhouette of
    k-means on a sample (see the module's docstring).

    unit (numpy.ndarray): Unit-length rows. (n, width)
    min_cluster_size (int): The fewest docs of a cluster: K is at most the
        sample's size over it.
    max_clusters (int): The largest K tried.
    sample (int): The most docs the silhouettes are measured on (seeded).
    RETURNS (Tuple[int, Dict[int, float]]): K, and each K tried with its
        silhouette (empty when the sample is too small to split: K is 1).
    """
    if max_clusters < 2:
        raise ValueError(f"the most clusters must be at least 2: {max_clusters}")
    rng = numpy.random.default_rng(seed)
    rows = numpy.arange(len(unit))
    if len(rows) > sample:
        rows = numpy.sort(rng.choice(rows, size=sample, replace=False))
    part = numpy.ascontiguousarray(unit[rows], dtype="float32")
    top = min(max_clusters, len(part) // max(min_cluster_size, 1), len(part) - 1)
    grid = k_grid(top)
    labellings: List[numpy.ndarray] = []
    with progress_bar(len(grid), 0, unit=" K", desc="Choosing K", disable=not progress) as bar:
        for k in grid:
            labels = kmeans(part, k, seed, n_init=2)
            if len(numpy.unique(labels)) < k:  # no more distinct docs than that
                break
            labellings.append(labels)
            bar.update(1)
    if not labellings:
        return 1, {}
    curve = dict(zip(grid, silhouettes(part, labellings)))
    return smallest_near_best(curve), curve


def smallest_near_best(curve: Dict[int, float]) -> int:
    """K from the silhouette curve: the smallest K within K_TOLERANCE of the
    best (relative), when the curve has a peak; when it has none (it rose to
    the grid's end), its knee (`knee`). A flat curve says no K is much better
    than its neighbours: of near-equal K the smaller is shown, over-split
    clusters being what the review's merge proposals mend."""
    if is_flat(curve):
        return knee(curve)
    best = max(curve.values())
    floor = best - K_TOLERANCE * abs(best)
    return next(k for k in sorted(curve) if curve[k] >= floor)


def knee(curve: Dict[int, float]) -> int:
    """The knee of a rising curve (Satopaa et al.'s Kneedle, 2011): K and the
    silhouette each scaled to [0, 1] over the grid, the K where the scaled
    silhouette is farthest above the scaled K: past it, each cluster more
    buys less silhouette than the ones before."""
    grid = sorted(curve)
    if len(grid) < 3:  # no knee in two points: the best
        return max(grid, key=lambda k: (curve[k], -k))
    ks = numpy.asarray(grid, dtype="float64")
    values = numpy.asarray([curve[k] for k in grid], dtype="float64")
    span = max(float(values.max() - values.min()), 1e-12)
    scaled = (values - values.min()) / span - (ks - ks[0]) / max(ks[-1] - ks[0], 1.0)
    return grid[int(numpy.argmax(scaled))]


def is_flat(curve: Dict[int, float]) -> bool:
    """Whether the silhouette has no peak below the largest K tried: its best
    is the largest K's."""
    grid = sorted(curve)
    return len(grid) > 1 and curve[grid[-1]] >= max(curve.values())


def k_grid(top: int) -> List[int]:
    """K = 2, 3, ... up to `top`: each the larger of the last + 1 and K_STEP
    times the last."""
    grid: List[int] = []
    k = 2
    while k <= top:
        grid.append(k)
        k = max(k + 1, int(round(k * K_STEP)))
    return grid
