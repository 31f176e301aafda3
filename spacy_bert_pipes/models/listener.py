"""A stand-in for the encoder inside a head, fed by an upstream `bert_encoder` pipe.

During training the upstream pipe runs the encoder once per batch and broadcasts
the outputs (and a callback that gathers gradients) to its listeners; at predict
time a listener reads `doc._.bert_encoding`, written by the upstream pipe. This is
the pattern of spaCy's Tok2VecListener.
"""

from typing import Callable, List, Optional, Tuple

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model

from .types import DocEncoding, DocEncodingGrad

ENCODING_ATTR = "bert_encoding"


class EncoderListener(Model):
    """Receives DocEncodings from an upstream `bert_encoder` component."""

    name = "bert_encoder_listener"

    def __init__(self, upstream_name: str, grad_factor: float = 1.0) -> None:
        Model.__init__(
            self,
            name=self.name,
            forward=_listener_forward,
            dims={"nO": None},
            attrs={"grad_factor": grad_factor},
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
    if is_train:
        model.verify_inputs(docs)
        assert model._outputs is not None and model._backprop is not None
        factor = float(model.attrs.get("grad_factor", 1.0))
        if factor == 1.0:
            return model._outputs, model._backprop
        backprop = model._backprop

        def scaled(grads: List[DocEncodingGrad]) -> List[Doc]:
            return backprop([_scaled(grad, factor) for grad in grads])

        return model._outputs, scaled
    outputs = []
    for i, doc in enumerate(docs):
        encoding = doc._.get(ENCODING_ATTR) if Doc.has_extension(ENCODING_ATTR) else None
        if encoding is None:
            raise ValueError(
                f"Doc {i} has no doc._.{ENCODING_ATTR}: {model.upstream_label} "
                "must run before its listeners (is it disabled or missing from the pipeline?)"
            )
        outputs.append(encoding)
    return outputs, lambda d: []


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


def _scaled(grad: DocEncodingGrad, factor: float) -> DocEncodingGrad:
    return DocEncodingGrad(
        d_cls=None if grad.d_cls is None else grad.d_cls * factor,
        d_wordpieces=None if grad.d_wordpieces is None else grad.d_wordpieces * factor,
    )
