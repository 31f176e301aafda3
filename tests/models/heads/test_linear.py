"""Task heads: pooling, activations, the output layer and the composed TextCatModel."""

import numpy
import pytest
import spacy
import torch
from numpy.testing import assert_allclose
from thinc.api import Adam, NumpyOps
from thinc.types import Ragged

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.heads.linear import (
    N_CASE_FEATURES,
    TextCatModel,
    TokenTaggerModel,
    activation,
    case_features_of,
    cls_pooling,
    logits_output,
    mean_pooling,
    token_features,
)
from spacy_bert_pipes.models.types import DocEncoding

pytestmark = pytest.mark.usefixtures("one_thread")


def make_encodings(n_pieces, width=5, seed=0):
    rng = numpy.random.default_rng(seed)
    return [
        DocEncoding(
            cls=rng.normal(size=(width,)).astype("f"),
            wordpieces=rng.normal(size=(n, width)).astype("f"),
            offsets=numpy.zeros((n, 2), dtype="i"),
        )
        for n in n_pieces
    ]


def test_cls_pooling():
    encodings = make_encodings([3, 0, 7])
    model = cls_pooling()
    X, backprop = model.begin_update(encodings)
    assert X.shape == (3, 5)
    assert_allclose(X, numpy.stack([e.cls for e in encodings]))
    dX = numpy.arange(15, dtype="f").reshape((3, 5))
    grads = backprop(dX)
    assert len(grads) == 3
    for i, grad in enumerate(grads):
        assert_allclose(grad.d_cls, dX[i])
        assert grad.d_wordpieces is None


def test_mean_pooling():
    encodings = make_encodings([3, 0, 7])
    model = mean_pooling()
    X, backprop = model.begin_update(encodings)
    assert X.shape == (3, 5)
    assert_allclose(X[0], encodings[0].wordpieces.mean(0), rtol=1e-6)
    assert_allclose(X[1], encodings[1].cls)  # no wordpieces: fall back to [CLS]
    assert_allclose(X[2], encodings[2].wordpieces.mean(0), rtol=1e-6)
    dX = numpy.arange(1, 16, dtype="f").reshape((3, 5))
    grads = backprop(dX)
    for i in (0, 2):
        n = len(encodings[i].wordpieces)
        assert grads[i].d_cls is None
        assert grads[i].d_wordpieces.shape == (n, 5)
        # Each wordpiece gets d/n: the mean's gradient.
        assert_allclose(grads[i].d_wordpieces, numpy.tile(dX[i] / n, (n, 1)), rtol=1e-6)
    assert grads[1].d_wordpieces is None
    assert_allclose(grads[1].d_cls, dX[1])


@pytest.mark.parametrize("pool", [cls_pooling, mean_pooling])
def test_pooling_empty_batch(pool):
    X, backprop = pool().begin_update([])
    assert X.shape[0] == 0
    assert backprop(X) == []


def _reference(name, X):
    x = torch.from_numpy(X.astype("float64"))
    functions = {
        "tanh": torch.tanh,
        "relu": torch.relu,
        "gelu": torch.nn.functional.gelu,  # erf form
        "none": lambda t: t,
    }
    return functions[name](x).numpy()


@pytest.mark.parametrize("name", ["tanh", "relu", "gelu", "none"])
def test_activation_forward_and_finite_differences(name):
    rng = numpy.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(4, 6)).astype("f")
    X[numpy.abs(X) < 0.1] = 0.5  # away from relu's kink
    model = activation(name)
    model.ops = NumpyOps()
    Y, backprop = model.begin_update(X.copy())
    assert_allclose(Y, _reference(name, X), atol=1e-5)
    dY = rng.normal(size=X.shape).astype("f")
    dX = backprop(dY)
    eps = 1e-3
    X64 = X.astype("float64")
    numeric = (_reference(name, X64 + eps) - _reference(name, X64 - eps)) / (2 * eps) * dY
    assert_allclose(dX, numeric, rtol=1e-3, atol=1e-4)
    if name != "none":
        assert not numpy.allclose(dX, dY)


def _output_layer(exclusive, W, b):
    model = logits_output(exclusive)
    model.initialize(X=numpy.zeros((1, W.shape[1]), "f"), Y=numpy.zeros((1, W.shape[0]), "f"))
    assert model.get_dim("nI") == W.shape[1] and model.get_dim("nO") == W.shape[0]
    model.set_param("W", W)
    model.set_param("b", b)
    return model


