"""`prefetching_pipe`: the next batch tokenized in a worker thread while a batch
runs, with the same output as without it and errors that name the text."""

import threading
from pathlib import Path
from typing import Any, List, Sequence

import pytest
import spacy
from helpers import (
    FP32_ENCODER,
    LABELS,
    NER_LABELS,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    loader_config,
    textcat_examples,
)
from spacy.language import Language

from spacy_bert_pipes.models.text import tokens as tokens_module

TEXTS = [text for text, _ in TRAIN_TEXTS] * 3 + ["a long text " * 20]


def textcat_nlp(tiny_bert: Path) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": FP32_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = {
        **loader_config(tiny_bert),
        "labels": LABELS,
    }
    nlp.initialize()
    return nlp


def recording_tokenize(monkeypatch: pytest.MonkeyPatch, fail_on: str = "") -> List[str]:
    """Record the thread of each tokenizer call; fail on texts containing `fail_on`."""
    threads: List[str] = []
    original = tokens_module.tokenize

    def tokenize(encoder: Any, texts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        if fail_on and any(fail_on in text for text in texts):
            raise RuntimeError("the tokenizer broke")
        return original(encoder, texts, *args, **kwargs)

    monkeypatch.setattr(tokens_module, "tokenize", tokenize)
    return threads


def test_prefetched_batches_give_the_same_output(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nlp = textcat_nlp(tiny_bert)
    one_by_one = [nlp(text).cats for text in TEXTS]
    threads = recording_tokenize(monkeypatch)
    piped = [doc.cats for doc in nlp.pipe(TEXTS, batch_size=4)]
    assert len(piped) == len(TEXTS)
    for got, want in zip(piped, one_by_one):
        assert got == pytest.approx(want, abs=1e-6)
    n_batches = -(-len(TEXTS) // 4)
    assert len(threads) == n_batches
    assert all(name.startswith("bert_textcat-tokenize") for name in threads)


def test_shared_encoder_prefetches_too(tiny_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": FP32_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}})
    nlp.config["initialize"]["components"] = {
        "bert_encoder": loader_config(tiny_bert),
        "bert_textcat": {"labels": LABELS},
    }
    nlp.initialize()
    one_by_one = [nlp(text).cats for text in TEXTS]
    threads = recording_tokenize(monkeypatch)
    for doc, want in zip(nlp.pipe(TEXTS, batch_size=3), one_by_one):
        assert doc.cats == pytest.approx(want, abs=1e-6)
    assert threads and all(name.startswith("bert_encoder-tokenize") for name in threads)


def test_worker_error_names_the_text_and_goes_through_the_error_handler(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nlp = textcat_nlp(tiny_bert)
    recording_tokenize(monkeypatch, fail_on="BOOM")
    texts = ["fine text", "another fine one", "this one goes BOOM", "fine again"]
    with pytest.raises(ValueError, match="doc 0 of the batch .'this one goes BOOM'.") as info:
        list(nlp.pipe(texts, batch_size=2))
    assert "the tokenizer broke" in str(info.value)
    failed: List[List[str]] = []

    def handler(name: str, component: Any, docs: List[Any], error: Exception) -> None:
        failed.append([doc.text for doc in docs])

    nlp.set_error_handler(handler)
    out = [doc.text for doc in nlp.pipe(texts, batch_size=2)]
    assert out == texts[:2]  # the failing batch is handed to the handler, not lost silently
    assert failed == [texts[2:]]


def test_training_tokenizes_on_the_main_thread(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nlp = textcat_nlp(tiny_bert)
    threads = recording_tokenize(monkeypatch)
    nlp.update(textcat_examples(nlp))
    assert threads == [threading.main_thread().name]


@pytest.mark.parametrize("component", ["bert_textcat", "bert_ner"])
def test_initialize_reads_its_examples_once(tiny_bert: Path, component: str) -> None:
    """A component's initialize reads the corpus once (spaCy's check, the
    encoder's context and the labels use that one list), as a reader that
    re-reads a .spacy file on every call would otherwise pay each time."""
    from helpers import ner_examples

    nlp = spacy.blank("en")
    nlp.add_pipe(component, config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"][component] = loader_config(tiny_bert)
    examples = textcat_examples(nlp) if component == "bert_textcat" else ner_examples(nlp)
    calls: List[int] = []

    def get_examples() -> Any:
        calls.append(1)
        return iter(examples)  # a fresh pass, as spaCy's Corpus gives

    nlp.initialize(get_examples)
    assert len(calls) == 1
    labels = nlp.get_pipe(component).labels
    assert list(labels) == (sorted(LABELS) if component == "bert_textcat" else NER_LABELS)


@pytest.mark.parametrize(
    "get_examples,error",
    [(None, "E930"), (lambda: [], "E930"), (lambda: 3, "E978"), (lambda: ["a doc"], "E978")],
)
def test_initialize_keeps_spacys_errors_for_bad_examples(
    tiny_bert: Path, get_examples: Any, error: str
) -> None:
    nlp = spacy.blank("en")
    textcat = nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    with pytest.raises(TypeError, match=error):
        textcat.initialize(get_examples, nlp=nlp, labels=LABELS)
