"""`bert-pipes discover`'s clustering on the frozen encoder's vectors (not a test):
the floor issue 47 sets, measured with our own clustering beside KMeans.

    python bench/discover_frozen.py --seeds 0,1

CLINC150 with 30 of its 150 intents held out (chosen with the seed, as
`convert clinc150-discover` chooses them); the pool is what a perfect router
would flag on test: the held-out intents' 900 test queries and the 1,000
out-of-scope test queries. Each query's vector is the default encoder's
sentence vector (`discover.frozen_vectors`, unit length). Clustered with
`discover.cluster_pool` with K from the data (`bert-pipes discover`'s default,
`--clusters auto`), with `discover.density_clusters` (HDBSCAN* over a
15-nearest-neighbour graph, `--clusters density`, at min cluster sizes 5 and
10) and with `discover.kmeans_clusters` at the true K = 30; and `auto`'s
clusters as the review holds them (`discover.cluster.leave_out_loose`: the
loose ones left out when the silhouette curve is flat). Scored on the held-out queries
only: NMI and ARI against their intents (noise counts as one more cluster), the
share left as noise, and the intents discovered (`discover.score_clusters`): one
cluster holds at least half of an intent's queries and at least 80% of that
cluster is that intent, the cluster's share counted among the held-out queries
(the `discover` workflow of project.yml counts all its docs, out-of-scope ones
included). Writes bench/results/discover_frozen.json.
"""

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import extras  # bench/extras.py: the references apart (Makefile)
import numpy
import typer

from spacy_bert_pipes.convert import held_out_intents
from spacy_bert_pipes.discover import (
    cluster_pool,
    density_clusters,
    frozen_vectors,
    kmeans_clusters,
    score_clusters,
)
from spacy_bert_pipes.discover.cluster import AUTO, leave_out_loose

extras.use()  # scikit-learn (k-means, silhouettes, the scores)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "clinc150" / "data_full.json"
HELD_OUT = 30


def score(gold: List[str], labels: numpy.ndarray, held: numpy.ndarray) -> Dict[str, Any]:
    """The clusters of the whole pool, scored on its held-out queries (a
    cluster's purity counted over those queries only)."""
    ours = score_clusters(gold, labels[held])
    return {
        "clusters": int(len(set(labels.tolist()) - {-1})),
        "nmi": ours["nmi"],
        "ari": ours["ari"],
        "noise_share": round(float((labels == -1).mean()), 4),
        "held_out_noise_share": ours["noise_share"],
        "discovered": ours["discovered"],
    }


def main(seeds: str = typer.Option("0,1", help="Seeds choosing the held-out intents")) -> None:
    data = json.loads(DATA.read_text(encoding="utf8"))
    intents = [intent for _, intent in data["train"]]
    results: Dict[str, Any] = {}
    for seed in [int(s) for s in seeds.split(",")]:
        held_out = set(held_out_intents(intents, HELD_OUT, seed))
        pool = [(t, i) for t, i in data["test"] if i in held_out] + list(data["oos_test"])
        texts = [t for t, _ in pool]
        unit = frozen_vectors(texts)
        held = numpy.asarray([i != "oos" for _, i in pool])
        gold = [i for _, i in pool if i != "oos"]
        auto, method = cluster_pool(unit, AUTO, seed=seed)
        # what `discover`'s review holds: auto with its loose clusters left
        # out when the silhouette curve is flat
        review, _, loose = leave_out_loose(unit, auto, flat=method["flat"], seed=seed)
        runs = {
            "kmeans_k30": kmeans_clusters(unit, HELD_OUT, seed=seed),
            f"kmeans_auto_k{method['k']}": auto,
            f"review_auto_k{method['k']}_{len(loose)}_loose_left_out": review,
            "density_min5": density_clusters(unit, min_cluster_size=5),
            "density_min10": density_clusters(unit, min_cluster_size=10),
        }
        results[str(seed)] = {
            "held_out_intents": sorted(held_out),
            "pool": {"held_out": int(held.sum()), "out_of_scope": int((~held).sum())},
            **{name: score(gold, labels, held) for name, labels in runs.items()},
        }
        for name in runs:
            print(f"seed {seed} {name}: {results[str(seed)][name]}")
    output = ROOT / "bench" / "results" / "discover_frozen.json"
    report = {"command": "python " + " ".join(sys.argv), "results": results}
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
