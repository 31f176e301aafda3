"""Task heads on top of the encoder. Each is a registered architecture returning a
thinc Model, composed with `chain`; widths are inferred in `init`.
"""

from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Linear, Model, chain, glorot_uniform_init, ragged2list, with_array
from thinc.types import Floats1d, Floats2d, Ints1d, Ragged

from ..text.align import TokenArrays, align_batch, token_arrays
from ..text.windows import is_cupy, segment_sums
from ..types import DocEncoding, DocEncodingGrad

Pooling = Literal["cls", "mean"]
Activation = Literal["none", "tanh", "relu", "gelu"]
TokenVector = Literal["first", "mean"]


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


@registry.architectures("spacy-bert-pipes.TokenTaggerModel.v1")
def TokenTaggerModel(
    encoder: Model[List[Doc], List[DocEncoding]],
    token_vector: TokenVector = "first",
    case_features: bool = True,
    dropout: float = 0.1,
    nO: Optional[int] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Token tagger: a vector per spaCy token from its wordpieces -> softmax over tags.

    encoder (Model[List[Doc], List[DocEncoding]]): A BertEncoder, or an
        EncoderListener to share an upstream `bert_encoder` component.
    token_vector (str): "first" takes each token's first wordpiece (as BERT's
        paper tags words); "mean" averages the token's wordpieces.
    case_features (bool): Append the spaCy token's casing class (lower, Title,
        UPPER, mixed, digits, other) and a sentence-start flag to its vector. An
        uncased encoder (the default one) never sees capitals, a strong cue for
        names; with a cased encoder this is redundant but harmless.
    dropout (float): Dropout on the token vectors during training.
    nO (Optional[int]): Number of tags, inferred from the data if unset.
    RETURNS (Model[List[Doc], List[Floats2d]]): Tag probabilities per doc,
        (n_tokens, n_tags); a token without wordpieces (whitespace) gets a zero vector.
    """
    features = token_features(encoder, token_vector, case_features)
    output = logits_output(exclusive=True, nO=nO)
    per_token: Model[Floats2d, Floats2d] = chain(
        cast(Model[Floats2d, Floats2d], Dropout(dropout)), output
    )
    model: Model[List[Doc], List[Floats2d]] = chain(features, with_array(per_token), ragged2list())
    model.attrs["token_vector"] = token_vector
    model.attrs["case_features"] = case_features
    model.set_ref("encoder", encoder)
    model.set_ref("output", output)
    model.init = _tagger_init
    return model


def _tagger_init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    encoder = model.get_ref("encoder")
    if encoder.has_dim("nO") is not True:
        encoder.initialize()
    output = model.get_ref("output")
    extra = N_CASE_FEATURES if model.attrs["case_features"] else 0
    output.set_dim("nI", encoder.get_dim("nO") + extra, force=True)
    if Y is not None:  # a sample of tag scores: one (n_tokens, n_tags) array, or a list
        sample = Y[0] if isinstance(Y, list) else Y
        output.set_dim("nO", sample.shape[1], force=True)
    output.initialize()
    model.set_dim("nO", output.get_dim("nO"), force=True)


def token_features(
    encoder: Model[List[Doc], List[DocEncoding]],
    token_vector: TokenVector,
    case_features: bool = False,
) -> Model[List[Doc], Ragged]:
    """One vector per spaCy token, from the wordpieces aligned to it by characters,
    optionally followed by the token's casing features (`case_features_batch`).

    The whole batch is one array problem: the docs' wordpiece vectors are
    concatenated once, every token of the batch is aligned in one pass
    (`align.align_batch`), and the token vectors are one gather (a prefix-sum
    difference for "mean" over several wordpieces).

    RETURNS (Model[List[Doc], Ragged]): All docs' token vectors, concatenated,
        with the number of tokens of each doc as lengths.
        (n_tokens, width [+ N_CASE_FEATURES])
    """
    if token_vector not in ("first", "mean"):
        raise ValueError(f"token_vector must be 'first' or 'mean', got {token_vector!r}")

    def forward(model: Model, docs: List[Doc], is_train: bool) -> Tuple[Ragged, Callable]:
        xp = model.ops.xp
        encodings, backprop_encoder = encoder(docs, is_train)
        width = encoder.get_dim("nO")
        tokens = token_arrays(docs)
        alignment = align_batch(docs, [enc.offsets for enc in encodings], tokens)
        starts = numpy.asarray(alignment.starts)  # into the batch's wordpieces
        lengths = numpy.asarray(alignment.lengths)
        if token_vector == "first":
            lengths = numpy.minimum(lengths, 1)
        n_pieces = [len(enc.wordpieces) for enc in encodings]
        pieces = concat_wordpieces(xp, encodings, width)  # (n_pieces, width)
        data = _segment_mean(xp, pieces, starts, lengths, width)  # (n_tokens, width)
        if case_features:
            flags = case_features_batch(docs, tokens)  # (n_tokens, N_CASE_FEATURES)
            data = xp.concatenate([data, xp.asarray(flags)], axis=1)
        sizes = model.ops.asarray1i(cast(Ints1d, tokens.sizes))

        def backprop(d_ragged: Ragged) -> List[Doc]:
            d_all = cast(Floats2d, d_ragged.dataXd)
            d_tokens = d_all[:, :width]  # the casing features have no parameters
            d_pieces = _backprop_segment_mean(xp, d_tokens, starts, lengths, sum(n_pieces))
            bounds = numpy.cumsum([0] + n_pieces).tolist()
            grads = [
                DocEncodingGrad(d_wordpieces=d_pieces[bounds[i] : bounds[i + 1]])
                for i in range(len(n_pieces))
            ]
            return backprop_encoder(grads)

        return Ragged(data, sizes), backprop

    return Model("token_features", forward, layers=[encoder], dims={"nO": None})


def concat_wordpieces(xp: Any, encodings: List[DocEncoding], width: int) -> Floats2d:
    """The wordpiece vectors of a batch's docs, end to end. (n_pieces, width)

    When the encodings are the consecutive docs of one encoder batch (the usual
    case in `nlp.pipe`), that is the batch's own array, not a copy."""
    if not encodings:
        return xp.zeros((0, width), dtype="f")
    first = encodings[0].batch
    if first is not None and first.start == 0:
        end = 0
        for enc in encodings:
            if enc.batch is None or enc.batch.array is not first.array or enc.batch.start != end:
                break
            end += len(enc.wordpieces)
        else:
            if end == len(first.array):
                return first.array
    return xp.concatenate([enc.wordpieces for enc in encodings])


