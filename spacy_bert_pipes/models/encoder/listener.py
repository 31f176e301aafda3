"""A stand-in for the encoder inside a head, fed by an upstream `bert_encoder` pipe.

During training the upstream pipe runs the encoder once per batch and broadcasts
the outputs (and a callback that gathers gradients) to its listeners; at predict
time a listener reads `doc._.bert_encoding`, written by the upstream pipe. This is
the pattern of spaCy's Tok2VecListener. A listener with `own_layers` reads its
component's branch of the encoding (`models/transformer/branches.py`).
"""

from typing import Callable, List, Optional, Tuple

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model

from ..types import DocEncoding, DocEncodingGrad

ENCODING_ATTR = "bert_encoding"


class EncoderListener(Model):
    """Receives DocEncodings from an upstream `bert_encoder` component."""

    name = "bert_encoder_listener"

    def __init__(self, upstream_name: str, grad_factor: float = 1.0, own_layers: int = 0) -> None:
        Model.__init__(
            self,
            name=self.name,
            forward=_listener_forward,
            dims={"nO": None},
            # branch: the name of the component this listener serves, set by the
            # upstream pipe when own_layers > 0 (its branch goes by that name)
            attrs={"grad_factor": grad_factor, "own_layers": own_layers, "branch": ""},
        )
        self.upstream_name = upstream_name
        self._batch_id: Optional[int] = None
        self._outputs: Optional[List[DocEncoding]] = None
        self._backprop: Optional[Callable[[List[DocEncodingGrad]], List[Doc]]] = None

    @property
    def upstream_label(self) -> str:
        """How error messages name the upstream component."""
        if self.upstream_name == "*":
            return "the upstream bert_encoder component"
        return f"the upstream component '{self.upstream_name}'"

    @classmethod
    def get_batch_id(cls, inputs: List[Doc]) -> int:
        """A cheap id for a batch, to check a listener gets the batch it was sent."""
        return sum(sum(token.orth for token in doc) + len(doc.text) for doc in inputs)

    def receive(
        self,
        batch_id: int,
        outputs: List[DocEncoding],
        backprop: Callable[[List[DocEncodingGrad]], List[Doc]],
    ) -> None:
        self._batch_id = batch_id
        self._outputs = outputs
        self._backprop = backprop

    def verify_inputs(self, inputs: List[Doc]) -> None:
        if self._batch_id is None and self._outputs is None:
            raise ValueError(
                f"The listener of {self.upstream_label} got no encoder output. In training, "
                "the upstream bert_encoder must come before its listeners in the pipeline "
                "and must not be frozen or disabled (list it in [training] annotating_components "
                "if it is frozen)."
            )
        if self._batch_id != self.get_batch_id(inputs):
            raise ValueError(
                f"The listener of {self.upstream_label} received a different batch than "
                "the one it was asked to predict."
            )


def _listener_forward(
    model: EncoderListener, docs: List[Doc], is_train: bool
) -> Tuple[List[DocEncoding], Callable[[List[DocEncodingGrad]], List[Doc]]]:
    branch = str(model.attrs.get("branch") or "") if model.attrs.get("own_layers") else ""
    if is_train:
        model.verify_inputs(docs)
        assert model._outputs is not None and model._backprop is not None
        factor = float(model.attrs.get("grad_factor", 1.0))
        if factor == 1.0 and not branch:
            return model._outputs, model._backprop
        backprop = model._backprop

        def scaled(grads: List[DocEncodingGrad]) -> List[Doc]:
            grads = [_scaled(grad, factor) if factor != 1.0 else grad for grad in grads]
            if branch:
                grads = [DocEncodingGrad(branches={branch: grad}) for grad in grads]
            return backprop(grads)

        return [_branch_of(model, enc, branch) for enc in model._outputs], scaled
    outputs = []
    for i, doc in enumerate(docs):
        encoding = doc._.get(ENCODING_ATTR) if Doc.has_extension(ENCODING_ATTR) else None
        if encoding is None:
            raise ValueError(
                f"Doc {i} has no doc._.{ENCODING_ATTR}: {model.upstream_label} "
                "must run before its listeners (is it disabled or missing from the pipeline?)"
            )
        outputs.append(_branch_of(model, encoding, branch))
    return outputs, lambda d: []


def _branch_of(model: EncoderListener, encoding: DocEncoding, branch: str) -> DocEncoding:
    """The encoding itself, or with own_layers its component's branch of it."""
    if not branch:
        return encoding
    if branch not in encoding.branches:
        raise ValueError(
            f"Component '{branch}' has its own top {model.attrs['own_layers']} encoder "
            f"layers (own_layers), but {model.upstream_label} gives it no output of "
            "them: the pipeline was initialized or trained without them. Initialize "
            "and train it again, or set own_layers = 0."
        )
    return encoding.branches[branch]


@registry.architectures("spacy-bert-pipes.EncoderListener.v1")
def make_encoder_listener(upstream: str = "*") -> Model[List[Doc], List[DocEncoding]]:
    """EncoderListener.v2 with grad_factor 1.0.

    upstream (str): The name of the upstream component, or "*" for the first
        `bert_encoder` before this component.
    """
    return make_encoder_listener_v2(upstream=upstream, grad_factor=1.0)


@registry.architectures("spacy-bert-pipes.EncoderListener.v2")
def make_encoder_listener_v2(
    upstream: str = "*", grad_factor: float = 1.0
) -> Model[List[Doc], List[DocEncoding]]:
    """Read encoder outputs from an upstream `bert_encoder` component.

    upstream (str): The name of the upstream component, or "*" for the first
        `bert_encoder` before this component.
    grad_factor (float): The weight of this head's loss in what the shared encoder
        learns (its gradients are scaled by it): in multi-task training, a head
        that should pull the encoder less gets less than 1.0; 0.0 trains the
        head on the encoder as it is.
    """
    if grad_factor < 0:
        raise ValueError(f"grad_factor must be >= 0, got {grad_factor}")
    return EncoderListener(upstream_name=upstream, grad_factor=grad_factor)


@registry.architectures("spacy-bert-pipes.EncoderListener.v3")
def make_encoder_listener_v3(
    upstream: str = "*", grad_factor: float = 1.0, own_layers: int = 0
) -> Model[List[Doc], List[DocEncoding]]:
    """EncoderListener.v2 with a way out for a head that does not do well on a
    fully shared encoder.

    own_layers (int): How many of the encoder's top layers this head owns: its own
        copy of them, started from the same weights, reads the output of the
        shared layers below them (`models/transformer/branches.py`). The pipeline then pays
        1 + own_layers / L encoder passes (L: the encoder's layers) instead of 1.
        0: the whole encoder is shared.
    """
    if grad_factor < 0:
        raise ValueError(f"grad_factor must be >= 0, got {grad_factor}")
    if own_layers < 0:
        raise ValueError(f"own_layers must be >= 0, got {own_layers}")
    return EncoderListener(upstream_name=upstream, grad_factor=grad_factor, own_layers=own_layers)


def _scaled(grad: DocEncodingGrad, factor: float) -> DocEncodingGrad:
    return DocEncodingGrad(
        d_cls=None if grad.d_cls is None else grad.d_cls * factor,
        d_wordpieces=None if grad.d_wordpieces is None else grad.d_wordpieces * factor,
        branches={name: _scaled(g, factor) for name, g in grad.branches.items()},
    )
