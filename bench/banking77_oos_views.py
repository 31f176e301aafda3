"""The trained router's out-of-scope confidence beside the frozen encoder's, and
the two combined, on BANKING77-OOS (not a test): does the frozen geometry that
fine-tuning loses add what the router misses on near misses (ID-OOS)?

    spacy project run route-banking            # the router and its predictions
    python bench/banking77_oos_views.py --project .

Per test file (test_id, test_ood), from one project folder that ran
`route-banking`:

    router     the routed pipeline's confidence (`bert-pipes evaluate`'s
               predictions: route.confidence, calibrated on in-scope queries)
    frozen     the cosine of the default encoder's frozen sentence vector with
               the nearest training query (bench/banking77_oos_baselines.py's
               "nearest"), as a percentile among val's in-scope queries
    mean       the mean of the two percentiles (the router's confidence is one
               already: the share of in-scope reference queries that look less
               typical)
    min        the lower of the two

AUROC and FPR95 with the in-scope queries as the positive class; no
out-of-scope query is used to fit anything. Writes --output
(bench/results/banking77_oos_views_seed<S>.json).
"""

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from banking77_oos_baselines import embed, read_split  # noqa: E402

from spacy_bert_pipes.confidence import auroc, fpr_at_recall  # noqa: E402
from spacy_bert_pipes.models.heads.scope import knn_scores, unit_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TESTS = {"test_id": "route_banking_id", "test_ood": "route_banking_ood"}


def router_confidences(path: Path, texts: List[str]) -> numpy.ndarray:
    """route.confidence of each doc of a predictions file, in the test file's order."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()]
    if [row["text"] for row in rows] != texts:
        raise SystemExit(f"{path}: its docs are not those of the test file, in order")
    return numpy.asarray([row["components"]["bert_textcat"]["route"]["confidence"] for row in rows])


def percentile(reference: numpy.ndarray, scores: numpy.ndarray) -> numpy.ndarray:
    """The share of reference scores below each score."""
    ordered = numpy.sort(reference)
    return numpy.searchsorted(ordered, scores, side="left") / len(ordered)


def main(
    project: Path = typer.Option(Path("."), help="A project folder that ran route-banking"),
    seed: int = typer.Option(0, help="The route_banking_seed it ran with (for the file name)"),
    output: Path = typer.Option(None, help="Results JSON"),
) -> None:
    corpus = project / "corpus" / "banking77_oos"
    splits = {name: read_split(corpus / f"{name}.spacy", 0) for name in ("train", "val", *TESTS)}
    texts = list(dict.fromkeys(t for texts_, _ in splits.values() for t in texts_))
    vectors = dict(zip(texts, embed(texts, "fp32", 256)))
    train = unit_rows(numpy.stack([vectors[t] for t in splits["train"][0]]))

    def nearest(names: List[str]) -> numpy.ndarray:
        return 1.0 - knn_scores(numpy.stack([vectors[t] for t in names]), train, 1)

    val_texts, val_gold = splits["val"]
    val_in_scope = [t for t, g in zip(val_texts, val_gold) if g is not None]
    reference = nearest(val_in_scope)
    results: Dict[str, Any] = {}
    for name, stem in TESTS.items():
        test_texts, gold = splits[name]
        in_scope = numpy.asarray([g is not None for g in gold])
        router = router_confidences(project / "metrics" / f"{stem}_predictions.jsonl", test_texts)
        frozen = percentile(reference, nearest(test_texts))
        views = {
            "router": router,
            "frozen": frozen,
            "mean": (router + frozen) / 2,
            "min": numpy.minimum(router, frozen),
        }
        results[name] = {
            view: {
                "auroc": auroc(scores[in_scope], scores[~in_scope]),
                "fpr95": fpr_at_recall(scores[in_scope], scores[~in_scope], 0.95),
            }
            for view, scores in views.items()
        }
        for view, figures in results[name].items():
            print(
                f"{name} {view:7s} AUROC {figures['auroc']:.4f} FPR95 {100 * figures['fpr95']:.1f}%"
            )
    output = output or RESULTS / f"banking77_oos_views_seed{seed}.json"
    report = {"command": "python " + " ".join(sys.argv), "seed": seed, "results": results}
    output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
