"""What a cluster is: the words that set it apart from the rest of the pool
(`keywords`, `suggested_name`), the docs that show it (`representatives`) and
the known label it is nearest (`nearest_labels`, `verdict`), what the router
did with its docs (`routed_to`) and the clusters it could be merged into
(`merge_proposals`).
"""

import math
import re
from collections import Counter
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy

from .cluster import LOOSE_SILHOUETTE, NOISE

# Two clusters whose centroids have at least this cosine are proposed as one
# (`merge_proposals`); chosen on the frozen vectors' pools of
# bench/discover_review.py (docs/benchmarks/discovery.md).
MERGE_COSINE = 0.8

# Words: runs of letters, with inner apostrophes ("don't"); digits are not words.
WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
# A cluster whose centroid has at least this cosine with a known label's vector
# is "near <label>", below it "new intent". A first guess for mean-pooled
# sentence vectors, where paraphrases of one intent sit above 0.7; a label
# relative cut (nearer than the label's nearest label) was tried and called
# half the new intents of bench/discover_review.py "near" (docs/discover.md).
NEAR_COSINE = 0.7
# A cluster most of whose docs the router routed to one label is "near" it.
ROUTED_MAJORITY = 0.5
# Representatives of a cluster's bulk: none this close to one chosen before.
COPY_COSINE = 0.95
# Representatives: none closer than this cosine to one chosen before, so that
# they show the ways a cluster is worded rather than paraphrases of its centre,
# and a label made of them covers more of its docs (chosen on the discover
# workflow's traffic, docs/discover.md).
DUPLICATE_COSINE = 0.85


def doc_words(text: str) -> Set[str]:
    """The lowercase words of a text, without spaCy's English stop words and
    one-letter words."""
    from spacy.lang.en.stop_words import STOP_WORDS

    words = (word.replace("’", "'") for word in WORD.findall(text.lower()))
    return {word for word in words if len(word) > 1 and word not in STOP_WORDS}


def keywords(
    texts: Sequence[str], clusters: numpy.ndarray, n_keywords: int = 5
) -> Dict[int, List[str]]:
    """Each cluster's words, the most distinctive first, by class-based TF-IDF
    (BERTopic's c-TF-IDF) over the docs of the pool, noise included:
    tf = the share of the cluster's docs that have the word; idf = log(1 + the
    pool's docs per class / the pool's docs that have the word). The words in
    two of the cluster's docs come first (in a cluster of four or more), then
    those in one, so that a cluster of varied wording still gets a name.

    texts (Sequence[str]): The pool's texts.
    clusters (numpy.ndarray): Each text's cluster, -1 for noise. (n,)
    RETURNS (Dict[int, List[str]]): cluster -> up to n_keywords words; ties in
        alphabetical order.
    """
    per_doc = [doc_words(text) for text in texts]
    pool: Counter = Counter()
    for words in per_doc:
        pool.update(words)
    by_cluster: Dict[int, Counter] = {}
    sizes: Counter = Counter()
    for words, cluster in zip(per_doc, clusters.tolist()):
        sizes[cluster] += 1
        if cluster != NOISE:
            by_cluster.setdefault(cluster, Counter()).update(words)
    per_class = len(texts) / max(len(sizes), 1)
    out: Dict[int, List[str]] = {}
    for cluster in sorted(sizes):
        if cluster == NOISE:
            continue
        counts = by_cluster.get(cluster, Counter())
        least = 2 if sizes[cluster] >= 4 else 1
        scored = [
            (n < least, -(n / sizes[cluster]) * math.log(1.0 + per_class / pool[word]), word)
            for word, n in counts.items()
        ]
        out[cluster] = [word for _, _, word in sorted(scored)[:n_keywords]]
    return out


def suggested_name(words: Sequence[str], cluster: int, n_words: int = 3) -> str:
    """A label name from a cluster's keywords ("card_arrive_still"), or
    "cluster_<n>" for a cluster without any (no doc of it has a word)."""
    return "_".join(words[:n_words]) or f"cluster_{cluster}"


def centroid(unit: numpy.ndarray) -> numpy.ndarray:
    """The unit mean of unit rows (zeros for none). (width,)"""
    if len(unit) == 0:
        return numpy.zeros(unit.shape[1], dtype="float32")
    mean = unit.mean(axis=0)
    return (mean / max(float(numpy.linalg.norm(mean)), 1e-12)).astype("float32")