# Casing classes (one-hot) + a sentence-start flag.
N_CASE_FEATURES = 7


# Without sentence boundaries on a doc, a token after one of these starts a sentence.
_SENTENCE_END = {".", "!", "?", "...", "\n"}
# The casing class of a word and whether a sentence ends after it depend only on
# its text, so they are computed once per word type (keyed by the string's hash,
# which does not depend on the vocab): code = class + 8 * ends_sentence.
_WORD_CODES: Dict[int, int] = {}
_MAX_WORD_CODES = 1_000_000


def word_code(text: str) -> int:
    """Casing class (lower, Title, UPPER, mixed letters, digits without letters,
    other) of a token's text, plus 8 if a sentence may start after it."""
    letters = [c for c in text if c.isalpha()]
    if letters:
        if all(c.islower() for c in letters):
            kind = 0
        elif letters[0].isupper() and all(c.islower() for c in letters[1:]):
            kind = 1
        elif all(c.isupper() for c in letters):
            kind = 2
        else:
            kind = 3
    else:
        kind = 4 if any(c.isdigit() for c in text) else 5
    ends = text in _SENTENCE_END or "\n" in text
    return kind + 8 * ends


def case_features_of(doc: Doc) -> numpy.ndarray:
    """Per token: one-hot casing class (lower, Title, UPPER, mixed letters, digits
    without letters, other) and whether the token starts a sentence: from the
    doc's sentence boundaries, or if it has none, after sentence-final punctuation
    or a line break. (n_tokens, 7)"""
    return case_features_batch([doc])


