"""Discovery scored against the true intents, where they are known: a
benchmark such as CLINC150 with intents held out (the `discover` workflow of
project.yml, bench/discover_frozen.py).

- `score_clusters`: NMI and ARI of the clusters against the intents (the docs
  in no cluster count as one more cluster), and `discovered_intents`: an
  intent is discovered when one cluster holds at least half of its docs and
  at least 80% of that cluster is that intent; `score_pool` scores a whole
  pool's clusters on its held-out intents' docs, as the workflow does.
- `frozen_vectors` and `baseline_clusters`: what a discovery is compared with,
  the encoder checkpoint's own sentence vectors clustered by k-means at the
  true K and by the default density clustering.
- `label_intents` and `routed_to_intents`: the loop, once the clusters are
  labels: which intent each new label stands for (its clusters' majority),
  and how queries of known intent are routed among the new labels.
"""

from collections import Counter
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

import numpy

from ..similar import embed_texts, unit_rows
from .cluster import AUTO, NOISE, cluster_pool, density_clusters, kmeans_clusters
from .pool import checkpoint_embedder

# NMI and ARI, here only: discover itself needs no extra package
DISCOVER_EXTRA = "pip install 'spacy-bert-pipes[discover]'  (or: pip install scikit-learn)"

# An intent is discovered by a cluster that holds this share of its docs ...
DISCOVERED_SHARE = 0.5
# ... and of which this share is that intent.
DISCOVERED_PURITY = 0.8


def discovered_intents(
    intents: Sequence[str],
    clusters: Sequence[int],
    sizes: Optional[Mapping[int, int]] = None,
) -> Dict[str, int]:
    """The intents discovered, each with the cluster that discovers it: one
    that holds at least half of the intent's docs, at least 80% of it that
    intent.

    intents (Sequence[str]): The true intent of each doc scored.
    clusters (Sequence[int]): Their clusters (-1: none).
    sizes (Optional[Mapping[int, int]]): Each cluster's size among all the
        docs clustered, the docs not scored included (e.g. out-of-scope ones).
        None: its size among the docs scored.
    RETURNS (Dict[str, int]): Intent -> cluster, the intents in sorted order.
    """
    if len(intents) != len(clusters):
        raise ValueError(f"{len(intents)} intents but {len(clusters)} clusters")
    labels = [int(c) for c in clusters]
    if sizes is None:
        sizes = Counter(c for c in labels if c != NOISE)
    totals = Counter(intents)
    found: Dict[str, int] = {}
    for intent in sorted(totals):
        counts = Counter(c for i, c in zip(intents, labels) if i == intent and c != NOISE)
        if not counts:
            continue
        # the most docs first, then the lowest number: of two clusters holding
        # half each, either may discover the intent
        for cluster, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            if count < DISCOVERED_SHARE * totals[intent]:
                break
            if count >= DISCOVERED_PURITY * sizes[cluster]:
                found[intent] = cluster
                break
    return found


def score_clusters(
    intents: Sequence[str],
    clusters: Sequence[int],
    sizes: Optional[Mapping[int, int]] = None,
) -> Dict[str, Any]:
    """NMI and ARI of the clusters against the true intents (scikit-learn;
    the docs in no cluster count as one more cluster), the share in none, and
    the intents discovered (`discovered_intents`, with `sizes`).

    RETURNS (Dict[str, Any]): {docs, nmi, ari, noise_share, discovered,
        discovered_intents}.
    """
    try:
        from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
    except ImportError as error:
        raise ImportError(f"scoring clusters needs scikit-learn: {DISCOVER_EXTRA}") from error

    labels = numpy.asarray(clusters, dtype="int64")
    found = discovered_intents(intents, labels.tolist(), sizes)
    empty = len(labels) == 0
    return {
        "docs": len(labels),
        "nmi": None if empty else round(float(normalized_mutual_info_score(intents, labels)), 4),
        "ari": None if empty else round(float(adjusted_rand_score(intents, labels)), 4),
        "noise_share": None if empty else round(float((labels == NOISE).mean()), 4),
        "discovered": len(found),
        "discovered_intents": sorted(found),
    }


