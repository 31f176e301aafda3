"""Label prototypes: classify a doc by the cosine of its sentence vector with
each label's prototype, so that a label can be defined by a description.

`PrototypeCatModel` is encoder -> sentence vector -> cosine head:
1. the sentence vector is the checkpoint's sentence-transformers geometry for
   all-MiniLM-L6-v2 (`pooling.py`): the mean over [CLS], the wordpieces and
   [SEP], scaled to unit length (the vector `bert_vectors` writes);
2. the head scores label j with `scale * cos(x, W_j) + b_j`, where the rows of
   W are the label prototypes, and returns softmax (exclusive labels) or sigmoid
   (multi-label) probabilities. For multi-label, `b_j = -scale * t_j` puts label
   j's decision at cosine `t_j`;
3. optionally (`example_weight`, exclusive labels) the head also remembers the
   vectors of the training examples and label descriptions and, when
   predicting, adds `example_weight` times the mean cosine of the doc with
   label j's `example_top` most similar examples to `cos(x, W_j)`
   (`nearest_examples`; a label with fewer examples counts its prototype's
   cosine): a label whose examples form several groups is not one point.
A prototype starts as the mean of its examples' vectors mixed with the vectors
of its descriptions (`label_prototypes`), so the model predicts before any
training, and fine-tuning moves the encoder, the prototypes and the biases.

The losses on a batch's sentence vectors that training adds are in
`vector_losses.py`. Plain numpy (or cupy), no torch.
"""

from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain, get_array_module
from thinc.types import Floats1d, Floats2d

from ..text.windows import segment_sums
from ..types import DocEncoding, DocEncodingGrad
from .fixed_order import ROUNDING_SLACK, fixed_order_dots, top_sums
from .linear import concat_wordpieces

# A numpy (or cupy) array of any shape: the plain math below takes either.
Array = Any


@registry.architectures("spacy-bert-pipes.PrototypeCatModel.v1")
def PrototypeCatModel(
    encoder: Model[List[Doc], List[DocEncoding]],
    exclusive_classes: bool = True,
    temperature: float = 0.05,
    prototype_norm: float = 1.0,
    example_weight: float = 0.0,
    example_top: int = 2,
    nO: Optional[int] = None,
) -> Model[List[Doc], Floats2d]:
    """Document classifier by cosine similarity to label prototypes.

    encoder (Model[List[Doc], List[DocEncoding]]): A BertEncoder (or a listener).
    exclusive_classes (bool): Softmax over the labels, or a sigmoid per label.
    temperature (float): The cosines are divided by it before the softmax or
        sigmoid (scale = 1 / temperature). The component calibrates it on its
        initialize examples when it has some; with none (zero-shot) this value
        is used. Training goes on from it.
    prototype_norm (float): The length the prototypes are stored at. The cosine
        does not see it, but the optimizer's steps are about the learning rate
        whatever a weight's size, so a shorter prototype moves faster: this sets
        how fast the prototypes learn relative to the encoder.
    example_weight (float): When predicting, add this times the mean cosine with
        each label's `example_top` nearest remembered training examples to the
        prototype's cosine (0: prototypes only). The examples are the vectors
        of the last update in which each one was seen (and of `initialize`).
        Exclusive classes only.
    example_top (int): How many of a label's nearest examples are averaged.
    nO (Optional[int]): Number of labels, inferred from the data if unset.
    """
    if temperature <= 0 or prototype_norm <= 0:
        raise ValueError(
            f"temperature and prototype_norm must be > 0, got {temperature}, {prototype_norm}"
        )
    if example_weight < 0 or example_top < 1:
        raise ValueError(
            f"example_weight must be >= 0 and example_top >= 1, got {example_weight}, {example_top}"
        )
    if example_weight > 0 and not exclusive_classes:
        raise ValueError(
            "example_weight (nearest training examples) needs exclusive_classes = true: "
            "the per-label thresholds of multi-label prototypes do not account for it"
        )
    body: Model[List[Doc], Floats2d] = chain(encoder, sentence_vectors())
    output = cosine_output(
        exclusive_classes,
        1.0 / temperature,
        nO=nO,
        example_weight=example_weight,
        example_top=example_top,
    )
    model: Model[List[Doc], Floats2d] = chain(body, output)
    model.attrs["exclusive_classes"] = exclusive_classes
    model.attrs["prototypes"] = True
    model.attrs["prototype_norm"] = prototype_norm
    model.set_ref("encoder", encoder)
    model.set_ref("body", body)
    model.set_ref("output", output)
    model.init = _prototype_init
    return model


