"""The BertEncoder thinc Model, checked against direct Hugging Face forward passes
of the same tiny random checkpoint."""

import json
import shutil

import numpy
import pytest
import spacy
import torch
from helpers import write_tiny_bert
from numpy.testing import assert_allclose
from spacy.tokens import Doc
from thinc.api import Adam
from transformers import BertModel, BertTokenizerFast

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.text.windows import plan_windows, reproducible_rows
from spacy_bert_pipes.models.types import DocEncodingGrad

SHORT = "Hello world, my card payment did not arrive in Paris!"
# Out-of-vocabulary words become several wordpieces; no [UNK] in these texts.
LONG = (
    "why is my new card not working in london? i was waiting for a transfer of money "
    "to my bank account, the exchange rate was bad and the refund did not arrive. "
    "how do i top up cash with apple or google pay in new york, asks john smith."
)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("en")


@pytest.fixture(scope="module")
def still_bert(tiny_bert, tmp_path_factory):
    """The tiny checkpoint without dropout, so training passes are deterministic."""
    path = tmp_path_factory.mktemp("still_bert")
    shutil.copytree(tiny_bert, path, dirs_exist_ok=True)
    config = json.loads((path / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def four_layer_bert(tmp_path_factory):
    """A 4-layer variant of the tiny checkpoint (for the last-four-layers options)."""
    path = tmp_path_factory.mktemp("four_layer_bert")
    return write_tiny_bert(path, num_hidden_layers=4, max_position_embeddings=64, seed=1)


@pytest.fixture(scope="module")
def hf(tiny_bert):
    model = BertModel.from_pretrained(tiny_bert).eval()
    return model, BertTokenizerFast.from_pretrained(tiny_bert)


def make_encoder(path, **kwargs):
    encoder = BertEncoder(**kwargs)
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    return encoder


def reference_windows(n, size, stride):
    """Windows and max-context owners, computed the slow, obvious way."""
    spans, start = [], 0
    while True:
        spans.append((start, min(start + size, n)))
        if start + size >= n:
            break
        start += size - stride
    owners = []
    for i in range(n):
        candidates = [
            (min(i - s, e - 1 - i), e - s, -w) for w, (s, e) in enumerate(spans) if s <= i < e
        ]
        owners.append(-max(candidates)[2])
    return spans, owners


def hf_window(model, tokenizer, ids, **kwargs):
    """(length, width) output of one [CLS] ids [SEP] sequence."""
    full = [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]
    out = model(
        input_ids=torch.tensor([full]),
        token_type_ids=torch.zeros((1, len(full)), dtype=torch.long),
        **kwargs,
    )
    return out


def hf_encode(model, tokenizer, text, size, stride):
    """(cls, wordpieces) of a text by running each window through HF separately."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    spans, owners = reference_windows(len(ids), size, stride)
    outs = [hf_window(model, tokenizer, ids[s:e]).last_hidden_state[0] for s, e in spans]
    cls = torch.stack([o[0] for o in outs]).mean(0)
    rows = [outs[w][1 + i - spans[w][0]] for i, w in enumerate(owners)]
    wordpieces = torch.stack(rows) if rows else torch.zeros((0, cls.shape[0]))
    return cls, wordpieces, spans, owners


def test_single_window_matches_hf_forward(tiny_bert, hf, nlp):
    model, tokenizer = hf
    encoder = make_encoder(tiny_bert)
    assert encoder.get_dim("nO") == 32
    (enc,) = encoder.predict([nlp(SHORT)])
    inputs = tokenizer(SHORT, return_tensors="pt", return_offsets_mapping=True)
    offsets = inputs.pop("offset_mapping")[0, 1:-1].numpy()
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state[0].numpy()
    n = inputs["input_ids"].shape[1] - 2
    assert enc.wordpieces.shape == (n, 32)
    assert enc.cls.shape == (32,)
    assert enc.cls.dtype == numpy.float32
    assert_allclose(enc.cls, expected[0], atol=1e-5)
    assert_allclose(enc.wordpieces, expected[1:-1], atol=1e-5)
    assert enc.offsets.tolist() == offsets.tolist()


def test_offsets_point_at_the_wordpieces(tiny_bert, hf, nlp):
    _, tokenizer = hf
    encoder = make_encoder(tiny_bert)
    text = "  Zebras pay\tcash in London.  "
    (enc,) = encoder.predict([nlp(text)])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert "[UNK]" not in pieces
    assert len(pieces) == len(enc.offsets) == len(enc.wordpieces)
    for piece, (start, end) in zip(pieces, enc.offsets.tolist()):
        assert text[start:end].lower() == piece.removeprefix("##")


def test_long_text_uses_max_context_windows(tiny_bert, hf, nlp):
    model, tokenizer = hf
    encoder = make_encoder(tiny_bert, max_length=16, stride=4)
    (enc,) = encoder.predict([nlp(LONG)])
    with torch.no_grad():
        cls, wordpieces, spans, owners = hf_encode(model, tokenizer, LONG, size=14, stride=4)
    assert len(spans) >= 4
    # Some pieces are owned by a later window than the first one holding them.
    first = [min(w for w, (s, e) in enumerate(spans) if s <= i < e) for i in range(len(owners))]
    assert owners != first
    assert enc.wordpieces.shape == tuple(wordpieces.shape)
    assert_allclose(enc.wordpieces, wordpieces.numpy(), atol=1e-5)
    assert_allclose(enc.cls, cls.numpy(), atol=1e-5)
    expected_offsets = tokenizer(LONG, add_special_tokens=False, return_offsets_mapping=True)
    assert enc.offsets.tolist() == [list(o) for o in expected_offsets["offset_mapping"]]


@pytest.mark.parametrize("text", ["", "   ", " \n\t  \n"])
def test_empty_and_whitespace_texts(tiny_bert, hf, nlp, text):
    model, tokenizer = hf
    encoder = make_encoder(tiny_bert)
    (enc,) = encoder.predict([nlp(text)])
    assert enc.wordpieces.shape == (0, 32)
    assert enc.offsets.shape == (0, 2)
    assert numpy.isfinite(enc.cls).all()
    with torch.no_grad():
        expected = hf_window(model, tokenizer, []).last_hidden_state[0, 0].numpy()
    assert_allclose(enc.cls, expected, atol=1e-5)


def test_empty_batch(tiny_bert):
    encoder = make_encoder(tiny_bert)
    assert encoder.predict([]) == []
    encodings, backprop = encoder.begin_update([])
    assert encodings == []
    backprop([])


def test_packing_does_not_change_results(tiny_bert, nlp):
    texts = [LONG * 3, "", SHORT, "hello", LONG, "   ", SHORT + " " + LONG]
    docs = [nlp(text) for text in texts]
    encoder = make_encoder(tiny_bert, max_length=32, stride=8)
    expected = [encoder.predict([doc])[0] for doc in docs]
    for budget in (64, 100, 4096):
        encoder.attrs["max_batch_tokens"] = budget
        for enc, exp in zip(encoder.predict(docs), expected):
            assert_allclose(enc.cls, exp.cls, atol=1e-5)
            assert enc.wordpieces.shape == exp.wordpieces.shape
            assert_allclose(enc.wordpieces, exp.wordpieces, atol=1e-5)
            assert numpy.array_equal(enc.offsets, exp.offsets)


def test_reproducible_calls_have_one_shape_per_width(tiny_bert, nlp, monkeypatch):
    """In reproducible mode a doc's windows go through transformer calls of
    the same shape alone and among others, and get the same outputs."""
    import spacy_bert_pipes.models.encoder.bert as encoder_module

    shapes = []
    run_batch = encoder_module.run_batch

    def recorded(shim, inputs, is_train):
        shapes.append(tuple(inputs[0].shape))
        return run_batch(shim, inputs, is_train)

    monkeypatch.setattr(encoder_module, "run_batch", recorded)
    texts = [LONG * 3, "", SHORT, "hello", LONG, "   ", SHORT + " " + LONG]
    docs = [nlp(text) for text in texts]
    encoder = make_encoder(tiny_bert, max_length=32, stride=8)
    encoder.attrs["reproducible"] = True
    together = encoder.predict(docs)
    alone = [encoder.predict([doc])[0] for doc in docs]
    rows = {width: reproducible_rows(width) for width in (16, 32)}
    assert shapes and all(shape == (rows[shape[1]], shape[1]) for shape in shapes)
    for enc, exp in zip(together, alone):
        assert numpy.array_equal(enc.cls, exp.cls)
        assert numpy.array_equal(enc.wordpieces, exp.wordpieces)


def test_very_long_doc(tiny_bert, hf, nlp):
    _, tokenizer = hf
    words = LONG.split()
    text = " ".join(words[i % len(words)] for i in range(5000))
    encoder = make_encoder(tiny_bert)
    (enc,) = encoder.predict([nlp(text)])
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert n > 5000
    assert enc.wordpieces.shape == (n, 32)
    assert numpy.isfinite(enc.wordpieces).all()
    assert enc.offsets[-1, 1] == len(text)


def _torch_params(encoder):
    return dict(encoder.shims[0].module.transformer.named_parameters())


def test_backprop_matches_torch_autograd(still_bert, nlp):
    """Gradients reaching the transformer equal those of the same loss computed
    directly in torch, through windows, packing and the merge."""
    texts = [LONG, SHORT, "", LONG + " " + SHORT]
    docs = [nlp(text) for text in texts]
    encoder = make_encoder(still_bert, max_length=16, stride=4, max_batch_tokens=48)
    encodings, backprop = encoder.begin_update(docs)
    rng = numpy.random.default_rng(0)
    d_encodings = []
    for i, enc in enumerate(encodings):
        d_cls = rng.normal(size=enc.cls.shape).astype("f")
        d_pieces = rng.normal(size=enc.wordpieces.shape).astype("f")
        # Doc 1 only sends a [CLS] gradient, doc 3 only wordpiece gradients.
        if i == 1:
            d_pieces = None
        if i == 3:
            d_cls = None
        d_encodings.append(DocEncodingGrad(d_cls=d_cls, d_wordpieces=d_pieces))
    assert backprop(d_encodings) == []

    model = BertModel.from_pretrained(still_bert)
    tokenizer = BertTokenizerFast.from_pretrained(still_bert)
    loss = torch.zeros(())
    for text, enc, d in zip(texts, encodings, d_encodings):
        cls, wordpieces, _, _ = hf_encode(model, tokenizer, text, size=14, stride=4)
        assert_allclose(enc.cls, cls.detach().numpy(), atol=1e-5)
        assert_allclose(enc.wordpieces, wordpieces.detach().numpy(), atol=1e-5)
        if d.d_cls is not None:
            loss = loss + (cls * torch.from_numpy(d.d_cls)).sum()
        if d.d_wordpieces is not None:
            loss = loss + (wordpieces * torch.from_numpy(d.d_wordpieces)).sum()
    loss.backward()

    params = _torch_params(encoder)
    n_checked = 0
    for name, ref in model.named_parameters():
        got = params[name].grad
        if ref.grad is None:  # the pooler is not part of the output
            assert got is None or not got.any(), name
            continue
        assert got is not None, name
        assert_allclose(got.numpy(), ref.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
        n_checked += 1
    assert n_checked > 10
    assert params["embeddings.word_embeddings.weight"].grad.abs().sum() > 0


def test_frozen_all_gives_no_gradients(tiny_bert, nlp):
    encoder = make_encoder(tiny_bert, frozen_layers="all")
    assert not any(p.requires_grad for p in _torch_params(encoder).values())
    encodings, backprop = encoder.begin_update([nlp(SHORT), nlp(LONG)])
    grads = [
        DocEncodingGrad(d_cls=numpy.ones_like(e.cls), d_wordpieces=numpy.ones_like(e.wordpieces))
        for e in encodings
    ]
    assert backprop(grads) == []
    assert all(p.grad is None for p in _torch_params(encoder).values())


def test_frozen_layers_freezes_embeddings_and_bottom_layers(tiny_bert, nlp):
    encoder = make_encoder(tiny_bert, frozen_layers=1)
    params = _torch_params(encoder)
    for name, param in params.items():
        frozen = name.startswith(("embeddings.", "encoder.layer.0."))
        assert param.requires_grad is not frozen, name
    encodings, backprop = encoder.begin_update([nlp(SHORT)])
    backprop([DocEncodingGrad(d_wordpieces=numpy.ones_like(encodings[0].wordpieces))])
    for name, param in params.items():
        if name.startswith(("embeddings.", "encoder.layer.0.")):
            assert param.grad is None, name
        elif name.startswith("encoder.layer.1."):
            assert param.grad is not None and param.grad.abs().sum() > 0, name


@pytest.mark.parametrize("frozen_layers", [3, -1, "some"])
def test_invalid_frozen_layers(tiny_bert, frozen_layers):
    encoder = BertEncoder(frozen_layers=frozen_layers)
    with pytest.raises(ValueError, match="frozen_layers"):
        HFCheckpoint(str(tiny_bert)).load_encoder(encoder)


def _last_four(four_layer_bert, text):
    model = BertModel.from_pretrained(four_layer_bert).eval()
    tokenizer = BertTokenizerFast.from_pretrained(four_layer_bert)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        states = hf_window(model, tokenizer, ids, output_hidden_states=True).hidden_states
    assert len(states) == 5  # embeddings + 4 layers
    return [s[0].numpy() for s in states[1:]]


def test_sum_last_four(four_layer_bert, nlp):
    encoder = make_encoder(four_layer_bert, max_length=64, hidden_layers="sum_last_four")
    assert encoder.get_dim("nO") == 32
    (enc,) = encoder.predict([nlp(SHORT)])
    expected = numpy.sum(_last_four(four_layer_bert, SHORT), axis=0)
    assert_allclose(enc.cls, expected[0], atol=1e-4)
    assert_allclose(enc.wordpieces, expected[1:-1], atol=1e-4)


def test_concat_last_four(four_layer_bert, nlp):
    encoder = make_encoder(four_layer_bert, max_length=64, hidden_layers="concat_last_four")
    assert encoder.get_dim("nO") == 128
    (enc,) = encoder.predict([nlp(SHORT)])
    expected = numpy.concatenate(_last_four(four_layer_bert, SHORT), axis=-1)
    assert enc.cls.shape == (128,)
    assert_allclose(enc.cls, expected[0], atol=1e-5)
    assert_allclose(enc.wordpieces, expected[1:-1], atol=1e-5)


@pytest.mark.parametrize("hidden_layers", ["sum_last_four", "concat_last_four"])
def test_last_four_needs_four_layers(tiny_bert, hidden_layers):
    encoder = BertEncoder(hidden_layers=hidden_layers)
    with pytest.raises(ValueError, match="4 layers"):
        HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
        encoder.initialize()


def test_max_length_above_position_limit(tiny_bert, nlp):
    encoder = BertEncoder(max_length=129)
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    with pytest.raises(ValueError, match="max_length=129 exceeds .* 128"):
        encoder.initialize()
    # The limit itself is fine, also for windows that use every position.
    encoder = make_encoder(tiny_bert, max_length=128, stride=16)
    (enc,) = encoder.predict([nlp(LONG * 4)])
    assert numpy.isfinite(enc.wordpieces).all()


@pytest.mark.parametrize("max_length,stride", [(16, 14), (16, 20), (16, -1), (2, 0), (0, 0)])
def test_invalid_window_settings_raise_at_build(max_length, stride):
    with pytest.raises(ValueError):
        BertEncoder(max_length=max_length, stride=stride)


def test_bf16_is_close_to_fp32(tiny_bert, nlp):
    docs = [nlp(SHORT), nlp(LONG)]
    fp32 = make_encoder(tiny_bert, max_length=32, stride=8).predict(docs)
    bf16 = make_encoder(tiny_bert, max_length=32, stride=8, precision="bf16").predict(docs)
    for a, b in zip(fp32, bf16):
        assert b.cls.dtype == numpy.float32 and b.wordpieces.dtype == numpy.float32
        assert_allclose(b.cls, a.cls, atol=0.15)
        assert_allclose(b.wordpieces, a.wordpieces, atol=0.15)
        # bf16 really ran: the outputs are close but not identical.
        assert not numpy.array_equal(b.wordpieces, a.wordpieces)


def test_bf16_predict_pads_long_batches_without_changing_outputs(tiny_bert, nlp, monkeypatch):
    from spacy_bert_pipes.models.transformer.precision import padded_length

    docs = [nlp(SHORT), nlp(LONG), nlp("a b")]
    encoder = make_encoder(tiny_bert, max_length=60, stride=8, precision="bf16")
    shim = encoder.shims[0]
    assert shim.length_multiple(is_train=False) == 16
    assert shim.length_multiple(is_train=True) == 1
    assert make_encoder(tiny_bert, precision="fp32").shims[0].length_multiple(False) == 1
    widths = []
    predict = type(shim).predict

    def spy(self, inputs, precision=None):
        widths.append(inputs[0].shape[1])
        return predict(self, inputs, precision=precision)

    monkeypatch.setattr(type(shim), "predict", spy)
    padded = encoder.predict(docs)
    padded_widths = list(widths)
    monkeypatch.setattr(type(shim), "padded_length", lambda self, longest, is_train: longest)
    widths.clear()
    unpadded = encoder.predict(docs)
    # long batches rounded up (to 16 or 8), short ones left alone (precision.padded_length)
    assert padded_widths == [padded_length(w, "bf16", shim.device) for w in widths]
    assert padded_widths != widths
    for a, b in zip(unpadded, padded):
        assert b.wordpieces.shape == a.wordpieces.shape
        # The padding is masked out; only bf16 rounding of other kernels differs.
        assert_allclose(b.cls, a.cls, atol=0.05)
        assert_allclose(b.wordpieces, a.wordpieces, atol=0.05)


def test_int8_is_close_to_fp32_and_trains_in_fp32(tiny_bert, nlp):
    docs = [nlp(SHORT), nlp(LONG)]
    fp32 = make_encoder(tiny_bert, max_length=32, stride=8)
    int8 = make_encoder(tiny_bert, max_length=32, stride=8, precision="int8")
    for a, b in zip(fp32.predict(docs), int8.predict(docs)):
        assert b.wordpieces.dtype == numpy.float32
        assert_allclose(b.wordpieces, a.wordpieces, atol=0.25)
        assert not numpy.array_equal(b.wordpieces, a.wordpieces)
    # Training runs the fp32 weights: the same outputs as an fp32 encoder
    # (the same seed gives both the same dropout masks).
    torch.manual_seed(0)
    train_a, _ = fp32.begin_update(docs)
    torch.manual_seed(0)
    train_b, _ = int8.begin_update(docs)
    for a, b in zip(train_a, train_b):
        assert_allclose(b.wordpieces, a.wordpieces, atol=1e-6)


def test_reduced_copy_follows_weight_updates(tiny_bert, nlp):
    docs = [nlp(SHORT)]
    encoder = make_encoder(tiny_bert, max_length=32, stride=8, precision="bf16")
    before = encoder.predict(docs)[0].wordpieces
    shim = encoder.shims[0]
    with torch.no_grad():
        for param in shim.module.parameters():
            param.add_(0.05)
    shim._reduced = None  # what an optimizer step does
    after = encoder.predict(docs)[0].wordpieces
    assert not numpy.allclose(before, after, atol=0.05)
    # An optimizer step drops the stale copy itself.
    _, backprop = encoder.begin_update(docs)
    backprop([DocEncodingGrad(d_cls=numpy.ones(before.shape[1], dtype="f"))])
    encoder.finish_update(Adam(0.01))
    assert shim._reduced is None


def test_auto_precision_follows_the_cpu(monkeypatch):
    from spacy_bert_pipes.models.transformer import precision

    cpu = torch.device("cpu")
    assert precision.resolve_precision("int8", cpu) == "int8"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    assert precision.resolve_precision("auto", cpu) == "bf16"
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert precision.resolve_precision("auto", cpu) == "fp32"


def _with_sentences(nlp, sentences):
    """A doc of the sentences joined by spaces, with a sentence start at each."""
    docs = [nlp(s) for s in sentences]
    doc = Doc.from_docs(docs)
    starts = set()
    i = 0
    for d in docs:
        starts.add(i)
        i += len(d)
    for token in doc:
        token.is_sent_start = token.i in starts
    return doc


SENTENCES = [LONG, "Hello world.", "   ", SHORT]


def test_sentence_context_equals_each_sentence_alone(tiny_bert, nlp):
    encoder = make_encoder(tiny_bert, max_length=24, stride=6, context="sentence")
    doc = _with_sentences(nlp, SENTENCES)
    (enc,) = encoder.predict([doc])
    alone = encoder.predict([nlp(s) for s in SENTENCES if s.strip()])
    assert_allclose(enc.wordpieces, numpy.concatenate([a.wordpieces for a in alone]), atol=1e-5)
    # offsets point into the whole doc's text
    hf_tokenizer = encoder.shims[0].tokenizer
    ids = hf_tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
    assert numpy.array_equal(enc.offsets, numpy.asarray(ids["offset_mapping"]))
    # the doc's [CLS] is the mean over all windows of its sentences
    n_windows = [len(plan_windows(len(a.wordpieces), 22, 6).spans) for a in alone]
    expected = sum(a.cls * n for a, n in zip(alone, n_windows)) / sum(n_windows)
    assert_allclose(enc.cls, expected, atol=1e-5)


def test_sentence_context_without_boundaries_is_the_whole_doc(tiny_bert, nlp):
    by_doc = make_encoder(tiny_bert, max_length=24, stride=6)
    by_sentence = make_encoder(tiny_bert, max_length=24, stride=6, context="sentence")
    docs = [nlp(LONG + " " + SHORT), nlp(""), nlp("   ")]
    for a, b in zip(by_doc.predict(docs), by_sentence.predict(docs)):
        assert_allclose(a.cls, b.cls, atol=1e-6)
        assert_allclose(a.wordpieces, b.wordpieces, atol=1e-6)
    # only blank sentences: one (empty) window, as for a blank doc
    (blank,) = by_sentence.predict([_with_sentences(nlp, ["  ", " "])])
    assert blank.wordpieces.shape[0] == 0 and numpy.isfinite(blank.cls).all()


def test_sentence_context_backprop_matches_torch_autograd(still_bert, nlp):
    encoder = make_encoder(still_bert, max_length=16, stride=4, context="sentence")
    doc = _with_sentences(nlp, [LONG, SHORT])
    (enc,), backprop = encoder.begin_update([doc])
    rng = numpy.random.default_rng(0)
    d = DocEncodingGrad(
        d_cls=rng.normal(size=enc.cls.shape).astype("f"),
        d_wordpieces=rng.normal(size=enc.wordpieces.shape).astype("f"),
    )
    backprop([d])

    model = BertModel.from_pretrained(still_bert)
    tokenizer = BertTokenizerFast.from_pretrained(still_bert)
    parts = [hf_encode(model, tokenizer, text, size=14, stride=4) for text in (LONG, SHORT)]
    n_windows = [len(p[2]) for p in parts]
    cls = sum(p[0] * n for p, n in zip(parts, n_windows)) / sum(n_windows)
    wordpieces = torch.cat([p[1] for p in parts])
    assert_allclose(enc.cls, cls.detach().numpy(), atol=1e-5)
    assert_allclose(enc.wordpieces, wordpieces.detach().numpy(), atol=1e-5)
    loss = (cls * torch.from_numpy(d.d_cls)).sum()
    loss = loss + (wordpieces * torch.from_numpy(d.d_wordpieces)).sum()
    loss.backward()
    params = _torch_params(encoder)
    for name, ref in model.named_parameters():
        if ref.grad is None:
            continue
        got = params[name].grad
        assert_allclose(got.numpy(), ref.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_invalid_context():
    with pytest.raises(ValueError, match="context must be one of doc, sentence"):
        BertEncoder(context="paragraph")


# --- case embeddings -------------------------------------------------------


def test_zero_case_embeddings_leave_the_pretrained_encoder_unchanged(tiny_bert, nlp):
    docs = [nlp("Apple opened a store in Paris."), nlp(LONG)]
    plain = make_encoder(tiny_bert, max_length=16, stride=4)
    cased = make_encoder(tiny_bert, max_length=16, stride=4, case_embeddings=True)
    for a, b in zip(plain.predict(docs), cased.predict(docs)):
        assert_allclose(a.wordpieces, b.wordpieces, atol=1e-6)
        assert_allclose(a.cls, b.cls, atol=1e-6)


def test_case_embeddings_let_an_uncased_encoder_see_capitals(tiny_bert, nlp):
    lower, title = nlp("apple is in paris"), nlp("Apple is in Paris")
    plain = make_encoder(tiny_bert)
    a, b = plain.predict([lower, title])
    assert_allclose(a.wordpieces, b.wordpieces, atol=1e-6)  # the tokenizer lower-cases
    cased = make_encoder(tiny_bert, case_embeddings=True)
    torch.nn.init.normal_(cased.shims[0].module.case_embeddings.weight)
    a, b = cased.predict([lower, title])
    assert not numpy.allclose(a.wordpieces, b.wordpieces, atol=1e-3)


def test_case_embeddings_train_and_round_trip(still_bert, nlp):
    encoder = make_encoder(still_bert, case_embeddings=True)
    docs = [nlp("Apple is in Paris"), nlp("NASA said so")]
    encodings, backprop = encoder.begin_update(docs)
    backprop(
        [DocEncodingGrad(d_cls=None, d_wordpieces=numpy.ones_like(e.wordpieces)) for e in encodings]
    )
    encoder.finish_update(Adam(0.01))
    weight = encoder.shims[0].module.case_embeddings.weight.detach().numpy().copy()
    assert numpy.abs(weight).sum() > 0  # the classes in these texts moved
    restored = BertEncoder(case_embeddings=True).from_bytes(encoder.to_bytes())
    restored_weight = restored.shims[0].module.case_embeddings.weight.detach().numpy()
    assert_allclose(restored_weight, weight)
    for a, b in zip(encoder.predict(docs), restored.predict(docs)):
        assert_allclose(a.wordpieces, b.wordpieces, atol=1e-6)
    with pytest.raises(ValueError, match="case_embeddings = true"):
        BertEncoder().from_bytes(encoder.to_bytes())
    # an encoder saved without them loads with zero ones: the same encoder
    plain = make_encoder(still_bert)
    zeroed = BertEncoder(case_embeddings=True).from_bytes(plain.to_bytes())
    for a, b in zip(plain.predict(docs), zeroed.predict(docs)):
        assert_allclose(a.wordpieces, b.wordpieces, atol=1e-6)


def test_case_embeddings_need_a_trainable_encoder():
    with pytest.raises(ValueError, match="frozen_layers = 'all'"):
        BertEncoder(case_embeddings=True, frozen_layers="all")
