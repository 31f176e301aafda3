"""Host work per batch, not per doc: the prediction paths of bert_encoder +
bert_textcat + bert_ner, and of bert_qa, make a fixed number of array operations
and host <-> device conversions per `nlp.pipe` batch, however many docs the
batch holds.

Counted with instrumented thinc ops: every call through a model's `ops` (asarray,
to_numpy, affine, softmax, ...), every function called through `ops.xp` (what
runs on the device on a GPU), and the shim's torch <-> xp conversions. A
per-doc `xp.asarray` or `to_numpy` (what a GPU pays for with a sync per doc)
makes the count grow with the batch."""

from collections import Counter
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pytest
import spacy
from helpers import LABELS, NER_LABELS, loader_config
from spacy.language import Language
from thinc.api import NumpyOps

from spacy_bert_pipes.models.transformer import hf_shim

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
# Identical texts have identical windows, so the transformer batches are the same
# for every number of docs used here: one window per doc (max_length 128), or
# several (max_length 16: each doc's windows are merged by their owners).
ENCODER = {"stride": 4, "max_batch_tokens": 8192}
TEXT = "John Smith flew from Paris to New York. Then he called Apple support!"


class _CountingCallable:
    """A function or numpy ufunc that counts its calls (and its ufunc methods')."""

    def __init__(self, name: str, target: Any, counts: Counter) -> None:
        self._name, self._target, self._counts = name, target, counts

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._counts[f"xp.{self._name}"] += 1
        return self._target(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if callable(value):
            return _CountingCallable(f"{self._name}.{attr}", value, self._counts)
        return value


class _CountingXp:
    """numpy, counting the calls made through it."""

    def __init__(self, counts: Counter) -> None:
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        value = getattr(numpy, name)
        if callable(value) and not isinstance(value, type):
            return _CountingCallable(name, value, self._counts)
        return value


def counting_ops(counts: Counter) -> NumpyOps:
    class CountingOps(NumpyOps):
        xp = _CountingXp(counts)  # type: ignore[assignment]

        def __getattribute__(self, name: str) -> Any:
            value = super().__getattribute__(name)
            if callable(value) and not name.startswith("_"):

                def counted(*args: Any, **kwargs: Any) -> Any:
                    counts[f"ops.{name}"] += 1
                    return value(*args, **kwargs)

                return counted
            return value

    return CountingOps()


def make_nlp(tiny_bert: Path, max_length: int) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": {**ENCODER, "max_length": max_length}})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER, "pooling": "mean"}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": LISTENER, "case_features": True}})
    nlp.config["initialize"]["components"] = {
        "bert_encoder": loader_config(tiny_bert),
        "bert_textcat": {"labels": LABELS},
        "bert_ner": {"labels": NER_LABELS},
    }
    nlp.initialize()
    return nlp


def count_one_batch(nlp: Language, n_docs: int, text: str = TEXT) -> Counter:
    counts: Counter = Counter()
    ops = counting_ops(counts)
    for _, pipe in nlp.pipeline:
        for node in pipe.model.walk():
            node.ops = ops
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in ("xp2torch", "torch2xp"):
            original = getattr(hf_shim, name)

            def conversion(*args: Any, _name: str = name, _f: Any = original, **kw: Any) -> Any:
                counts[f"shim.{_name}"] += 1
                return _f(*args, **kw)

            monkeypatch.setattr(hf_shim, name, conversion)
        docs = list(nlp.pipe([text] * n_docs, batch_size=n_docs))
    assert len(docs) == n_docs
    if "bert_textcat" in nlp.pipe_names:
        assert all(len(doc.cats) == len(LABELS) for doc in docs)
    if "bert_qa" in nlp.pipe_names:
        assert all(len(doc._.answers) == len(QUESTIONS) for doc in docs)
    return counts


def assert_constant(small: Counter, large: Counter) -> None:
    conversions = {
        key for key in small | large if "asarray" in key or "to_numpy" in key or "shim." in key
    }
    assert conversions, "nothing was counted: the instrumentation is not in place"
    grown: Dict[str, List[int]] = {
        key: [small[key], large[key]] for key in small | large if small[key] != large[key]
    }
    assert not grown, f"array ops or conversions that grow with the docs of a batch: {grown}"


@pytest.mark.parametrize("max_length", [128, 16])
def test_array_ops_per_batch_do_not_grow_with_docs(tiny_bert: Path, max_length: int) -> None:
    nlp = make_nlp(tiny_bert, max_length)
    n_pieces = len(nlp("x " + TEXT)._.bert_encoding.wordpieces)
    assert (n_pieces > max_length) == (max_length == 16)  # several windows, or one
    small = count_one_batch(nlp, 4)
    large = count_one_batch(nlp, 32)
    assert_constant(small, large)


QUESTIONS = {"who": "Who called?", "where": "Where did he fly to from Paris?"}
QA_TEXT = " ".join([TEXT] * 3)


def make_qa_nlp(tiny_bert: Path) -> Language:
    nlp = spacy.blank("en")
    # several windows per question; all of a batch's windows in one predict group
    model = {
        "encoder": {**ENCODER, "max_length": 16, "max_batch_tokens": 65536},
        "max_seq_len": 32,
        "doc_stride": 8,
        "max_question_len": 8,
    }
    config = {"model": model, "questions": QUESTIONS, "handle_impossible_answer": True}
    nlp.add_pipe("bert_qa", config=config)
    nlp.config["initialize"]["components"] = {"bert_qa": loader_config(tiny_bert)}
    nlp.initialize()
    return nlp


def test_qa_array_ops_per_batch_do_not_grow_with_docs(tiny_bert: Path) -> None:
    """bert_qa: windows laid out, logits gathered, copied to the host and decoded
    for the whole batch, not per doc, question or window."""
    nlp = make_qa_nlp(tiny_bert)
    doc = nlp(QA_TEXT)
    assert len(doc._.answers) == len(QUESTIONS)
    assert len(nlp.get_pipe("bert_qa").predict([doc])[0].questions[0]) > 1  # several windows
    small = count_one_batch(nlp, 4, QA_TEXT)
    large = count_one_batch(nlp, 32, QA_TEXT)
    assert small["ops.to_numpy"] + small["ops.affine"] > 0  # the head was counted
    assert_constant(small, large)
