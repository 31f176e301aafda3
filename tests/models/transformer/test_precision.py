"""How the encoder chooses its precision: training precision vs prediction precision
("auto" by default in BertEncoder.v2, the same as training in
v1), the padding of bf16 batches on the CPU, attention backends and TF32 on CUDA."""

import numpy
import pytest
import spacy
import torch

from spacy_bert_pipes.models.encoder.bert import BertEncoder, BertEncoderV2
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.transformer import precision as precision_module
from spacy_bert_pipes.models.transformer.precision import padded_length, resolve_precision
from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)
TEXTS = ["Hello world, my card did not arrive.", "why is my transfer still waiting? " * 6]


@pytest.fixture(scope="module")
def docs():
    nlp = spacy.blank("en")
    return [nlp(text) for text in TEXTS]


def loaded(encoder, path):
    HFCheckpoint(str(path)).load_encoder(encoder)
    encoder.initialize()
    return encoder


@pytest.fixture
def fast_bf16_cpu(monkeypatch):
    monkeypatch.setattr(
        precision_module, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"})
    )


@pytest.fixture
def plain_cpu(monkeypatch):
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx2"}))


def test_auto_on_the_cpu_is_bf16_only_with_fast_bf16(monkeypatch):
    for flags, want in (({"avx512_bf16"}, "bf16"), ({"amx_bf16"}, "bf16"), ({"avx2"}, "fp32")):
        monkeypatch.setattr(precision_module, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert resolve_precision("auto", CPU) == want
        # int8 only for an encoder whose pipeline passed the int8 check
        assert resolve_precision("auto", CPU, predicting=True) == want
    # explicit settings pass through; tf32 is a CUDA mode
    assert resolve_precision("int8", CPU) == "int8"
    assert resolve_precision("tf32", CPU) == "fp32"


@pytest.mark.parametrize("capability,want", [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp32")])
def test_auto_on_cuda_trains_in_bf16_from_ampere_and_predicts_in_fp32(
    monkeypatch, capability, want
):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", CUDA) == want
    # bf16 prediction measured slower than fp32 on an H100: "auto" keeps fp32
    assert resolve_precision("auto", CUDA, predicting=True) == "fp32"
    assert resolve_precision("bf16", CUDA, predicting=True) == "bf16"
    assert resolve_precision("tf32", CUDA) == "tf32"


def test_the_default_predict_precision_is_auto(tiny_bert, fast_bf16_cpu):
    shim = loaded(BertEncoderV2(), tiny_bert).shims[0]
    assert (shim.precision, shim.predict_precision) == ("fp32", "auto")
    assert shim.prediction_precision == "bf16"


def test_padded_length_rounds_only_when_cheap():
    # bf16 on the CPU: to 16 (or else 8) only where it adds at most 1/8 of the length
    assert padded_length(128, "bf16", CPU) == 128
    assert padded_length(100, "bf16", CPU) == 112
    assert padded_length(61, "bf16", CPU) == 64
    assert padded_length(50, "bf16", CPU) == 56  # 64 would add 28%; 56 adds 12%
    assert padded_length(20, "bf16", CPU) == 20  # short queries: 32 would add 60%
    assert padded_length(9, "bf16", CPU) == 9
    # fp32 and GPUs: never padded
    assert padded_length(100, "fp32", CPU) == 100
    assert padded_length(100, "bf16", CUDA) == 100


def test_v2_predicts_auto_and_trains_as_configured(tiny_bert, fast_bf16_cpu):
    shim = loaded(BertEncoderV2(precision="fp32", predict_precision="auto"), tiny_bert).shims[0]
    assert shim.predict_precision == "auto"
    assert shim.prediction_precision == "bf16"
    assert shim.padded_length(100, is_train=False) == 112
    assert shim.padded_length(100, is_train=True) == 100
    assert shim.precision == "fp32"  # training


def test_v1_predicts_in_its_training_precision(tiny_bert, fast_bf16_cpu):
    assert loaded(BertEncoder(), tiny_bert).shims[0].prediction_precision == "fp32"
    assert loaded(BertEncoder(precision="int8"), tiny_bert).shims[0].prediction_precision == "int8"


def test_auto_is_fp32_on_a_cpu_without_fast_bf16(tiny_bert, plain_cpu):
    assert loaded(BertEncoderV2(), tiny_bert).shims[0].prediction_precision == "fp32"


def test_auto_predicts_int8_on_a_cpu_without_fast_bf16_once_checked(monkeypatch):
    for flags in ({"avx2"}, {"avx512f", "avx512_vnni"}):
        monkeypatch.setattr(precision_module, "cpu_flags", lambda flags=flags: frozenset(flags))
        assert resolve_precision("auto", CPU, predicting=True, int8_checked=True) == "int8"
        # training never runs int8; an unchecked encoder stays fp32
        assert resolve_precision("auto", CPU, int8_checked=True) == "fp32"
        assert resolve_precision("auto", CPU, predicting=True) == "fp32"
    # bf16 where the CPU has it, checked or not; fp32 on CUDA
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert resolve_precision("auto", CPU, predicting=True, int8_checked=True) == "bf16"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert resolve_precision("auto", CUDA, predicting=True, int8_checked=True) == "fp32"


def test_auto_without_onnxruntime_stays_fp32(monkeypatch, plain_cpu):
    monkeypatch.setattr(precision_module, "int8_available", lambda: False)
    assert resolve_precision("auto", CPU, predicting=True, int8_checked=True) == "fp32"


def test_a_checked_encoder_predicts_int8_on_a_cpu_without_fast_bf16(tiny_bert, plain_cpu, docs):
    encoder = loaded(BertEncoderV2(int8_checked=True), tiny_bert)
    shim = encoder.shims[0]
    assert shim.prediction_precision == "int8"
    assert shim.rows_share_scales  # int8's one activation scale per call
    # and it runs the quantized module: near fp32's outputs, not equal to them
    fp32 = loaded(BertEncoderV2(predict_precision="fp32"), tiny_bert).predict(docs)
    for got, want in zip(encoder.predict(docs), fp32):
        assert got.wordpieces.shape == want.wordpieces.shape
        assert not numpy.array_equal(got.wordpieces, want.wordpieces)
        cosine = (got.cls @ want.cls) / numpy.linalg.norm(got.cls) / numpy.linalg.norm(want.cls)
        assert cosine > 0.9


def test_unknown_predict_precision_is_refused():
    with pytest.raises(ValueError, match="predict_precision"):
        BertEncoderV2(predict_precision="fp8")  # type: ignore[arg-type]


def test_fp32_prediction_of_a_bf16_trained_encoder_runs_no_autocast(tiny_bert, docs):
    fp32 = loaded(BertEncoderV2(precision="fp32", predict_precision="fp32"), tiny_bert)
    mixed = loaded(BertEncoderV2(precision="bf16", predict_precision="fp32"), tiny_bert)
    for a, b in zip(fp32.predict(docs), mixed.predict(docs)):
        assert numpy.array_equal(a.wordpieces, b.wordpieces)


def test_bf16_prediction_of_an_fp32_trained_encoder_is_close(tiny_bert, docs):
    fp32 = loaded(BertEncoderV2(predict_precision="fp32"), tiny_bert)
    bf16 = loaded(BertEncoderV2(predict_precision="bf16"), tiny_bert)
    differs = False
    for a, b in zip(fp32.predict(docs), bf16.predict(docs)):
        assert a.wordpieces.shape == b.wordpieces.shape
        numpy.testing.assert_allclose(a.wordpieces, b.wordpieces, atol=0.1)
        differs |= not numpy.array_equal(a.wordpieces, b.wordpieces)
    assert differs, "bf16 prediction computed exactly what fp32 did: was it bf16?"


def test_cpu_prediction_changes_no_torch_settings(tiny_bert, docs):
    encoder = loaded(BertEncoderV2(precision="tf32", predict_precision="tf32"), tiny_bert)
    before = torch.get_float32_matmul_precision()
    seen = []
    forward = TransformerModule.forward

    def spy(self, *args, **kwargs):
        seen.append(torch.get_float32_matmul_precision())
        return forward(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransformerModule, "forward", spy)
        encoder.predict(docs)
    assert seen and set(seen) == {before}
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_cuda_prediction_avoids_cudnn_attention_and_restores_tf32(tiny_bert, docs, precision):
    from thinc.api import use_ops

    seen = []
    forward = TransformerModule.forward

    def spy(self, *args, **kwargs):
        seen.append((torch.backends.cuda.cudnn_sdp_enabled(), torch.get_float32_matmul_precision()))
        return forward(self, *args, **kwargs)

    before = torch.get_float32_matmul_precision()
    with use_ops("cupy"):
        encoder = loaded(BertEncoderV2(predict_precision=precision), tiny_bert)
        encoder.to_gpu(0)
        reference = loaded(BertEncoderV2(predict_precision="fp32"), tiny_bert)
        reference.to_gpu(0)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(TransformerModule, "forward", spy)
            got = encoder.predict(docs)
        want = reference.predict(docs)
    assert seen and all(not cudnn for cudnn, _ in seen)
    if precision == "tf32":
        assert all(matmul == "high" for _, matmul in seen)
    assert torch.get_float32_matmul_precision() == before
    for a, b in zip(got, want):
        numpy.testing.assert_allclose(a.wordpieces.get(), b.wordpieces.get(), atol=0.1)


def test_frozen_encoder_trains_on_features_of_the_training_precision(
    tiny_bert, docs, fast_bf16_cpu
):
    frozen = loaded(BertEncoderV2(frozen_layers="all", predict_precision="auto"), tiny_bert)
    # trains in fp32; predicts in bf16
    fp32 = loaded(BertEncoderV2(predict_precision="fp32"), tiny_bert)
    trained_on, _ = frozen.begin_update(docs)
    for a, b in zip(fp32.predict(docs), trained_on):
        assert numpy.array_equal(a.wordpieces, b.wordpieces)
    # predicting makes the bf16 copy once; updates of a frozen encoder keep it
    frozen.predict(docs)
    shim = frozen.shims[0]
    reduced = shim._reduced
    assert reduced is not None
    from thinc.api import SGD

    shim.finish_update(SGD(0.1))
    assert shim._reduced is reduced


@pytest.mark.parametrize(
    "flags,kind",
    [
        ({"avx2", "avx512f", "avx512_vnni", "amx_bf16", "avx512_bf16"}, "amx"),
        ({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, "avx512bf16"),
        ({"avx2", "avx512f", "avx512_vnni"}, "avx512vnni"),
        ({"avx2", "avx512f"}, "avx512"),
        ({"avx2"}, "avx2"),
        (set(), "other"),
    ],
)
def test_the_cpu_kind_is_named_by_its_best_flag(monkeypatch, flags, kind):
    monkeypatch.setattr(precision_module, "cpu_flags", lambda: frozenset(flags))
    assert precision_module.cpu_kind() == kind
