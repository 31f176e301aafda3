"""Labels defined by descriptions and a few examples, for a `bert_textcat` whose
model is a `spacy-bert-pipes.PrototypeCatModel.v1` (`models/heads/prototypes.py`):
a label as a prototype, from its examples and descriptions to its vector.

The settings (`PROTOTYPE_SETTINGS`, checked by `check_prototype_settings`) and
`LabelPrototypes`, what the component owns (`BertTextCategorizer.prototypes`),
over its model and cfg:
- `set_prototypes`: each label's prototype from its examples and descriptions,
  the softmax temperature (exclusive) or the per-label cosine thresholds
  (multi-label) calibrated on the examples where there are any: what
  `initialize` does, with or without examples; with `example_weight`, the
  examples are remembered too (`remember`);
- `adapt_to_texts`: the prototypes moved towards the unlabelled texts the
  component would route (self-training);
- `update`: one step of few-shot training: the classifier's cross-entropy plus
  the pair loss over the batch's docs.

The labels' names and descriptions as written are `label_descriptions.py`;
labels added to a trained component `new_labels.py`. The math is in
`models/heads/prototypes.py`.
"""

import hashlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats1d, Floats2d

from ..models.heads.prototypes import (
    calibrate_scale,
    label_prototypes,
    remember_examples,
    self_trained_prototypes,
    store_prototypes,
)
from ..models.heads.vector_losses import anchor_to_teacher, contrastive_loss
from .frozen_vectors import FrozenVectors
from .label_descriptions import name_description, read_label_descriptions
from .textcat_scope import ScopeRouter
from .textcat_targets import gold_targets

# The settings of labels from descriptions and few examples, with their defaults.
PROTOTYPE_SETTINGS: Dict[str, Any] = {
    "label_descriptions": None,
    "label_names_as_descriptions": False,
    "description_template": "{}",
    "description_weight": 1.0,
    "similarity_threshold": 0.3,
    "contrastive_weight": 0.0,
    "contrastive_temperature": 0.1,
    "vector_anchor": 0.0,
}


def check_prototype_settings(name: str, cfg: Dict[str, Any], model: Model) -> None:
    """A clear error for label-prototype settings that cannot work with the
    component's `model`."""
    if not float(cfg["vector_anchor"]) >= 0:
        raise ValueError(f"[components.{name}] vector_anchor must be >= 0: {cfg['vector_anchor']}")
    if cfg["vector_anchor"] and not model.attrs.get("prototypes", False):
        raise ValueError(
            f"[components.{name}] vector_anchor needs a spacy-bert-pipes.PrototypeCatModel.v1 "
            "model (with a TextCatModel, set vector_anchor on the shared bert_encoder)"
        )


# The softmax scales (1 / temperature) that calibration tries.
SCALES = tuple(float(s) for s in numpy.geomspace(5.0, 100.0, 25))
# The cosines that per-label threshold calibration tries (multi-label).
THRESHOLDS = tuple(float(t) for t in numpy.linspace(0.05, 0.95, 91))


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
        teacher: Optional[FrozenVectors] = None,
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
