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
view is clustered by `discover.density_clusters` (`--clusters density`, min
cluster size 5), by `discover.kmeans_clusters` at the true K = 30, by
`discover.cluster_pool` with K from the data (`--clusters auto`, the default:
the largest K whose cosine silhouette on a sample is within 5% of the best),
and, to show what that rule adds, by k-means at the K of the best silhouette
of the same curve. Scored as scripts/score_discovery.py scores the workflow's
own clustering: on the held-out intents' queries in the pool, each cluster's
purity counted over all its docs. Also written: for each held-out intent, its queries in the traffic
and in the pool.
"""

import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict

import extras  # bench/extras.py: the references apart (Makefile)
import spacy
import srsly
import typer

from spacy_bert_pipes.convert.clinc150_discover import MANIFEST, TRAFFIC_GOLD
from spacy_bert_pipes.discover import (
    cluster_pool,
    density_clusters,
    frozen_vectors,
    kmeans_clusters,
    read_pool,
    score_pool,
)
from spacy_bert_pipes.discover.cluster import AUTO
from spacy_bert_pipes.discover.labels import prototype_component
from spacy_bert_pipes.discover.pool import embed_rows
from spacy_bert_pipes.similar import unit_rows

extras.use()  # scikit-learn (k-means, silhouettes, the scores)

MIN_CLUSTER_SIZE = 5


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
        auto, method = cluster_pool(unit, AUTO, min_cluster_size=MIN_CLUSTER_SIZE, seed=seed)
        curve = method["silhouettes"]
        best = int(max(curve, key=curve.__getitem__))
        runs = {
            "density_min5": density_clusters(unit, min_cluster_size=MIN_CLUSTER_SIZE),
            f"kmeans_k{len(held)}": kmeans_clusters(unit, len(held), seed=seed),
            f"kmeans_auto_k{method['k']}": auto,
            f"kmeans_best_silhouette_k{best}": kmeans_clusters(
                unit, best, min_cluster_size=MIN_CLUSTER_SIZE, seed=seed
            ),
        }
        for name, labels in runs.items():
            results[f"{view}_{name}"] = score_pool(labels.tolist(), intents, held)
            shown = results[f"{view}_{name}"]
            print(
                f"{view} {name}: NMI {shown['nmi']} ARI {shown['ari']} noise "
                f"{shown['noise_share']} discovered {shown['discovered']} "
                f"({shown['clusters']} clusters)"
            )
        results[f"{view}_silhouettes"] = curve
    output.parent.mkdir(parents=True, exist_ok=True)
    report = {"project": str(project), "seed": seed, "held_out_in_traffic_and_pool": composition}
    output.write_text(json.dumps({**report, **results}, indent=1) + "\n", encoding="utf8")
    print(f"Wrote {output}")


if __name__ == "__main__":
    typer.run(main)