def case_features_batch(docs: List[Doc], tokens: Optional[TokenArrays] = None) -> numpy.ndarray:
    """`case_features_of` for a batch of docs, their tokens end to end: one lookup
    per distinct word of the batch, the rest on whole arrays. (n_tokens, 7)"""
    if tokens is None:
        tokens = token_arrays(docs)
    n_tokens = len(tokens.orth)
    out = numpy.zeros((n_tokens, N_CASE_FEATURES), dtype="f")
    if n_tokens == 0:
        return out
    types, inverse = numpy.unique(tokens.orth, return_inverse=True)
    codes_of_types = [_WORD_CODES.get(orth) for orth in types.tolist()]
    if None in codes_of_types:
        strings = docs[0].vocab.strings
        if len(_WORD_CODES) > _MAX_WORD_CODES:
            _WORD_CODES.clear()
        for i, orth in enumerate(types.tolist()):
            if codes_of_types[i] is None:
                codes_of_types[i] = _WORD_CODES[orth] = word_code(strings[orth])
    codes = numpy.asarray(codes_of_types, dtype="i")[inverse.reshape(-1)]
    out[numpy.arange(n_tokens), codes & 7] = 1.0
    # A sentence starts at a doc's first token, at a marked boundary (docs with
    # sentence boundaries), or after a sentence-final token (docs without).
    has_sentences = numpy.asarray([doc.has_annotation("SENT_START") for doc in docs], bool)
    marked = numpy.repeat(has_sentences, tokens.sizes)
    after_end = numpy.concatenate(([True], codes[:-1] >= 8))
    starts = numpy.where(marked, tokens.sent_start == 1, after_end)
    starts[tokens.doc_starts[tokens.sizes > 0]] = True
    out[:, 6] = starts
    return out


def _segment_mean(
    xp: Any, pieces: Floats2d, starts: numpy.ndarray, lengths: numpy.ndarray, width: int
) -> Floats2d:
    """Mean of pieces[start : start + length] for each token; zeros where length is 0."""
    n_tokens = len(starts)
    if n_tokens == 0 or len(pieces) == 0:
        return xp.zeros((n_tokens, width), dtype="f")
    if int(lengths.max()) <= 1:  # one piece per token: a gather
        rows = pieces[xp.asarray(numpy.minimum(starts, len(pieces) - 1))]  # a copy
        if not lengths.all():
            rows[xp.asarray(lengths == 0)] = 0.0
        return rows
    # Sums of contiguous runs from a prefix sum, in float64 so long docs stay exact.
    prefix = xp.concatenate(
        [xp.zeros((1, pieces.shape[1]), dtype="f8"), xp.cumsum(pieces, axis=0, dtype="f8")]
    )
    s, e = xp.asarray(starts), xp.asarray(starts + lengths)
    sums = prefix[e] - prefix[s]  # (n_tokens, width)
    return (sums / xp.asarray(numpy.maximum(lengths, 1), dtype="f8")[:, None]).astype("f")


def _backprop_segment_mean(
    xp: Any, d_tokens: Floats2d, starts: numpy.ndarray, lengths: numpy.ndarray, n_pieces: int
) -> Floats2d:
    """Spread each token's gradient evenly over its wordpieces."""
    width = d_tokens.shape[1]
    has = lengths > 0
    if n_pieces == 0 or not has.any():
        return xp.zeros((n_pieces, width), dtype="f")
    scaled = d_tokens[xp.asarray(has)] / xp.asarray(lengths[has], dtype="f")[:, None]
    # A difference array: +g at a run's start, -g just after its end, then a prefix sum.
    diff = xp.zeros((n_pieces + 1, width), dtype="f8")
    _scatter_add(xp, diff, starts[has], scaled)
    _scatter_add(xp, diff, starts[has] + lengths[has], -scaled)
    return xp.cumsum(diff, axis=0)[:n_pieces].astype("f")


def _scatter_add(xp: Any, table: Any, indices: numpy.ndarray, values: Any) -> None:
    if not is_cupy(xp):
        xp.add.at(table, indices, values)
    else:  # cupy
        import cupyx

        cupyx.scatter_add(table, xp.asarray(indices), values)


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
    """The mean of each doc's wordpiece vectors ([CLS] for a doc with none), for
    the whole batch at once: one concatenation, one segment sum."""

    def forward(
        model: Model, encodings: List[DocEncoding], is_train: bool
    ) -> Tuple[Floats2d, Callable]:
        xp = model.ops.xp
        if not encodings:
            return xp.zeros((0, 0), "f"), lambda dX: []
        width = encodings[0].width
        counts = numpy.asarray([len(enc.wordpieces) for enc in encodings], dtype="i")
        cls = xp.stack([enc.cls for enc in encodings])  # (n_docs, width)
        pieces = concat_wordpieces(xp, encodings, width)  # (n_pieces, width)
        sums = segment_sums(xp, pieces, counts)  # (n_docs, width)
        has = counts > 0
        means = sums / xp.asarray(numpy.maximum(counts, 1), dtype="f")[:, None]
        X = xp.where(xp.asarray(has)[:, None], means, cls) if not has.all() else means

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
