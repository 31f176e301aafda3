"""Labels defined by descriptions and a few examples, for a `bert_textcat` whose
model is a `spacy-bert-pipes.PrototypeCatModel.v1` (`models/heads/prototypes.py`).
One concept: a label as a prototype, from its setting to its vector.

* `LabelPrototypes`: what the component owns (`BertTextCategorizer.prototypes`),
  over its model and cfg:
  - `set_prototypes`: each label's prototype from its examples and
    descriptions, the softmax temperature (exclusive) or the per-label cosine
    thresholds (multi-label) calibrated on the examples where there are any:
    what `initialize` does, with or without examples; with `example_weight`,
    the examples are remembered too (`remember`);
  - `add_described_label`: a new label on a trained component, from its
    descriptions and a few examples; the trained labels keep their prototypes;
  - `adapt_to_texts`: the prototypes moved towards the unlabelled texts the
    component would route (self-training);
  - `update`: one step of few-shot training: the classifier's cross-entropy
    plus the pair loss over the batch's docs.
* `read_label_descriptions`: the `label_descriptions` setting (inline, or a JSON
  file) as label -> phrases, with an error that names the file and the label.
* `check_label`: a label is one non-blank string (not a string of several);
  `name_description`: its name as a phrase, an error for a name without words.
* `add_labels`: `add_described_label` for several labels of a loaded pipeline
  (`bert-pipes add-label`). The math is in `models/heads/prototypes.py`.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union, cast

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats1d, Floats2d

from ..models.heads.guard import RememberedBest, guard_bias
from ..models.heads.prototypes import (
    calibrate_scale,
    cosine_logits,
    cosine_output,
    has_examples,
    label_prototypes,
    nearest_examples,
    remember_examples,
    self_trained_prototypes,
    store_prototypes,
    unit_with_norms,
)
from ..models.heads.vector_losses import anchor_to_teacher, contrastive_loss
from .textcat_scope import ScopeRouter
from .textcat_targets import gold_targets

LabelDescriptions = Optional[Union[str, Dict[str, Union[str, List[str]]]]]


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


# The softmax scales (1 / temperature) that calibration tries.
SCALES = tuple(float(s) for s in numpy.geomspace(5.0, 100.0, 25))
# The cosines that per-label threshold calibration tries (multi-label).
THRESHOLDS = tuple(float(t) for t in numpy.linspace(0.05, 0.95, 91))


def read_label_descriptions(setting: LabelDescriptions, component: str) -> Dict[str, List[str]]:
    """label -> its description phrases, from the setting: a mapping (label ->
    a phrase or a list of phrases), or the path of a JSON file holding one."""
    if setting is None:
        return {}
    where = f"[components.{component}.label_descriptions]"
    data: object = setting
    if isinstance(setting, (str, Path)):
        path = Path(setting)
        where = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf8"))
        except OSError as error:
            raise ValueError(
                f"{path}: cannot read the label descriptions of '{component}': {error}"
            ) from error
        except ValueError as error:
            raise ValueError(
                f"{path}: the label descriptions are not valid JSON: {error}"
            ) from error
    if not isinstance(data, dict):
        raise ValueError(
            f"{where}: expected an object of label -> description (or list of "
            f"descriptions), got {type(data).__name__}"
        )
    out: Dict[str, List[str]] = {}
    for label, value in data.items():
        phrases = [value] if isinstance(value, str) else value
        if (
            not isinstance(phrases, list)
            or not phrases
            or not all(isinstance(p, str) and p.strip() for p in phrases)
        ):
            raise ValueError(
                f"{where}: the description of label {label!r} must be a non-empty "
                f"string or a list of them, got {value!r}"
            )
        out[str(label)] = list(phrases)
    return out


def check_label(component: str, label: object) -> str:
    """The label, if it is one non-blank string; else an error naming the
    component and the value (labels given as one string, "a,b", or a list given
    where one label goes)."""
    if not isinstance(label, str) or not label.strip():
        raise ValueError(
            f"'{component}': a label must be one non-blank string, got {label!r} (add "
            "labels one at a time, or give several as a list of strings)"
        )
    return label


def name_description(component: str, label: str) -> str:
    """A label's name as a phrase: underscores as spaces ("card_arrival" -> "card
    arrival"); an error naming the component for a name with no words ("___")."""
    phrase = " ".join(label.replace("_", " ").split())
    if not phrase:
        raise ValueError(
            f"'{component}' describes its labels by their names, with underscores read as "
            f"spaces, and the label {label!r} has no words: give it a description in "
            f"[components.{component}.label_descriptions], or rename it"
        )
    return phrase


