"""Routing for an exclusive `bert_textcat`: the out-of-scope confidence of each
doc, the decision (routed, out of scope, ambiguous) written to `doc._.route`,
and calibration on held-out docs (`bert-pipes calibrate`). The math is
`models/heads/scope.py`; this module reads and writes Docs.

`doc._.route` (`doc._.<prefix>_route` for a classifier whose score_prefix is
not "cats") is a dict:

    {"label": the routed label, or None when the doc is not routed,
     "top": the most probable label, "confidence": in-scope confidence in [0, 1],
     "decision": "routed" | "out_of_scope" | "ambiguous"}
"""

from dataclasses import dataclass
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    cast,
)

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Corpus, Example
from thinc.api import Model
from thinc.types import Floats2d

from ..models.heads.scope import (
    SCOPE_METHODS,
    TEMPERATURE_ATTR,
    ScopeFit,
    confidence,
    fit_scope,
    fit_temperature,
    get_fit,
    get_temperature,
    raw_scores,
    scale_probs,
    set_fit,
)
from ..confidence import expected_calibration_error
from ..scorers import score_routes

DECISIONS = ("routed", "out_of_scope", "ambiguous")
# Runs a pipeline's components before a classifier on a batch of docs.
Prepare = Callable[[List[Doc]], List[Doc]]
# docs encoded at a time when calibrating
CALIBRATE_BATCH = 256


class RoutedScores(NamedTuple):
    """What an exclusive `bert_textcat` predicts for a batch.

    probs (Floats2d): Label probabilities, temperature-scaled. (n_docs, n_labels)
    confidence (Optional[numpy.ndarray]): In-scope confidence per doc (exclusive
        classes only, else None). (n_docs,)
    """

    probs: Floats2d
    confidence: Optional[numpy.ndarray]


def route_attr(score_prefix: str) -> str:
    """The doc._ attribute a classifier writes its routes to."""
    return "route" if score_prefix == "cats" else f"{score_prefix}_route"


def ensure_route_extension(name: str) -> None:
    if not Doc.has_extension(name):
        Doc.set_extension(name, default=None)


def check_scope_settings(
    name: str, method: str, threshold: float, margin: float, oos_label: Optional[str]
) -> None:
    """A clear error for out-of-scope settings that cannot work."""
    if method not in SCOPE_METHODS:
        raise ValueError(
            f"oos_method of '{name}' must be one of {list(SCOPE_METHODS)}, got {method!r}"
        )
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"oos_threshold of '{name}' must be in [0, 1], got {threshold!r}")
    if not 0.0 <= margin <= 1.0:
        raise ValueError(f"ambiguity_margin of '{name}' must be in [0, 1], got {margin!r}")
    if oos_label is not None and (not isinstance(oos_label, str) or not oos_label.strip()):
        raise ValueError(f"oos_label of '{name}' must be a non-blank string or null")


