"""The oos_threshold of an exclusive `bert_textcat`, chosen on dev docs
(`bert-pipes threshold`): one prediction pass, then what each threshold from
0 to 1 does (in-scope coverage, routed right, out-of-scope recall and a score
of the component), and the threshold one rule picks (a coverage, a cost ratio
or the best score). The routing itself is `textcat_scope.py`.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy
from spacy.language import Language
from spacy.training import Corpus, Example

from ..scorers import score_routes
from .textcat_scope import ScopeRouter

# The in-scope coverage `bert-pipes threshold` chooses for when given no rule
# (docs/routing.md): it does not depend on how much foreign traffic the dev set holds.
DEFAULT_COVERAGE = 0.97
# The score shown beside each threshold when no --key is given.
DEFAULT_KEY = "cats_oos_f2"


class ThresholdTrial(NamedTuple):
    """What one oos_threshold does on the dev docs.

    threshold (float): The oos_threshold.
    coverage (Optional[float]): The share of in-scope docs routed.
    routed_accuracy (Optional[float]): The share of in-scope docs routed to
        their gold label ("routed right").
    oos_recall (Optional[float]): The share of out-of-scope docs not routed.
    foreign_routed (int): Out-of-scope docs routed.
    abstained (int): In-scope docs not routed.
    score (Optional[float]): The value of the sweep's key.
    """

    threshold: float
    coverage: Optional[float]
    routed_accuracy: Optional[float]
    oos_recall: Optional[float]
    foreign_routed: int
    abstained: int
    score: Optional[float]

    def cost(self, cost_ratio: float) -> float:
        """A foreign doc routed costs `cost_ratio`, an in-scope doc not routed 1."""
        return cost_ratio * self.foreign_routed + self.abstained


@dataclass
class ThresholdSweep:
    """The trials of `sweep_thresholds` and the one its rule chose.

    rule (str): How the best was chosen: "coverage 0.97", "cost ratio 5",
        "max cats_oos_f2".
    best (ThresholdTrial): The chosen threshold.
    trials (List[ThresholdTrial]): Every threshold tried, 0 to 1.
    """

    component: str
    key: str
    rule: str
    best: ThresholdTrial
    trials: List[ThresholdTrial]
    in_scope_docs: int
    out_of_scope_docs: int

    def to_json(self) -> Dict[str, Any]:
        """The report `bert-pipes threshold` writes."""
        return {
            "component": self.component,
            "key": self.key,
            "rule": self.rule,
            "in_scope_docs": self.in_scope_docs,
            "out_of_scope_docs": self.out_of_scope_docs,
            "best_threshold": self.best.threshold,
            "best_score": self.best.score,
            "best": self._row(self.best),
            "scores": [self._row(trial) for trial in self.trials],
        }

    def _row(self, trial: ThresholdTrial) -> Dict[str, Any]:
        return {
            "threshold": trial.threshold,
            "coverage": trial.coverage,
            "routed_accuracy": trial.routed_accuracy,
            "oos_recall": trial.oos_recall,
            "foreign_routed": trial.foreign_routed,
            "abstained": trial.abstained,
            self.key: trial.score,
        }


def sweep_thresholds(
    nlp: Language,
    dev: Path,
    component: str,
    key: Optional[str] = None,
    trials: int = 101,
    *,
    coverage: Optional[float] = None,
    cost_ratio: Optional[float] = None,
) -> ThresholdSweep:
    """What `trials` values of oos_threshold from 0 to 1 do on the dev docs (the
    in-scope coverage, routed right, out-of-scope recall and `key`), and the
    best by one rule:

    - `coverage`: the highest threshold that routes at least this share of the
      in-scope dev docs (found among their confidences, not only the trials);
    - `cost_ratio`: the least cost, where a foreign doc routed costs
      `cost_ratio` and an in-scope doc not routed costs 1;
    - else, with `key`: its best value, what `spacy find-threshold PIPELINE DEV
      COMPONENT oos_threshold KEY -n TRIALS` reports (ties to the lowest
      threshold);
    - with none of them: coverage DEFAULT_COVERAGE.

    There is one prediction pass (the confidence does not depend on the
    threshold), so it takes seconds, not a pipeline run a trial.
    """
    if trials < 2:
        raise ValueError(f"trials must be >= 2, got {trials}")
    if sum(rule is not None for rule in (coverage, cost_ratio)) > 1:
        raise ValueError("choose the threshold by one rule: a coverage or a cost ratio")
    if coverage is None and cost_ratio is None and key is None:
        coverage = DEFAULT_COVERAGE
    if coverage is not None and not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
    if cost_ratio is not None and not cost_ratio > 0:
        raise ValueError(f"cost ratio must be > 0, got {cost_ratio!r}")
    if component not in nlp.pipe_names:
        raise ValueError(f"No component '{component}' in the pipeline; it has {nlp.pipe_names}")
    pipe: Any = nlp.get_pipe(component)
    router = getattr(pipe, "router", None)
    if router is None or not getattr(pipe, "exclusive", False):
        raise ValueError(f"'{component}' is not an exclusive bert_textcat")
    examples = list(Corpus(dev)(nlp))
    docs = list(nlp.pipe(eg.predicted for eg in examples))
    scored = [Example(doc, eg.reference) for doc, eg in zip(docs, examples)]
    in_scope = [router.gold_index(eg) is not None for eg in scored]
    n_in = sum(in_scope)
    n_out = len(scored) - n_in
    prefix = router.cfg["score_prefix"]
    shown = key if key is not None else prefix + DEFAULT_KEY[len("cats") :]
    by_key = coverage is None and cost_ratio is None
    _check_key(pipe, scored, component, shown, dev, (n_in, n_out), by_key)
    if coverage is not None and not n_in:
        raise ValueError(f"choosing for a coverage needs in-scope docs in {dev}; found none")
    if cost_ratio is not None and not (n_in and n_out):
        raise ValueError(
            f"choosing for a cost ratio needs in-scope and out-of-scope docs in {dev}; "
            f"found {n_in} in-scope and {n_out} out-of-scope docs"
        )
    labels = router.labels
    probs = numpy.asarray([[doc.cats[label] for label in labels] for doc in docs], dtype="f")
    conf = numpy.asarray([doc._.get(router.attr)["confidence"] for doc in docs], dtype="f")

    def trial(threshold: float) -> ThresholdTrial:
        router.cfg["oos_threshold"] = threshold
        for doc, route in zip(docs, router.routes(probs, conf)):
            doc._.set(router.attr, route)
        scores = _scores_at_threshold(pipe, router, scored, shown)
        cov, right, oos_r = (
            scores.get(f"{prefix}_{name}") for name in ("coverage", "routed_accuracy", "oos_r")
        )
        value = scores.get(shown)
        return ThresholdTrial(
            threshold,
            cov,
            right,
            oos_r,
            round(n_out * (1 - oos_r)) if oos_r is not None else 0,
            round(n_in * (1 - cov)) if cov is not None else 0,
            float(value) if isinstance(value, (int, float)) else None,
        )

    kept = router.cfg["oos_threshold"]
    try:
        table = [trial(t) for t in numpy.linspace(0, 1, trials).tolist()]
        if coverage is not None:
            # the highest threshold that keeps `coverage` of the in-scope docs
            ranked = numpy.sort(conf[numpy.asarray(in_scope)])
            best = trial(float(ranked[int(numpy.floor((1 - coverage) * len(ranked)))]))
            rule = f"coverage {coverage:g}"
        elif cost_ratio is not None:
            best = min(table, key=lambda t: (t.cost(cost_ratio), t.threshold))
            rule = f"cost ratio {cost_ratio:g}"
        else:
            best = max(table, key=lambda t: (_number(t.score), -t.threshold))
            rule = f"max {shown}"
    finally:
        router.cfg["oos_threshold"] = kept
    return ThresholdSweep(component, shown, rule, best, table, n_in, n_out)


def _check_key(
    pipe: Any,
    examples: List[Example],
    component: str,
    key: str,
    dev: Path,
    docs: Tuple[int, int],
    needed: bool,
) -> None:
    """An error that lists the valid keys for a key the component does not
    score, and, when the threshold is chosen by it (`needed`), says what is
    missing for one it cannot score on `dev` (`docs`: in-scope and out-of-scope
    docs)."""
    scores = pipe.score(examples)
    if key not in scores or (key.endswith("_desc") or isinstance(scores[key], (dict, list))):
        valid = sorted(k for k, v in scores.items() if isinstance(v, (int, float)) or v is None)
        raise ValueError(f"'{component}' has no score {key!r}; its scores: {', '.join(valid)}")
    if needed and scores[key] is None:
        raise ValueError(
            f"'{component}' cannot score {key!r} on {dev}: it has {docs[0]} in-scope and "
            f"{docs[1]} out-of-scope docs (an out-of-scope doc has no positive label, or "
            "the oos_label: docs/routing.md)"
        )


def _scores_at_threshold(
    pipe: Any, router: ScopeRouter, examples: List[Example], key: str
) -> Dict[str, Any]:
    """The component's scores: the routing scores alone when `key` is one of
    them, else all of them (the per-label scores count the routing decision
    too)."""
    prefix = router.cfg["score_prefix"]
    routing = score_routes(examples, router.labels, router.attr, router.cfg["oos_label"])
    renamed = {prefix + name[len("cats") :]: value for name, value in routing.items()}
    return renamed if key in renamed else {**pipe.score(examples), **renamed}


def _number(value: Optional[float]) -> float:
    return value if value is not None else float("-inf")