def test_logits_output_softmax_and_backprop():
    rng = numpy.random.default_rng(1)
    W = rng.normal(size=(3, 4)).astype("f")
    b = rng.normal(size=(3,)).astype("f")
    X = rng.normal(size=(5, 4)).astype("f")
    model = _output_layer(True, W, b)
    Y, backprop = model.begin_update(X)
    logits = X @ W.T + b
    expected = numpy.exp(logits) / numpy.exp(logits).sum(1, keepdims=True)
    assert_allclose(Y, expected, rtol=1e-5)
    assert_allclose(Y.sum(1), numpy.ones(5), rtol=1e-6)
    d_logits = rng.normal(size=(5, 3)).astype("f")
    dX = backprop(d_logits)
    assert_allclose(dX, d_logits @ W, rtol=1e-5, atol=1e-6)
    assert_allclose(model.get_grad("W"), d_logits.T @ X, rtol=1e-5, atol=1e-6)
    assert_allclose(model.get_grad("b"), d_logits.sum(0), rtol=1e-5, atol=1e-6)


def test_logits_output_sigmoid():
    rng = numpy.random.default_rng(2)
    W = rng.normal(size=(3, 4)).astype("f")
    b = rng.normal(size=(3,)).astype("f")
    X = rng.normal(size=(5, 4)).astype("f")
    model = _output_layer(False, W, b)
    assert model.name == "sigmoid_output"
    Y = model.predict(X)
    assert_allclose(Y, 1 / (1 + numpy.exp(-(X @ W.T + b))), rtol=1e-5)
    assert ((Y > 0) & (Y < 1)).all()
    assert not numpy.allclose(Y.sum(1), 1.0)


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


TEXTS = ["my card did not arrive", "the exchange rate is bad", "hello world", ""]
TRUTH = numpy.asarray([[1, 0], [0, 1], [1, 0], [0, 1]], dtype="f")


def make_textcat(tiny_bert, **kwargs):
    encoder = BertEncoder(max_length=16, stride=4)
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    model = TextCatModel(encoder, **kwargs)
    model.initialize(Y=TRUTH)
    return model


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("pooler_activation", ["none", "tanh"])
def test_textcat_model_predicts_distributions(tiny_bert, nlp, pooling, pooler_activation):
    model = make_textcat(tiny_bert, pooling=pooling, pooler_activation=pooler_activation)
    assert model.get_dim("nO") == 2
    assert model.get_ref("output").get_dim("nI") == 32
    assert model.has_ref("pooler") is (pooler_activation != "none")
    scores = model.predict([nlp(text) for text in TEXTS])
    assert scores.shape == (4, 2)
    assert_allclose(scores.sum(1), numpy.ones(4), rtol=1e-5)


def test_textcat_model_multilabel(tiny_bert, nlp):
    model = make_textcat(tiny_bert, exclusive_classes=False)
    model.get_ref("output").set_param("b", numpy.asarray([1.0, 2.0], dtype="f"))
    scores = model.predict([nlp(text) for text in TEXTS])
    assert ((scores > 0) & (scores < 1)).all()
    assert not numpy.allclose(scores.sum(1), 1.0)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_textcat_model_overfits(tiny_bert, nlp, pooling):
    """Gradients flow from the output layer through pooling into the transformer."""
    torch.manual_seed(0)  # the checkpoint's own dropout
    model = make_textcat(tiny_bert, pooling=pooling, pooler_activation="tanh", dropout=0.0)
    docs = [nlp(text) for text in TEXTS]
    optimizer = Adam(0.005)
    transformer = model.get_ref("encoder").shims[0].module.transformer
    embeddings = transformer.embeddings.word_embeddings.weight.detach().clone()
    losses = []
    for _ in range(25):
        scores, backprop = model.begin_update(docs)
        losses.append(float(-(TRUTH * numpy.log(scores + 1e-8)).sum()))
        backprop(scores - TRUTH)
        model.finish_update(optimizer)
    assert losses[-1] < 0.25 * losses[0]
    assert not torch.equal(transformer.embeddings.word_embeddings.weight, embeddings)
    assert (model.predict(docs).argmax(1) == TRUTH.argmax(1)).all()


# --- token tagging ------------------------------------------------------------


class FixedEncoder:
    """Builds a thinc Model returning given DocEncodings, recording the gradients."""

    @staticmethod
    def make(encodings, width):
        from thinc.api import Model

        received = []

        def forward(model, docs, is_train):
            return encodings, lambda grads: received.extend(grads) or []

        model = Model("fixed_encoder", forward, dims={"nO": width})
        return model, received


def piece_offsets(doc, split_every=3):
    """Character offsets of wordpieces: each token cut into chunks of 3 characters."""
    offsets = []
    for token in doc:
        if token.is_space:
            continue
        for start in range(token.idx, token.idx + len(token), split_every):
            offsets.append((start, min(start + split_every, token.idx + len(token))))
    return numpy.asarray(offsets, dtype="i").reshape((-1, 2))


