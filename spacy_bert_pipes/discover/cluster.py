"""Clusters among unit vectors: K of them by k-means, K from the data
(`choose_k`) or given (`kmeans_clusters`), or as many as the density holds,
scattered docs left out (`density_clusters`); `cluster_pool` picks by name.

`density_clusters` is HDBSCAN* (Campello, Moulavi and Sander, 2013; as McInnes
and Healy's `hdbscan` computes it) over a graph of k nearest neighbours instead
of all pairs, so that what follows the neighbour search grows with n * k, not
n²:

1. `knn_graph`: each vector's k most similar others (cosine), exactly, by
   faiss when it is installed (the `similar` extra), else numpy matrix
   products in blocks of rows; memory (block, n) at a time.
2. Core distances: the cosine distance (1 - cos) to a doc's `min_samples`-th
   neighbour. An edge's mutual reachability distance is the largest of its
   length and its two ends' core distances: docs in sparse regions are far
   from everything.
3. The minimum spanning forest of the graph (Kruskal), its trees joined at an
   infinite distance: a single-linkage tree.
4. The condensed tree: a split where both sides hold `min_cluster_size` docs
   makes two clusters; a smaller side is docs falling out of their cluster.
5. Excess of mass: the clusters kept for their stability (the root never); a
   doc under no kept cluster is noise (-1).

`kmeans_clusters` is k-means (`kmeans`, numpy alone) for K clusters, K given
or found by `kmeans.choose_k` (the silhouette of a sample; see that module).
"""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy

from ..progress import progress_bar
from .kmeans import SILHOUETTE_SAMPLE, choose_k, cluster_silhouettes, is_flat, kmeans

NOISE = -1
# Rows of the numpy neighbour search per matrix product: (BLOCK, n) float32
# scores and their (BLOCK, n) int64 partition, 300 MB at n = 100,000.
BLOCK = 256
# Neighbours per doc in the graph: at least this many, and at least min_samples.
GRAPH_K = 15
# `--clusters`: K by silhouette (k-means), or as many as the density holds
AUTO, DENSITY = "auto", "density"
DEFAULT_CLUSTERS = AUTO

# A cluster whose docs' mean silhouette is below this is "loose": its docs are
# hardly nearer each other than the next cluster's, scattered requests k-means
# had to put somewhere rather than one intent. On the frozen vectors' pools of
# bench/discover_review.py, the clusters of new intents were at 0.1 or above
# but for a few of two intents together, and most foreign ones below.
LOOSE_SILHOUETTE = 0.1