def representatives(
    unit: numpy.ndarray, center: numpy.ndarray, n: int = 8, spacing: float = DUPLICATE_COSINE
) -> List[int]:
    """Up to n members: its bulk, then its spread. The first half (rounded up)
    are the members closest to the centroid, only near-copies (a cosine of
    COPY_COSINE or more with one chosen before) skipped: what most of the
    cluster says. The rest are the next closest with a cosine below `spacing`
    with every one chosen before: the other ways it is worded. If that leaves
    fewer than n, the skipped ones fill in, closest first.

    Spreading every pick (as before) showed the outliers of a mixed cluster:
    a cluster of 25 docs, 20 of them one new intent, was shown as 4 foreign
    requests and one of the 20, its bulk being paraphrases of each other.

    unit (numpy.ndarray): The members' unit vectors. (n_members, width)
    RETURNS (List[int]): Positions in `unit`, the bulk first.
    """
    cosines = unit @ center  # (n_members,)
    order = numpy.lexsort((numpy.arange(len(unit)), -cosines))[: 10 * n]
    bulk = (n + 1) // 2
    chosen: List[int] = []
    skipped: List[int] = []
    for member in order.tolist():
        if len(chosen) == n:
            break
        cut = COPY_COSINE if len(chosen) < bulk else spacing
        if chosen and float((unit[chosen] @ unit[member]).max()) >= cut:
            skipped.append(member)
        else:
            chosen.append(member)
    return chosen + [m for m in skipped if m not in chosen][: n - len(chosen)]


def merge_proposals(
    centers: numpy.ndarray, threshold: float = MERGE_COSINE
) -> List[Tuple[Optional[int], Optional[float]]]:
    """Per cluster, a larger cluster to merge it into, and their centroids'
    cosine: the nearest larger cluster that is not itself merged, when their
    cosine reaches `threshold` ((None, None) otherwise). Clusters are taken
    largest first, so a merge never points at a cluster merged elsewhere.

    centers (numpy.ndarray): The clusters' unit centroids, the largest
        cluster first, in the space a label made of them will live in.
        (n_clusters, width)
    """
    out: List[Tuple[Optional[int], Optional[float]]] = []
    roots: List[int] = []
    for c in range(len(centers)):
        if roots:
            cosines = centers[roots] @ centers[c]  # (n_roots,)
            best = int(numpy.argmax(cosines))
            if float(cosines[best]) >= threshold:
                out.append((roots[best], float(cosines[best])))
                continue
        out.append((None, None))
        roots.append(c)
    return out


def routed_to(
    labels: Sequence[Optional[str]], n_labels: int = 3
) -> Tuple[float, List[Tuple[str, int]]]:
    """The share of a cluster's docs the router routed (`--below` pools some),
    and the labels it routed them to, the most first (ties alphabetical).

    labels (Sequence[Optional[str]]): Each member's routed label, None: not routed.
    """
    counts = Counter(label for label in labels if label is not None)
    share = sum(counts.values()) / len(labels) if len(labels) else 0.0
    return share, sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n_labels]


def nearest_labels(
    centers: numpy.ndarray, labels: Sequence[str], label_vectors: numpy.ndarray
) -> List[Tuple[Optional[str], Optional[float]]]:
    """Each cluster's nearest known label and their cosine ((None, None) when
    there are no labels).

    centers (numpy.ndarray): The clusters' unit vectors. (n_clusters, width)
    label_vectors (numpy.ndarray): The labels' unit vectors, in the same
        space. (n_labels, width)
    """
    if len(labels) == 0:
        return [(None, None)] * len(centers)
    cosines = centers @ label_vectors.T  # (n_clusters, n_labels)
    best = cosines.argmax(axis=1)
    return [(labels[j], float(cosines[i, j])) for i, j in enumerate(best.tolist())]


def verdict(
    label: Optional[str],
    cosine: Optional[float],
    near: float = NEAR_COSINE,
    *,
    silhouette: Optional[float] = None,
    routed: Sequence[Tuple[str, int]] = (),
    size: int = 0,
) -> str:
    """What a cluster looks like, in the space the label would live in:

    - "loose": its silhouette is below LOOSE_SILHOUETTE (scattered requests,
      or a few intents together);
    - "near <label>": the router routed most of its docs to that label (with
      `--below`, a label's paraphrases the router was unsure of), or its
      centroid's cosine with that label reaches `near`;
    - "new intent": otherwise.

    routed (Sequence[Tuple[str, int]]): The labels its docs were routed to,
        with their counts, the most first (`routed_to`).
    size (int): Its docs.
    """
    if silhouette is not None and silhouette < LOOSE_SILHOUETTE:
        return "loose"
    if routed and size and routed[0][1] > ROUTED_MAJORITY * size:
        return f"near {routed[0][0]}"
    if label is not None and cosine is not None and cosine >= near:
        return f"near {label}"
    return "new intent"
