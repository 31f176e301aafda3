"""`bert-pipes discover`'s clustering on the frozen encoder's vectors (not a test):
the floor issue 47 sets, measured with our own clustering beside KMeans.

    python bench/discover_frozen.py --seeds 0,1

CLINC150 with 30 of its 150 intents held out (chosen with the seed); the pool is
what a perfect router would flag on test: the held-out intents' 900 test queries
and the 1,000 out-of-scope test queries. Each query's vector is the default
encoder's sentence vector (`bert_vectors`, unit length). Clustered with
`discover.density_clusters` (HDBSCAN* over a 15-nearest-neighbour graph, the
default of `bert-pipes discover`, at min cluster sizes 5 and 10) and with
`discover.kmeans_clusters` at the true K = 30. Scored on the held-out queries
only: NMI and ARI against their intents (noise counts as one more cluster), the
share left as noise, and the intents discovered: one cluster holds at least
half of an intent's queries and at least 80% of that cluster is that intent.
Writes bench/results/discover_frozen.json.
"""

import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import numpy
import spacy
import typer

from spacy_bert_pipes.discover import density_clusters, kmeans_clusters

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "clinc150" / "data_full.json"
HELD_OUT = 30


def embed(texts: List[str]) -> numpy.ndarray:
    """The default encoder's unit sentence vectors. (n, width)"""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder")
    nlp.add_pipe("bert_vectors")
    nlp.initialize()
    rows = numpy.stack([numpy.asarray(doc.vector) for doc in nlp.pipe(texts, batch_size=256)])
    return rows / numpy.linalg.norm(rows, axis=1, keepdims=True)


def discovered(gold: List[str], labels: numpy.ndarray) -> int:
    """Intents with a cluster holding >= half their queries, >= 80% of it theirs."""
    sizes = Counter(int(label) for label in labels if label >= 0)
    found = 0
    for intent in set(gold):
        rows = [int(label) for g, label in zip(gold, labels) if g == intent and label >= 0]
        if not rows:
            continue
        cluster, count = Counter(rows).most_common(1)[0]
        if count >= 0.5 * gold.count(intent) and count >= 0.8 * sizes[cluster]:
            found += 1
    return found


def score(gold: List[str], labels: numpy.ndarray, held: numpy.ndarray) -> Dict[str, Any]:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    ours = labels[held]
    return {
        "clusters": int(len(set(labels.tolist()) - {-1})),
        "nmi": round(float(normalized_mutual_info_score(gold, ours)), 4),
        "ari": round(float(adjusted_rand_score(gold, ours)), 4),
        "noise_share": round(float((labels == -1).mean()), 4),
        "held_out_noise_share": round(float((ours == -1).mean()), 4),
        "discovered": discovered(gold, ours),
    }


def main(seeds: str = typer.Option("0,1", help="Seeds choosing the held-out intents")) -> None:
    data = json.loads(DATA.read_text(encoding="utf8"))
    intents = sorted({intent for _, intent in data["train"]})
    results: Dict[str, Any] = {}
    for seed in [int(s) for s in seeds.split(",")]:
        held_out = set(random.Random(seed).sample(intents, HELD_OUT))
        pool = [(t, i) for t, i in data["test"] if i in held_out] + list(data["oos_test"])
        texts = [t for t, _ in pool]
        unit = embed(texts)
        held = numpy.asarray([i != "oos" for _, i in pool])
        gold = [i for _, i in pool if i != "oos"]
        runs = {
            "kmeans_k30": kmeans_clusters(unit, HELD_OUT, seed=seed),
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
