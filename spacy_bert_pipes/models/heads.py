"""Task heads on top of the encoder. Each is a registered architecture returning a
thinc Model, composed with `chain`; widths are inferred in `init`.
"""

from typing import Any, Callable, List, Literal, Optional, Tuple, cast

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Model, chain, glorot_uniform_init
from thinc.types import Floats1d, Floats2d

from .types import DocEncoding, DocEncodingGrad

Pooling = Literal["cls", "mean"]
Activation = Literal["none", "tanh", "relu", "gelu"]


@registry.architectures("spacy-bert-pipes.TextCatModel.v1")
def TextCatModel(
    encoder: Model[List[Doc], List[DocEncoding]],
    exclusive_classes: bool = True,
    pooling: Pooling = "cls",
    pooler_activation: Activation = "none",
    dropout: float = 0.1,
    nO: Optional[int] = None,
) -> Model[List[Doc], Floats2d]:
    """Document classifier: pooled encoder vector -> (dense) -> softmax or sigmoid.

    encoder (Model[List[Doc], List[DocEncoding]]): A BertEncoder, or an
        EncoderListener to share an upstream `bert_encoder` component.
    exclusive_classes (bool): Softmax over mutually exclusive classes, or an
        independent sigmoid per label (multi-label).
    pooling (str): "cls" uses the [CLS] vector, as BERT does; "mean" averages the
        wordpiece vectors (how sentence-transformers models were trained).
    pooler_activation (str): If not "none", a dense layer with this activation is
        applied to the pooled vector first: BERT's own classifier uses "tanh".
    dropout (float): Dropout on the pooled vector during training.
    nO (Optional[int]): Number of labels, inferred from the data if unset.
    """
    pool = cls_pooling() if pooling == "cls" else mean_pooling()
    layers: List[Model] = [encoder, pool]
    pooler: Optional[Model] = None
    if pooler_activation != "none":
        pooler = chain(Linear(), activation(pooler_activation))
        layers.extend([Dropout(dropout), pooler])
    output = logits_output(exclusive_classes, nO=nO)
    layers.extend([Dropout(dropout), output])
    model: Model[List[Doc], Floats2d] = chain(*layers)
    model.attrs["exclusive_classes"] = exclusive_classes
    model.attrs["pooling"] = pooling
    model.attrs["pooler_activation"] = pooler_activation
    model.set_ref("encoder", encoder)
    model.set_ref("output", output)
    if pooler is not None:
        model.set_ref("pooler", pooler.layers[0])
    model.init = _textcat_init
    return model


def _textcat_init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    encoder = model.get_ref("encoder")
    if encoder.has_dim("nO") is not True:
        encoder.initialize()
    width = encoder.get_dim("nO")
    if model.has_ref("pooler"):
        pooler = model.get_ref("pooler")
        pooler.set_dim("nI", width, force=True)
        pooler.set_dim("nO", width, force=True)
    output = model.get_ref("output")
    output.set_dim("nI", width, force=True)
    if Y is not None:
        output.set_dim("nO", Y.shape[1], force=True)
    for layer in model.layers[1:]:
        layer.initialize()
    model.set_dim("nO", output.get_dim("nO"), force=True)


def cls_pooling() -> Model[List[DocEncoding], Floats2d]:
    """The [CLS] vector of each doc. (n_docs, width)"""

    def forward(
        model: Model, encodings: List[DocEncoding], is_train: bool
    ) -> Tuple[Floats2d, Callable]:
        xp = model.ops.xp
        X = xp.stack([enc.cls for enc in encodings]) if encodings else xp.zeros((0, 0), "f")

        def backprop(dX: Floats2d) -> List[DocEncodingGrad]:
            return [DocEncodingGrad(d_cls=dX[i]) for i in range(len(encodings))]

        return X, backprop

    return Model("cls_pooling", forward)


def mean_pooling() -> Model[List[DocEncoding], Floats2d]:
    """The mean of each doc's wordpiece vectors ([CLS] for a doc with none)."""

    def forward(
        model: Model, encodings: List[DocEncoding], is_train: bool
    ) -> Tuple[Floats2d, Callable]:
        xp = model.ops.xp
        rows = [
            enc.wordpieces.mean(axis=0) if len(enc.wordpieces) else enc.cls for enc in encodings
        ]
        X = xp.stack(rows) if rows else xp.zeros((0, 0), "f")

        def backprop(dX: Floats2d) -> List[DocEncodingGrad]:
            grads = []
            for i, enc in enumerate(encodings):
                n = len(enc.wordpieces)
                if n == 0:
                    grads.append(DocEncodingGrad(d_cls=dX[i]))
                else:
                    d_pieces = xp.broadcast_to(dX[i] / n, enc.wordpieces.shape)
                    grads.append(DocEncodingGrad(d_wordpieces=d_pieces))
            return grads

        return X, backprop

    return Model("mean_pooling", forward)


def activation(name: Activation) -> Model[Floats2d, Floats2d]:
    """An elementwise activation: tanh, relu or (erf) gelu."""

    def forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
        ops = model.ops
        if name == "tanh":
            Y = ops.xp.tanh(X)
            return Y, lambda dY: dY * (1.0 - Y * Y)
        if name == "relu":
            Y = ops.relu(X)
            return Y, lambda dY: ops.backprop_relu(dY, Y)
        if name == "gelu":
            return ops.gelu(X), lambda dY: ops.backprop_gelu(dY, X)
        return X, lambda dY: dY

    return Model(f"activation_{name}", forward)


def logits_output(exclusive: bool, nO: Optional[int] = None) -> Model[Floats2d, Floats2d]:
    """Affine layer + softmax (exclusive) or sigmoid (multi-label).

    Returns probabilities; backprop expects the gradient of the loss with respect
    to the *logits* (for cross-entropy: probabilities minus truth), which is
    stable where the gradient through the squashing function is not.
    """

    def forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
        W = cast(Floats2d, model.get_param("W"))  # (nO, nI)
        b = cast(Floats1d, model.get_param("b"))  # (nO,)
        logits = model.ops.affine(X, W, b)  # (batch, nO)
        Y = model.ops.softmax(logits) if exclusive else model.ops.sigmoid(logits)

        def backprop(d_logits: Floats2d) -> Floats2d:
            model.inc_grad("b", d_logits.sum(axis=0))
            model.inc_grad("W", model.ops.gemm(d_logits, X, trans1=True))
            return model.ops.gemm(d_logits, W)

        return Y, backprop

    def init(model: Model, X: Optional[Floats2d] = None, Y: Optional[Floats2d] = None) -> None:
        if X is not None:
            model.set_dim("nI", X.shape[1], force=True)
        if Y is not None:
            model.set_dim("nO", Y.shape[1], force=True)
        nO_, nI_ = model.get_dim("nO"), model.get_dim("nI")
        model.set_param("W", glorot_uniform_init(model.ops, (nO_, nI_)))
        model.set_param("b", model.ops.alloc1f(nO_))

    return Model(
        "softmax_output" if exclusive else "sigmoid_output",
        forward,
        init=init,
        dims={"nO": nO, "nI": None},
        params={"W": None, "b": None},
        attrs={"exclusive": exclusive},
    )