class ScopeRouter:
    """The routing of one exclusive classifier: its model (which holds the
    calibration) and its cfg (which holds the settings)."""

    def __init__(self, name: str, model: Model, cfg: Dict[str, Any]) -> None:
        self.name = name
        self.model = model
        self.cfg = cfg

    @property
    def labels(self) -> List[str]:
        return list(self.cfg["labels"])

    @property
    def attr(self) -> str:
        return route_attr(self.cfg["score_prefix"])

    @property
    def method(self) -> str:
        return str(self.cfg["oos_method"])

    @property
    def fit(self) -> Optional[ScopeFit]:
        return get_fit(self.model)

    # --- predicting ---------------------------------------------------------------
    def forward(self, docs: List[Doc]) -> Tuple[numpy.ndarray, Floats2d]:
        """The model's prediction in two steps: the features (on the host) and
        the probabilities computed from them."""
        X: Any = docs
        for layer in self.model.layers[:-1]:
            X = layer.predict(X)
        probs = self.model.layers[-1].predict(X)
        return self.model.ops.to_numpy(X).astype("f"), probs

    def predict(self, docs: List[Doc]) -> RoutedScores:
        """Temperature-scaled probabilities and the in-scope confidence; the
        features are taken only when the configured method needs them and is
        fit (the saved fit is read once a batch)."""
        fit, method = self.fit, self.method
        X: Optional[numpy.ndarray] = None
        if method != "max_prob" and fit is not None and fit.method == method:
            X, probs = self.forward(docs)
        else:
            probs = self.model.predict(docs)
        scaled = scale_probs(self.model.ops.to_numpy(probs), get_temperature(self.model))
        conf = confidence(fit, method, raw_scores(fit, method, X, scaled))
        return RoutedScores(self.model.ops.asarray2f(cast(Floats2d, scaled)), conf)

    def confidences(self, docs: List[Doc]) -> numpy.ndarray:
        """Each doc's in-scope confidence, as `doc._.route` would give it. (n_docs,)"""
        conf = self.predict(docs).confidence
        assert conf is not None
        return conf

    def routes(self, probs: numpy.ndarray, conf: numpy.ndarray) -> List[Dict[str, Any]]:
        """Each doc's route from its probabilities and confidence."""
        labels = self.labels
        threshold = float(self.cfg["oos_threshold"])
        margin = float(self.cfg["ambiguity_margin"])
        oos_label = self.cfg["oos_label"]
        routes = []
        if probs.shape[1] >= 2:
            top2 = numpy.sort(probs, axis=1)[:, -2:]
            gaps = top2[:, 1] - top2[:, 0]
        else:
            gaps = numpy.ones(len(probs), dtype="f")
        for row, c, gap in zip(probs.argmax(axis=1).tolist(), conf.tolist(), gaps.tolist()):
            top = labels[row]
            if top == oos_label or c < threshold:
                decision = "out_of_scope"
            elif gap < margin:
                decision = "ambiguous"
            else:
                decision = "routed"
            routes.append(
                {
                    "label": top if decision == "routed" else None,
                    "top": top,
                    "confidence": c,
                    "decision": decision,
                }
            )
        return routes

    def set_annotations(self, docs: Sequence[Doc], scores: RoutedScores) -> None:
        if scores.confidence is None:
            return
        probs = self.model.ops.to_numpy(scores.probs)
        for doc, route in zip(docs, self.routes(probs, scores.confidence)):
            doc._.set(self.attr, route)

    # --- calibrating -----------------------------------------------------------------
    def gold_index(self, example: Example) -> Optional[int]:
        """The index of the example's in-scope gold label; None for a doc with
        no positive label among ours, or the oos_label (out of scope)."""
        cats = example.reference.cats
        own = {label: cats[label] for label in self.labels if label in cats}
        if not own:
            return None
        best = max(own, key=own.__getitem__)
        if own[best] < 0.5 or best == self.cfg["oos_label"]:
            return None
        return self.labels.index(best)

    def encode(
        self, docs: List[Doc], prepare: Optional[Prepare] = None
    ) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Features and raw probabilities of many docs, in batches; `prepare`
        runs the upstream components on each batch (a shared encoder)."""
        feats, probs = [], []
        for start in range(0, len(docs), CALIBRATE_BATCH):
            batch = docs[start : start + CALIBRATE_BATCH]
            X, P = self.forward(prepare(batch) if prepare is not None else batch)
            feats.append(X)
            probs.append(self.model.ops.to_numpy(P).astype("f"))
        width = self.model.get_ref("output").get_dim("nI")
        if not feats:
            return numpy.zeros((0, width), "f"), numpy.zeros((0, len(self.labels)), "f")
        return numpy.concatenate(feats), numpy.concatenate(probs)

    def calibrate(
        self,
        train: Iterable[Example],
        dev: Iterable[Example],
        *,
        coverage: Optional[float] = None,
        k: int = 1,
        prepare: Optional[Prepare] = None,
    ) -> Dict[str, Any]:
        """Fit the temperature on the in-scope dev docs, the out-of-scope method
        on the in-scope training docs and its reference scores on the dev docs;
        with `coverage`, set oos_threshold so that that share of the in-scope
        dev docs is kept.

        RETURNS (Dict[str, Any]): what was fit: temperature, method, the
            in-scope dev ECE before and after, the threshold (if set).
        """
        if coverage is not None and not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must be in (0, 1], got {coverage!r}")
        dev_docs, dev_gold = self._in_scope(dev, "dev")
        if len(dev_docs) < 2:
            raise ValueError(
                f"calibrating '{self.name}' needs in-scope dev docs (with a positive "
                f"label among its {len(self.labels)} labels); found {len(dev_docs)}"
            )
        dev_X, dev_probs = self.encode(dev_docs, prepare)
        temperature = fit_temperature(dev_probs, dev_gold)
        scaled = scale_probs(dev_probs, temperature)
        correct = scaled.argmax(axis=1) == dev_gold
        train_X = train_y = None
        if self.method != "max_prob":
            train_docs, train_gold = self._in_scope(train, "train")
            if not train_docs:
                raise ValueError(f"oos_method {self.method!r} needs in-scope training docs")
            train_X, _ = self.encode(train_docs, prepare)
            train_y = train_gold
        fit = fit_scope(
            self.method,
            train_vectors=train_X,
            train_labels=train_y,
            n_labels=len(self.labels),
            ref_vectors=dev_X,
            ref_probs=scaled,
            k=k,
        )
        self.model.attrs[TEMPERATURE_ATTR] = temperature
        set_fit(self.model, fit)
        report: Dict[str, Any] = {
            "component": self.name,
            "method": self.method,
            "temperature": temperature,
            "dev_in_scope_docs": len(dev_docs),
            "dev_ece_before": expected_calibration_error(dev_probs.max(axis=1), correct),
            "dev_ece_after": expected_calibration_error(scaled.max(axis=1), correct),
        }
        if coverage is not None:
            conf = confidence(fit, self.method, fit.reference)
            # the share of reference docs kept at threshold t is the share with conf >= t
            threshold = float(numpy.sort(conf)[int(numpy.floor((1 - coverage) * len(conf)))])
            self.cfg["oos_threshold"] = threshold
            report["coverage"] = coverage
            report["oos_threshold"] = threshold
        return report

    def _in_scope(self, examples: Iterable[Example], what: str) -> Tuple[List[Doc], numpy.ndarray]:
        docs, gold = [], []
        for eg in examples:
            index = self.gold_index(eg)
            if index is not None:
                docs.append(eg.predicted)
                gold.append(index)
        return docs, numpy.asarray(gold, dtype="int64")


class Calibrated(Protocol):
    """What `calibrate_pipeline` needs of a component (BertTextCategorizer)."""

    exclusive: bool

    def calibrate(
        self,
        train: Iterable[Example],
        dev: Iterable[Example],
        *,
        coverage: Optional[float],
        prepare: Optional[Prepare],
    ) -> Dict[str, Any]: ...


def calibrate_pipeline(
    nlp: Language,
    train: Optional[Path],
    dev: Path,
    *,
    component: Optional[str] = None,
    coverage: Optional[float] = None,
) -> Dict[str, Any]:
    """Calibrate a pipeline's exclusive `bert_textcat` on .spacy corpora
    (`BertTextCategorizer.calibrate`) and write a threshold chosen for
    `coverage` into its config, so that the saved pipeline loads with it.

    train (Optional[Path]): The training corpus (the feature methods fit on
        its in-scope docs; "max_prob" needs none).
    dev (Path): Held-out docs: the in-scope ones fit the temperature and the
        confidence's reference.
    component (Optional[str]): The component; default: the only exclusive
        bert_textcat.
    RETURNS (Dict[str, Any]): What was fit (`ScopeRouter.calibrate`).
    """
    if component is None:
        names = [
            name
            for name, pipe in nlp.pipeline
            if hasattr(pipe, "calibrate") and getattr(pipe, "exclusive", False)
        ]
        if len(names) != 1:
            raise ValueError(
                f"Name the exclusive bert_textcat component to calibrate; found {names}"
            )
        component = names[0]
    if component not in nlp.pipe_names:
        raise ValueError(f"No component '{component}' in the pipeline; it has {nlp.pipe_names}")
    pipe = cast(Calibrated, nlp.get_pipe(component))
    if not hasattr(pipe, "calibrate"):
        raise ValueError(f"'{component}' is not a bert_textcat")
    # the docs as the pipeline's tokenizer makes them, not annotated yet
    dev_examples = list(Corpus(dev)(nlp))
    train_examples = list(Corpus(train)(nlp)) if train is not None else []
    upstream = [nlp.get_pipe(name) for name in nlp.pipe_names[: nlp.pipe_names.index(component)]]

    def prepare(docs: List[Doc]) -> List[Doc]:
        for proc in upstream:  # e.g. the shared bert_encoder a listener reads
            docs = list(cast(Any, proc).pipe(docs))
        return docs

    report = pipe.calibrate(train_examples, dev_examples, coverage=coverage, prepare=prepare)
    if "oos_threshold" in report:
        nlp.get_pipe_config(component)["oos_threshold"] = report["oos_threshold"]
    return report


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
