"""GPU tests (run on the device machine with `make gpu`; skipped without CUDA)."""

from pathlib import Path
from typing import Iterator

import pytest
import spacy
from helpers import (
    NER_TEXTS,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    loader_config,
    ner_examples,
    textcat_examples,
)
from spacy.language import Language

pytestmark = pytest.mark.gpu
# CPU predictions compared with the GPU's must be fp32: "auto" picks bf16 on CPUs
# with native bf16, which moves scores by ~1e-3
FP32 = {**SMALL_ENCODER, "predict_precision": "fp32"}


@pytest.fixture
def gpu() -> Iterator[None]:
    spacy.require_gpu(0)
    yield
    spacy.require_cpu()


def gpu_nlp(tiny_bert: Path, precision: str = "fp32") -> Language:
    nlp = spacy.blank("en")
    encoder = {**FP32, "precision": precision}
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


def test_ner_trains_on_gpu_and_loads_on_cpu(tiny_bert: Path, tmp_path: Path, gpu: None) -> None:
    """bert_ner with case embeddings: trained on the GPU, it tags its training
    texts, and a copy loaded on the CPU gives the same entities and confidences."""
    from test_ner import ents, make_nlp

    nlp = make_nlp(tiny_bert, model={"encoder": {**FP32, "case_embeddings": True}})
    examples = ner_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(60):
        nlp.update(examples, sgd=optimizer)
    texts = [t for t, _ in NER_TEXTS] + ["", "John Smith is in Paris . " * 40]
    on_gpu = [(ents(d), [e._.bert_ner_score for e in d.ents]) for d in nlp.pipe(texts)]
    for (text, gold), (found, _) in zip(NER_TEXTS, on_gpu):
        assert found == gold, text
    nlp.to_disk(tmp_path / "ner")
    spacy.require_cpu()
    loaded = spacy.load(tmp_path / "ner")
    on_cpu = [(ents(d), [e._.bert_ner_score for e in d.ents]) for d in loaded.pipe(texts)]
    for (e1, s1), (e2, s2) in zip(on_gpu, on_cpu):
        assert e1 == e2
        assert s1 == pytest.approx(s2, abs=1e-4)


def test_qa_trains_on_gpu_and_loads_on_cpu(tiny_bert: Path, tmp_path: Path, gpu: None) -> None:
    """bert_qa with null answers and case embeddings: trained on the GPU, it answers
    its training questions, reads a long context whole, and a copy loaded on the
    CPU gives the same answers, offsets and scores."""
    from test_qa import QA_DATA, QUESTIONS, best, make_nlp, qa_examples

    nlp = make_nlp(
        tiny_bert,
        handle_impossible_answer=True,
        questions=QUESTIONS,
        model={"encoder": {**FP32, "case_embeddings": True}},
    )
    examples = qa_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 3e-3
    for _ in range(80):
        nlp.update(examples, sgd=optimizer)
    for text, asked in QA_DATA:
        assert best(nlp(text)) == {k: a or "" for k, (_, a) in asked.items()}, text
    long_text = "hello world " * 300 + "john smith is in paris"
    texts = [t for t, _ in QA_DATA] + ["", long_text]
    on_gpu = [d._.answers for d in nlp.pipe(texts)]
    assert {a["key"] for a in on_gpu[-1]} == set(QUESTIONS)
    nlp.to_disk(tmp_path / "qa")
    spacy.require_cpu()
    on_cpu = [d._.answers for d in spacy.load(tmp_path / "qa").pipe(texts)]
    for a, b in zip(on_gpu, on_cpu):
        keys = ("key", "text", "start", "end")
        assert [tuple(x[k] for k in keys) for x in a] == [tuple(x[k] for k in keys) for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-4)


def test_branched_head_trains_on_gpu_and_loads_on_cpu(
    tiny_bert: Path, tmp_path: Path, gpu: None
) -> None:
    """A textcat that owns the top encoder layer beside a shared NER: trained on
    the GPU in one transformer call per batch, the same predictions on the CPU."""
    from test_encoder_branches import branched_nlp, examples_of

    nlp = branched_nlp(tiny_bert, encoder=FP32)
    examples = examples_of(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    texts = [t for t, _ in TRAIN_TEXTS] + ["", "word " * 300]
    on_gpu = [doc.cats for doc in nlp.pipe(texts)]
    for cats, (_, gold) in zip(on_gpu, TRAIN_TEXTS):
        assert max(cats, key=cats.get) == gold
    nlp.to_disk(tmp_path / "branched")
    spacy.require_cpu()
    on_cpu = [doc.cats for doc in spacy.load(tmp_path / "branched").pipe(texts)]
    for a, b in zip(on_gpu, on_cpu):
        for label in a:
            assert a[label] == pytest.approx(b[label], abs=1e-4)
