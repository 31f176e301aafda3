"""Heads on a spacy-transformers `transformer` component (TrfListenerEncoder.v1):
one transformer pass per batch, gradients back to the transformer, persistent."""

import sys
from pathlib import Path
from typing import Any, List

import numpy
import pytest
import spacy
from helpers import NER_TEXTS, TRAIN_TEXTS, ner_examples, textcat_examples
from spacy.language import Language
from spacy.util import registry

from spacy_bert_pipes.models.encoder.trf import wordpiece_rows
from spacy_bert_pipes.models.types import DocEncodingGrad


@pytest.fixture(scope="module", autouse=True)
def spacy_transformers(extras: None) -> None:
    """Imported, so that spaCy knows its factory and architectures."""
    pytest.importorskip("spacy_transformers")


TRF_ENCODER = {"@architectures": "spacy-bert-pipes.TrfListenerEncoder.v1", "upstream": "*"}
# Small windows, so that a sentence already spans several overlapping windows.
WINDOW, STRIDE = 8, 6
LONG_TEXT = (
    "john smith is transferring money to the london bank , and still waiting . "
    "why is my card not working in paris ? the exchange rate was arrived at by google "
    "for cash top up payment refund"
)


def trf_nlp(tiny_bert: Path, heads: List[str]) -> Language:
    nlp = spacy.blank("en")
    get_spans = {
        "@span_getters": "spacy-transformers.strided_spans.v1",
        "window": WINDOW,
        "stride": STRIDE,
    }
    model = {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": str(tiny_bert),
        "get_spans": get_spans,
    }
    nlp.add_pipe("transformer", config={"model": model})
    for head in heads:
        nlp.add_pipe(head, config={"model": {"encoder": TRF_ENCODER}})
    return nlp


def count_forward_calls(nlp: Language) -> List[int]:
    """A list that grows by one per forward pass of the transformer's HF model."""
    calls: List[int] = []
    hf_model = nlp.get_pipe("transformer").model.transformer
    hf_model.register_forward_hook(lambda *args: calls.append(1))
    return calls


def transformer_weights(nlp: Language) -> Any:
    hf_model = nlp.get_pipe("transformer").model.transformer
    return hf_model.embeddings.word_embeddings.weight.detach().numpy().copy()


