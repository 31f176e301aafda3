"""Clustering unit vectors: the number of clusters from the data, noise left out."""

import sys
import warnings

import numpy
import pytest

from spacy_bert_pipes.discover import (
    NOISE,
    choose_k,
    cluster_pool,
    density_clusters,
    kmeans_clusters,
    knn_graph,
)
from spacy_bert_pipes.discover.cluster import parse_clusters, renumber
from spacy_bert_pipes.discover.kmeans import (
    cluster_silhouettes,
    k_grid,
    kmeans,
    silhouettes,
    smallest_near_best,
)


def blobs(seed: int = 0, n_blobs: int = 6, per_blob: int = 40, n_noise: int = 60) -> tuple:
    """Unit vectors: tight blobs around random directions, and scattered ones."""
    rng = numpy.random.default_rng(seed)
    width = 48
    centers = rng.normal(size=(n_blobs, width))
    parts = [c + 0.3 * rng.normal(size=(per_blob, width)) for c in centers]
    parts.append(rng.normal(size=(n_noise, width)))
    vectors = numpy.concatenate(parts)
    truth = numpy.repeat(numpy.arange(n_blobs + 1), [per_blob] * n_blobs + [n_noise])
    truth[truth == n_blobs] = NOISE
    unit = (vectors / numpy.linalg.norm(vectors, axis=1, keepdims=True)).astype("f")
    return unit, truth


def test_finds_the_blobs_and_leaves_the_scattered_docs_out() -> None:
    unit, truth = blobs()
    labels = density_clusters(unit, min_cluster_size=5)
    assert labels.max() + 1 == 6
    for blob in range(6):  # each blob is one cluster, whole
        assert len(set(labels[truth == blob].tolist())) == 1
        assert labels[truth == blob][0] != NOISE
    assert (labels[truth == NOISE] == NOISE).mean() > 0.8


def test_deterministic_and_nearly_independent_of_the_row_order() -> None:
    unit, _ = blobs(seed=1)
    first = density_clusters(unit, min_cluster_size=5)
    assert (density_clusters(unit, min_cluster_size=5) == first).all()
    order = numpy.random.default_rng(0).permutation(len(unit))
    again = density_clusters(unit[order], min_cluster_size=5)
    back = numpy.empty_like(again)
    back[order] = again
    # ties between equal distances may put a border doc elsewhere, no more
    assert (renumber(back) == first).mean() > 0.97


def test_numpy_and_faiss_find_the_same_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("faiss")
    unit, _ = blobs(seed=2)
    rows, cosines = knn_graph(unit, 7)
    assert rows.shape == (len(unit), 7)
    assert not (rows == numpy.arange(len(unit))[:, None]).any()  # never itself
    assert (numpy.diff(cosines, axis=1) <= 1e-6).all()  # the most similar first
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss fails: numpy
    rows_np, cosines_np = knn_graph(unit, 7)
    assert (rows_np == rows).mean() > 0.99
    numpy.testing.assert_allclose(cosines_np, cosines, atol=1e-5)


def test_small_pools_duplicates_and_disconnected_groups() -> None:
    assert (density_clusters(numpy.eye(3, dtype="f"), min_cluster_size=5) == NOISE).all()
    # exact duplicates (distance 0) and two groups with no edge between them
    a = numpy.tile(numpy.eye(4, dtype="f")[0], (20, 1))
    b = numpy.tile(numpy.eye(4, dtype="f")[1], (20, 1))
    labels = density_clusters(numpy.concatenate([a, b]), min_cluster_size=5)
    assert labels.tolist() == [0] * 20 + [1] * 20
    with pytest.raises(ValueError, match="at least 2"):
        density_clusters(a, min_cluster_size=1)


def test_kmeans_k_clusters_small_ones_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    # numpy alone: discover's default needs no extra package
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.cluster", None)
    unit, truth = blobs(seed=3, n_noise=0)
    labels = kmeans_clusters(unit, 6, seed=0)
    assert labels.max() + 1 == 6 and (labels != NOISE).all()
    assert (kmeans_clusters(unit, 6, seed=0) == labels).all()
    assert (labels[truth == 0] == labels[0]).all()  # a blob is a cluster
    # the blobs have 40 docs each: a cluster needing 41 is noise
    assert (kmeans_clusters(unit, 6, min_cluster_size=41, seed=0) == NOISE).all()
    with pytest.raises(ValueError, match="7 clusters asked of 5 docs"):
        kmeans_clusters(unit[:5], 7)


