"""`discover`: the docs a router did not route, clustered and described, from
a `bert-pipes annotate` OUTPUT to the clusters a person reviews.

1. `read_pool`: the OUTPUT's rows, routes, texts and vectors; the docs not
   routed (`out_of_scope`, and `ambiguous` when asked) are the pool. Docs with
   an empty text are counted and given cluster -1, never clustered.
2. Their vectors: the OUTPUT's `vector` column, else `doc.vector` by the
   pipeline (a `bert_vectors` component), else the sentence vectors of its
   router's own encoder (a bert_textcat with label prototypes).
3. `cluster_pool` on unit vectors: k-means with K from the data (`choose_k`)
   or given, or `density_clusters` (as many as the density holds, scattered
   docs -1).
4. Each cluster's silhouette (`kmeans.cluster_silhouettes`): below
   LOOSE_SILHOUETTE it is "loose". When `auto`'s silhouette curve is flat
   (scattered docs k-means had to cut somewhere), loose clusters are left out
   of the review: their docs get cluster -1 and the summary counts them
   (`keep_loose` keeps them).
5. Per cluster: `keywords` and a `suggested_name`, `representatives`, and the
   nearest known label (`labels.LabelSpace`) with a `verdict`.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import numpy

from ..io.errors import ConversionError
from ..similar import unit_rows
from .cluster import (
    DEFAULT_CLUSTERS,
    LOOSE_SILHOUETTE,
    NOISE,
    cluster_pool,
    leave_out_loose,
    parse_clusters,
)
from .describe import (
    NEAR_COSINE,
    centroid,
    keywords,
    merge_proposals,
    nearest_labels,
    representatives,
    routed_to,
    suggested_name,
    verdict,
)
from .labels import (
    PROTOTYPE_SAMPLE,
    ROUTED_SAMPLE,
    LabelSpace,
    prototype_component,
    prototype_samples,
    prototype_space,
    routed_space,
)
from .pool import (
    BASE_ENCODER,
    Pool,
    base_checkpoint,
    checkpoint_embedder,
    embed_rows,
    has_bert_vectors,
    missing_text,
    read_pool,
    read_pool_texts,
)

if TYPE_CHECKING:
    from spacy.language import Language

# Five: the examples of the labels the discover workflow measured
# (docs/discover.md, "A label of five examples").
N_REPRESENTATIVES = 5


@dataclass
class Cluster:
    """One cluster of the pool, as the review file shows it.

    cluster (int): Its number: 0 is the largest.
    size (int): Its docs.
    name (str): A suggested label name, from its keywords.
    keywords (List[str]): The words that set it apart, the most distinctive first.
    nearest_label (Optional[str]): The known label nearest its centroid.
    nearest_cosine (Optional[float]): Their cosine.
    verdict (str): "new intent", "near <label>" or "loose" (`describe.verdict`).
    representatives (List[Dict[str, str]]): {id, text} of docs near its
        centroid, its bulk then its spread (`describe.representatives`).
    routed_share (float): The share of its docs the router routed (with
        `--below`, some are).
    routed_to (List[Tuple[str, int]]): The labels they were routed to, with
        their counts, the most first (at most 3).
    merge_into (Optional[int]): A larger cluster it may be the same intent
        as (`describe.merge_proposals`), None: none.
    merge_cosine (Optional[float]): Their centroids' cosine.
    silhouette (Optional[float]): The mean silhouette of its docs (None: not
        measured, none of its docs sampled).
    """

    cluster: int
    size: int
    name: str
    keywords: List[str]
    nearest_label: Optional[str]
    nearest_cosine: Optional[float]
    verdict: str
    representatives: List[Dict[str, str]]
    routed_share: float = 0.0
    routed_to: List[Tuple[str, int]] = field(default_factory=list)
    merge_into: Optional[int] = None
    merge_cosine: Optional[float] = None
    silhouette: Optional[float] = None

    def review_record(self) -> Dict[str, Any]:
        """Its row of the review file, with an empty `action` for the reviewer."""
        cosine = None if self.nearest_cosine is None else round(self.nearest_cosine, 4)
        return {
            "cluster": self.cluster,
            "size": self.size,
            "name": self.name,
            "keywords": self.keywords,
            "nearest_label": self.nearest_label,
            "nearest_cosine": cosine,
            "verdict": self.verdict,
            "silhouette": None if self.silhouette is None else round(self.silhouette, 4),
            "routed_share": round(self.routed_share, 4),
            "routed_to": [{"label": label, "docs": n} for label, n in self.routed_to],
            "proposal": "" if self.merge_into is None else f"merge:{self.merge_into}",
            "merge_cosine": None if self.merge_cosine is None else round(self.merge_cosine, 4),
            "representatives": self.representatives,
            "action": "",
        }


@dataclass
class Discovery:
    """What `discover` found.

    clusters (List[Cluster]): The clusters, the largest first.
    assignments (List[Dict[str, Any]]): Per doc of the pool, in the OUTPUT's
        order: {id, decision, empty_text, cluster} (-1: noise or empty text).
    summary (Dict[str, Any]): Counts and settings.
    label_space (LabelSpace): The known labels the clusters were compared with.
    centers (numpy.ndarray): The clusters' unit vectors in the labels' space,
        in the order of `clusters`. (n_clusters, width)
    """

    clusters: List[Cluster]
    assignments: List[Dict[str, Any]]
    summary: Dict[str, Any]
    label_space: LabelSpace
    centers: numpy.ndarray = field(default_factory=lambda: numpy.zeros((0, 0), dtype="f"))


def discover(
    annotations: Union[str, Path],
    *,
    nlp: Optional["Language"] = None,
    texts: Optional[Union[str, Path]] = None,
    include_ambiguous: bool = False,
    below: float = 0.0,
    encoder: Optional[str] = None,
    clusters: Union[int, str] = DEFAULT_CLUSTERS,
    min_cluster_size: int = 5,
    seed: int = 0,
    near_cosine: float = NEAR_COSINE,
    n_representatives: int = N_REPRESENTATIVES,
    keep_loose: bool = False,
    text_column: str = "text",
    id_column: Optional[str] = None,
    progress: bool = False,
) -> Discovery:
    """Cluster and describe the docs a router did not route.

    annotations (Union[str, Path]): An OUTPUT of `bert-pipes annotate` by a
        pipeline that routes (a `route` column): .jsonl, .csv, .parquet or a
        folder of Parquet shards.
    nlp (Optional[Language]): The pipeline: it embeds the docs when the OUTPUT
        has no `vector` column, and its bert_textcat's label prototypes (if it
        has them) are the known labels. None: the OUTPUT's vectors, and each
        label's mean vector of the rows routed to it.
    texts (Optional[Union[str, Path]]): The input the OUTPUT was annotated
        from, for the texts it did not keep (matched by id).
    include_ambiguous (bool): Pool the "ambiguous" docs with the "out_of_scope" ones.
    below (float): Also pool the docs with an in-scope confidence below it,
        routed or not: a new intent worded like a known one is often routed, with
        a low confidence. 0: only the decisions.
    encoder (Optional[str]): Cluster on this encoder checkpoint's own sentence
        vectors (nothing trained; a name or folder, as `bert-pipes assemble
        --vectors` takes it), not on the OUTPUT's or the pipeline's: a router's
        fine-tuning pulls a new intent's docs towards the known intent they
        resemble, where the checkpoint it started from keeps them apart.
        "base": the checkpoint the pipeline's router was initialised from
        (`pool.base_checkpoint`).
    clusters (Union[int, str]): "auto": k-means, K from the data by the
        silhouette (`choose_k`); "density": as many as the density holds,
        scattered docs left out (`density_clusters`); K: k-means, K clusters.
    min_cluster_size (int): The fewest docs of a cluster.
    seed (int): The seed of k-means and of the docs sampled for the labels.
    near_cosine (float): The cosine from which a cluster is "near" a label.
    n_representatives (int): Representatives per cluster.
    keep_loose (bool): Keep loose clusters in the review when `auto`'s
        silhouette curve is flat (they are kept, "loose", when it has a peak).
    text_column, id_column: The columns of `texts` (as `bert-pipes annotate`).
    progress (bool): Show progress bars.
    RETURNS (Discovery): The clusters, each doc's cluster and a summary.
    RAISES (ConversionError): A bad row, named; (ValueError): bad settings.
    """
    how = parse_clusters(clusters)
    if min_cluster_size < 2:
        raise ValueError(f"--min-cluster-size must be at least 2: {min_cluster_size}")
    if not 0 <= below <= 1:
        raise ValueError(f"--below takes a confidence from 0 to 1: {below}")
    if n_representatives < 1:
        raise ValueError(f"representatives per cluster must be at least 1: {n_representatives}")
    if encoder == BASE_ENCODER:  # before the pool is read
        if nlp is None:
            raise ValueError(
                f"--encoder {BASE_ENCODER} takes the checkpoint the --pipeline's router "
                "started from: give --pipeline"
            )
        encoder = base_checkpoint(nlp, prototype_component(nlp))
    # with an encoder, the checkpoint's vectors, not the OUTPUT's
    pool = read_pool(
        annotations, text_column=text_column, vectors=encoder is None, progress=progress
    )
    if pool.vectors is None and nlp is None and encoder is None:
        raise ConversionError(
            pool.path,
            "no 'vector' column: give --pipeline (a router with label prototypes, or one "
            "with a bert_vectors component) to compute the vectors, or annotate with --vectors",
        )
    component = prototype_component(nlp) if nlp is not None else None
    # no vector column and no bert_vectors: the router's own vectors, in the
    # space of its prototypes
    own_space = (
        pool.vectors is None
        and encoder is None
        and nlp is not None
        and component is not None
        and not has_bert_vectors(nlp)
    )
    embedder = component if own_space else None
    wanted = ("out_of_scope", "ambiguous") if include_ambiguous else ("out_of_scope",)
    pooled = pool.pooled(wanted, below)
    rows = [row for row in pooled if not pool.empty[row]]
    rng = numpy.random.default_rng(seed)
    routed_sample = _routed_sample(pool, rng) if component is None and pool.vectors is None else []
    _fill_texts(pool, rows + routed_sample, texts, text_column, id_column)
    row_texts = [str(pool.texts[row]) for row in rows]
    vectors_of = checkpoint_embedder(encoder) if encoder is not None else nlp
    unit = _unit_vectors(pool, rows, vectors_of, progress, embedder)
    method: Dict[str, Any] = {"method": "none: no doc to cluster"}
    if len(rows) == 0:
        assigned = numpy.zeros(0, dtype="int64")
    else:
        assigned, method = cluster_pool(
            unit, how, min_cluster_size=min_cluster_size, seed=seed, progress=progress
        )
    before = assigned
    flat = bool(method.get("flat")) and not keep_loose
    assigned, silhouette_of, loose = leave_out_loose(unit, assigned, flat=flat, seed=seed)
    loose_docs = int(numpy.isin(before, loose).sum())
    if loose:
        method["warning"] += (
            f"; {len(loose)} loose clusters ({loose_docs:,} docs, silhouette below "
            f"{LOOSE_SILHOUETTE}) are left out of the review (cluster -1): --keep-loose keeps them"
        )
    assigned = _by_size(assigned)
    n_found = int(assigned.max()) + 1 if len(assigned) else 0
    members = [numpy.flatnonzero(assigned == c) for c in range(n_found)]
    centers = [centroid(unit[m]) for m in members]
    silhouettes = [silhouette_of.get(int(before[m[0]])) for m in members]
    words = keywords(row_texts, assigned) if n_found else {}
    # the representatives: the members nearest the centre in the space a label
    # made of the cluster would live in (the prototypes', when there are some)
    pick_from, pick_unit = members, [unit[m] for m in members]
    if component is not None:
        assert nlp is not None
        space = prototype_space(nlp, component)
        if own_space:  # the clusters' centroids are in the prototypes' space already
            label_centers = _stack(centers)
        else:
            pick_from = [_sample(m, PROTOTYPE_SAMPLE, rng) for m in members]
            pick_unit = prototype_samples(
                nlp, component, [[row_texts[i] for i in sample] for sample in pick_from]
            )
            label_centers = _stack([centroid(vectors) for vectors in pick_unit])
    else:
        space = _routed_space(pool, routed_sample, vectors_of, progress)
        label_centers = _stack(centers)
    nearest = nearest_labels(label_centers, space.labels, space.vectors)
    merges = merge_proposals(label_centers)
    described = []
    for c, (m, (label, cosine)) in enumerate(zip(pick_from, nearest)):
        chosen = representatives(pick_unit[c], label_centers[c], n_representatives)
        shown = [{"id": pool.ids[rows[m[i]]], "text": row_texts[m[i]]} for i in chosen]
        share, routed = routed_to([pool.labels[rows[i]] for i in members[c]])
        judged = verdict(
            label,
            cosine,
            near_cosine,
            silhouette=silhouettes[c],
            routed=routed,
            size=len(members[c]),
        )
        described.append(
            Cluster(
                c,
                len(members[c]),
                suggested_name(words.get(c, []), c),
                words.get(c, []),
                label,
                cosine,
                judged,
                shown,
                share,
                routed,
                *merges[c],
                silhouettes[c],
            )
        )
    cluster_of = dict(zip(rows, assigned.tolist()))
    assignments = [
        {
            "id": pool.ids[row],
            "decision": pool.decisions[row],
            "empty_text": pool.empty[row],
            "cluster": cluster_of.get(row, NOISE),
        }
        for row in pooled
    ]
    summary = {
        "annotations": pool.path,
        "rows": len(pool.ids),
        "decisions": {d: pool.decisions.count(d) for d in ("routed", "out_of_scope", "ambiguous")},
        "pooled": len(pooled),
        "pooled_decisions": list(wanted),
        "below": below,
        "pooled_routed": sum(pool.decisions[row] == "routed" for row in pooled),
        "empty_text": len(pooled) - len(rows),
        "clustered": int((assigned != NOISE).sum()),
        "noise": int((assigned == NOISE).sum()),
        "loose_left_out": len(loose),
        "loose_docs_left_out": loose_docs,
        "clusters": n_found,
        "new_intents": sum(cluster.verdict == "new intent" for cluster in described),
        "loose": sum(cluster.verdict == "loose" for cluster in described),
        **method,
        "min_cluster_size": min_cluster_size,
        "seed": seed,
        "vectors": _vectors_source(pool, embedder, encoder),
        "labels_from": space.source,
        "near_cosine": near_cosine,
        "loose_silhouette": LOOSE_SILHOUETTE,
        "merge_proposals": sum(cluster.merge_into is not None for cluster in described),
    }
    return Discovery(described, assignments, summary, space, label_centers)


def _fill_texts(
    pool: Pool,
    rows: List[int],
    texts: Optional[Union[str, Path]],
    text_column: str,
    id_column: Optional[str],
) -> None:
    """The texts of `rows` from `texts` where the OUTPUT did not keep them, or
    an error naming the first row without one."""
    lacking = [row for row in rows if pool.texts[row] is None]
    if lacking and texts is not None:
        read_pool_texts(pool, lacking, texts, text_column=text_column, id_column=id_column)
    first = missing_text(pool, rows)
    if first is not None:
        raise ConversionError(
            pool.locations[first],
            f"no {text_column!r} column: give --texts INPUT (the input these annotations "
            "were made from), or annotate with --keep-columns text",
        )


def _unit_vectors(
    pool: Pool,
    rows: List[int],
    nlp: Optional["Language"],
    progress: bool,
    component: Optional[str] = None,
) -> numpy.ndarray:
    """The unit vectors of `rows`: the OUTPUT's, else by the pipeline (its
    bert_vectors, or with `component` that bert_textcat's sentence vectors)."""
    if pool.vectors is not None:
        vectors = pool.vectors[rows]
    else:
        assert nlp is not None
        texts = [str(pool.texts[row]) for row in rows]
        vectors = embed_rows(nlp, texts, component=component, progress=progress)
        if len(rows) == 0:
            return numpy.zeros((0, 1), dtype="float32")
    zero = numpy.flatnonzero(~(numpy.abs(vectors) > 0).any(axis=1))
    if len(zero):
        raise ConversionError(
            pool.locations[rows[int(zero[0])]],
            "the vector is all zeros, but the text is not empty: the pipeline gives it no vector",
        )
    return unit_rows(vectors)