def test_textcat_trains_on_one_transformer_pass(tiny_bert: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_textcat"])
    examples = textcat_examples(nlp, TRAIN_TEXTS[:4])
    optimizer = nlp.initialize(lambda: examples)  # no encoder_loader needed
    optimizer.learn_rate = 2e-3
    assert nlp.get_pipe("transformer").listening_components == ["bert_textcat"]
    assert nlp.get_pipe("bert_textcat").model.get_ref("encoder").get_dim("nO") == 32
    before = transformer_weights(nlp)
    calls = count_forward_calls(nlp)
    losses = [nlp.update(examples, sgd=optimizer)["bert_textcat"] for _ in range(25)]
    assert len(calls) == 25  # one transformer pass per update
    assert losses[-1] < losses[0] / 2
    assert not numpy.allclose(transformer_weights(nlp), before)  # gradients reached it
    calls.clear()
    docs = list(nlp.pipe([text for text, _ in TRAIN_TEXTS[:4]], batch_size=4))
    assert len(calls) == 1  # one pass for the batch, read by the head
    for doc, (_, gold) in zip(docs, TRAIN_TEXTS[:4]):
        assert max(doc.cats, key=doc.cats.get) == gold
    for text in ["", "   ", LONG_TEXT]:
        assert set(nlp(text).cats) == {"card", "fx", "other"}


def test_textcat_and_ner_share_the_transformer(tiny_bert: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_textcat", "bert_ner"])
    examples = ner_examples(nlp)
    for eg, (_, gold) in zip(examples, TRAIN_TEXTS):
        eg.reference.cats = {label: float(label == gold) for label in ("card", "fx", "other")}
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    assert nlp.get_pipe("transformer").listening_components == ["bert_textcat", "bert_ner"]
    calls = count_forward_calls(nlp)
    first = nlp.update(examples, sgd=optimizer)
    for _ in range(24):
        last = nlp.update(examples, sgd=optimizer)
    assert len(calls) == 25
    assert last["bert_ner"] < first["bert_ner"] / 2
    assert last["bert_textcat"] < first["bert_textcat"]
    calls.clear()
    docs = list(nlp.pipe([text for text, _ in NER_TEXTS], batch_size=len(NER_TEXTS)))
    assert len(calls) == 1
    for doc, (_, gold) in zip(docs, NER_TEXTS):
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == gold


def test_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_textcat", "bert_ner"])
    examples = ner_examples(nlp)
    for eg, (_, gold) in zip(examples, TRAIN_TEXTS):
        eg.reference.cats = {label: float(label == gold) for label in ("card", "fx", "other")}
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    texts = [text for text, _ in NER_TEXTS] + ["", LONG_TEXT]
    before = list(nlp.pipe(texts))
    nlp.to_disk(tmp_path / "trf")
    loaded = spacy.load(tmp_path / "trf")
    assert loaded.get_pipe("transformer").listening_components == ["bert_textcat", "bert_ner"]
    after = list(loaded.pipe(texts))
    two = list(loaded.pipe(texts, n_process=2, batch_size=3))
    for a, b, c in zip(before, after, two):
        for other in (b, c):
            assert other.cats == pytest.approx(a.cats, abs=1e-5)
            assert [(e.start, e.end, e.label_) for e in other.ents] == [
                (e.start, e.end, e.label_) for e in a.ents
            ]


def test_long_doc_has_one_vector_per_wordpiece(tiny_bert: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_textcat"])
    nlp.initialize(lambda: textcat_examples(nlp))
    doc = nlp.get_pipe("transformer")(nlp.make_doc(LONG_TEXT))
    trf_data = doc._.trf_data
    hidden = trf_data.model_output.last_hidden_state  # (n_spans, padded_length, width)
    n_spans, padded, width = hidden.shape
    assert n_spans > 3
    rows = wordpiece_rows(doc, trf_data.align.dataXd, trf_data.align.lengths, (n_spans, padded))
    # Every wordpiece of the text once, in order: the same ids as tokenizing it whole.
    tokenizer = nlp.get_pipe("transformer").model.tokenizer
    expected = tokenizer(doc.text, add_special_tokens=False)["input_ids"]
    ids = numpy.asarray(trf_data.wordpieces.input_ids).reshape(-1)[rows.rows]
    assert ids.tolist() == expected
    starts, ends = rows.offsets[:, 0], rows.offsets[:, 1]
    assert (numpy.diff(starts) >= 0).all() and (numpy.diff(ends) >= 0).all()
    assert (numpy.diff(rows.rows) > 0).all()  # unique, in text order
    encoder = nlp.get_pipe("bert_textcat").model.get_ref("encoder")
    (encoding,) = encoder.predict([doc])
    numpy.testing.assert_allclose(encoding.wordpieces, hidden.reshape(-1, width)[rows.rows])
    numpy.testing.assert_allclose(encoding.cls, hidden[:, 0].mean(0), rtol=1e-5, atol=1e-6)
    assert len(encoding.offsets) == len(expected)
    # The token "transferring" (split into several wordpieces) has its own offsets.
    token = doc[3]
    assert token.text == "transferring"
    own = rows.offsets[(starts == token.idx)]
    assert len(own) > 1 and (own[:, 1] == token.idx + len(token)).all()


def test_backprop_scatters_into_the_transformer_states(tiny_bert: Path) -> None:
    from spacy_transformers.layers.listener import TransformerListener

    nlp = trf_nlp(tiny_bert, ["bert_textcat"])
    nlp.initialize(lambda: textcat_examples(nlp))
    docs = [nlp.make_doc(LONG_TEXT), nlp.make_doc("hello world"), nlp.make_doc("")]
    full, _ = nlp.get_pipe("transformer").model.begin_update(docs)
    encoder = nlp.get_pipe("bert_textcat").model.get_ref("encoder")
    encoder.attrs["grad_factor"] = 0.5
    received: List[Any] = []
    listener = encoder.layers[0]
    batch_id = TransformerListener.get_batch_id(docs)
    listener.receive(batch_id, full.doc_data, lambda d: received.extend(d) or [])
    encodings, backprop = encoder.begin_update(docs)
    grads = [
        DocEncodingGrad(
            d_cls=numpy.ones((32,), dtype="f"),
            d_wordpieces=numpy.full(enc.wordpieces.shape, 2.0, "f"),
        )
        for enc in encodings
    ]
    backprop(grads)
    assert len(received) == 2  # none for the empty doc, which the transformer skipped
    for doc_data, d_data in zip(full.doc_data, received):
        hidden = doc_data.model_output.last_hidden_state
        d_hidden = d_data.model_output.last_hidden_state
        assert d_hidden.shape == hidden.shape
        n_spans, padded, width = hidden.shape
        rows = wordpiece_rows(
            docs[full.doc_data.index(doc_data)],
            doc_data.align.dataXd,
            doc_data.align.lengths,
            (n_spans, padded),
        ).rows
        expected = numpy.zeros((n_spans * padded, width), dtype="f")
        expected[rows] = 2.0 * 0.5
        expected[numpy.arange(n_spans) * padded] = 0.5 / n_spans
        numpy.testing.assert_allclose(d_hidden.reshape(-1, width), expected, rtol=1e-6)


def test_missing_transformer_output_is_a_clear_error(tiny_bert: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_textcat"])
    nlp.initialize(lambda: textcat_examples(nlp))
    with nlp.select_pipes(disable=["transformer"]):
        with pytest.raises(ValueError, match="trf_data"):
            nlp("hello world")


def test_initialize_without_a_transformer_is_a_clear_error() -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": TRF_ENCODER}})
    with pytest.raises(ValueError, match="transformer"):
        nlp.initialize(lambda: textcat_examples(nlp))


def test_missing_spacy_transformers_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "spacy_transformers.layers.listener", None)
    with pytest.raises(ImportError, match=r"spacy-bert-pipes\[baseline\]"):
        registry.architectures.get("spacy-bert-pipes.TrfListenerEncoder.v1")()


def test_qa_cannot_read_a_transformer(tiny_bert: Path) -> None:
    nlp = trf_nlp(tiny_bert, ["bert_qa"])
    with pytest.raises(ValueError, match="needs its own encoder"):
        nlp.initialize()
