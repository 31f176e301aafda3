"""Measures of a classifier's confidence, in plain numpy over plain lists:
how well calibrated it is (`reliability` bins, `expected_calibration_error`),
how well it separates in-scope from out-of-scope docs (`auroc`,
`fpr_at_recall`) and what accuracy it buys for the docs it keeps
(`risk_coverage`). The routing scores (`scorers.score_routes`) and the router's
calibration (`pipeline/textcat_scope.py`) read them."""

from typing import Dict, List, Sequence

import numpy


def reliability(
    top_probs: Sequence[float], correct: Sequence[bool], n_bins: int = 15
) -> List[Dict[str, float]]:
    """Equal-width bins of the top probability: each bin's docs, mean
    probability and accuracy (empty bins left out)."""
    p = numpy.asarray(top_probs, dtype="float64")
    c = numpy.asarray(correct, dtype="float64")
    # bin i holds (i/n, (i+1)/n]; a probability of 0 goes to the first bin
    index = numpy.clip(numpy.ceil(p * n_bins).astype(int) - 1, 0, n_bins - 1)
    bins = []
    for i in range(n_bins):
        mask = index == i
        if mask.any():
            bins.append(
                {
                    "low": i / n_bins,
                    "high": (i + 1) / n_bins,
                    "docs": int(mask.sum()),
                    "confidence": float(p[mask].mean()),
                    "accuracy": float(c[mask].mean()),
                }
            )
    return bins


def expected_calibration_error(
    top_probs: Sequence[float], correct: Sequence[bool], n_bins: int = 15
) -> float:
    """ECE: the docs-weighted mean gap between confidence and accuracy over
    equal-width bins of the top probability (Guo et al. 2017)."""
    bins = reliability(top_probs, correct, n_bins)
    total = sum(b["docs"] for b in bins)
    if not total:
        return 0.0
    return float(sum(b["docs"] * abs(b["confidence"] - b["accuracy"]) for b in bins) / total)


def auroc(in_scope: Sequence[float], out_of_scope: Sequence[float]) -> float:
    """The probability that an in-scope doc's confidence exceeds an out-of-scope
    doc's (ties count half): the area under the ROC curve."""
    pos = numpy.asarray(in_scope, dtype="float64")
    neg = numpy.asarray(out_of_scope, dtype="float64")
    values = numpy.concatenate([pos, neg])
    order = numpy.argsort(values, kind="mergesort")
    ranks = numpy.empty(len(values))
    sorted_values = values[order]
    # average ranks of ties
    starts = numpy.r_[0, numpy.flatnonzero(numpy.diff(sorted_values)) + 1]
    ends = numpy.r_[starts[1:], len(values)]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2
    rank_sum = ranks[: len(pos)].sum()
    return float((rank_sum - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def fpr_at_recall(
    in_scope: Sequence[float], out_of_scope: Sequence[float], recall: float = 0.95
) -> float:
    """The share of out-of-scope docs kept at the highest confidence threshold
    that keeps `recall` of the in-scope docs (FPR95 for 0.95)."""
    pos = numpy.sort(numpy.asarray(in_scope, dtype="float64"))
    neg = numpy.asarray(out_of_scope, dtype="float64")
    cut = pos[int(numpy.floor((1 - recall) * len(pos)))]
    return float((neg >= cut).mean())


def risk_coverage(
    confidences: Sequence[float], correct: Sequence[bool], points: int = 50
) -> List[Dict[str, float]]:
    """Accuracy of the docs kept against the share kept, keeping the most
    confident first: `points` points from the most confident 2% to all."""
    conf = numpy.asarray(confidences, dtype="float64")
    ok = numpy.asarray(correct, dtype="float64")[numpy.argsort(-conf, kind="mergesort")]
    n = len(ok)
    if not n:
        return []
    cum = numpy.cumsum(ok)
    curve = []
    for share in numpy.linspace(1 / points, 1.0, points):
        kept = max(int(round(share * n)), 1)
        curve.append({"coverage": kept / n, "accuracy": float(cum[kept - 1] / kept)})
    return curve
