"""Labels added to a trained `bert_textcat` (a PrototypeCatModel) without
training: the router grows (docs/discover.md, `bert-pipes add-label`).

* `NewLabels`: what the component owns (`BertTextCategorizer.new_labels`),
  over its label prototypes and its router:
  - `add`: a label from its descriptions and a few example docs, its bias
    guarded so that the docs the router was fit on keep their labels, its
    examples joining the out-of-scope fit;
  - `add_prototype`: the new label's prototype and guarded bias alone (also
    what a loaded pipeline does for a label its label_descriptions add);
  - `route_by_nearest_examples`: predicting with the nearest remembered docs,
    so that a label made of a few examples is those examples.
* `Guarding`: the options of adding labels to a calibrated router.
* `add_labels`: several labels added to a loaded pipeline's component.
* `label_settings`: the settings `add-label` uses where none is given: the
  discover workflow's measured ones for labels from a review on a router that
  remembers its training docs ("knn"), none otherwise.

The prototype math is `models/heads/prototypes.py`, the guard's
`models/heads/guard.py`.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Protocol, Sequence, Tuple, cast

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats1d, Floats2d

from ..models.heads.guard import RememberedBest, guard_bias, remembered_logits
from ..models.heads.prototypes import (
    cosine_logits,
    cosine_output,
    has_examples,
    label_prototypes,
    nearest_examples,
    remember_examples,
    unit_with_norms,
)
from .label_descriptions import check_label
from .label_prototypes import LabelPrototypes, stable_key
from .textcat_scope import ScopeRouter


@dataclass
class Guarding:
    """How labels added to a calibrated router keep its docs and its scope.

    allowance (float): The share of the docs the router remembers that a new
        label may take from their labels (`guard_bias`).
    scope_correction (bool): Divide the distances to a new label's examples in
        a "knn" fit by their reach (`ScopeRouter.example_reach`).
    remembered (RememberedBest): The remembered docs' best logits, carried from
        one new label to the next (share one Guarding across the labels).
    """

    allowance: float = 0.0
    scope_correction: bool = False
    remembered: RememberedBest = field(default_factory=RememberedBest)


class NewLabels:
    """New labels of an initialized (trained) `bert_textcat` whose model is a
    PrototypeCatModel. The component owns one (`BertTextCategorizer.new_labels`),
    over its label prototypes and its router."""

    def __init__(self, prototypes: LabelPrototypes, router: ScopeRouter) -> None:
        self.prototypes = prototypes
        self.router = router

    @property
    def name(self) -> str:
        return self.prototypes.name

    def add(
        self, label: str, descriptions: Sequence[str], examples: Sequence[Doc], guarding: Guarding
    ) -> None:
        """Add a label from its description phrases and a few example docs (or
        none), without training: it gets predictions next to the trained labels,
        and its examples join the calibrated out-of-scope fit
        (`ScopeRouter.add_examples`). On a calibrated router the new label's bias
        keeps every doc the fit remembers with the label it had, or all but a
        share `guarding.allowance` of them (`ScopeRouter.remembered`,
        `guard_bias`); with the nearest-examples term, `guarding.remembered`
        carries the remembered docs' best logits from one label to the next
        (give the same Guarding for several labels). With
        `guarding.scope_correction`, the distances to the examples in a "knn"
        fit are divided by their reach (`ScopeRouter.example_reach`), so that
        the new label keeps about as many of its docs in scope as a trained
        label."""
        router = self.router
        reach = router.example_reach(len(examples)) if guarding.scope_correction else 1.0
        vectors = self.add_prototype(
            label,
            descriptions,
            examples,
            reference=router.remembered(),
            allowance=guarding.allowance,
            remembered=guarding.remembered,
        )
        router.add_examples(vectors, label, reach)

    def add_prototype(
        self,
        label: str,
        descriptions: Sequence[str],
        examples: Sequence[Doc] = (),
        reference: Optional[numpy.ndarray] = None,
        allowance: float = 0.0,
        remembered: Optional[RememberedBest] = None,
    ) -> numpy.ndarray:
        """Add a label to the model: its prototype is made from its descriptions
        and its example docs (without training), with the configured
        similarity_threshold as its bias (multi-label) or, exclusive, a zero
        bias, lowered until none of the reference docs changes its top label
        (`guard_bias`; a share `allowance` of them may). The reference docs:
        with the nearest-examples term (example_weight), the remembered
        examples, each scored as prediction scores it (`remembered` holds their
        best logits from one call to the next: give the same one when adding
        several labels); else the `reference` features (docs the component was
        fit on, (n, width)), by their cosines.

        RETURNS (numpy.ndarray): The examples' sentence vectors. (n_examples, width)
        """
        prototypes = self.prototypes
        name, labels, exclusive = self.name, prototypes.labels, prototypes.exclusive
        check_label(name, label)
        if label in labels:
            raise ValueError(f"'{name}' already has the label {label!r}")
        if isinstance(descriptions, str) or not all(
            isinstance(p, str) and p.strip() for p in descriptions
        ):
            raise ValueError(
                f"'{name}': the descriptions of label {label!r} must be a list of "
                f"non-blank strings, got {descriptions!r}"
            )
        if not all(isinstance(doc, Doc) for doc in examples):
            raise ValueError(
                f"'{name}': the examples of label {label!r} must be a list of Docs "
                f"(nlp.make_doc(text)), got {examples!r}"
            )
        if not descriptions and not examples:
            raise ValueError(f"Label {label!r}: give a description or an example to add it")
        phrases = list(descriptions)
        described = (
            prototypes.sentence_vectors(prototypes.phrase_docs(phrases)) if phrases else None
        )
        vectors = prototypes.sentence_vectors(list(examples))
        positive = numpy.ones((len(vectors), 1), dtype="f")
        weight = float(prototypes.cfg["description_weight"])
        row = label_prototypes(vectors, positive, [described], weight)  # (1, width)
        model, ops = prototypes.model, prototypes.model.ops
        output = model.get_ref("output")
        W = ops.to_numpy(output.get_param("W"))
        b = ops.to_numpy(output.get_param("b"))
        scale = float(numpy.exp(ops.to_numpy(output.get_param("log_scale"))[0]))
        bias = 0.0 if exclusive else -scale * float(prototypes.cfg["similarity_threshold"])
        by_examples = exclusive and has_examples(output)
        by_examples = by_examples and float(output.attrs.get("example_weight", 0.0)) > 0
        new = numpy.zeros(0, dtype="f")
        if by_examples:
            own = vectors if described is None else numpy.concatenate([vectors, described])
            remembered = remembered if remembered is not None else RememberedBest()
            new = self._new_label_scores(output, row[0], own)
            bias = guard_bias(remembered.current(output)[:, None], new, scale, allowance)
        elif exclusive and reference is not None and len(reference):
            R = numpy.asarray(reference, dtype="f")
            logits = ops.to_numpy(cosine_logits(output, ops.asarray2f(cast(Floats2d, R))))
            unit, _ = unit_with_norms(R)
            bias = guard_bias(logits, unit @ ops.to_numpy(row)[0], scale, allowance)
        # thinc does not resize a layer with weights: a new output layer takes its place
        grown = cosine_output(
            exclusive,
            scale,
            nO=len(b) + 1,
            example_weight=float(output.attrs.get("example_weight", 0.0)),
            example_top=int(output.attrs.get("example_top", 2)),
        )
        grown.set_dim("nI", W.shape[1])
        grown.initialize()
        row = row * float(model.attrs["prototype_norm"])  # as the others are stored
        grown.set_param("W", ops.asarray2f(cast(Floats2d, numpy.concatenate([W, row]))))
        grown.set_param("b", ops.asarray1f(cast(Floats1d, numpy.append(b, bias).astype("f"))))
        grown.set_param("log_scale", output.get_param("log_scale").copy())
        if has_examples(output):
            grown.set_param("E", output.get_param("E").copy())
            grown.set_param("E_label", output.get_param("E_label").copy())
            grown.attrs["example_keys"] = list(output.attrs["example_keys"])
        model.replace_node(output, grown)
        model.set_ref("output", grown)
        model.set_dim("nO", len(b) + 1, force=True)
        prototypes.cfg["labels"].append(label)
        if len(vectors):
            positive = numpy.zeros((len(vectors), len(b) + 1), dtype="f")
            positive[:, -1] = 1.0
            prototypes.remember(list(examples), ops.asarray2f(cast(Floats2d, vectors)), positive)
        if phrases:
            prototypes.remember_descriptions([label], {label: phrases}, [described])
        if remembered is not None and by_examples:
            remembered.added(grown, scale * new + bias)
        return vectors

    def taken(self, labels: Sequence[str]) -> Tuple[Dict[str, int], int]:
        """How many of the docs the router remembers each of `labels` takes
        now: their top label is it. The docs: with the nearest-examples term,
        the remembered examples of the other labels, scored as prediction
        scores them; else the calibrated fit's (`ScopeRouter.remembered`:
        "knn", the training docs; "mahalanobis", the class means).

        RETURNS (Tuple[Dict[str, int], int]): label -> docs taken, and the
            docs looked at (0: the router remembers none; nothing measured).
        """
        output = self.prototypes.model.get_ref("output")
        ops = output.ops
        names = list(self.prototypes.labels)
        ids = [names.index(label) for label in labels]
        if has_examples(output) and float(output.attrs.get("example_weight", 0.0)) > 0:
            logits = ops.to_numpy(remembered_logits(output))
            own = numpy.isin(ops.to_numpy(output.get_param("E_label")), ids)
            logits = logits[~own]
        else:
            reference = self.router.remembered()
            if reference is None or not len(reference):
                return {label: 0 for label in labels}, 0
            R = ops.asarray2f(cast(Floats2d, numpy.asarray(reference, dtype="f")))
            logits = ops.to_numpy(cosine_logits(output, R))
        tops = logits.argmax(axis=1)  # (n_docs,)
        return {label: int((tops == i).sum()) for label, i in zip(labels, ids)}, len(tops)

    def _new_label_scores(
        self, output: Model, prototype: numpy.ndarray, own: numpy.ndarray
    ) -> numpy.ndarray:
        """The remembered examples' scores for a new label of this prototype
        and these examples' (and descriptions') vectors, before the scale: the
        cosine plus example_weight times the nearest-examples term. (n_examples,)"""
        E = output.ops.to_numpy(output.get_param("E"))
        unit_prototype = prototype / max(float(numpy.linalg.norm(prototype)), 1e-12)
        cos = E @ unit_prototype  # (n_examples,)
        if len(own):
            own_unit, _ = unit_with_norms(numpy.asarray(own, dtype="f"))
            near = nearest_examples(
                E,
                own_unit,
                numpy.zeros(len(own_unit), dtype="f"),
                cos[:, None],
                int(output.attrs.get("example_top", 2)),
            )[:, 0]
        else:
            near = cos
        return cos + float(output.attrs["example_weight"]) * near

    def route_by_nearest_examples(self, weight: float) -> int:
        """From now on, predict with the nearest-examples term of `weight`
        (`example_weight`, docs/discover.md): a label is its prototype and its
        nearest remembered docs, so a label made of a few examples is those
        examples, not only their mean. A head that remembers no examples yet
        takes the training docs its calibrated "knn" fit keeps, with their labels.
        The setting is the model's `example_weight`: set it in the pipeline's
        config too (`add_labels` does), or a saved pipeline loads without it.

        RETURNS (int): The number of remembered examples.
        RAISES (ValueError): no examples and no fit that keeps its docs' labels.
        """
        if weight <= 0:
            raise ValueError(f"the nearest-examples weight must be > 0, got {weight}")
        prototypes = self.prototypes
        if not prototypes.exclusive:
            raise ValueError(
                f"'{self.name}': the nearest-examples term needs exclusive_classes = true"
            )
        output = prototypes.model.get_ref("output")
        if not has_examples(output):
            # the docs the out-of-scope fit keeps, (n, width), and their labels, (n,)
            vectors, label_ids = self.router.remembered(), self.router.remembered_labels()
            if vectors is None or label_ids is None or not len(vectors):
                raise ValueError(
                    f"'{self.name}' remembers no examples and its out-of-scope fit keeps "
                    "no training docs with their labels: calibrate it with oos_method "
                    '"knn" (bert-pipes calibrate) first'
                )
            ids = numpy.asarray(label_ids, dtype="int64")
            if len(ids) != len(vectors) or ids.min() < 0 or ids.max() >= len(prototypes.labels):
                raise ValueError(
                    f"'{self.name}': the out-of-scope fit's labels do not match its "
                    f"{len(prototypes.labels)} labels"
                )
            keys = [stable_key(f"\x00fit\x00{i}") for i in range(len(vectors))]
            ops = prototypes.model.ops
            V = ops.asarray2f(cast(Floats2d, numpy.asarray(vectors, dtype="f")))
            remember_examples(output, keys, V, ids.tolist())
        output.attrs["example_weight"] = float(weight)
        return int(output.get_param("E").shape[0])


# What labels from a `discover` review get on a router calibrated with
# oos_method "knn" when `add-label` is given no setting: the settings the
# discover workflow measured (docs/discover.md, "A label of five examples").
REVIEW_NEAREST_EXAMPLES = 1.0
REVIEW_ALLOWANCE = 0.0005


@dataclass
class LabelSettings:
    """The settings of `add_labels`, and where they came from.

    nearest_examples, allowance, scope_correction: as `add_labels` takes them.
    measured (bool): The discover workflow's (`label_settings`), not given.
    """

    nearest_examples: float = 0.0
    allowance: float = 0.0
    scope_correction: bool = False
    measured: bool = False


def label_settings(
    nlp: Language,
    component: Optional[str],
    *,
    from_review: bool,
    nearest_examples: Optional[float] = None,
    allowance: Optional[float] = None,
    scope_correction: Optional[bool] = None,
) -> LabelSettings:
    """The settings to add labels with: those given; where none is given, for
    labels from a `discover` review on a router calibrated with "knn" (it
    remembers its training docs), the discover workflow's (nearest examples
    REVIEW_NEAREST_EXAMPLES, allowance REVIEW_ALLOWANCE, the scope correction),
    else none (0, 0, off).

    component (Optional[str]): The bert_textcat; None: the pipeline's only one.
    from_review (bool): The labels come from a `discover` review.
    """
    name = component or only_textcat(nlp)
    router = getattr(nlp.get_pipe(name), "router", None)
    measured = (
        from_review
        and isinstance(router, ScopeRouter)
        and router.method == "knn"
        and router.remembered() is not None
        and nearest_examples is None
        and allowance is None
        and scope_correction is None
    )
    if measured:
        return LabelSettings(REVIEW_NEAREST_EXAMPLES, REVIEW_ALLOWANCE, True, measured=True)
    return LabelSettings(nearest_examples or 0.0, allowance or 0.0, bool(scope_correction))


def only_textcat(nlp: Language) -> str:
    """The pipeline's only bert_textcat (with described labels)."""
    names = [name for name, pipe in nlp.pipeline if hasattr(pipe, "add_described_label")]
    if len(names) != 1:
        raise ValueError(f"Name the bert_textcat component to add labels to; found {names}")
    return names[0]


