"""The torch side of the encoder: serialization without pickle, train/predict modes,
parameter updates and the errors of an encoder without weights."""

import json
import pickle
from unittest import mock

import numpy
import pytest
import spacy
import srsly
import torch
from safetensors.torch import load as load_safetensors
from thinc.api import SGD, Adam, RAdam, fix_random_seed, warmup_linear
from transformers import BertModel, BertTokenizer

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.transformer.hf_shim import HFShim
from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule
from spacy_bert_pipes.models.types import DocEncodingGrad

TEXTS = ["Hello world, my card did not arrive.", "", "why is my transfer still waiting? " * 6]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def docs():
    nlp = spacy.blank("en")
    return [nlp(text) for text in TEXTS]


def make_encoder(path, **kwargs):
    encoder = BertEncoder(**kwargs)
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    return encoder


def assert_same_encodings(encodings1, encodings2):
    assert len(encodings1) == len(encodings2)
    for a, b in zip(encodings1, encodings2):
        assert numpy.array_equal(a.cls, b.cls)
        assert numpy.array_equal(a.wordpieces, b.wordpieces)
        assert numpy.array_equal(a.offsets, b.offsets)


def test_bytes_round_trip_gives_identical_outputs(tiny_bert, docs):
    encoder = make_encoder(tiny_bert, max_length=16, stride=4)
    data = encoder.to_bytes()
    # Loading uses neither pickle nor torch.load.
    forbidden = mock.Mock(side_effect=AssertionError("pickle used"))
    with (
        mock.patch.object(pickle, "loads", forbidden),
        mock.patch.object(pickle, "load", forbidden),
        mock.patch.object(torch, "load", forbidden),
    ):
        restored = BertEncoder(max_length=16, stride=4).from_bytes(data)
    assert forbidden.call_count == 0
    assert restored.shims[0].is_loaded
    assert restored.get_dim("nO") == 32
    assert restored.attrs["source"] == str(tiny_bert)
    assert_same_encodings(restored.predict(docs), encoder.predict(docs))
    # And again, from the restored copy.
    again = BertEncoder(max_length=16, stride=4).from_bytes(restored.to_bytes())
    assert_same_encodings(again.predict(docs), encoder.predict(docs))


def test_shim_bytes_hold_config_tokenizer_and_safetensors(tiny_bert):
    encoder = make_encoder(tiny_bert)
    shim = encoder.shims[0]
    msg = srsly.msgpack_loads(shim.to_bytes())
    assert set(msg) == {"loaded", "config", "tokenizer", "weights"}
    assert msg["loaded"] is True
    config = json.loads(msg["config"])
    assert config["model_type"] == "bert"
    assert config["num_hidden_layers"] == 2
    assert "tokenizer.json" in msg["tokenizer"]
    assert all(isinstance(data, bytes) for data in msg["tokenizer"].values())
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in msg["tokenizer"])
    weights = load_safetensors(msg["weights"])
    state = shim.module.transformer.state_dict()
    assert set(weights) == set(state)
    for name, tensor in state.items():
        assert torch.equal(weights[name], tensor), name


def test_trained_weights_survive_round_trip(tiny_bert, docs):
    """Saving after an update keeps the updated weights, not the checkpoint's."""
    encoder = make_encoder(tiny_bert)
    before = encoder.predict(docs)
    encodings, backprop = encoder.begin_update(docs)
    backprop([DocEncodingGrad(d_cls=numpy.ones_like(e.cls)) for e in encodings])
    encoder.finish_update(Adam(0.01))
    after = encoder.predict(docs)
    assert not numpy.allclose(after[0].cls, before[0].cls)
    restored = BertEncoder().from_bytes(encoder.to_bytes())
    assert_same_encodings(restored.predict(docs), after)


def test_frozen_layers_apply_after_from_bytes(tiny_bert):
    data = make_encoder(tiny_bert).to_bytes()
    restored = BertEncoder(frozen_layers=1).from_bytes(data)
    params = dict(restored.shims[0].module.transformer.named_parameters())
    for name, param in params.items():
        frozen = name.startswith(("embeddings.", "encoder.layer.0."))
        assert param.requires_grad is not frozen, name


def test_unloaded_encoder_round_trips_as_unloaded():
    data = BertEncoder().to_bytes()
    restored = BertEncoder().from_bytes(data)
    assert not restored.shims[0].is_loaded
    assert srsly.msgpack_loads(HFShim().to_bytes()) == {"loaded": False}


def test_unloaded_bytes_empty_a_loaded_shim(tiny_bert):
    shim = make_encoder(tiny_bert).shims[0]
    shim.from_bytes(HFShim().to_bytes())
    assert not shim.is_loaded
    with pytest.raises(ValueError, match="initialize"):
        shim.tokenizer  # noqa: B018


