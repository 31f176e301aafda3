"""Prediction batches that run out of device memory are split and retried
(tested on the CPU by making the transformer raise OOM for big batches)."""

from pathlib import Path
from typing import Any, List

import numpy
import pytest
import spacy
import torch
from helpers import WORDS

from spacy_bert_pipes.models.encoder.bert import BertEncoder
from spacy_bert_pipes.models.encoder.loaders import HFCheckpoint
from spacy_bert_pipes.models.encoder.oom import WindowOutOfMemoryError
from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

ORIGINAL_FORWARD = TransformerModule.forward


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def encoder(tiny_bert: Path) -> Any:
    model = BertEncoder(max_length=16, stride=4, max_batch_tokens=512)
    HFCheckpoint(str(tiny_bert)).load_encoder(model)
    model.initialize()
    return model


@pytest.fixture(scope="module")
def docs() -> List[Any]:
    nlp = spacy.blank("en")
    rng = numpy.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=n)) for n in (3, 40, 0, 12, 90, 7, 25)]
    texts.append("paris " * 5)
    return [nlp(text) for text in texts]


def fail_above(limit: int, calls: List[int]) -> Any:
    """A forward that raises OOM for batches of more than `limit` windows."""

    def forward(self: Any, input_ids: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        calls.append(int(input_ids.shape[0]))
        if input_ids.shape[0] > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return ORIGINAL_FORWARD(self, input_ids, *args, **kwargs)

    return forward


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_split_batches_give_the_same_outputs(
    encoder: Any, docs: List[Any], monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    expected = encoder.predict(docs)
    calls: List[int] = []
    monkeypatch.setattr(TransformerModule, "forward", fail_above(limit, calls))
    got = encoder.predict(docs)
    assert max(calls) > limit, "the fault was never injected"
    assert len(got) == len(docs)
    for ours, theirs in zip(got, expected):
        numpy.testing.assert_allclose(ours.cls, theirs.cls, atol=1e-5)
        numpy.testing.assert_allclose(ours.wordpieces, theirs.wordpieces, atol=1e-5)
        numpy.testing.assert_array_equal(ours.offsets, theirs.offsets)


def test_a_single_window_that_does_not_fit_names_its_text(
    encoder: Any, docs: List[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TransformerModule, "forward", fail_above(0, []))
    with pytest.raises(WindowOutOfMemoryError, match="does not fit in cpu memory") as info:
        encoder.predict([spacy.blank("en")("john smith is in paris")])
    assert info.value.text_start == "john smith is in paris"
    assert info.value.n_wordpieces == 7  # [CLS] 5 words [SEP]


def test_training_reraises(encoder: Any, docs: List[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: List[int] = []
    monkeypatch.setattr(TransformerModule, "forward", fail_above(1, calls))
    with pytest.raises(torch.OutOfMemoryError):
        encoder.begin_update(docs)
    assert len(calls) == 1


def test_a_pipeline_annotates_every_doc(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same_entities_under_faults(tiny_bert, monkeypatch)


@pytest.mark.gpu
def test_a_pipeline_annotates_every_doc_on_gpu(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on a GPU: cupy outputs concatenated, the CUDA cache emptied."""
    spacy.require_gpu(0)
    try:
        assert_same_entities_under_faults(tiny_bert, monkeypatch)
    finally:
        spacy.require_cpu()


def assert_same_entities_under_faults(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import FP32_ENCODER, loader_config, ner_examples

    nlp = spacy.blank("en")
    # fp32: the faults are injected into the torch forward, which int8 does not run
    nlp.add_pipe("bert_ner", config={"model": {"encoder": FP32_ENCODER}})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    nlp.initialize(lambda: ner_examples(nlp))
    texts = [" ".join(WORDS[i : i + 3 * i]) for i in range(20)]
    expected = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    calls: List[int] = []
    monkeypatch.setattr(TransformerModule, "forward", fail_above(2, calls))
    got = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    assert max(calls) > 2
    assert any(expected), "the untrained tagger found no entities to compare"
    assert got == expected