def score_pool(
    clusters: Sequence[int], intents: Sequence[str], held_out: Iterable[str]
) -> Dict[str, Any]:
    """Clusters of a whole pool scored on its held-out intents' docs, as the
    `discover` workflow scores them: each cluster's purity counted over all its
    docs (out-of-scope and known-intent ones included).

    clusters (Sequence[int]): Each pooled doc's cluster (-1: none).
    intents (Sequence[str]): Each pooled doc's true intent ("oos": none).
    held_out (Iterable[str]): The intents held out of training.
    RETURNS (Dict[str, Any]): {clusters, pool_noise_share} and `score_clusters`'s.
    """
    labels = [int(c) for c in clusters]
    sizes = Counter(c for c in labels if c != NOISE)
    held = set(held_out)
    rows = [k for k, intent in enumerate(intents) if intent in held]
    return {
        "clusters": len(sizes),
        "pool_noise_share": round(sum(c == NOISE for c in labels) / max(len(labels), 1), 4),
        **score_clusters([intents[k] for k in rows], [labels[k] for k in rows], sizes),
    }


def frozen_vectors(
    texts: Sequence[str], *, checkpoint: Optional[str] = None, batch_size: int = 256
) -> numpy.ndarray:
    """The checkpoint's own sentence vectors (a `bert_encoder` and a
    `bert_vectors`, nothing trained), unit length. (n_texts, width)

    checkpoint (Optional[str]): The encoder checkpoint, as `bert-pipes
        assemble --vectors` takes it; None: the bert_encoder's default.
    """
    nlp = checkpoint_embedder(checkpoint)
    return unit_rows(embed_texts(nlp, texts, batch_size=batch_size))


def baseline_clusters(
    unit: numpy.ndarray, n_clusters: int, *, min_cluster_size: int = 5, seed: int = 0
) -> Dict[str, numpy.ndarray]:
    """The clusters a discovery is compared with: k-means given the true
    number of clusters, k-means with K from the data (`bert-pipes discover`'s
    default) and HDBSCAN* over the nearest-neighbour graph (`--clusters
    density`), with `min_cluster_size`.

    RETURNS (Dict[str, numpy.ndarray]): "kmeans_k<K>", "kmeans_auto" and
        "density_min<min_cluster_size>" -> a cluster per row (-1: none).
    """
    auto, _ = cluster_pool(unit, AUTO, min_cluster_size=min_cluster_size, seed=seed)
    return {
        f"kmeans_k{n_clusters}": kmeans_clusters(unit, n_clusters, seed=seed),
        "kmeans_auto": auto,
        f"density_min{min_cluster_size}": density_clusters(unit, min_cluster_size=min_cluster_size),
    }


def label_intents(
    label_clusters: Mapping[str, Sequence[int]],
    clusters: Sequence[int],
    intents: Sequence[str],
) -> Dict[str, str]:
    """The intent each new label stands for: the most frequent true intent
    among the docs of its clusters (ties: the first in sorted order).

    label_clusters (Mapping[str, Sequence[int]]): Label -> the clusters it
        was made of.
    clusters (Sequence[int]): The cluster of each doc of the pool.
    intents (Sequence[str]): The true intent of each doc of the pool.
    RETURNS (Dict[str, str]): Label -> intent, for the labels with any docs.
    """
    members: Dict[int, Counter] = {}
    for cluster, intent in zip(clusters, intents):
        members.setdefault(int(cluster), Counter())[intent] += 1
    stands_for = {}
    for label, numbers in label_clusters.items():
        counts: Counter = sum((members.get(int(c), Counter()) for c in numbers), Counter())
        if counts:
            stands_for[label] = min(counts.items(), key=lambda item: (-item[1], item[0]))[0]
    return stands_for


def routed_to_intents(
    routed: Sequence[Optional[str]], intents: Sequence[str], stands_for: Mapping[str, str]
) -> Dict[str, Any]:
    """How queries are routed once clusters are labels: the share routed to a
    new label that stands for their intent, to another new label, to a label
    the router knew, and not routed.

    routed (Sequence[Optional[str]]): Each query's routed label (None: not routed).
    intents (Sequence[str]): Each query's true intent.
    stands_for (Mapping[str, str]): New label -> its intent (`label_intents`).
    """
    if len(routed) != len(intents):
        raise ValueError(f"{len(routed)} routes but {len(intents)} intents")
    kinds: Counter = Counter()
    for label, intent in zip(routed, intents):
        if label is None:
            kinds["not_routed"] += 1
        elif label not in stands_for:
            kinds["known_label"] += 1
        else:
            kinds["right_new_label" if stands_for[label] == intent else "other_new_label"] += 1
    n = max(len(routed), 1)
    shares = ("right_new_label", "other_new_label", "known_label", "not_routed")
    return {"queries": len(routed), **{kind: round(kinds[kind] / n, 4) for kind in shares}}
