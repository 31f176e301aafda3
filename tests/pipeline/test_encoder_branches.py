"""A head that owns the encoder's top layers (EncoderListener.v3 own_layers)."""

from pathlib import Path
from typing import Any, Dict

import numpy
import pytest
import spacy
import torch
from helpers import (
    FP32_ENCODER,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    count_calls,
    loader_config,
    ner_examples,
    textcat_examples,
)
from spacy.language import Language

from spacy_bert_pipes.models.encoder import bert as encoder_module
from spacy_bert_pipes.models.encoder.bert import hf_shim


def listener(own_layers: int = 0) -> Dict[str, Any]:
    return {
        "@architectures": "spacy-bert-pipes.EncoderListener.v3",
        "upstream": "*",
        "own_layers": own_layers,
    }


def branched_nlp(
    tiny_bert: Path, own_layers: int = 1, encoder: Dict[str, Any] = SMALL_ENCODER
) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": encoder})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener(own_layers)}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": listener(0)}})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    return nlp


def examples_of(nlp: Language) -> list:
    return textcat_examples(nlp) + ner_examples(nlp)


def module_of(nlp: Language) -> Any:
    return hf_shim(nlp.get_pipe("bert_encoder").model).module


def test_branch_starts_as_the_shared_top_layers(tiny_bert: Path) -> None:
    """Before training, the head's own top layers compute what the shared ones do."""
    nlp = branched_nlp(tiny_bert, encoder=FP32_ENCODER)  # the branch runs the fp32 layers
    nlp.initialize(lambda: examples_of(nlp))
    assert module_of(nlp).branch_layers == {"bert_textcat": 1}
    # one padded batch: the short doc's padding must be masked in the branch too
    docs = [nlp.make_doc("card late"), nlp.make_doc("the card arrived late yesterday " * 9)]
    for encoding in nlp.get_pipe("bert_encoder").predict(docs):
        branch = encoding.branches["bert_textcat"]
        numpy.testing.assert_allclose(branch.wordpieces, encoding.wordpieces, atol=1e-5)
        numpy.testing.assert_allclose(branch.cls, encoding.cls, atol=1e-5)


