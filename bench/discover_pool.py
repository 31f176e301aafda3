"""The pool a `discover` run's router left, clustered other ways (not a test):
which clustering the issue's lines call for, and how many held-out intents the
pool holds at all.

    python bench/discover_pool.py PROJECT --output bench/results/discover_pool_seed0.json

PROJECT is a project folder after `spacy project run discover` (its
corpus/clinc150_discover, annotations/discover_traffic.jsonl and
training/discover/model-routed). The pool is what the router did not route
among the traffic, as `bert-pipes discover` pools it. Each pooled query gets
the router's own sentence vector (the space of its prototypes, as `discover`
computes it) and the frozen encoder's (`discover.frozen_vectors`), and each
view is clustered by `discover.density_clusters` (the default, min cluster
size 5), by `discover.kmeans_clusters` at the true K = 30, and by k-means at
the K of the best cosine silhouette over a grid (K = 2, then x1.1 up to the
pool's size / 5; k-means with 2 initialisations per K, the chosen K fitted
again as `kmeans_clusters` fits it), the last also with the queries whose
cosine to their cluster's centre is under 0.5 left out. Scored as
scripts/score_discovery.py scores the workflow's own clustering: on the
held-out intents' queries in the pool, each cluster's purity counted over all
its docs. Also written: for each held-out intent, its queries in the traffic
and in the pool.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import spacy
import srsly
import typer

from spacy_bert_pipes.convert.clinc150_discover import MANIFEST, TRAFFIC_GOLD
from spacy_bert_pipes.discover import (
    NOISE,
    density_clusters,
    frozen_vectors,
    kmeans_clusters,
    read_pool,
    score_pool,
)
from spacy_bert_pipes.discover.describe import centroid
from spacy_bert_pipes.discover.labels import prototype_component
from spacy_bert_pipes.discover.pool import embed_rows
from spacy_bert_pipes.similar import unit_rows

extras.use()  # scikit-learn (k-means, silhouette, the scores)

TRIM_COSINE = 0.5
GRID_RATIO = 1.1
MIN_CLUSTER_SIZE = 5


def k_grid(n: int) -> List[int]:
    top, k, grid = max(2, n // MIN_CLUSTER_SIZE), 2.0, []
    while round(k) <= top:
        if round(k) not in grid:
            grid.append(round(k))
        k *= GRID_RATIO
    return grid


def silhouette_kmeans(unit: numpy.ndarray, seed: int) -> Dict[str, Any]:
    """k-means at the K of the best cosine silhouette; and with the queries far
    from their centre left out."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    silhouettes = {}
    for k in k_grid(len(unit)):
        labels = KMeans(n_clusters=k, n_init=2, random_state=seed).fit_predict(unit)
        silhouettes[k] = float(silhouette_score(unit, labels, metric="cosine"))
    best = max(silhouettes, key=silhouettes.__getitem__)
    labels = kmeans_clusters(unit, best, seed=seed)
    centres = numpy.stack([centroid(unit[labels == c]) for c in range(labels.max() + 1)])
    trimmed = labels.copy()
    trimmed[(unit * centres[labels]).sum(1) < TRIM_COSINE] = NOISE
    counts = Counter(trimmed[trimmed != NOISE].tolist())
    trimmed[numpy.isin(trimmed, [c for c, n in counts.items() if n < MIN_CLUSTER_SIZE])] = NOISE
    return {"k": best, "silhouettes": silhouettes, "labels": labels, "trimmed": trimmed}


def main(
    project: Path = typer.Argument(..., exists=True, file_okay=False),
    output: Path = typer.Option(..., dir_okay=False),
    seed: int = typer.Option(0, help="The seed of k-means"),
) -> None:
    corpus = project / "corpus" / "clinc150_discover"
    manifest = json.loads((corpus / MANIFEST).read_text(encoding="utf8"))
    held = set(manifest["held_out_intents"])
    gold = {row["id"]: row["intent"] for row in srsly.read_jsonl(corpus / TRAFFIC_GOLD)}
    pool = read_pool(project / "annotations" / "discover_traffic.jsonl")
    rows = [r for r, d in enumerate(pool.decisions) if d == "out_of_scope" and not pool.empty[r]]
    texts = [str(pool.texts[r]) for r in rows]
    intents = [gold[pool.ids[r]] for r in rows]
    traffic = Counter(gold[i] for i in pool.ids)
    pooled = Counter(intents)
    composition = {intent: [traffic[intent], pooled[intent]] for intent in sorted(held)}
    print(f"pool: {len(rows)} queries, {sum(pooled[i] for i in held)} of held-out intents")
    print(f"held-out intents with no query in the pool: {sum(not pooled[i] for i in held)}")

    nlp = spacy.load(project / "training" / "discover" / "model-routed")
    component = prototype_component(nlp)
    views = {
        "router": unit_rows(embed_rows(nlp, texts, component=component, progress=True)),
        "frozen": frozen_vectors(texts),
    }
    results: Dict[str, Any] = {}
    for view, unit in views.items():
        auto = silhouette_kmeans(unit, seed)
        runs = {
            "density_min5": density_clusters(unit, min_cluster_size=MIN_CLUSTER_SIZE),
            f"kmeans_k{len(held)}": kmeans_clusters(unit, len(held), seed=seed),
            f"kmeans_silhouette_k{auto['k']}": auto["labels"],
            f"kmeans_silhouette_k{auto['k']}_trim{TRIM_COSINE}": auto["trimmed"],
        }
        for name, labels in runs.items():
            results[f"{view}_{name}"] = score_pool(labels.tolist(), intents, held)
            shown = results[f"{view}_{name}"]
            print(
                f"{view} {name}: NMI {shown['nmi']} ARI {shown['ari']} noise "
                f"{shown['noise_share']} discovered {shown['discovered']} "
                f"({shown['clusters']} clusters)"
            )
        results[f"{view}_silhouettes"] = auto["silhouettes"]
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {"project": str(project), "seed": seed, "held_out_in_traffic_and_pool": composition}
    output.write_text(json.dumps({**report, **results}, indent=1) + "\n", encoding="utf8")
    print(f"Wrote {output}")


if __name__ == "__main__":
    typer.run(main)
