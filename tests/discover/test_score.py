"""Discovery scored against true intents (`discover.score`), on hand-made
clusters whose scores are known."""

import sys
from pathlib import Path

import numpy
import pytest

from spacy_bert_pipes.discover import (
    baseline_clusters,
    discovered_intents,
    frozen_vectors,
    label_intents,
    routed_to_intents,
    score_clusters,
    score_pool,
)

# a: 3 of its 4 docs in cluster 0, all of it; b: all 4 in cluster 1, with
# one doc of a; c: in no cluster
INTENTS = ["a"] * 4 + ["b"] * 4 + ["c"] * 2
CLUSTERS = [0, 0, 0, 1, 1, 1, 1, 1, -1, -1]


def test_without_scikit_learn_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)  # import fails
    with pytest.raises(ImportError, match=r"spacy-bert-pipes\[discover\]"):
        score_clusters(INTENTS, CLUSTERS)


def test_discovered_intents() -> None:
    # a: 3 >= half of 4, and cluster 0 is all a; b: 4 of cluster 1's 5 is 80%
    assert discovered_intents(INTENTS, CLUSTERS) == {"a": 0, "b": 1}
    # one more doc in cluster 1 that is not scored (out of scope, say): 4 of 6
    assert discovered_intents(INTENTS, CLUSTERS, {0: 3, 1: 6}) == {"a": 0}
    # half of the intent's docs is enough; of two such clusters the lower one,
    # or the one that is pure enough
    assert discovered_intents(["d", "d"], [3, 2]) == {"d": 2}
    assert discovered_intents(["d", "d"], [3, 2], {2: 2, 3: 1}) == {"d": 3}
    # less than half is not
    assert discovered_intents(["e"] * 3, [0, 1, -1]) == {}
    with pytest.raises(ValueError, match="3 intents but 2 clusters"):
        discovered_intents(["a", "a", "b"], [0, 0])


def test_score_clusters(extras: None) -> None:
    pytest.importorskip("sklearn")
    perfect = score_clusters(["a", "a", "b", "b"], [5, 5, 7, 7])
    assert perfect == {
        "docs": 4,
        "nmi": 1.0,
        "ari": 1.0,
        "noise_share": 0.0,
        "discovered": 2,
        "discovered_intents": ["a", "b"],
    }
    # the docs in no cluster are one more cluster: NMI and ARI are perfect,
    # but only b is discovered
    noise = score_clusters(["a", "a", "b", "b"], [-1, -1, 0, 0])
    assert (noise["nmi"], noise["ari"], noise["noise_share"]) == (1.0, 1.0, 0.5)
    assert noise["discovered_intents"] == ["b"]
    # H(intents) = ln 2, H(clusters) = 0.5623, MI = 0.2158: NMI = MI / their mean;
    # a's cluster is a third b, and b's half in cluster 1 is all of it
    split = score_clusters(["a", "a", "b", "b"], [0, 0, 0, 1])
    assert split["nmi"] == 0.3437 and split["discovered_intents"] == ["b"]
    assert score_clusters(INTENTS, CLUSTERS, {0: 3, 1: 6})["discovered"] == 1
    assert score_clusters([], [])["nmi"] is None


def test_score_pool_counts_purity_over_the_whole_pool(extras: None) -> None:
    """Only the held-out intents' docs are scored, but a cluster's other docs
    (out of scope, known intents) count against its purity."""
    pytest.importorskip("sklearn")
    clusters = [0, 0, 0, 1, 1, -1, 1]
    intents = ["a", "a", "oos", "b", "b", "a", "known"]
    scores = score_pool(clusters, intents, ["a", "b"])
    assert scores["clusters"] == 2 and scores["pool_noise_share"] == round(1 / 7, 4)
    assert scores["docs"] == 5  # a, a, b, b, a: the held-out intents' docs
    # a: 2 of its 3 docs in cluster 0, 2 of that cluster's 3 docs (67% < 80%)
    # b: both in cluster 1, 2 of its 3 docs (67%): neither is discovered
    assert scores["discovered"] == 0
    # the same held-out docs, the others in clusters of their own: both discovered
    assert score_pool([0, 0, 2, 1, 1, -1, 3], intents, ["a", "b"])["discovered"] == 2


def test_label_intents() -> None:
    clusters = [0, 0, 1, 2, 2, -1, 3, 3]
    intents = ["a", "a", "b", "c", "c", "a", "b", "a"]
    label_clusters = {"x": [0], "y": [1, 2], "z": [9], "t": [3]}
    # y: one b and two c; z: no docs; t: one a and one b, the tie to a
    assert label_intents(label_clusters, clusters, intents) == {"x": "a", "y": "c", "t": "a"}


def test_routed_to_intents() -> None:
    routed = ["x", "y", None, "known", "x"]
    intents = ["a", "b", "a", "a", "b"]
    assert routed_to_intents(routed, intents, {"x": "a", "y": "c"}) == {
        "queries": 5,
        "right_new_label": 0.2,
        "other_new_label": 0.4,
        "known_label": 0.2,
        "not_routed": 0.2,
    }
    with pytest.raises(ValueError, match="1 routes but 2 intents"):
        routed_to_intents(["x"], ["a", "b"], {})


def test_frozen_vectors(tiny_bert: Path) -> None:
    unit = frozen_vectors(["hello world", "pin", "hello world"], checkpoint=str(tiny_bert))
    assert unit.shape == (3, 32)
    assert numpy.allclose(numpy.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    assert numpy.allclose(unit[0], unit[2]) and not numpy.allclose(unit[0], unit[1])


def test_baseline_clusters(extras: None) -> None:
    pytest.importorskip("sklearn")
    rng = numpy.random.default_rng(0)
    centers = numpy.eye(8)[:3]
    rows = numpy.concatenate([c + 0.05 * rng.standard_normal((10, 8)) for c in centers])
    unit = rows / numpy.linalg.norm(rows, axis=1, keepdims=True)
    blobs = [f"blob{i}" for i in range(3) for _ in range(10)]
    found = baseline_clusters(unit, 3, seed=0)
    assert list(found) == ["kmeans_k3", "kmeans_auto", "density_min5"]
    for labels in found.values():
        assert labels.shape == (30,)
        assert score_clusters(blobs, labels.tolist())["discovered"] == 3