class DescribedLabels(Protocol):
    """What `add_labels` needs of a component: a `bert_textcat`'s labels and
    its `NewLabels`."""

    @property
    def labels(self) -> Tuple[str, ...]: ...

    @property
    def new_labels(self) -> NewLabels: ...


def add_labels(
    nlp: Language,
    descriptions: Dict[str, List[str]],
    examples: Optional[Dict[str, List[str]]] = None,
    component: Optional[str] = None,
    allowance: float = 0.0,
    nearest_examples: float = 0.0,
    scope_correction: bool = False,
) -> List[str]:
    """Add labels to a trained pipeline's `bert_textcat` (with a
    PrototypeCatModel) by their descriptions and optionally example texts.

    descriptions (Dict[str, List[str]]): label -> description phrases.
    examples (Optional[Dict[str, List[str]]]): label -> example texts; a label
        given examples only needs no description.
    component (Optional[str]): The component's name; default: the pipeline's
        only bert_textcat.
    allowance (float): The share of the docs a calibrated router remembers
        that a new label may take from their labels (`guard_bias`).
    nearest_examples (float): > 0: first switch the component to predicting
        with the nearest-examples term of this weight
        (`route_by_nearest_examples`), in its config too (`example_weight`,
        what a saved pipeline loads with); 0: leave it as it is.
    scope_correction (bool): Divide the distances to each new label's examples
        in the router's "knn" fit by their reach (`ScopeRouter.example_reach`).
    RETURNS (List[str]): The labels added, in order.
    """
    examples = examples or {}
    if component is None:
        component = only_textcat(nlp)
    pipe = cast(DescribedLabels, nlp.get_pipe(component))
    new = list(dict.fromkeys([*descriptions, *examples]))
    known = [label for label in new if label in pipe.labels]
    if known:
        raise ValueError(f"'{component}' already has the label(s) {known}")
    if nearest_examples > 0:
        pipe.new_labels.route_by_nearest_examples(nearest_examples)
        # a setting of the model's config: a loaded pipeline takes it from there
        nlp.get_pipe_config(component)["model"]["example_weight"] = float(nearest_examples)
    guarding = Guarding(allowance, scope_correction)  # one for all: its logits carry over
    for label in new:
        docs = [nlp.make_doc(text) for text in examples.get(label, [])]
        pipe.new_labels.add(label, descriptions.get(label, []), docs, guarding)
    return new
