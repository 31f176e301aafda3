"""bert_encoder shared by listening heads: one encoder pass, trainable, persistent."""

from pathlib import Path
from typing import Iterator

import pytest
import spacy
from helpers import SMALL_ENCODER, TRAIN_TEXTS, count_calls, loader_config, textcat_examples
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.models.encoder import bert as encoder_module

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}


def shared_nlp(tiny_bert: Path) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    return nlp


def test_listener_is_linked(tiny_bert: Path) -> None:
    nlp = shared_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    encoder = nlp.get_pipe("bert_encoder")
    assert encoder.listening_components == ["bert_textcat"]
    assert len(encoder.listeners) == 1


def test_shared_encoder_trains_and_runs_once_per_batch(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nlp = shared_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    calls = count_calls(monkeypatch, encoder_module, "run_windows")
    for _ in range(60):
        nlp.update(examples, sgd=optimizer)
    assert len(calls) == 60
    calls.clear()
    docs = list(nlp.pipe([t for t, _ in TRAIN_TEXTS], batch_size=len(TRAIN_TEXTS)))
    assert len(calls) == 1
    for doc, (_, gold) in zip(docs, TRAIN_TEXTS):
        assert max(doc.cats, key=doc.cats.get) == gold
        assert doc._.bert_encoding is not None


def test_missing_upstream_output_is_a_clear_error(tiny_bert: Path) -> None:
    nlp = shared_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    with nlp.select_pipes(disable=["bert_encoder"]):
        with pytest.raises(ValueError, match="bert_encoder"):
            nlp("hello world")


def test_shared_pipeline_round_trip_and_two_processes(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = shared_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    texts = [t for t, _ in TRAIN_TEXTS] + ["", "word " * 100]
    # the same batches throughout: at int8 a doc's outputs depend on its batch
    before = [doc.cats for doc in nlp.pipe(texts, batch_size=3)]
    nlp.to_disk(tmp_path / "shared")
    loaded = spacy.load(tmp_path / "shared")
    assert loaded.get_pipe("bert_encoder").listening_components == ["bert_textcat"]
    after = [doc.cats for doc in loaded.pipe(texts, batch_size=3)]
    two = [doc.cats for doc in loaded.pipe(texts, n_process=2, batch_size=3)]
    for a, b, c in zip(before, after, two):
        for label in a:
            assert b[label] == pytest.approx(a[label], abs=1e-6)
            assert c[label] == pytest.approx(a[label], abs=1e-6)


def test_shared_equals_standalone_with_same_weights(tiny_bert: Path) -> None:
    """Untrained heads aside, a listener sees exactly what its own encoder would."""
    shared = shared_nlp(tiny_bert)
    shared.initialize(lambda: textcat_examples(shared))
    standalone = spacy.blank("en")
    standalone.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    standalone.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    standalone.initialize(lambda: textcat_examples(standalone))
    head = shared.get_pipe("bert_textcat").model.get_ref("output")
    other = standalone.get_pipe("bert_textcat").model.get_ref("output")
    rng = __import__("numpy").random.default_rng(0)
    W = rng.normal(size=head.get_param("W").shape).astype("f")
    head.set_param("W", W.copy())
    other.set_param("W", W.copy())
    for text in ["my card", "exchange rate " * 20, ""]:
        a, b = shared(text).cats, standalone(text).cats
        for label in a:
            assert a[label] == pytest.approx(b[label], abs=1e-5)


def test_vector_anchor_keeps_doc_vectors_near_the_checkpoints(tiny_bert: Path) -> None:
    """Fine-tuning a shared encoder for a head moves its mean doc vectors; with
    vector_anchor they stay closer to those of the encoder before training."""
    from spacy_bert_pipes.models.encoder.anchor import mean_vector

    texts = [text for text, _ in TRAIN_TEXTS]
    similarity = {}
    for anchor in (0.0, 5.0):
        nlp = spacy.blank("en")
        nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER, "vector_anchor": anchor})
        listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v2"}
        nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}})
        nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
        examples = textcat_examples(nlp)
        optimizer = nlp.initialize(lambda examples=examples: examples)
        optimizer.learn_rate = 1e-2
        before = [mean_vector(doc._.bert_encoding) for doc in nlp.pipe(texts)]
        for _ in range(15):
            losses = nlp.update(examples, sgd=optimizer)
        assert (losses["bert_encoder"] > 0) == (anchor > 0)
        after = [mean_vector(doc._.bert_encoding) for doc in nlp.pipe(texts)]
        similarity[anchor] = min(
            float(a @ b / ((a @ a) ** 0.5 * (b @ b) ** 0.5)) for a, b in zip(before, after)
        )
    assert similarity[5.0] > similarity[0.0], similarity


@pytest.mark.parametrize("context,reads", [("doc", 1), ("auto", 1 + len(TRAIN_TEXTS))])
def test_initialize_reads_the_examples_only_to_learn_from_them(
    tiny_bert: Path, context: str, reads: int
) -> None:
    """The encoder checks the examples as spaCy does, on the first one; with
    context = "auto" it then reads them all once, to learn the context, and
    otherwise no more (a multitask corpus is ~34,000 examples)."""
    nlp = spacy.blank("en")
    encoder = nlp.add_pipe("bert_encoder", config={"model": {**SMALL_ENCODER, "context": context}})
    examples = textcat_examples(nlp)
    read = []

    def get_examples() -> Iterator[Example]:
        for example in examples:
            read.append(example)
            yield example

    loader = spacy.registry.misc.get("spacy-bert-pipes.HFCheckpoint.v1")(source=str(tiny_bert))
    encoder.initialize(get_examples, nlp=nlp, encoder_loader=loader)
    assert len(read) == reads
    for bad, error in [(lambda: [], "E930"), (lambda: 3, "E978"), (lambda: ["a doc"], "E978")]:
        with pytest.raises(TypeError, match=error):
            encoder.initialize(bad, nlp=nlp, encoder_loader=loader)