def knn_graph(
    unit: numpy.ndarray, k: int, *, progress: bool = False
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Each row's k most similar other rows, the most similar first (ties: the
    lower row first).

    unit (numpy.ndarray): Unit-length rows. (n, width)
    k (int): Neighbours per row; at most n - 1 are found.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray]): The neighbours' rows (n, k)
        and their cosines (n, k).
    """
    n = len(unit)
    k = min(k, n - 1)
    if k < 1:
        return numpy.zeros((n, 0), dtype="int64"), numpy.zeros((n, 0), dtype="float32")
    try:
        import faiss  # noqa: F401
    except ImportError:
        rows, cosines = _numpy_knn(unit, k + 1, progress)
    else:
        rows, cosines = _faiss_knn(unit, k + 1, progress)
    # drop each row itself (or, among exact duplicates, one extra neighbour)
    own = rows == numpy.arange(n)[:, None]
    keep = ~own
    keep[~own.any(axis=1), -1] = False
    rows = rows[keep].reshape(n, k)
    cosines = cosines[keep].reshape(n, k)
    order = numpy.lexsort((rows, -cosines), axis=-1)
    return numpy.take_along_axis(rows, order, 1), numpy.take_along_axis(cosines, order, 1)


def _faiss_knn(unit: numpy.ndarray, k: int, progress: bool) -> Tuple[numpy.ndarray, numpy.ndarray]:
    import faiss

    index = faiss.IndexFlatIP(unit.shape[1])
    index.add(unit)
    rows = numpy.empty((len(unit), k), dtype="int64")
    cosines = numpy.empty((len(unit), k), dtype="float32")
    step = 16 * BLOCK
    with progress_bar(len(unit), 0, unit=" docs", desc="Neighbours", disable=not progress) as bar:
        for start in range(0, len(unit), step):
            scores, found = index.search(unit[start : start + step], k)
            cosines[start : start + step], rows[start : start + step] = scores, found
            bar.update(len(found))
    return rows, cosines


def _numpy_knn(unit: numpy.ndarray, k: int, progress: bool) -> Tuple[numpy.ndarray, numpy.ndarray]:
    n = len(unit)
    rows = numpy.empty((n, k), dtype="int64")
    cosines = numpy.empty((n, k), dtype="float32")
    with progress_bar(n, 0, unit=" docs", desc="Neighbours", disable=not progress) as bar:
        for start in range(0, n, BLOCK):
            scores = unit[start : start + BLOCK] @ unit.T  # (block, n)
            top = numpy.argpartition(scores, n - k, axis=1)[:, n - k :]  # (block, k)
            rows[start : start + BLOCK] = top
            cosines[start : start + BLOCK] = numpy.take_along_axis(scores, top, 1)
            bar.update(len(top))
    return rows, cosines


def density_clusters(
    unit: numpy.ndarray,
    *,
    min_cluster_size: int = 5,
    min_samples: Optional[int] = None,
    progress: bool = False,
) -> numpy.ndarray:
    """HDBSCAN* over the k-nearest-neighbour graph of unit vectors (see the
    module's docstring). Deterministic: the same vectors give the same labels.

    unit (numpy.ndarray): Unit-length rows. (n, width)
    min_cluster_size (int): The fewest docs a cluster holds.
    min_samples (Optional[int]): The neighbour that sets a doc's core distance
        (default: min_cluster_size): larger leaves more docs as noise.
    RETURNS (numpy.ndarray): A cluster per row, 0, 1, ... in order of each
        cluster's first row, or -1 (noise). (n,)
    """
    if min_cluster_size < 2:
        raise ValueError(f"min_cluster_size must be at least 2: {min_cluster_size}")
    n = len(unit)
    if n < min_cluster_size:
        return numpy.full(n, NOISE, dtype="int64")
    samples = min(min_samples or min_cluster_size, n - 1)
    rows, cosines = knn_graph(unit, max(GRAPH_K, samples), progress=progress)
    distances = numpy.maximum(1.0 - cosines.astype("float64"), 0.0)  # (n, k)
    core = distances[:, samples - 1]  # (n,)
    sources = numpy.repeat(numpy.arange(n), rows.shape[1])
    targets = rows.ravel()
    reach = numpy.maximum(distances.ravel(), numpy.maximum(core[sources], core[targets]))
    merges = _single_linkage(n, sources, targets, reach)
    tree = _condense(merges, n, min_cluster_size)
    chosen = _excess_of_mass(tree, n)
    return _labels(tree, chosen, n)


def _single_linkage(
    n: int, sources: numpy.ndarray, targets: numpy.ndarray, weights: numpy.ndarray
) -> List[Tuple[int, int, float, int]]:
    """The merges (left node, right node, distance, size) of the minimum
    spanning forest (Kruskal), in order; node n + i is the i-th merge. Trees
    left apart are joined at an infinite distance."""
    order = numpy.lexsort((targets, sources, weights))  # ties: in row order
    parent = list(range(2 * n - 1))
    size = [1] * (2 * n - 1)

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    merges: List[Tuple[int, int, float, int]] = []
    for a, b, w in zip(sources[order].tolist(), targets[order].tolist(), weights[order].tolist()):
        ra, rb = root(a), root(b)
        if ra == rb:
            continue
        node = n + len(merges)
        parent[ra] = parent[rb] = node
        size[node] = size[ra] + size[rb]
        merges.append((ra, rb, w, size[node]))
        if len(merges) == n - 1:
            break
    roots = sorted({root(x) for x in range(n)})
    while len(roots) > 1:  # a forest: its trees meet at infinity
        ra, rb = roots[0], roots[1]
        node = n + len(merges)
        parent[ra] = parent[rb] = node
        size[node] = size[ra] + size[rb]
        merges.append((ra, rb, float("inf"), size[node]))
        roots = [node, *roots[2:]]
    return merges


def _condense(
    merges: List[Tuple[int, int, float, int]], n: int, min_cluster_size: int
) -> List[Tuple[int, int, float, int]]:
    """The condensed tree: (parent cluster, child, lambda, child size) rows, a
    child below n being a doc that falls out; clusters are numbered from n (the
    root) in the order they appear. lambda = 1 / distance."""
    if not merges:
        return []

    def size_of(node: int) -> int:
        return 1 if node < n else merges[node - n][3]

    def docs_under(node: int) -> List[int]:
        out, stack = [], [node]
        while stack:
            x = stack.pop()
            if x < n:
                out.append(x)
            else:
                stack.extend(merges[x - n][:2])
        return out

    top = n + len(merges) - 1
    relabel: Dict[int, int] = {top: n}
    next_label = n + 1
    tree: List[Tuple[int, int, float, int]] = []
    stack = [top]
    while stack:
        node = stack.pop()
        left, right, distance, _ = merges[node - n]
        lam = 1.0 / distance if distance > 0 else float("inf")
        parent = relabel[node]
        if size_of(left) >= min_cluster_size and size_of(right) >= min_cluster_size:
            for child in (left, right):  # a true split: two new clusters
                relabel[child] = next_label
                tree.append((parent, next_label, lam, size_of(child)))
                next_label += 1
                stack.append(child)
            continue
        for child in (left, right):
            if size_of(child) >= min_cluster_size:
                relabel[child] = parent  # the cluster goes on, smaller
                stack.append(child)
            else:
                tree.extend((parent, doc, lam, 1) for doc in docs_under(child))
    return tree


def _excess_of_mass(tree: List[Tuple[int, int, float, int]], n: int) -> List[int]:
    """The clusters of greatest total stability, none inside another; the root
    is not one (a single cluster of everything says nothing)."""
    birth: Dict[int, float] = {n: 0.0}
    for _, child, lam, _ in tree:
        if child >= n:
            birth[child] = lam
    stability = {c: 0.0 for c in birth}
    children: Dict[int, List[int]] = {c: [] for c in birth}
    for parent, child, lam, size in tree:
        lam = min(lam, _LAMBDA_CAP)
        stability[parent] += (lam - min(birth[parent], _LAMBDA_CAP)) * size
        if child >= n:
            children[parent].append(child)
    chosen = {c: False for c in birth}
    # children are numbered after their parents: the leaves first
    for c in sorted(birth, reverse=True):
        if c == n:
            continue
        below = sum(stability[child] for child in children[c])
        if children[c] and below > stability[c]:
            stability[c] = below
        else:
            chosen[c] = True
            stack = list(children[c])
            while stack:
                x = stack.pop()
                chosen[x] = False
                stack.extend(children[x])
    return sorted(c for c, kept in chosen.items() if kept)


# Exact duplicates are at distance 0 (lambda infinite): their stability counts
# them at this lambda (a cosine distance of 1e-9).
_LAMBDA_CAP = 1e9


def _labels(tree: List[Tuple[int, int, float, int]], chosen: List[int], n: int) -> numpy.ndarray:
    """Each doc's kept cluster (its nearest kept ancestor in the condensed
    tree), numbered by first doc, or -1."""
    parent_of: Dict[int, int] = {child: parent for parent, child, _, _ in tree}
    kept = set(chosen)
    labels = numpy.full(n, NOISE, dtype="int64")
    cache: Dict[int, int] = {}
    for doc in range(n):
        path, node, found = [], parent_of.get(doc), NOISE
        while node is not None:
            if node in cache:
                found = cache[node]
                break
            path.append(node)
            if node in kept:
                found = node
                break
            node = parent_of.get(node)
        for x in path:
            cache[x] = found
        labels[doc] = found
    return renumber(labels)


def renumber(labels: numpy.ndarray) -> numpy.ndarray:
    """Clusters numbered 0, 1, ... in order of their first row; -1 stays."""
    out = numpy.full(len(labels), NOISE, dtype="int64")
    numbers: Dict[int, int] = {}
    for row, label in enumerate(labels.tolist()):
        if label != NOISE:
            out[row] = numbers.setdefault(label, len(numbers))
    return out


def kmeans_clusters(
    unit: numpy.ndarray,
    n_clusters: int,
    *,
    min_cluster_size: int = 1,
    seed: int = 0,
    progress: bool = False,
) -> numpy.ndarray:
    """K clusters of unit vectors by k-means (`kmeans.kmeans`); a cluster with
    fewer than min_cluster_size docs becomes noise (-1).

    progress (bool): Show a bar while k-means runs (one step: it says what
        runs and for how long).
    RETURNS (numpy.ndarray): A cluster per row, numbered as `renumber`. (n,)
    """
    if n_clusters < 1:
        raise ValueError(f"the number of clusters must be at least 1: {n_clusters}")
    if n_clusters > len(unit):
        raise ValueError(f"{n_clusters} clusters asked of {len(unit)} docs")
    desc = f"k-means, {n_clusters} clusters of {len(unit):,} docs"
    with progress_bar(1, 0, unit=" fit", desc=desc, disable=not progress) as bar:
        labels = kmeans(unit, n_clusters, seed, n_init=3)
        bar.update(1)
    counts = numpy.bincount(labels, minlength=n_clusters)
    labels[counts[labels] < min_cluster_size] = NOISE
    return renumber(labels)


def cluster_pool(
    unit: numpy.ndarray,
    clusters: Union[int, str] = DEFAULT_CLUSTERS,
    *,
    min_cluster_size: int = 5,
    seed: int = 0,
    progress: bool = False,
) -> Tuple[numpy.ndarray, Dict[str, Any]]:
    """The pool's clusters by the method `clusters` names: "auto" (k-means, K
    by `choose_k`), "density" (`density_clusters`) or K (k-means).

    RETURNS (Tuple[numpy.ndarray, Dict[str, Any]]): A cluster per row (-1:
        none), and the method for the summary: {method, k, silhouettes, flat
        (`auto`'s silhouette rose to the largest K tried) and then a warning}.
    """
    clusters = parse_clusters(clusters)
    if clusters == DENSITY:
        labels = density_clusters(unit, min_cluster_size=min_cluster_size, progress=progress)
        return labels, {"method": f"HDBSCAN* over a {GRAPH_K}-nearest-neighbour graph"}
    curve: Dict[int, float] = {}
    warning = None
    flat = False
    if clusters == AUTO:
        k, curve = choose_k(unit, min_cluster_size=min_cluster_size, seed=seed, progress=progress)
        sampled = min(len(unit), SILHOUETTE_SAMPLE)
        method = f"k-means, K = {k} by the cosine silhouette of {sampled:,} docs"
        flat = is_flat(curve)
        if flat:
            warning = (
                f"the silhouette has no peak below the largest K tried ({max(curve)}): K = "
                f"{k} is the curve's knee; look at 'silhouettes' in "
                "summary.json and at the review's merge proposals, or give --clusters K"
            )
    else:
        k = int(clusters)
        method = f"k-means, {k} clusters"
    labels = kmeans_clusters(
        unit, k, min_cluster_size=min_cluster_size, seed=seed, progress=progress
    )
    found: Dict[str, Any] = {
        "method": method,
        "k": k,
        "silhouettes": {str(x): round(v, 4) for x, v in curve.items()},
        "flat": flat,
    }
    if warning is not None:
        found["warning"] = warning
    return labels, found


def parse_clusters(value: Union[int, str]) -> Union[int, str]:
    """`--clusters` checked: "auto", "density", or a whole number K >= 1."""
    if isinstance(value, str) and value in (AUTO, DENSITY):
        return value
    try:
        k = int(value)
    except (TypeError, ValueError):
        k = 0
    if k < 1 or str(value).strip() != str(k):
        raise ValueError(
            f"--clusters must be '{AUTO}' (k-means, K from the data), '{DENSITY}' (as many as "
            f"the density holds, scattered docs left out) or a number of clusters: {value!r}"
        )
    return k


def leave_out_loose(
    unit: numpy.ndarray, labels: numpy.ndarray, *, flat: bool, seed: int = 0
) -> Tuple[numpy.ndarray, Dict[int, float], List[int]]:
    """Each cluster's silhouette (`kmeans.cluster_silhouettes`) and, when the
    silhouette curve is `flat`, the loose clusters (below LOOSE_SILHOUETTE)
    left out: their docs become -1.

    labels (numpy.ndarray): Each row's cluster, or -1. (n,)
    RETURNS (Tuple[numpy.ndarray, Dict[int, float], List[int]]): The labels
        (a copy, the loose ones -1 when flat), each cluster's silhouette by
        its number in `labels` as given, and the clusters left out.
    """
    silhouettes = cluster_silhouettes(unit, labels, seed=seed) if len(labels) else {}
    if not flat:
        return labels.copy(), silhouettes, []
    loose = sorted(c for c, value in silhouettes.items() if value < LOOSE_SILHOUETTE)
    return numpy.where(numpy.isin(labels, loose), NOISE, labels), silhouettes, loose