def test_kmeans_and_silhouettes_match_scikit_learn(extras: None) -> None:
    pytest.importorskip("sklearn")
    from sklearn.metrics import adjusted_rand_score, silhouette_score

    unit, truth = blobs(seed=8, n_noise=30)
    labels = kmeans(unit, 7, seed=0)
    assert adjusted_rand_score(truth[truth >= 0], labels[truth >= 0]) > 0.95
    for k in (2, 5, 9):
        ours = kmeans(unit, k, seed=1)
        (mine,) = silhouettes(unit, [ours])
        assert mine == pytest.approx(silhouette_score(unit, ours, metric="cosine"), abs=1e-4)


def test_cluster_silhouettes_are_their_docs_mean(extras: None) -> None:
    pytest.importorskip("sklearn")
    from sklearn.metrics import silhouette_samples

    unit, truth = blobs(seed=9, n_blobs=3, n_noise=40)
    labels = kmeans(unit, 4, seed=0)
    labels[:3] = NOISE  # in no cluster: left out
    kept = labels >= 0
    theirs = silhouette_samples(unit[kept], labels[kept], metric="cosine")
    ours = cluster_silhouettes(unit, labels)
    assert sorted(ours) == sorted(set(labels[kept].tolist()))
    for cluster, value in ours.items():
        assert value == pytest.approx(theirs[labels[kept] == cluster].mean(), abs=1e-4)
    # the scattered docs' cluster is the loosest, the blobs' tight
    scattered = int(numpy.bincount(labels[truth == NOISE][labels[truth == NOISE] >= 0]).argmax())
    assert ours[scattered] == min(ours.values()) and ours[scattered] < 0.1
    assert all(v > 0.5 for c, v in ours.items() if c != scattered)
    # on a seeded sample: near the whole pool's, the same twice
    sampled = cluster_silhouettes(unit, labels, sample=100, seed=3)
    assert sampled == cluster_silhouettes(unit, labels, sample=100, seed=3)
    assert all(abs(sampled[c] - ours[c]) < 0.1 for c in sampled)
    assert cluster_silhouettes(unit, numpy.full(len(unit), NOISE)) == {}


def test_choose_k_finds_the_blobs_on_a_sample() -> None:
    unit, _ = blobs(seed=4, n_blobs=7, n_noise=0)
    k, curve = choose_k(unit, seed=0)
    assert k == 7 and curve[7] == max(curve.values())
    assert min(curve) == 2 and max(curve) <= len(unit) // 5
    # the silhouettes of a sample of 120 of the 280 docs say the same
    k_sampled, curve_sampled = choose_k(unit, sample=120, seed=0)
    assert k_sampled == 7 and max(curve_sampled) <= 120 // 5
    assert choose_k(unit, seed=0) == (k, curve)  # seeded
    assert choose_k(unit, max_clusters=5, seed=0)[0] <= 5