def test_unloaded_encoder_raises_clear_error(docs):
    encoder = BertEncoder()
    with pytest.raises(ValueError, match="initialize"):
        encoder.initialize()
    with pytest.raises(ValueError, match="initialize"):
        encoder.predict(docs)
    with pytest.raises(ValueError, match="initialize"):
        encoder.begin_update(docs)


def test_predict_is_deterministic_after_training_mode(tiny_bert, docs):
    """The checkpoint has dropout: predict must switch it off, training must not."""
    encoder = make_encoder(tiny_bert)
    expected = encoder.predict(docs)
    encodings, _ = encoder.begin_update(docs)
    assert encoder.shims[0].module.training
    assert not numpy.allclose(encodings[0].wordpieces, expected[0].wordpieces)
    assert_same_encodings(encoder.predict(docs), expected)
    # predict leaves eval mode on; the next training step switches dropout back on.
    assert not encoder.shims[0].module.training
    again, _ = encoder.begin_update(docs)
    assert encoder.shims[0].module.training
    assert not numpy.allclose(again[0].wordpieces, expected[0].wordpieces)


def test_finish_update_changes_only_trainable_weights(tiny_bert, docs):
    encoder = make_encoder(tiny_bert, frozen_layers=1)
    params = dict(encoder.shims[0].module.transformer.named_parameters())
    before = {name: p.detach().clone() for name, p in params.items()}
    encodings, backprop = encoder.begin_update(docs)
    ones = numpy.ones_like
    backprop([DocEncodingGrad(ones(e.cls), ones(e.wordpieces)) for e in encodings])
    encoder.finish_update(Adam(0.01))
    for name, param in params.items():
        assert param.grad is None, name  # gradients are consumed
        changed = not torch.equal(param.detach(), before[name])
        if name.startswith(("embeddings.", "encoder.layer.0.", "pooler.")):
            assert not changed, name  # frozen, or no gradient (pooler)
        else:
            assert changed, name


def test_loss_scaling_unscales_a_steps_gradients_once(tiny_bert, docs, monkeypatch):
    """fp16 scales the gradient entering each transformer batch's backward. A step
    of several batches adds their parameter gradients up at that one scale, and
    they are unscaled once before the optimizer: the update equals the unscaled
    one. (Unscaling after every batch divided the earlier batches' gradients by
    the scale again, so only the last batch trained the encoder.)"""
    from thinc.shims.pytorch_grad_scaler import PyTorchGradScaler

    def scale_on_cpu(self, tensor, per_device, inplace):  # the scaler refuses CPU tensors
        return tensor.mul_(self._scale) if inplace else tensor * self._scale

    monkeypatch.setattr(PyTorchGradScaler, "_scale_tensor", scale_on_cpu)
    gradients = []
    for scaled in (False, True):
        # A small batch budget: the three docs' windows run as several batches.
        encoder = make_encoder(tiny_bert, max_length=16, stride=4, max_batch_tokens=48)
        shim = encoder.shims[0]
        shim._grad_scaler = PyTorchGradScaler(enabled=scaled)
        fix_random_seed(0)  # the same dropout in both runs
        with mock.patch.object(shim, "begin_update", wraps=shim.begin_update) as spy:
            encodings, backprop = encoder.begin_update(docs)
        assert spy.call_count > 1  # the case that went wrong: several batches a step
        ones = numpy.ones_like
        backprop([DocEncodingGrad(ones(e.cls), ones(e.wordpieces)) for e in encodings])
        seen = {}

        def optimizer(key, weights, gradient, seen=seen):  # records what it is given
            seen[key[1]] = gradient.copy()
            return weights, gradient

        encoder.finish_update(optimizer)
        assert not shim._grad_scaler.found_inf
        gradients.append(seen)
    plain, unscaled = gradients
    assert plain.keys() == unscaled.keys() and len(plain) > 10
    for name, gradient in plain.items():
        tolerance = 1e-6 * float(numpy.abs(gradient).max())
        numpy.testing.assert_allclose(unscaled[name], gradient, rtol=1e-4, atol=tolerance)


def test_use_params_swaps_in_averages_and_restores(tiny_bert, docs):
    encoder = make_encoder(tiny_bert)
    optimizer = Adam(0.01, use_averages=True)
    for _ in range(2):
        encodings, backprop = encoder.begin_update(docs)
        backprop([DocEncodingGrad(d_cls=numpy.ones_like(e.cls)) for e in encodings])
        encoder.finish_update(optimizer)
    current = encoder.predict(docs)
    with encoder.use_params(optimizer.averages):
        averaged = encoder.predict(docs)
    assert not numpy.allclose(averaged[0].cls, current[0].cls)
    assert_same_encodings(encoder.predict(docs), current)


def test_slow_tokenizer_is_refused(tiny_bert):
    model = BertModel.from_pretrained(tiny_bert)
    tokenizer = BertTokenizer.from_pretrained(tiny_bert)
    with pytest.raises(ValueError, match="fast tokenizer"):
        HFShim().load(model, tokenizer)