class LabelPrototypes:
    """The labels of a `bert_textcat` whose model is a PrototypeCatModel: each a
    prototype made from its descriptions and examples. The component owns one
    (`BertTextCategorizer.prototypes`) and shares its model and its `cfg` with
    it: the labels are `cfg["labels"]`, the settings the component's."""

    def __init__(self, name: str, vocab: Vocab, model: Model, cfg: Dict[str, Any]) -> None:
        self.name = name
        self.vocab = vocab
        self.model = model
        self.cfg = cfg

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def exclusive(self) -> bool:
        return bool(self.model.attrs["exclusive_classes"])

    def descriptions(self) -> Dict[str, List[str]]:
        """label -> description phrases: the label_descriptions setting, and with
        label_names_as_descriptions each other label's name."""
        described = read_label_descriptions(self.cfg["label_descriptions"], self.name)
        if self.cfg["label_names_as_descriptions"]:
            for label in self.labels:
                if label not in described:
                    described[label] = [name_description(self.name, label)]
        return described

    def truths(self, examples: Sequence[Example]) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Gold labels (n_docs, n_labels) and the mask of those annotated."""
        return gold_targets(examples, self.labels, self.exclusive, self.name)

    def phrase_docs(self, phrases: Sequence[str]) -> List[Doc]:
        """Docs of description phrases, through the description template."""
        template = self.cfg["description_template"]
        return [Doc(self.vocab, words=[template.format(p)], spaces=[False]) for p in phrases]

    def sentence_vectors(self, docs: Sequence[Doc]) -> numpy.ndarray:
        """The unit sentence vectors of docs by the component's encoder. (n, width)"""
        body = self.model.get_ref("body")
        width = self.model.get_ref("output").get_dim("nI")
        rows = [numpy.zeros((0, width), dtype="f")]
        for start in range(0, len(docs), 64):
            batch = list(docs[start : start + 64])
            rows.append(self.model.ops.to_numpy(body.predict(batch)))
        return numpy.concatenate(rows).astype("f")

    def description_vectors(
        self, labels: Sequence[str], descriptions: Dict[str, List[str]]
    ) -> List[Optional[numpy.ndarray]]:
        """Per label, the vectors of its descriptions (None for a label without)."""
        phrases = [p for label in labels for p in descriptions.get(label, [])]
        vectors = self.sentence_vectors(self.phrase_docs(phrases))
        out: List[Optional[numpy.ndarray]] = []
        start = 0
        for label in labels:
            n = len(descriptions.get(label, []))
            out.append(vectors[start : start + n] if n else None)
            start += n
        return out

    def remember(self, docs: Sequence[Doc], vectors: Floats2d, positive: numpy.ndarray) -> None:
        """With example_weight > 0, remember the vectors of the docs that have
        exactly one gold label (positive: (n_docs, n_labels)) as that label's
        examples."""
        output = self.model.get_ref("output")
        if not output.attrs.get("example_weight", 0.0):
            return
        single = positive.sum(axis=1) == 1
        ids = [int(numpy.argmax(row)) if one else -1 for row, one in zip(positive, single)]
        remember_examples(output, [stable_key(doc.text) for doc in docs], vectors, ids)

    def remember_fit_docs(
        self,
        weight: float,
        vectors: Optional[numpy.ndarray],
        label_ids: Optional[numpy.ndarray],
    ) -> int:
        """Set the head's example_weight; a head that remembers no examples yet
        remembers `vectors` (the docs an out-of-scope fit keeps, (n, width)) as
        examples of their `label_ids` ((n,)).

        RETURNS (int): The number of remembered examples.
        """
        output = self.model.get_ref("output")
        if not has_examples(output):
            if vectors is None or label_ids is None or not len(vectors):
                raise ValueError(
                    f"'{self.name}' remembers no examples and its out-of-scope fit keeps "
                    "no training docs with their labels: calibrate it with oos_method "
                    '"knn" (bert-pipes calibrate) first'
                )
            ids = numpy.asarray(label_ids, dtype="int64")
            if len(ids) != len(vectors) or ids.min() < 0 or ids.max() >= len(self.labels):
                raise ValueError(
                    f"'{self.name}': the out-of-scope fit's labels do not match its "
                    f"{len(self.labels)} labels"
                )
            keys = [stable_key(f"\x00fit\x00{i}") for i in range(len(vectors))]
            V = self.model.ops.asarray2f(cast(Floats2d, numpy.asarray(vectors, dtype="f")))
            remember_examples(output, keys, V, ids.tolist())
        output.attrs["example_weight"] = float(weight)
        return int(output.get_param("E").shape[0])

    def remember_descriptions(
        self,
        labels: Sequence[str],
        descriptions: Dict[str, List[str]],
        described: Optional[List[Optional[numpy.ndarray]]] = None,
    ) -> None:
        """With example_weight > 0, remember the labels' description vectors as
        examples of their labels: `described` (per label, as
        `description_vectors` gives them), or computed now by the encoder as it
        is (no dropout)."""
        output = self.model.get_ref("output")
        if not output.attrs.get("example_weight", 0.0):
            return
        if described is None:
            described = self.description_vectors(labels, descriptions)
        keys, rows, ids = [], [], []
        for label, vectors in zip(labels, described):
            if vectors is None:
                continue
            for phrase, row in zip(descriptions[label], vectors):
                keys.append(description_key(label, phrase))
                rows.append(row)
                ids.append(self.labels.index(label))
        if rows:
            stacked = self.model.ops.asarray2f(cast(Floats2d, numpy.stack(rows)))
            remember_examples(output, keys, stacked, ids)

    def set_prototypes(self, examples: List[Example]) -> None:
        """Set every label's prototype from the examples that annotate it and its
        descriptions, then calibrate the temperature (exclusive) or each label's
        threshold (multi-label) on the examples; remember the examples (with
        example_weight), forgetting any remembered before."""
        labels = list(self.labels)
        descriptions = self.descriptions()
        own = [eg for eg in examples if any(label in eg.reference.cats for label in labels)]
        if not own and not descriptions:
            # zero-shot from the labels alone (add_label, or [initialize] labels): the
            # names are all there is to describe them by
            descriptions = {label: [name_description(self.name, label)] for label in labels}
        truths, known = self.truths(own)
        positive = truths * known  # (n_docs, n_labels)
        vectors = self.sentence_vectors([eg.reference for eg in own])
        described = self.description_vectors(labels, descriptions)
        weight = float(self.cfg["description_weight"])
        prototypes = label_prototypes(vectors, positive, described, weight)
        empty = [label for label, row in zip(labels, prototypes) if not row.any()]
        if empty:
            raise ValueError(
                f"'{self.name}' has no example and no description for the label(s) "
                f"{empty[:10]}: give them in label_descriptions (or set "
                "label_names_as_descriptions = true) or add training examples"
            )
        output = self.model.get_ref("output")
        ops = self.model.ops
        store_prototypes(self.model, prototypes)
        scale = float(numpy.exp(ops.to_numpy(output.get_param("log_scale"))[0]))
        cos = vectors @ prototypes.T  # (n_docs, n_labels)
        if self.exclusive:
            gold = positive.sum(axis=1) == 1
            if gold.any():
                loo = _leave_one_out(vectors, positive, described, weight, prototypes)
                scale = calibrate_scale(loo[gold], positive[gold], SCALES)
            output.set_param("log_scale", ops.asarray1f([numpy.log(scale)]))
            output.set_param("b", ops.alloc1f(len(labels)))
            output.set_param("E", ops.alloc2f(0, vectors.shape[1]))
            output.set_param("E_label", ops.alloc1f(0))
            output.attrs["example_keys"] = []
            own_docs = [eg.reference for eg in own]
            self.remember(own_docs, ops.asarray2f(cast(Floats2d, vectors)), positive)
            self.remember_descriptions(labels, descriptions, described)
            return
        thresholds = numpy.full(len(labels), float(self.cfg["similarity_threshold"]), dtype="f")
        for j in range(len(labels)):
            mask = known[:, j] > 0
            if positive[mask, j].any():
                thresholds[j] = _best_threshold(cos[mask, j], positive[mask, j])
        output.set_param("b", ops.asarray1f(cast(Floats1d, -scale * thresholds)))

    def add_described_label(
        self,
        label: str,
        descriptions: Sequence[str],
        examples: Sequence[Doc] = (),
        reference: Optional[numpy.ndarray] = None,
        allowance: float = 0.0,
        remembered: Optional[RememberedBest] = None,
    ) -> numpy.ndarray:
        """Add a label to an initialized (trained) component: its prototype is made
        from its descriptions and its example docs (without training), with the
        configured similarity_threshold as its bias (multi-label) or, exclusive, a
        zero bias, lowered until none of the reference docs changes its top label
        (`guard_bias`; a share `allowance` of them may). The reference docs: with
        the nearest-examples term (example_weight), the remembered examples, each
        scored as prediction scores it (`remembered` holds their best logits
        from one call to the next: give the same one when adding several
        labels); else the `reference` features (docs the component was fit
        on, (n, width)), by their cosines.

        RETURNS (numpy.ndarray): The examples' sentence vectors. (n_examples, width)
        """
        check_label(self.name, label)
        if label in self.labels:
            raise ValueError(f"'{self.name}' already has the label {label!r}")
        if isinstance(descriptions, str) or not all(
            isinstance(p, str) and p.strip() for p in descriptions
        ):
            raise ValueError(
                f"'{self.name}': the descriptions of label {label!r} must be a list of "
                f"non-blank strings, got {descriptions!r}"
            )
        if not all(isinstance(doc, Doc) for doc in examples):
            raise ValueError(
                f"'{self.name}': the examples of label {label!r} must be a list of Docs "
                f"(nlp.make_doc(text)), got {examples!r}"
            )
        if not descriptions and not examples:
            raise ValueError(f"Label {label!r}: give a description or an example to add it")
        phrases = list(descriptions)
        described = self.sentence_vectors(self.phrase_docs(phrases)) if phrases else None
        vectors = self.sentence_vectors(list(examples))
        positive = numpy.ones((len(vectors), 1), dtype="f")
        weight = float(self.cfg["description_weight"])
        row = label_prototypes(vectors, positive, [described], weight)  # (1, width)
        model, ops = self.model, self.model.ops
        output = model.get_ref("output")
        W = ops.to_numpy(output.get_param("W"))
        b = ops.to_numpy(output.get_param("b"))
        scale = float(numpy.exp(ops.to_numpy(output.get_param("log_scale"))[0]))
        bias = 0.0 if self.exclusive else -scale * float(self.cfg["similarity_threshold"])
        by_examples = self.exclusive and has_examples(output)
        by_examples = by_examples and float(output.attrs.get("example_weight", 0.0)) > 0
        new = numpy.zeros(0, dtype="f")
        if by_examples:
            own = vectors if described is None else numpy.concatenate([vectors, described])
            remembered = remembered if remembered is not None else RememberedBest()
            new = self._new_label_scores(output, row[0], own)
            bias = guard_bias(remembered.current(output)[:, None], new, scale, allowance)
        elif self.exclusive and reference is not None and len(reference):
            R = numpy.asarray(reference, dtype="f")
            logits = ops.to_numpy(cosine_logits(output, ops.asarray2f(cast(Floats2d, R))))
            unit, _ = unit_with_norms(R)
            bias = guard_bias(logits, unit @ ops.to_numpy(row)[0], scale, allowance)
        # thinc does not resize a layer with weights: a new output layer takes its place
        grown = cosine_output(
            self.exclusive,
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
        self.cfg["labels"].append(label)
        if len(vectors):
            positive = numpy.zeros((len(vectors), len(b) + 1), dtype="f")
            positive[:, -1] = 1.0
            self.remember(list(examples), ops.asarray2f(cast(Floats2d, vectors)), positive)
        if phrases:
            self.remember_descriptions([label], {label: phrases}, [described])
        if remembered is not None and by_examples:
            remembered.added(grown, scale * new + bias)
        return vectors

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

    def adapt_to_texts(
        self,
        docs: Sequence[Doc],
        rounds: int = 10,
        weight: float = 4.0,
        min_confidence: float = 0.0,
    ) -> Dict[str, int]:
        """Move the prototypes of an initialized (zero-shot, few-shot or trained)
        exclusive component towards unlabelled docs of its domain: `rounds` times,
        each doc is assigned to its nearest prototype and each label's prototype
        becomes its current one plus `weight` times the unit mean of its docs
        (`models.heads.prototypes.self_trained_prototypes`). The encoder, the
        temperature and the remembered examples stay as they are.

        min_confidence (float): Only docs routed with at least this confidence
            (`doc._.route`) take part: texts that fit no label would pull the
            prototypes away. 0 takes every doc.
        RETURNS (Dict[str, int]): label -> docs nearest it at the end (all 0,
            prototypes unchanged, when no doc is kept)."""
        if not self.exclusive:
            raise ValueError(
                f"'{self.name}': adapting the prototypes to unlabelled texts needs "
                "exclusive_classes = true (one label per doc)"
            )
        if rounds < 1 or weight <= 0:
            raise ValueError(f"rounds must be >= 1 and weight > 0, got {rounds}, {weight}")
        if not docs:
            raise ValueError(f"'{self.name}': no texts to adapt the prototypes to")
        if min_confidence > 0:
            confidence = ScopeRouter(self.name, self.model, self.cfg).confidences(list(docs))
            docs = [doc for doc, c in zip(docs, confidence.tolist()) if c >= min_confidence]
            if not docs:
                return {label: 0 for label in self.labels}
        output = self.model.get_ref("output")
        W = self.model.ops.to_numpy(output.get_param("W"))
        start = W / numpy.maximum(numpy.linalg.norm(W, axis=1, keepdims=True), 1e-12)
        vectors = self.sentence_vectors(docs)
        prototypes, counts = self_trained_prototypes(start, vectors, rounds, weight)
        store_prototypes(self.model, prototypes)
        return {label: int(n) for label, n in zip(self.labels, counts.tolist())}

    def update(
        self,
        examples: List[Example],
        get_loss: Callable[[List[Example], Floats2d], Tuple[float, Floats2d]],
        *,
        sgd: Optional[Optimizer],
        losses: Dict[str, float],
        teacher: Optional[Model] = None,
    ) -> Dict[str, float]:
        """One update: the classifier's loss (`get_loss`) plus contrastive_weight
        times the pair loss over the batch's sentence vectors, docs of the same
        label being the positive pairs (exclusive: the gold label; multi-label: a
        doc's first gold label), plus vector_anchor times the anchor loss to
        `teacher`'s sentence vectors (a frozen copy of the body: required when
        vector_anchor > 0). With example_weight, after the step the batch's
        docs and its labels' descriptions are encoded again as prediction encodes
        them (no dropout, no gradient) and remembered as their latest vectors."""
        losses.setdefault(self.name, 0.0)
        body, output = self.model.get_ref("body"), self.model.get_ref("output")
        docs = [eg.predicted for eg in examples]
        vectors, backprop_body = body.begin_update(docs)
        scores, backprop_output = output.begin_update(vectors)
        loss, d_logits = get_loss(examples, scores)
        d_vectors = backprop_output(d_logits)
        truths, known = self.truths(examples)
        positive = truths * known
        weight = float(self.cfg["contrastive_weight"])
        pair_loss = 0.0
        if weight > 0:
            ids = [int(numpy.argmax(row)) if row.max() >= 0.5 else -1 for row in positive]
            pair_loss, d_pairs = contrastive_loss(
                self.model.ops.to_numpy(vectors), ids, float(self.cfg["contrastive_temperature"])
            )
            d_vectors = d_vectors + weight * self.model.ops.asarray2f(d_pairs)
        anchor = float(self.cfg.get("vector_anchor") or 0.0)
        anchor_loss = 0.0
        if anchor > 0:
            if teacher is None:
                raise ValueError(f"'{self.name}': vector_anchor needs the frozen teacher")
            anchor_loss, d_anchor = anchor_to_teacher(vectors, teacher.predict(docs), anchor)
            d_vectors = d_vectors + d_anchor
        backprop_body(d_vectors)
        if sgd is not None:
            self.model.finish_update(sgd)
        if output.attrs.get("example_weight", 0.0):
            # the batch's docs and its labels' descriptions as prediction encodes
            # them (no dropout), with the weights after the step when it was taken
            self.remember([eg.reference for eg in examples], body.predict(docs), positive)
            labels = [self.labels[j] for j in numpy.flatnonzero(positive.sum(axis=0))]
            self.remember_descriptions(labels, self.descriptions())
        losses[self.name] += loss + weight * pair_loss + anchor_loss
        return losses


def stable_key(text: str) -> int:
    """A remembered vector's key: a hash of `text`, the same in every process."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf8"), digest_size=8).digest(), "big")


def description_key(label: str, phrase: str) -> int:
    """The key of a label's description phrase among the remembered examples."""
    return stable_key(f"\x00description\x00{label}\x00{phrase}")


def _leave_one_out(
    vectors: numpy.ndarray,
    positive: numpy.ndarray,
    described: List[Optional[numpy.ndarray]],
    weight: float,
    prototypes: numpy.ndarray,
) -> numpy.ndarray:
    """Cosines of each doc with the prototypes, its own labels' prototypes made
    without it, so that calibration does not see a doc in its own prototype."""
    cos = vectors @ prototypes.T
    counts = positive.sum(axis=0)
    sums = positive.T @ vectors  # (n_labels, width)
    for i, j in zip(*numpy.nonzero(positive)):
        rest = (sums[j] - vectors[i]) / max(counts[j] - 1, 1)
        if described[j] is not None:
            rest = rest + weight * described[j].mean(axis=0)
        norm = float(numpy.linalg.norm(rest))
        cos[i, j] = float(vectors[i] @ rest) / norm if norm > 0 else 0.0
    return cos


def _best_threshold(cos: numpy.ndarray, truth: numpy.ndarray) -> float:
    """The cosine of THRESHOLDS at which predicting the label gives the best F1."""
    best, best_f = THRESHOLDS[0], -1.0
    for t in THRESHOLDS:
        predicted = cos >= t
        tp = float((predicted & (truth > 0)).sum())
        f = 2 * tp / max(float(predicted.sum() + (truth > 0).sum()), 1.0)
        if f > best_f:
            best, best_f = t, f
    return best


class DescribedLabels(Protocol):
    """What `add_labels` needs of a component: a `bert_textcat`'s labels and
    `add_described_label`."""

    @property
    def labels(self) -> Tuple[str, ...]: ...

    def add_described_label(
        self,
        label: str,
        descriptions: Sequence[str],
        examples: Sequence[Doc] = (),
        guarding: Optional[Guarding] = None,
    ) -> None: ...

    def route_by_nearest_examples(self, weight: float) -> int: ...


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
        names = [name for name, pipe in nlp.pipeline if hasattr(pipe, "add_described_label")]
        if len(names) != 1:
            raise ValueError(f"Name the bert_textcat component to add labels to; found {names}")
        component = names[0]
    pipe = cast(DescribedLabels, nlp.get_pipe(component))
    new = list(dict.fromkeys([*descriptions, *examples]))
    known = [label for label in new if label in pipe.labels]
    if known:
        raise ValueError(f"'{component}' already has the label(s) {known}")
    if nearest_examples > 0:
        pipe.route_by_nearest_examples(nearest_examples)
        # a setting of the model's config: a loaded pipeline takes it from there
        nlp.get_pipe_config(component)["model"]["example_weight"] = float(nearest_examples)
    guarding = Guarding(allowance, scope_correction)  # one for all: its logits carry over
    for label in new:
        docs = [nlp.make_doc(text) for text in examples.get(label, [])]
        pipe.add_described_label(label, descriptions.get(label, []), docs, guarding)
    return new
