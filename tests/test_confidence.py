"""The measures of confidence (spacy_bert_pipes.confidence) against brute force."""

import numpy
import pytest

from spacy_bert_pipes.confidence import (
    auroc,
    expected_calibration_error,
    fpr_at_recall,
    reliability,
    risk_coverage,
)


def test_confidence_measures_against_brute_force() -> None:
    rng = numpy.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 300), rng.normal(0, 1, 200)
    pos[:20] = 0.5  # ties across the classes count half
    neg[:10] = 0.5
    pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
    assert auroc(pos, neg) == pytest.approx(numpy.mean(pairs))
    cut = numpy.sort(pos)[15]  # keeps 95% of 300 in-scope docs
    assert fpr_at_recall(pos, neg, 0.95) == pytest.approx((neg >= cut).mean())
    probs = [0.05, 0.95, 0.95, 0.5, 0.5]
    correct = [False, True, False, True, False]
    bins = reliability(probs, correct, 15)
    assert [b["docs"] for b in bins] == [1, 2, 2]
    expected = (1 * 0.05 + 2 * abs(0.5 - 0.5) + 2 * abs(0.95 - 0.5)) / 5
    assert expected_calibration_error(probs, correct, 15) == pytest.approx(expected)
    curve = risk_coverage([0.9, 0.8, 0.1, 0.05], [True, False, True, False], points=4)
    assert [p["accuracy"] for p in curve] == [1.0, 0.5, pytest.approx(2 / 3), 0.5]
    assert curve[-1]["coverage"] == 1.0
