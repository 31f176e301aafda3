"""models/transformer/branches.py: a head's own copy of the encoder's top layers."""

from pathlib import Path

import pytest
import srsly
import torch
from helpers import write_tiny_bert
from transformers import AutoModel

from spacy_bert_pipes.models.transformer.hf_shim import HFShim
from spacy_bert_pipes.models.transformer.serial import DamagedEncoderError
from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule


def module(tiny_bert: Path) -> TransformerModule:
    return TransformerModule(AutoModel.from_pretrained(str(tiny_bert)), "last", "fp32").eval()


def test_branch_output_follows_the_shared_one_and_masks_padding(tiny_bert: Path) -> None:
    m = module(tiny_bert)
    m.add_branch("intents", 1)
    assert m.branch_layers == {"intents": 1}
    # a padded batch: the short row's padding must not change its vectors
    ids = torch.tensor([[2, 50, 51, 3, 0, 0, 0, 0], [2, 50, 51, 52, 53, 54, 55, 3]])
    mask = (ids != 0).long()
    with torch.no_grad():
        out = m(ids, mask, torch.zeros_like(ids))
        alone = m(ids[:1, :4], mask[:1, :4], torch.zeros_like(ids[:1, :4]))
    width = m.width
    assert out.shape == (2, 8, 2 * width)
    # the copy starts from the shared top layer's weights: the same output
    torch.testing.assert_close(out[..., :width][mask.bool()], out[..., width:][mask.bool()])
    torch.testing.assert_close(out[0, :4, width:], alone[0, :, width:], atol=1e-5, rtol=1e-5)


def test_branch_owns_its_weights(tiny_bert: Path) -> None:
    m = module(tiny_bert)
    m.add_branch("intents", 2)
    own = m.branches["intents"].layer[0].output.dense.weight
    shared = m.transformer.encoder.layer[0].output.dense.weight
    assert own is not shared and torch.equal(own, shared)
    with torch.no_grad():
        own.add_(1.0)
    assert not torch.equal(own, shared)


def test_bad_branches(tiny_bert: Path, tmp_path: Path) -> None:
    m = module(tiny_bert)
    with pytest.raises(ValueError, match="between 1 and the encoder's 2 layers"):
        m.add_branch("intents", 3)
    with pytest.raises(ValueError, match="without '.'"):
        m.add_branch("a.b", 1)
    four = write_tiny_bert(tmp_path / "four", num_hidden_layers=4)
    summed = TransformerModule(AutoModel.from_pretrained(str(four)), "sum_last_four", "fp32")
    with pytest.raises(ValueError, match="hidden_layers = 'last'"):
        summed.add_branch("intents", 1)


@pytest.mark.parametrize(
    "branches",
    [
        {"layers": [["intents", 99, False]], "weights": b""},
        {"layers": [["a.b", 1, False]], "weights": b""},
        {"layers": [[3, "x", False]], "weights": b""},
        {"layers": [["intents", 1]], "weights": b""},
        {"layers": [["intents", 1, False]], "weights": b"not safetensors"},
        {"layers": "intents"},
    ],
)
def test_damaged_saved_branches_are_named(tiny_bert: Path, branches: object) -> None:
    """Branches read from a pipeline folder are untrusted: a bad one is a
    DamagedEncoderError that names them, never a stray exception."""
    from transformers import AutoTokenizer

    shim = HFShim()
    shim.load(
        AutoModel.from_pretrained(str(tiny_bert)), AutoTokenizer.from_pretrained(str(tiny_bert))
    )
    shim.add_branch("intents", 1)
    msg = srsly.msgpack_loads(shim.to_bytes())
    assert msg["branches"]["layers"] == [["intents", 1, False]]
    msg["branches"] = branches
    with pytest.raises(DamagedEncoderError, match="branches"):
        HFShim().from_bytes(srsly.msgpack_dumps(msg))


def test_saved_branches_round_trip(tiny_bert: Path) -> None:
    from transformers import AutoTokenizer

    shim = HFShim()
    shim.load(
        AutoModel.from_pretrained(str(tiny_bert)), AutoTokenizer.from_pretrained(str(tiny_bert))
    )
    shim.add_branch("intents", 2)
    shim.add_branch("vectors", 1, frozen=True)
    with torch.no_grad():
        shim.module.branches["intents"].layer[1].output.dense.weight.add_(1.0)
    loaded = HFShim().from_bytes(shim.to_bytes())
    assert loaded.module.branch_layers == {"intents": 2, "vectors": 1}
    assert loaded.module.branch_frozen("vectors") and not loaded.module.branch_frozen("intents")
    for (name, a), (_, b) in zip(
        shim.module.branches.state_dict().items(), loaded.module.branches.state_dict().items()
    ):
        assert torch.equal(a, b), name