def _prototype_init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    encoder = model.get_ref("encoder")
    if encoder.has_dim("nO") is not True:
        encoder.initialize()
    output = model.get_ref("output")
    output.set_dim("nI", encoder.get_dim("nO"), force=True)
    if Y is not None:
        output.set_dim("nO", Y.shape[1], force=True)
    output.initialize()
    model.set_dim("nO", output.get_dim("nO"), force=True)


def sentence_vectors() -> Model[List[DocEncoding], Floats2d]:
    """Each doc's sentence vector: the mean of its [CLS], wordpiece and [SEP]
    vectors, scaled to unit length. (n_docs, width)

    The gradient reaches [CLS] and the wordpieces; the encoder has no gradient
    path for [SEP], whose share of the mean is one position of the text's."""

    def forward(
        model: Model, encodings: List[DocEncoding], is_train: bool
    ) -> Tuple[Floats2d, Callable]:
        xp = model.ops.xp
        if not encodings:
            return xp.zeros((0, 0), "f"), lambda dX: []
        width = encodings[0].width
        counts = numpy.asarray([len(enc.wordpieces) for enc in encodings], dtype="i")
        cls = xp.stack([enc.cls for enc in encodings])  # (n_docs, width)
        sep = xp.stack([enc.cls if enc.sep is None else enc.sep for enc in encodings])
        has_sep = xp.asarray([enc.sep is not None for enc in encodings], dtype="f")
        pieces = concat_wordpieces(xp, encodings, width)  # (n_pieces, width)
        sums = segment_sums(xp, pieces, counts) + cls + sep * has_sep[:, None]
        n = xp.asarray(counts + 1, dtype="f") + has_sep  # positions pooled per doc
        means = sums / n[:, None]  # (n_docs, width)
        norms = xp.maximum(xp.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        X = means / norms  # (n_docs, width)

        def backprop(dX: Floats2d) -> List[DocEncodingGrad]:
            # through the normalisation: (dX - X (X . dX)) / |mean|
            d_means = (dX - X * (X * dX).sum(axis=1, keepdims=True)) / norms
            d_pos = d_means / n[:, None]  # each pooled position's gradient
            return [
                DocEncodingGrad(
                    d_cls=d_pos[i],
                    d_wordpieces=xp.broadcast_to(d_pos[i], enc.wordpieces.shape),
                )
                for i, enc in enumerate(encodings)
            ]

        return X, backprop

    return Model("sentence_vectors", forward)


def cosine_output(
    exclusive: bool,
    scale: float,
    nO: Optional[int] = None,
    example_weight: float = 0.0,
    example_top: int = 2,
) -> Model:
    """`scale * cos(X, W) + b` -> softmax or sigmoid. Its params: W, the label
    prototypes (nO, nI), any length; b (nO,); and the scale, learned as its log
    (shape (1,)). Like `heads.logits_output`, backprop takes the gradient with
    respect to the logits.

    With example_weight > 0, prediction (not training, where a doc would find
    itself) adds `example_weight * nearest_examples(...)` to the cosines. The
    remembered examples are the params E (n_examples, nI), unit rows, and
    E_label (n_examples,), their label indices; `remember_examples` sets them."""

    def forward(model: Model, X: Floats2d, is_train: bool) -> Tuple[Floats2d, Callable]:
        xp = model.ops.xp
        W = cast(Floats2d, model.get_param("W"))  # (nO, nI)
        b = cast(Floats1d, model.get_param("b"))  # (nO,)
        s = xp.exp(model.get_param("log_scale"))  # (1,)
        Wn, w_norms = unit_with_norms(W)  # (nO, nI), (nO, 1)
        Xn, x_norms = unit_with_norms(X)  # (batch, nI), (batch, 1)
        cos = model.ops.gemm(Xn, Wn, trans2=True)  # (batch, nO)
        weight = float(model.attrs["example_weight"])
        if not is_train and weight > 0 and has_examples(model):
            near = nearest_examples(
                Xn,
                model.get_param("E"),
                model.get_param("E_label"),
                cos,
                int(model.attrs["example_top"]),
            )
            logits = (cos + weight * near) * s + b
        else:
            logits = cos * s + b
        Y = model.ops.softmax(logits) if exclusive else model.ops.sigmoid(logits)

        def backprop(d_logits: Floats2d) -> Floats2d:
            d_cos = d_logits * s  # (batch, nO)
            model.inc_grad("b", d_logits.sum(axis=0))
            d_log_scale = float(xp.sum(d_logits * cos)) * float(s[0])
            model.inc_grad("log_scale", xp.asarray([d_log_scale], dtype="f"))
            d_Wn = model.ops.gemm(d_cos, Xn, trans1=True)  # (nO, nI)
            d_W = (d_Wn - Wn * (Wn * d_Wn).sum(axis=1, keepdims=True)) / w_norms
            model.inc_grad("W", d_W.astype("f"))
            d_Xn = model.ops.gemm(d_cos, Wn)  # (batch, nI)
            return (d_Xn - Xn * (Xn * d_Xn).sum(axis=1, keepdims=True)) / x_norms

        return Y, backprop

    def init(model: Model, X: Optional[Floats2d] = None, Y: Optional[Floats2d] = None) -> None:
        if Y is not None:
            model.set_dim("nO", Y.shape[1], force=True)
        nO_, nI_ = model.get_dim("nO"), model.get_dim("nI")
        # placeholders until the component sets the prototypes (`set_prototypes`)
        model.set_param("W", model.ops.alloc2f(nO_, nI_) + 1.0)
        model.set_param("b", model.ops.alloc1f(nO_))
        model.set_param("log_scale", model.ops.asarray1f([numpy.log(scale)]))
        model.set_param("E", model.ops.alloc2f(0, nI_))
        model.set_param("E_label", model.ops.alloc1f(0))
        model.attrs["example_keys"] = []

    return Model(
        "cosine_softmax" if exclusive else "cosine_sigmoid",
        forward,
        init=init,
        dims={"nO": nO, "nI": None},
        params={"W": None, "b": None, "log_scale": None, "E": None, "E_label": None},
        attrs={
            "exclusive": exclusive,
            "example_weight": example_weight,
            "example_top": example_top,
            "example_keys": [],
        },
    )


def has_examples(output: Model) -> bool:
    """Whether a cosine output layer remembers any training examples."""
    return bool(output.has_param("E")) and output.get_param("E").shape[0] > 0


def nearest_examples(
    Xn: Array,
    E: Array,
    E_label: Array,
    cos: Array,
    top: int,
    leave_out: Optional[Array] = None,
) -> Array:
    """Per doc and label, the mean cosine of the doc with the label's `top` most
    similar examples; a label with fewer than `top` examples gets its
    prototype's cosine from `cos` instead (with one example per label, the
    example alone would outweigh the label's description in its prototype).

    A doc's values depend on its vector alone, not on the other docs of its
    batch nor on the BLAS's threads (`fixed_order`): the float32 product only
    screens the examples, and those within its rounding bound of a label's
    `top`-th nearest are computed again in float64 in one fixed order.

    Xn (Floats2d): The docs' unit vectors. (batch, nI)
    E (Floats2d): The examples' unit vectors. (n_examples, nI)
    E_label (Floats1d): Each example's label index. (n_examples,)
    cos (Floats2d): The cosines with the prototypes. (batch, n_labels)
    leave_out (Optional[Ints1d]): Per doc, the row of E that is the doc itself
        (-1: none), not counted among its nearest. (batch,)
    RETURNS (Floats2d): (batch, n_labels)
    """
    xp = get_array_module(cos)
    n_docs, n_labels = cos.shape
    ids = (E_label.get() if hasattr(E_label, "get") else numpy.asarray(E_label)).astype("i")
    counts = numpy.bincount(ids, minlength=n_labels)[:n_labels]  # (n_labels,)
    width = max(int(counts.max()), 1)
    order = numpy.argsort(ids, kind="stable")
    starts = numpy.concatenate([[0], numpy.cumsum(counts)[:-1]])
    index = numpy.full((n_labels, width), -1, dtype="i")  # each label's example rows
    index[ids[order], numpy.arange(len(ids)) - starts[ids[order]]] = order
    # the screen: the float32 product, in the BLAS's order (batch, n_examples)
    sims = Xn @ E.T
    if leave_out is not None:
        own = numpy.asarray(leave_out.get() if hasattr(leave_out, "get") else leave_out)
        rows = numpy.flatnonzero(own >= 0)
        sims[xp.asarray(rows), xp.asarray(own[rows])] = -xp.inf
    grid = sims[:, xp.asarray(numpy.maximum(index, 0))]  # (batch, n_labels, width)
    grid = xp.where(xp.asarray(index >= 0)[None], grid, -xp.inf)
    k = min(top, width)
    kth = xp.partition(grid, width - k, axis=2)[:, :, width - k]  # (batch, n_labels)
    # unit rows: the product's rounding is within width * eps; the examples
    # that may be among a label's k nearest (-inf: all it has, fewer than k)
    slack = ROUNDING_SLACK * Xn.shape[1] * float(numpy.finfo("f").eps)
    labels = xp.asarray(ids)
    close = xp.isfinite(sims) & (sims >= kth[:, labels] - 2 * slack)
    rows, cols = xp.nonzero(close)  # (n_pairs,)
    # those cosines again, each summed in one fixed order, and per doc and
    # label the k largest, added largest first
    exact = fixed_order_dots(Xn, rows, E, cols)
    sums, taken = top_sums(n_docs * n_labels, rows * n_labels + labels[cols], exact, k)
    taken = taken.reshape(n_docs, n_labels)
    means = sums.reshape(n_docs, n_labels) / xp.maximum(taken, 1)
    return xp.where(taken >= top, means, cos).astype("f")


def remember_examples(
    output: Model, keys: Sequence[int], vectors: Array, label_ids: Sequence[int]
) -> None:
    """Remember each example's vector and label under its key in a cosine output
    layer: a known key's row is replaced, a new key is appended (within one call,
    the last of a repeated key wins). Examples with a label index < 0 (no single
    gold label) are skipped. vectors: (n, nI)."""
    xp = get_array_module(vectors)
    latest = {int(keys[i]): i for i, j in enumerate(label_ids) if j >= 0}
    if not latest:
        return
    ops = output.ops
    old_keys: List[int] = list(output.attrs.get("example_keys", []))
    if has_examples(output):
        E, labels = output.get_param("E").copy(), output.get_param("E_label").copy()
    else:
        E, labels = ops.alloc2f(0, vectors.shape[1]), ops.alloc1f(0)
    row_of = {key: row for row, key in enumerate(old_keys)}
    new_keys = [key for key in latest if key not in row_of]
    E = xp.concatenate([E, ops.alloc2f(len(new_keys), vectors.shape[1])])
    labels = xp.concatenate([labels, ops.alloc1f(len(new_keys))])
    row_of.update({key: len(old_keys) + n for n, key in enumerate(new_keys)})
    rows = xp.asarray([row_of[key] for key in latest])
    taken = xp.asarray(list(latest.values()))
    chosen = vectors[taken]
    E[rows] = chosen / xp.maximum(xp.linalg.norm(chosen, axis=1, keepdims=True), 1e-12)
    labels[rows] = xp.asarray([float(label_ids[i]) for i in latest.values()], dtype="f")
    output.set_param("E", ops.asarray2f(E.astype("f")))
    output.set_param("E_label", ops.asarray1f(labels.astype("f")))
    output.attrs["example_keys"] = old_keys + new_keys


def store_prototypes(model: Model, prototypes: Array) -> None:
    """Set the prototypes (n_labels, width) of a PrototypeCatModel's output
    layer, stored at the model's prototype_norm."""
    unit, _ = unit_with_norms(prototypes)
    rows = unit * model.attrs["prototype_norm"]
    output = model.get_ref("output")
    output.set_param("W", model.ops.asarray2f(rows.astype("f")))


def unit_with_norms(A: Array) -> Tuple[Array, Array]:
    """A's rows scaled to length 1, and their lengths (at least 1e-12, so a zero
    row stays zero). (n, width), (n, 1)"""
    xp = get_array_module(A)
    norms = xp.maximum(xp.linalg.norm(A, axis=1, keepdims=True), 1e-12)
    return A / norms, norms


def cosine_logits(output: Model, X: Array) -> Array:
    """`scale * cos(X, W) + b` of a cosine output layer, before the softmax
    (without the remembered examples' term of `example_weight`). (n_docs, nO)"""
    xp = get_array_module(X)
    Wn, _ = unit_with_norms(output.get_param("W"))
    Xn, _ = unit_with_norms(X)
    return (Xn @ Wn.T) * xp.exp(output.get_param("log_scale")) + output.get_param("b")


def label_prototypes(
    vectors: Array,
    targets: Array,
    descriptions: Sequence[Optional[Array]],
    description_weight: float,
) -> Array:
    """Each label's prototype: the mean of its examples' (unit) vectors plus
    `description_weight` times the mean of its descriptions' vectors, scaled to
    unit length. A label with no positive example is its descriptions alone.

    vectors (Floats2d): The examples' sentence vectors. (n_docs, width)
    targets (Floats2d): 1 where a doc has the label. (n_docs, n_labels)
    descriptions (Sequence[Optional[Floats2d]]): Per label, its description
        vectors (n_descriptions, width), or None.
    RETURNS (Floats2d): (n_labels, width). A label with neither has a zero row.
    """
    xp = get_array_module(vectors)
    counts = targets.sum(axis=0)  # (n_labels,)
    means = targets.T @ vectors / xp.maximum(counts, 1)[:, None]  # (n_labels, width)
    for j, described in enumerate(descriptions):
        if described is not None and len(described):
            means[j] += description_weight * described.mean(axis=0)
    norms = xp.linalg.norm(means, axis=1, keepdims=True)
    return xp.where(norms > 0, means / xp.maximum(norms, 1e-12), 0.0).astype("f")


def self_trained_prototypes(
    start: Array, vectors: Array, rounds: int, weight: float
) -> Tuple[Array, Array]:
    """Prototypes moved towards unlabelled docs (exclusive labels): each round
    assigns every doc to its nearest prototype, and each label's prototype
    becomes its starting prototype plus `weight` times the unit mean of the docs
    assigned to it, to unit length. A label no doc is nearest keeps its start.

    start (Floats2d): The starting unit prototypes. (n_labels, width)
    vectors (Floats2d): The docs' unit sentence vectors. (n_docs, width)
    RETURNS: the prototypes (n_labels, width) and each label's number of docs in
        the last round's assignment (n_labels,).
    """
    xp = get_array_module(start)
    prototypes = start
    counts = xp.zeros((start.shape[0],), dtype="f")
    for _ in range(rounds):
        nearest = (vectors @ prototypes.T).argmax(axis=1)  # (n_docs,)
        assigned = xp.zeros((len(vectors), start.shape[0]), dtype="f")
        assigned[xp.arange(len(vectors)), nearest] = 1.0
        counts = assigned.sum(axis=0)  # (n_labels,)
        means = assigned.T @ vectors  # (n_labels, width)
        norms = xp.linalg.norm(means, axis=1, keepdims=True)
        means = xp.where(norms > 0, means / xp.maximum(norms, 1e-12), 0.0)
        moved = start + weight * means
        prototypes = moved / xp.maximum(xp.linalg.norm(moved, axis=1, keepdims=True), 1e-12)
    return prototypes.astype("f"), counts


def calibrate_scale(cos: Array, truth: Array, scales: Sequence[float]) -> float:
    """The scale (1 / temperature) of `scales` with the lowest cross-entropy of
    the softmax of `scale * cos` against the one-hot `truth`. (n_docs, n_labels)"""
    xp = get_array_module(cos)
    best, best_loss = scales[0], float("inf")
    gold = (cos * truth).sum(axis=1)  # (n_docs,)
    for s in scales:
        z = s * cos
        top = z.max(axis=1)
        loss = float((top + xp.log(xp.exp(z - top[:, None]).sum(axis=1)) - s * gold).mean())
        if loss < best_loss:
            best, best_loss = s, loss
    return float(best)