def test_choose_k_on_pools_too_small_to_split() -> None:
    unit, _ = blobs(seed=5, n_blobs=1, per_blob=9, n_noise=0)
    assert choose_k(unit, min_cluster_size=5) == (1, {})
    # three texts five times each: K stops at the distinct docs, no warning
    copies = numpy.repeat(numpy.eye(6, dtype="f")[:3], 5, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k, curve = choose_k(copies, min_cluster_size=3)
    assert k == 3 and sorted(curve) == [2, 3] and curve[3] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        choose_k(unit, max_clusters=1)


def test_k_stops_early_on_a_flat_curve() -> None:
    # a peak: the peak, not a far K about as good
    curve = {2: 0.1, 3: 0.3, 4: 0.40, 5: 0.39, 6: 0.385, 8: 0.2, 20: 0.25, 40: 0.3}
    assert smallest_near_best(curve) == 4
    assert smallest_near_best({2: 0.5, 3: 0.2}) == 2
    assert smallest_near_best({2: -0.1, 3: -0.104, 4: -0.2}) == 2
    # flat (0.098 to 0.121 from K = 5 to 198): the old rule took the grid's end
    flat = {2: 0.04, 3: 0.07, 4: 0.09, 5: 0.098}
    flat.update({k: 0.098 + 0.023 * n / 24 for n, k in enumerate(k_grid(200)[4:], 1)})
    assert max(flat, key=flat.__getitem__) == 198
    assert smallest_near_best(flat) < 30
    # a real one, rising to K = 198 (CLINC150, 30 held-out intents' test queries
    # among 1,000 out-of-scope ones, bench/discover_frozen.py's seed 0): its knee
    values = [0.043, 0.044, 0.048, 0.053, 0.055, 0.056, 0.065, 0.063, 0.073, 0.077, 0.074]
    values += [0.069, 0.095, 0.103, 0.112, 0.112, 0.122, 0.141, 0.143, 0.155, 0.156, 0.155]
    values += [0.164, 0.166, 0.162, 0.161, 0.162, 0.164, 0.172, 0.174]
    assert smallest_near_best(dict(zip(k_grid(200), values))) == 49


def test_k_grid() -> None:
    assert k_grid(1) == []
    assert k_grid(10) == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    grid = k_grid(200)
    assert grid[-1] <= 200 and len(grid) < 40 and grid == sorted(set(grid))


def test_cluster_pool_by_name() -> None:
    unit, truth = blobs(seed=6, n_blobs=5)
    auto, method = cluster_pool(unit, "auto", seed=0)
    assert "silhouette" in method["method"]
    assert method["silhouettes"][str(method["k"])] >= 0.95 * max(method["silhouettes"].values())
    for blob in range(5):  # each blob one cluster, whole and nearly pure
        (cluster,) = set(auto[truth == blob].tolist())
        assert cluster != NOISE and (truth[auto == cluster] == blob).mean() >= 0.9
    # the scattered docs: kept apart from the blobs, in a cluster or two of
    # their own (a reviewer rejects them) or under min_cluster_size (noise)
    assert method["k"] >= auto.max() + 1 and method["k"] <= 7
    density, method = cluster_pool(unit, "density")
    assert (density == density_clusters(unit)).all() and "HDBSCAN" in method["method"]
    given, method = cluster_pool(unit, 4, seed=0)
    assert given.max() + 1 == 4 and method == {
        "method": "k-means, 4 clusters",
        "k": 4,
        "silhouettes": {},
        "flat": False,
    }
    assert (cluster_pool(unit, "4", seed=0)[0] == given).all()


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "many", "", 0])
def test_parse_clusters_names_what_it_takes(bad: object) -> None:
    with pytest.raises(ValueError, match="'auto'.*'density'.*a number of clusters"):
        parse_clusters(bad)  # type: ignore[arg-type]


def test_auto_warns_when_the_silhouette_rises_to_the_largest_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import spacy_bert_pipes.discover.cluster as cluster

    unit, _ = blobs(seed=7, n_blobs=4)
    _, method = cluster_pool(unit, "auto", seed=0)
    assert "warning" not in method  # a peak: no warning
    rising = {2: 0.1, 3: 0.2, 4: 0.3}
    monkeypatch.setattr(cluster, "choose_k", lambda *args, **kwargs: (3, rising))
    labels, method = cluster_pool(unit, "auto", seed=0)
    assert method["k"] == 3 and labels.max() + 1 <= 3
    assert "no peak below the largest K tried (4): K = 3" in method["warning"]
    assert method["flat"]


def test_kmeans_says_what_runs(capsys: pytest.CaptureFixture) -> None:
    unit, _ = blobs(seed=3, n_noise=0)
    quiet = kmeans_clusters(unit, 6, seed=0)
    assert capsys.readouterr().err == ""
    shown = kmeans_clusters(unit, 6, seed=0, progress=True)
    assert "k-means, 6 clusters of 240 docs" in capsys.readouterr().err
    assert (shown == quiet).all()