@pytest.mark.parametrize("kwargs", [{"hidden_layers": "first"}, {"precision": "fp8"}])
def test_transformer_module_rejects_unknown_options(tiny_bert, kwargs):
    model = BertModel.from_pretrained(tiny_bert)
    options = {"hidden_layers": "last", "precision": "fp32", **kwargs}
    with pytest.raises(ValueError, match=list(kwargs)[0]):
        TransformerModule(model, **options)


def test_to_device(tiny_bert):
    shim = make_encoder(tiny_bert).shims[0]
    shim.to_device("cpu", 0)
    assert shim.device.type == "cpu"
    with pytest.raises(ValueError, match="device_type"):
        shim.to_device("tpu", 0)
    HFShim().to_device("cpu", 0)  # nothing to move yet


def test_fp16_training_on_cpu_is_a_clear_error(tiny_bert):

    encoder = BertEncoder(max_length=16, stride=4, precision="fp16")
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    encoder.initialize()
    doc = spacy.blank("en").make_doc("my card")
    with pytest.raises(ValueError, match="bf16"):
        encoder.begin_update([doc])


@pytest.mark.parametrize(
    "settings",
    [
        {"L2": 0.01, "L2_is_weight_decay": True, "grad_clip": 1.0},
        {"L2": 0.01, "L2_is_weight_decay": False, "grad_clip": 0.0},
        {"L2": 0.0, "grad_clip": 5.0, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
        {"L2": 0.01, "grad_clip": 1.0, "use_averages": True},
    ],
)
def test_fused_adam_equals_thincs_adam(tiny_bert, docs, settings):
    """The multi-tensor CPU step gives the weights, moments and update counts of
    thinc's own per-parameter Adam, step after step, on a warm-up schedule. Both
    optimizers get the same gradients at each step (from one model), so that float
    rounding cannot compound through training."""
    encoder = make_encoder(tiny_bert, frozen_layers=1)
    shim = encoder.shims[0]
    params = dict(shim.module.named_parameters())
    initial = {name: p.detach().clone() for name, p in params.items()}
    optimizers = [
        Adam(warmup_linear(initial_rate=0.01, warmup_steps=2, total_steps=10), **settings)
        for _ in range(2)
    ]
    rng = numpy.random.default_rng(0)
    for _ in range(4):
        encodings, backprop = encoder.begin_update(docs)
        # large [CLS] gradients, so that clipping acts on some parameters
        d_encodings = [
            DocEncodingGrad(
                (rng.normal(size=e.cls.shape) * 50).astype("f"),
                rng.normal(size=e.wordpieces.shape).astype("f"),
            )
            for e in encodings
        ]
        backprop(d_encodings)
        weights = {n: p.detach().clone() for n, p in params.items()}
        grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
        after = []
        for fused, optimizer in zip((False, True), optimizers):
            for name, param in params.items():
                param.data.copy_(weights[name])
                param.grad = grads[name].clone() if name in grads else None
            target = "spacy_bert_pipes.models.transformer.hf_shim.fused_adam_applies"
            with mock.patch(target, return_value=fused) as applies:
                shim.finish_update(optimizer)
            assert applies.called
            optimizer.step_schedules()
            after.append({n: p.detach().clone() for n, p in params.items()})
        for name in params:
            numpy.testing.assert_allclose(
                after[1][name].numpy(), after[0][name].numpy(), rtol=1e-5, atol=1e-7, err_msg=name
            )
        slow, fast = optimizers
        assert dict(fast.nr_update) == dict(slow.nr_update)
        assert set(fast.mom1) == set(slow.mom1) == {(shim.id, n) for n in grads}
        for key in slow.mom1:
            numpy.testing.assert_allclose(fast.mom1[key], slow.mom1[key], rtol=1e-4, atol=1e-7)
            numpy.testing.assert_allclose(fast.mom2[key], slow.mom2[key], rtol=1e-4, atol=1e-12)
        if slow.averages is not None:
            assert set(fast.averages) == set(slow.averages) == set(slow.mom1)
            for key, average in slow.averages.items():
                numpy.testing.assert_allclose(fast.averages[key], average, rtol=1e-5, atol=1e-7)
        # both go on from the same weights
        for name, param in params.items():
            param.data.copy_(after[0][name])
    changed = [n for n, p in params.items() if not torch.equal(p.detach(), initial[n])]
    assert len(changed) > 10 and not any(n.startswith("transformer.embeddings.") for n in changed)


def test_fused_adam_is_used_for_adam_on_the_cpu(tiny_bert, docs):
    params = list(make_encoder(tiny_bert).shims[0].module.named_parameters())
    from spacy_bert_pipes.models.transformer.fused_adam import fused_adam_applies

    assert fused_adam_applies(Adam(0.01), params)
    assert fused_adam_applies(Adam(0.01, use_averages=False), params)
    assert not fused_adam_applies(RAdam(0.01), params)
    assert not fused_adam_applies(SGD(0.01), params)
