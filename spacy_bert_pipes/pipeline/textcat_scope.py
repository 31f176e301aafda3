"""Routing for an exclusive `bert_textcat`: the out-of-scope confidence of each
doc, the decision (routed, out of scope, ambiguous) written to `doc._.route`,
and calibration on held-out docs (`bert-pipes calibrate`); the settings'
defaults are `SCOPE_SETTINGS`, checked by `check_scope_settings`. The math is
`models/heads/scope.py`; this module reads and writes Docs. What each
oos_threshold does on dev docs (`bert-pipes threshold`) is
`textcat_threshold.py`.

`doc._.route` (`doc._.<prefix>_route` for a classifier whose score_prefix is
not "cats") is a dict:

    {"label": the routed label, or None when the doc is not routed,
     "top": the most probable label, "confidence": in-scope confidence in [0, 1],
     "decision": "routed" | "out_of_scope" | "ambiguous"}
"""

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
from spacy.tokens import Doc, DocBin
from spacy.training import Corpus, Example
from thinc.api import Model
from thinc.types import Floats2d

from ..confidence import expected_calibration_error
from ..models.heads.scope import (
    SCOPE_METHODS,
    TEMPERATURE_ATTR,
    ScopeFit,
    confidence,
    extend_fit,
    fit_scope,
    fit_temperature,
    get_fit,
    get_temperature,
    raw_scores,
    sample_reach,
    scale_probs,
    set_fit,
)
from .textcat_holdout import record_calibration, split_dev

DECISIONS = ("routed", "out_of_scope", "ambiguous")
# Runs a pipeline's components before a classifier on a batch of docs.
Prepare = Callable[[List[Doc]], List[Doc]]
# docs encoded at a time when calibrating
CALIBRATE_BATCH = 256
# The settings of out-of-scope detection and abstention (exclusive classes),
# with their defaults (docs/routing.md).
SCOPE_SETTINGS: Dict[str, Any] = {
    "oos_method": "max_prob",
    "oos_threshold": 0.0,
    "oos_label": None,
    "ambiguity_margin": 0.0,
}


class RoutedScores(NamedTuple):
    """What an exclusive `bert_textcat` predicts for a batch.

    probs (Floats2d): Label probabilities, temperature-scaled. (n_docs, n_labels)
    confidence (Optional[numpy.ndarray]): In-scope confidence per doc (exclusive
        classes only, else None). (n_docs,)
    vectors (Optional[numpy.ndarray]): The unit sentence vectors the
        probabilities were computed from, on the host (a model with label
        prototypes only, else None): `set_annotations` makes them the docs'
        `doc.vector` (`router_vectors.py`). (n_docs, width)
    """

    probs: Floats2d
    confidence: Optional[numpy.ndarray]
    vectors: Optional[numpy.ndarray] = None


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
        features are taken when the configured method needs them and is fit
        (the saved fit is read once a batch), and always from a model with
        label prototypes, whose features are the docs' sentence vectors."""
        fit, method = self.fit, self.method
        features = method != "max_prob" and fit is not None and fit.method == method
        prototypes = bool(self.model.attrs.get("prototypes", False))
        X: Optional[numpy.ndarray] = None
        if features or prototypes:
            X, probs = self.forward(docs)
        else:
            probs = self.model.predict(docs)
        scaled = scale_probs(self.model.ops.to_numpy(probs), get_temperature(self.model))
        conf = confidence(fit, method, raw_scores(fit, method, X, scaled))
        vectors = X if prototypes else None
        return RoutedScores(self.model.ops.asarray2f(cast(Floats2d, scaled)), conf, vectors)

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

    def remembered(self) -> Optional[numpy.ndarray]:
        """The features the out-of-scope fit keeps of the docs it was fit on:
        "knn", the training docs' vectors; "mahalanobis", the class means; None
        without a fit or with "max_prob". (n, width)"""
        fit = self.fit
        if fit is None or fit.method == "max_prob":
            return None
        return fit.vectors if fit.method == "knn" else fit.means

    def add_examples(self, vectors: numpy.ndarray, label: str, reach: float = 1.0) -> None:
        """A new label's example docs join the out-of-scope fit, as training
        docs would have (`extend_fit`): without them, "knn" and "mahalanobis"
        would keep calling the new label's docs out of scope.

        vectors (numpy.ndarray): The examples' features (the model's output
            layer's input). (n_examples, width)
        label (str): Their label (one of the labels).
        reach (float): "knn": what the distances to them are divided by
            (`example_reach`).
        """
        fit = self.fit
        if fit is None or not len(vectors) or fit.method == "max_prob":
            return
        set_fit(self.model, extend_fit(fit, vectors, self.labels.index(label), reach))

    def example_reach(self, n_examples: int) -> float:
        """The reach of a new label's `n_examples` examples in a "knn" fit
        (`sample_reach`), at the share of in-scope docs the threshold keeps
        (1 - oos_threshold, within [0.5, 0.99]).

        RAISES (ValueError): no "knn" fit that keeps its docs' labels.
        """
        fit = self.fit
        if fit is None or fit.method != "knn":
            raise ValueError(
                f"'{self.name}': the reach of a new label's examples needs a router "
                'calibrated with oos_method "knn" (bert-pipes calibrate)'
            )
        coverage = min(max(1.0 - float(self.cfg["oos_threshold"]), 0.5), 0.99)
        return sample_reach(fit, max(n_examples, 1), coverage)

    def remembered_labels(self) -> Optional[numpy.ndarray]:
        """The label indices of the docs a "knn" fit remembers (`remembered`),
        None where the fit does not keep them. (n,)"""
        fit = self.fit
        if fit is None or fit.method != "knn":
            return None
        return fit.labels

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

    @property
    def router(self) -> ScopeRouter: ...

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
    hold_out: float = 0.0,
    held_out: Optional[Path] = None,
    seed: int = 0,
) -> Dict[str, Any]:
    """Calibrate a pipeline's exclusive `bert_textcat` on .spacy corpora
    (`BertTextCategorizer.calibrate`) and write a threshold chosen for
    `coverage` into its config, so that the saved pipeline loads with it.
    The dev file (and the held-out file) are noted in `nlp.meta`
    (`record_calibration`).

    train (Optional[Path]): The training corpus (the feature methods fit on
        its in-scope docs; "max_prob" needs none).
    dev (Path): Held-out docs: the in-scope ones fit the temperature and the
        confidence's reference.
    component (Optional[str]): The component; default: the only exclusive
        bert_textcat.
    hold_out (float): > 0: calibrate on the rest of the dev docs and write
        this share of each label's in-scope dev docs, and every out-of-scope
        one, to `held_out`, for the threshold (`split_dev`, drawn with `seed`).
    RETURNS (Dict[str, Any]): What was fit (`ScopeRouter.calibrate`), and
        with hold_out the docs held out ("dev_held_out_docs").
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

    held: List[Example] = []
    if hold_out > 0:
        if held_out is None:
            raise ValueError("holding dev docs out needs a file to write them to")
        dev_examples, held = split_dev(dev_examples, pipe.router.gold_index, hold_out, seed)
    report = pipe.calibrate(train_examples, dev_examples, coverage=coverage, prepare=prepare)
    if "oos_threshold" in report:
        nlp.get_pipe_config(component)["oos_threshold"] = report["oos_threshold"]
    if hold_out > 0 and held_out is not None:
        DocBin(docs=[eg.reference for eg in held], store_user_data=True).to_disk(held_out)
        report["dev_held_out_docs"] = len(held)
    record_calibration(nlp, component, dev, held_out if hold_out > 0 else None)
    return report
