"""Score the `discover` workflow against CLINC150's true intents and write
metrics/discover.json (docs/discover.md, "The discover workflow").

python scripts/score_discovery.py CORPUS TRAFFIC DISCOVERY LOOP BEFORE AFTER OUTPUT \
    [--encoder CHECKPOINT] [--seed 0]

CORPUS     what `bert-pipes convert clinc150-discover` wrote
TRAFFIC    the router's `bert-pipes annotate` OUTPUT of CORPUS/traffic.jsonl
DISCOVERY  what `bert-pipes discover` wrote from TRAFFIC (assignments, review)
LOOP       the extended router's annotate OUTPUT of CORPUS/test_held_out.jsonl
BEFORE     `bert-pipes evaluate` of the router on CORPUS/test.spacy
AFTER      the same of the router with every cluster added as a label

The pool is what the router did not route among the traffic, and with
discover's `--below` what it routed with a lower confidence (the docs
DISCOVERY clustered). The clusters are scored on the held-out intents' queries
in the pool, beside the frozen encoder's vectors of the same pool clustered
by k-means at the true K, by discover's default (`--clusters auto`) and by
`--clusters density`; then the loop: the
held-out intents' test queries routed to the new label that stands for their
intent, and the known intents' test accuracy before and after. The math is
`spacy_bert_pipes.discover.score`'s.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import srsly
import typer

from spacy_bert_pipes.convert.clinc150_discover import (
    MANIFEST,
    TEST_HELD_OUT,
    TRAFFIC,
    TRAFFIC_GOLD,
)
from spacy_bert_pipes.discover import (
    ASSIGNMENTS,
    baseline_clusters,
    frozen_vectors,
    label_intents,
    read_discovery,
    read_pool,
    read_review,
    routed_to_intents,
    score_pool,
)

# The test scores compared before and after the new labels.
KNOWN_TEST_KEYS = ("cats_accuracy", "cats_routed_accuracy")
# The scores of a clustering printed.
SHOWN = ("clusters", "pool_noise_share", "nmi", "ari", "noise_share", "discovered")


def kinds(intents: Sequence[str], held_out: Sequence[str]) -> Dict[str, int]:
    """The queries of held-out intents, of known intents and out of scope."""
    held = set(held_out)
    n_held = sum(intent in held for intent in intents)
    n_oos = sum(intent == "oos" for intent in intents)
    return {
        "queries": len(intents),
        "held_out": n_held,
        "known": len(intents) - n_held - n_oos,
        "oos": n_oos,
    }


def main(
    corpus: Path = typer.Argument(..., exists=True, file_okay=False),
    traffic: Path = typer.Argument(..., exists=True),
    discovery: Path = typer.Argument(..., exists=True, file_okay=False),
    loop: Path = typer.Argument(..., exists=True),
    before: Path = typer.Argument(..., exists=True, dir_okay=False),
    after: Path = typer.Argument(..., exists=True, dir_okay=False),
    output: Path = typer.Argument(..., dir_okay=False),
    encoder: Optional[str] = typer.Option(None, help="The checkpoint of the frozen vectors"),
    seed: int = typer.Option(0, help="The seed of the frozen k-means"),
) -> None:
    manifest = json.loads((corpus / MANIFEST).read_text(encoding="utf8"))
    held_out: List[str] = manifest["held_out_intents"]
    gold = {row["id"]: row["intent"] for row in srsly.read_jsonl(corpus / TRAFFIC_GOLD)}
    texts = {row["id"]: row["text"] for row in srsly.read_jsonl(corpus / TRAFFIC)}
    routes = read_pool(traffic)
    found = read_discovery(discovery)
    assignments = list(srsly.read_jsonl(discovery / ASSIGNMENTS))
    pool_ids = [row["id"] for row in assignments]
    below = float(found.summary.get("below", 0.0))
    pooled = [routes.ids[row] for row in routes.pooled(found.summary["pooled_decisions"], below)]
    if pool_ids != pooled or set(routes.ids) != set(gold):
        raise SystemExit(f"{discovery} was not discovered from {traffic} of {corpus}")
    intents = [gold[i] for i in pool_ids]
    clusters = [int(row["cluster"]) for row in assignments]
    print(
        f"pool: {kinds(intents, held_out)} of the traffic's {kinds(list(gold.values()), held_out)}"
    )

    clustering: Dict[str, Any] = {"discover": score_pool(clusters, intents, held_out)}
    unit = frozen_vectors([texts[i] for i in pool_ids], checkpoint=encoder)
    for name, labels in baseline_clusters(unit, len(held_out), seed=seed).items():
        clustering[f"frozen_{name}"] = score_pool(labels.tolist(), intents, held_out)
    for name, scores in clustering.items():
        print(f"{name}: " + ", ".join(f"{key} {scores[key]}" for key in SHOWN))

    # every cluster a label under its name (add-label --review --accept-all)
    label_clusters: Dict[str, List[int]] = defaultdict(list)
    for row in read_review(discovery / found.summary["files"]["review"]):
        label_clusters[row.name].append(row.cluster)
    stands_for = label_intents(label_clusters, clusters, intents)
    test_gold = {row["id"]: row["intent"] for row in srsly.read_jsonl(corpus / TEST_HELD_OUT)}
    extended = read_pool(loop)
    if set(extended.ids) != set(test_gold):
        raise SystemExit(f"{loop} is not the annotation of {corpus / TEST_HELD_OUT}")
    routed = routed_to_intents(extended.labels, [test_gold[i] for i in extended.ids], stands_for)
    scores_before = json.loads(before.read_text(encoding="utf8"))
    scores_after = json.loads(after.read_text(encoding="utf8"))
    known_test = {
        key: {
            "before": scores_before[key],
            "after": scores_after[key],
            "drop_points": round(100 * (scores_before[key] - scores_after[key]), 2),
        }
        for key in KNOWN_TEST_KEYS
    }
    loop_scores = {
        "new_labels": len(label_clusters),
        "held_out_intents_with_a_label": len(set(stands_for.values()) & set(held_out)),
        "held_out_test": routed,
        "known_test": known_test,
    }
    print(f"loop: {loop_scores}")

    report = {
        "seed": manifest["seed"],
        "held_out_intents": held_out,
        "traffic": kinds(list(gold.values()), held_out),
        "pool": kinds(intents, held_out),
        "clustering": clustering,
        "loop": loop_scores,
        "label_intents": stands_for,
        "discovery": {
            key: found.summary.get(key)
            for key in ("method", "vectors", "min_cluster_size", "below", "pooled_routed")
        },
        "frozen_encoder": encoder or "the bert_encoder's default",
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