def test_branch_trains_apart_in_one_call(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One transformer call per batch; the textcat's loss moves its own top layer
    and the layers below it, the NER's loss never reaches the textcat's top layer."""
    nlp = branched_nlp(tiny_bert)
    examples = examples_of(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    module = module_of(nlp)
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    calls = count_calls(monkeypatch, encoder_module, "run_windows")
    with nlp.select_pipes(disable=["bert_textcat"]):
        nlp.update(ner_examples(nlp), sgd=optimizer)
    after_ner = {k: v.detach().clone() for k, v in module.state_dict().items()}
    branch_keys = [k for k in before if k.startswith("branches.")]
    assert branch_keys
    assert all(torch.equal(before[k], after_ner[k]) for k in branch_keys)
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    assert len(calls) == 41
    trained = module.state_dict()
    assert not all(torch.equal(after_ner[k], trained[k]) for k in branch_keys)
    # the shared top layer and the branch's copy of it have parted
    top = len(module.transformer.encoder.layer) - 1
    shared = trained[f"transformer.encoder.layer.{top}.output.dense.weight"]
    own = trained["branches.bert_textcat.layer.0.output.dense.weight"]
    assert not torch.equal(shared, own)
    calls.clear()
    docs = list(nlp.pipe([t for t, _ in TRAIN_TEXTS], batch_size=len(TRAIN_TEXTS)))
    assert len(calls) == 1
    for doc, (_, gold) in zip(docs, TRAIN_TEXTS):
        assert max(doc.cats, key=doc.cats.get) == gold


def test_branched_pipeline_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = branched_nlp(tiny_bert)
    examples = examples_of(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    texts = [t for t, _ in TRAIN_TEXTS] + ["", "word " * 100]
    before = [(doc.cats, [e.text for e in doc.ents]) for doc in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "branched")
    loaded = spacy.load(tmp_path / "branched")
    assert module_of(loaded).branch_layers == {"bert_textcat": 1}
    after = [(doc.cats, [e.text for e in doc.ents]) for doc in loaded.pipe(texts)]
    for (cats_a, ents_a), (cats_b, ents_b) in zip(before, after):
        assert ents_a == ents_b
        for label in cats_a:
            assert cats_b[label] == pytest.approx(cats_a[label], abs=1e-5)


def test_own_layers_changed_at_load_is_a_clear_error(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = branched_nlp(tiny_bert)
    nlp.initialize(lambda: examples_of(nlp))
    nlp.to_disk(tmp_path / "branched")
    override = {"components": {"bert_textcat": {"model": {"encoder": {"own_layers": 2}}}}}
    with pytest.raises(ValueError, match=r"bert_textcat.*own_layers = 2.*holds 1"):
        spacy.load(tmp_path / "branched", config=override)


def test_own_layers_out_of_range(tiny_bert: Path) -> None:
    nlp = branched_nlp(tiny_bert, own_layers=99)
    with pytest.raises(ValueError, match="own_layers must be between 1 and"):
        nlp.initialize(lambda: examples_of(nlp))
    with pytest.raises(ValueError, match="own_layers must be >= 0"):
        nlp.add_pipe("bert_textcat", name="other", config={"model": {"encoder": listener(-1)}})


def vectors_nlp(tiny_bert: Path, own_layers: int = 1) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener(0)}})
    nlp.add_pipe("bert_vectors", config={"own_layers": own_layers})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    return nlp


def test_vectors_keep_the_checkpoints_top_layers(tiny_bert: Path, tmp_path: Path) -> None:
    """bert_vectors with own_layers reads a frozen copy of the checkpoint's top
    layers: training the textcat moves the shared layer, never the copy, and the
    doc, span and token vectors all come from the copy."""
    nlp = vectors_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    module = module_of(nlp)
    assert module.branch_layers == {"bert_vectors": 1} and module.branch_frozen("bert_vectors")
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    optimizer.learn_rate = 2e-3
    for _ in range(5):
        nlp.update(examples, sgd=optimizer)
    after = module.state_dict()
    top = len(module.transformer.encoder.layer) - 1
    shared = f"transformer.encoder.layer.{top}.output.dense.weight"
    own = "branches.bert_vectors.layer.0.output.dense.weight"
    assert not torch.equal(before[shared], after[shared])
    assert torch.equal(before[own], after[own])
    doc = nlp("the card arrived late yesterday")
    encoding = doc._.bert_encoding.branches["bert_vectors"]
    assert not numpy.allclose(encoding.wordpieces, doc._.bert_encoding.wordpieces)
    numpy.testing.assert_allclose(doc[1].vector, encoding.wordpieces[1], atol=1e-5)
    assert doc.vector.shape == doc[0:2].vector.shape == (encoding.width,)
    nlp.to_disk(tmp_path / "vectors")
    loaded = spacy.load(tmp_path / "vectors")
    assert module_of(loaded).branch_frozen("bert_vectors")
    numpy.testing.assert_allclose(loaded(doc.text).vector, doc.vector, atol=1e-5)
    # own_layers set at load, where the pipeline was trained without them
    plain = vectors_nlp(tiny_bert, own_layers=0)
    plain.initialize(lambda: textcat_examples(plain))
    plain.to_disk(tmp_path / "plain")
    override = {"components": {"bert_vectors": {"own_layers": 1}}}
    with pytest.raises(ValueError, match=r"\[bert_vectors\].*own_layers.*initialize"):
        spacy.load(tmp_path / "plain", config=override)("some text")


def test_vector_anchor_teacher_runs_no_branches(tiny_bert: Path) -> None:
    """The anchor compares the shared output only: its frozen teacher drops the
    branches, the trained encoder keeps them."""
    nlp = branched_nlp(tiny_bert)
    nlp.get_pipe("bert_encoder").cfg["vector_anchor"] = 0.5
    examples = examples_of(nlp)
    optimizer = nlp.initialize(lambda: examples)
    losses = nlp.update(examples, sgd=optimizer)
    assert losses["bert_encoder"] > 0
    teacher = nlp.get_pipe("bert_encoder")._anchor_teacher()
    assert hf_shim(teacher).module.branch_layers == {}
    assert module_of(nlp).branch_layers == {"bert_textcat": 1}