@pytest.mark.parametrize("token_vector", ["first", "mean"])
def test_token_features_forward_and_adjoint(nlp, token_vector):
    docs = [nlp.make_doc("international  bank of london"), nlp.make_doc(""), nlp.make_doc("a")]
    rng = numpy.random.default_rng(0)
    encodings = []
    for doc in docs:
        offsets = piece_offsets(doc)
        encodings.append(
            DocEncoding(
                cls=rng.normal(size=(4,)).astype("f"),
                wordpieces=rng.normal(size=(len(offsets), 4)).astype("f"),
                offsets=offsets,
            )
        )
    encoder, received = FixedEncoder.make(encodings, 4)
    model = token_features(encoder, token_vector)
    ragged, backprop = model.begin_update(docs)
    assert list(ragged.lengths) == [len(doc) for doc in docs]
    X = ragged.dataXd
    # "international" = 5 pieces (inter|nat|ion|al), then the whitespace token " ".
    pieces = encodings[0].wordpieces
    first_token = pieces[0] if token_vector == "first" else pieces[0:5].mean(axis=0)
    assert_allclose(X[0], first_token, rtol=1e-5)
    assert_allclose(X[1], numpy.zeros(4))  # whitespace: no wordpiece
    # Backprop is the adjoint of forward: <F(x), g> == <x, B(g)>.
    dX = rng.normal(size=X.shape).astype("f")
    backprop(Ragged(dX, ragged.lengths))
    lhs = float((X * dX).sum())
    rhs = sum(float((e.wordpieces * g.d_wordpieces).sum()) for e, g in zip(encodings, received))
    assert lhs == pytest.approx(rhs, rel=1e-4)


def test_token_features_rejects_unknown_mode():
    encoder, _ = FixedEncoder.make([], 4)
    with pytest.raises(ValueError, match="token_vector"):
        token_features(encoder, "last")  # type: ignore[arg-type]


@pytest.mark.parametrize("token_vector", ["first", "mean"])
def test_token_tagger_overfits(tiny_bert, nlp, token_vector):
    encoder = BertEncoder(max_length=16, stride=4)
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    model = TokenTaggerModel(encoder, token_vector=token_vector)
    model.initialize(Y=numpy.zeros((1, 3), dtype="f"))
    docs = [nlp.make_doc("john smith is in paris"), nlp.make_doc("hello world " * 10)]
    truth = [numpy.asarray([1, 2, 0, 0, 1]), numpy.zeros(len(docs[1]), dtype="i")]
    optimizer = Adam(0.005)
    for _ in range(60):
        probs, backprop = model.begin_update(docs)
        grads = []
        for p, t in zip(probs, truth):
            d = p.copy()
            d[numpy.arange(len(t)), t] -= 1.0
            grads.append(d / len(t))
        backprop(grads)
        model.finish_update(optimizer)
    probs = model.predict(docs)
    assert [p.shape for p in probs] == [(5, 3), (20, 3)]
    for p, t in zip(probs, truth):
        assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
        assert list(p.argmax(axis=1)) == list(t)
    assert model.predict([]) == []


def test_case_features(nlp):
    from spacy.tokens import Doc

    doc = Doc(
        nlp.vocab,
        words=["EU", "rejects", "German", "iPhone", "1996-08-22", ".", "Peter"],
        sent_starts=[True, False, False, False, False, False, True],
    )
    feats = case_features_of(doc)
    assert feats.shape == (7, N_CASE_FEATURES)
    assert list(feats[:, :6].argmax(axis=1)) == [2, 0, 1, 3, 4, 5, 1]
    assert list(feats[:, 6]) == [1, 0, 0, 0, 0, 0, 1]
    assert (feats[:, :6].sum(axis=1) == 1).all()


def test_token_features_with_case_features(nlp):
    docs = [nlp.make_doc("John lives in PARIS"), nlp.make_doc("")]
    encodings = [
        DocEncoding(
            cls=numpy.zeros((4,), "f"),
            wordpieces=numpy.ones((len(piece_offsets(d)), 4), "f"),
            offsets=piece_offsets(d),
        )
        for d in docs
    ]
    encoder, received = FixedEncoder.make(encodings, 4)
    ragged, backprop = token_features(encoder, "first", case_features=True).begin_update(docs)
    X = ragged.dataXd
    assert X.shape == (4, 4 + N_CASE_FEATURES)
    assert_allclose(X[:, 4:], case_features_of(docs[0]))
    backprop(Ragged(numpy.ones_like(X), ragged.lengths))
    assert received[0].d_wordpieces.shape == encodings[0].wordpieces.shape


def test_case_features_guess_sentence_starts_without_boundaries(nlp):
    doc = nlp.make_doc("Peter left. Then Mary came!\nJohn")
    assert not doc.has_annotation("SENT_START")
    starts = case_features_of(doc)[:, 6]
    assert [t.text for t, s in zip(doc, starts) if s and not t.is_space] == [
        "Peter",
        "Then",
        "John",
    ]
