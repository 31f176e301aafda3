"""EncoderListener: what a head sends back to the shared encoder."""

import numpy
import pytest
import spacy
from spacy.util import registry

from spacy_bert_pipes.models.encoder.listener import EncoderListener
from spacy_bert_pipes.models.types import DocEncoding, DocEncodingGrad


@pytest.mark.parametrize("grad_factor", [0.0, 0.5, 1.0])
def test_grad_factor_scales_what_reaches_the_encoder(grad_factor: float) -> None:
    make = registry.architectures.get("spacy-bert-pipes.EncoderListener.v2")
    listener = make(grad_factor=grad_factor)
    docs = [spacy.blank("en")("my card")]
    encoding = DocEncoding(
        cls=numpy.ones((4,), "f"), wordpieces=numpy.ones((2, 4), "f"), offsets=numpy.zeros((2, 2))
    )
    received = []
    listener.receive(EncoderListener.get_batch_id(docs), [encoding], received.extend)
    outputs, backprop = listener(docs, is_train=True)
    assert outputs == [encoding]
    backprop([DocEncodingGrad(d_cls=numpy.full((4,), 2.0, "f"), d_wordpieces=None)])
    assert received[0].d_cls.tolist() == [2.0 * grad_factor] * 4
    assert received[0].d_wordpieces is None


def test_v1_passes_gradients_whole_and_negative_factors_fail() -> None:
    assert (
        registry.architectures.get("spacy-bert-pipes.EncoderListener.v1")().attrs["grad_factor"]
        == 1.0
    )
    with pytest.raises(ValueError, match="grad_factor"):
        registry.architectures.get("spacy-bert-pipes.EncoderListener.v2")(grad_factor=-1.0)
