"""bert_vectors: doc/span/token vectors and similarity from the encoder's output."""

import pickle
import shutil
from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
from helpers import (
    SMALL_ENCODER,
    TRAIN_TEXTS,
    count_calls,
    loader_config,
    textcat_examples,
    write_sentence_transformers_layout,
)
from spacy.language import Language

from spacy_bert_pipes.models.encoder import bert as encoder_module
from spacy_bert_pipes.pipeline.vectors import DOC_VECTOR_KEY

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
TEXTS = ["my card still not arrived", "exchange rate for cash", "hello world", ""]


@pytest.fixture(scope="module")
def st_bert(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    """The tiny BERT in sentence-transformers layout: mean pooling, normalised."""
    path = tmp_path_factory.mktemp("st_bert") / "model"
    shutil.copytree(tiny_bert, path)
    pooling = {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}
    return write_sentence_transformers_layout(path, pooling, normalize=True)


def vectors_nlp(checkpoint: Path, encoder: dict = SMALL_ENCODER) -> Language:
    nlp = spacy.blank("en")
    # fp32, as sentence-transformers, whose vectors they are compared with
    nlp.add_pipe("bert_encoder", config={"model": {**encoder, "predict_precision": "fp32"}})
    nlp.add_pipe("bert_vectors")
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(checkpoint)
    nlp.initialize()
    return nlp


def hf_sentence_embeddings(checkpoint: Path, texts: List[str]) -> numpy.ndarray:
    """sentence-transformers' recipe by hand: mean over the attention mask, normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"][..., None].float()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(mean, dim=-1).numpy()


def test_doc_vector_is_the_checkpoints_sentence_embedding(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    recipe = nlp.get_pipe("bert_vectors").recipe
    assert recipe.modes == ("mean",) and recipe.normalize
    expected = hf_sentence_embeddings(st_bert, TEXTS)
    for text, want in zip(TEXTS, expected):
        doc = nlp(text)
        assert doc.has_vector
        numpy.testing.assert_allclose(doc.vector, want, atol=1e-5)
        assert doc.vector_norm == pytest.approx(1.0, abs=1e-5)


def test_checkpoint_without_recipe_gets_plain_mean(tiny_bert: Path) -> None:
    nlp = vectors_nlp(tiny_bert)
    recipe = nlp.get_pipe("bert_vectors").recipe
    assert recipe.modes == ("mean",) and not recipe.normalize
    doc = nlp("hello world")
    enc = doc._.bert_encoding
    positions = numpy.concatenate([enc.cls[None], enc.wordpieces, enc.sep[None]])
    numpy.testing.assert_allclose(doc.vector, positions.mean(0), atol=1e-6)


def test_config_overrides_the_checkpoint(st_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_vectors", config={"pooling": ["cls", "max"], "normalize": False})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(st_bert)
    nlp.initialize()
    doc = nlp("hello world")
    enc = doc._.bert_encoding
    positions = numpy.concatenate([enc.cls[None], enc.wordpieces, enc.sep[None]])
    numpy.testing.assert_allclose(doc.vector, numpy.concatenate([enc.cls, positions.max(0)]))


def test_token_and_span_vectors(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    doc = nlp("paris  exchange xyzzy")  # "  " is a whitespace token; xyzzy splits
    enc = doc._.bert_encoding
    assert [t.has_vector for t in doc] == [True, False, True, True]
    assert not doc[1].vector.any()
    # "xyzzy": several wordpieces, its vector is their mean
    start = doc[3].idx
    rows = [i for i, (s, _) in enumerate(enc.offsets) if s >= start]
    assert len(rows) > 1
    numpy.testing.assert_allclose(doc[3].vector, enc.wordpieces[rows].mean(0), atol=1e-6)
    # a span pools its wordpieces by the recipe (mean, normalised)
    span_rows = [i for i, (s, _) in enumerate(enc.offsets) if s >= doc[2].idx]
    want = enc.wordpieces[span_rows].mean(0)
    numpy.testing.assert_allclose(doc[2:4].vector, want / numpy.linalg.norm(want), atol=1e-6)
    numpy.testing.assert_allclose(doc[:].vector, doc.vector)
    assert not doc[1:2].has_vector and doc[2:4].has_vector


def test_similarity_is_cosine(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    a, b = nlp("my card still not arrived"), nlp("exchange rate for cash")
    cosine = float(a.vector @ b.vector / numpy.linalg.norm(a.vector) / numpy.linalg.norm(b.vector))
    assert a.similarity(b) == pytest.approx(cosine, abs=1e-6)
    assert a.similarity(b) == pytest.approx(b.similarity(a), abs=1e-6)
    assert a.similarity(a) == pytest.approx(1.0, abs=1e-5)
    assert a[1:3].similarity(b[:2]) == pytest.approx(b[:2].similarity(a[1:3]), abs=1e-6)
    assert -1.0 <= a[1].similarity(b[0]) <= 1.0


def test_long_text_is_pooled_over_merged_windows(st_bert: Path) -> None:
    """Windows: each wordpiece once (from its max-context window), [CLS] and [SEP]
    averaged over the windows; the [SEP] kept is each window's own."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    nlp = vectors_nlp(st_bert)  # 14 wordpieces a window, stride 4
    text = " ".join(["my card still not arrived", "exchange rate for cash"] * 6)
    doc = nlp(text)
    enc = doc._.bert_encoding
    assert len(enc.wordpieces) > 3 * 14
    tokenizer = AutoTokenizer.from_pretrained(str(st_bert))
    model = AutoModel.from_pretrained(str(st_bert)).eval()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    from spacy_bert_pipes.models.text.windows import plan_windows

    plan = plan_windows(len(ids), 14, 4)
    seps, clss = [], []
    for start, end in plan.spans:
        window = [tokenizer.cls_token_id, *ids[start:end], tokenizer.sep_token_id]
        with torch.no_grad():
            hidden = model(torch.tensor([window])).last_hidden_state[0].numpy()
        clss.append(hidden[0])
        seps.append(hidden[-1])
    numpy.testing.assert_allclose(enc.sep, numpy.mean(seps, 0), atol=1e-5)
    numpy.testing.assert_allclose(enc.cls, numpy.mean(clss, 0), atol=1e-5)
    total = enc.cls + enc.wordpieces.sum(0) + enc.sep
    want = total / (len(enc.wordpieces) + 2)
    numpy.testing.assert_allclose(doc.vector, want / numpy.linalg.norm(want), atol=1e-5)


def test_one_pass_feeds_heads_and_vectors(st_bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    nlp.add_pipe("bert_vectors")
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(st_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    calls = count_calls(monkeypatch, encoder_module, "run_windows")
    docs = list(nlp.pipe([t for t, _ in TRAIN_TEXTS], batch_size=len(TRAIN_TEXTS)))
    assert len(calls) == 1
    assert all(doc.cats and doc.has_vector and doc.vector.shape == (32,) for doc in docs)


def test_roundtrip_to_disk_and_load(st_bert: Path, tmp_path: Path) -> None:
    nlp = vectors_nlp(st_bert)
    expected = [nlp(t).vector for t in TEXTS]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("bert_vectors").recipe == nlp.get_pipe("bert_vectors").recipe
    for text, want in zip(TEXTS, expected):
        numpy.testing.assert_allclose(loaded(text).vector, want, atol=1e-6)
    # bytes too
    copy = spacy.blank("en").add_pipe("bert_vectors")
    copy.from_bytes(nlp.get_pipe("bert_vectors").to_bytes())
    assert copy.recipe == nlp.get_pipe("bert_vectors").recipe


def test_pickled_doc_keeps_its_vectors(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    doc = nlp("my card still not arrived")
    copy = pickle.loads(pickle.dumps(doc))
    numpy.testing.assert_allclose(copy.vector, doc.vector)
    numpy.testing.assert_allclose(copy[1].vector, doc[1].vector)
    assert copy.similarity(doc) == pytest.approx(1.0, abs=1e-5)


def test_multiprocessing_docs_get_their_hooks_back(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    expected = [nlp(t) for t in TEXTS]
    # the workers warn W109 (hooks dropped by Doc.to_bytes); we re-install them
    docs = list(nlp.pipe(TEXTS, n_process=2, batch_size=2))
    vectors = nlp.get_pipe("bert_vectors")
    for doc, want in zip(docs, expected):
        # spaCy's Doc.to_bytes drops user hooks; the vectors travel in user_data
        assert "vector" not in doc.user_hooks
        assert DOC_VECTOR_KEY in doc.user_data
        doc = vectors(doc)
        numpy.testing.assert_allclose(doc.vector, want.vector, atol=1e-6)
        for token, want_token in zip(doc, want):
            numpy.testing.assert_allclose(token.vector, want_token.vector, atol=1e-6)


def test_memory_zone(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    nlp("warm up the vocab")
    n_strings = len(nlp.vocab.strings)
    with nlp.memory_zone():
        docs = list(nlp.pipe(["an unseen zebra word", "another qwertyuiop"]))
        sims = docs[0].similarity(docs[1]), docs[0][1].similarity(docs[1][0])
        assert all(-1.0 <= s <= 1.0 for s in sims)
    assert len(nlp.vocab.strings) == n_strings
    doc = nlp("an unseen zebra word")
    assert doc.similarity(nlp("an unseen zebra word")) == pytest.approx(1.0, abs=1e-5)


def test_without_encoder_is_a_clear_error(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    with nlp.select_pipes(disable=["bert_encoder"]):
        with pytest.raises(ValueError, match="bert_encoder component must run before"):
            nlp("hello world")
    bare = spacy.blank("en")
    bare.add_pipe("bert_vectors")
    with pytest.raises(ValueError, match="found no bert_encoder"):
        bare.initialize()


def test_off_costs_nothing(st_bert: Path) -> None:
    nlp = vectors_nlp(st_bert)
    with nlp.select_pipes(disable=["bert_vectors"]):
        doc = nlp("hello world")
    assert not doc.user_hooks and DOC_VECTOR_KEY not in doc.user_data
    assert doc.vector.shape == (0,) or not doc.vector.any()
