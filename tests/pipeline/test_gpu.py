"""GPU tests (run on the device machine with `make gpu`; skipped without CUDA)."""

from pathlib import Path
from typing import Iterator

import pytest
import spacy
from conftest import SMALL_ENCODER, TRAIN_TEXTS, loader_config, textcat_examples
from spacy.language import Language

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu() -> Iterator[None]:
    spacy.require_gpu(0)
    yield
    spacy.require_cpu()


def gpu_nlp(tiny_bert: Path, precision: str = "fp32") -> Language:
    nlp = spacy.blank("en")
    encoder = {**SMALL_ENCODER, "precision": precision}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": encoder}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    return nlp


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_trains_and_predicts_on_gpu(tiny_bert: Path, gpu: None, precision: str) -> None:
    nlp = gpu_nlp(tiny_bert, precision)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    module = nlp.get_pipe("bert_textcat").model.get_ref("encoder").shims[0].module
    assert next(module.parameters()).is_cuda
    optimizer.learn_rate = 2e-3
    for _ in range(60):
        nlp.update(examples, sgd=optimizer)
    for text, gold in TRAIN_TEXTS:
        cats = nlp(text).cats
        assert max(cats, key=cats.get) == gold


def test_gpu_to_disk_loads_on_cpu(tiny_bert: Path, tmp_path: Path, gpu: None) -> None:
    nlp = gpu_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    texts = [t for t, _ in TRAIN_TEXTS] + ["", "word " * 300]
    on_gpu = [doc.cats for doc in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "model")
    spacy.require_cpu()
    on_cpu = [doc.cats for doc in spacy.load(tmp_path / "model").pipe(texts)]
    for a, b in zip(on_gpu, on_cpu):
        for label in a:
            assert a[label] == pytest.approx(b[label], abs=1e-4)