def _vectors_source(pool: Pool, component: Optional[str], encoder: Optional[str]) -> str:
    """Where the pool's vectors came from, for the summary."""
    if encoder is not None:
        return f"the frozen sentence vectors of {encoder}"
    if pool.vectors is not None:
        return "the vector column"
    if component is not None:
        return f"computed by '{component}' (its encoder's sentence vectors: its prototypes' space)"
    return "computed by the pipeline"


def _stack(centers: List[numpy.ndarray]) -> numpy.ndarray:
    return numpy.stack(centers) if centers else numpy.zeros((0, 0), dtype="f")


def _routed_sample(pool: Pool, rng: numpy.random.Generator) -> List[int]:
    """Up to ROUTED_SAMPLE rows routed to each label (not empty), in row order."""
    by_label: Dict[str, List[int]] = {}
    for row, label in enumerate(pool.labels):
        if label is not None and not pool.empty[row]:
            by_label.setdefault(label, []).append(row)
    rows: List[int] = []
    for label in sorted(by_label):
        rows.extend(_sample(numpy.asarray(by_label[label]), ROUTED_SAMPLE, rng).tolist())
    return sorted(rows)


def _routed_space(
    pool: Pool, sample: List[int], nlp: Optional["Language"], progress: bool
) -> LabelSpace:
    """Each label's mean vector of the rows routed to it: all of them from the
    OUTPUT's vectors, else the sample's, embedded by the pipeline."""
    if pool.vectors is not None:
        rows = [r for r, label in enumerate(pool.labels) if label is not None and not pool.empty[r]]
        unit = unit_rows(pool.vectors[rows])
    else:
        rows = sample
        unit = _unit_vectors(pool, rows, nlp, progress)
    return routed_space([pool.labels[row] for row in rows], unit)


def _sample(rows: numpy.ndarray, n: int, rng: numpy.random.Generator) -> numpy.ndarray:
    """Up to n of `rows`, chosen at random, in their order."""
    if len(rows) <= n:
        return rows
    return numpy.sort(rng.choice(rows, size=n, replace=False))


def _by_size(assigned: numpy.ndarray) -> numpy.ndarray:
    """Clusters numbered by size, the largest 0 (ties: the one whose first doc
    comes first); -1 stays."""
    kept = assigned[assigned != NOISE]
    if len(kept) == 0:
        return assigned
    numbers = numpy.unique(kept)
    sizes = numpy.bincount(kept)[numbers]
    firsts = numpy.asarray([numpy.argmax(assigned == c) for c in numbers])
    order = numbers[numpy.lexsort((firsts, -sizes))]
    remap = {int(old): new for new, old in enumerate(order.tolist())}
    return numpy.asarray([remap.get(int(c), NOISE) for c in assigned.tolist()], dtype="int64")
