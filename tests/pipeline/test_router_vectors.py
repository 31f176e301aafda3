"""A router's sentence vectors as `doc.vector` (pipeline/router_vectors.py): a
bert_textcat with label prototypes installs the vectors its prediction
computed, from the same encoder pass, where the pipeline gives the doc no
vector of its own."""

import pickle
import warnings
from pathlib import Path
from typing import Any, List

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, WORDS, loader_config, prototype_router, textcat_examples
from spacy.language import Language
from spacy.tokens import Doc

from spacy_bert_pipes.models.encoder.bert import hf_shim
from spacy_bert_pipes.pipeline.router_vectors import RouterVector, prototype_vectors

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["top up my account", "what is the weather", "change my pin", "my card", "   ", ""]


@pytest.fixture(scope="module")
def router_path(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prototype_router(tiny_bert, tmp_path_factory.mktemp("router") / "router")


def encoder_passes(nlp: Language, name: str = "bert_textcat") -> List[int]:
    """A list that grows by one per forward of the component's transformer."""
    calls: List[int] = []
    encoder = nlp.get_pipe(name).model.get_ref("encoder")  # type: ignore[attr-defined]
    hf_shim(encoder).module.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_doc_vector_is_the_router_sentence_vector_of_one_pass(router_path: Path) -> None:
    nlp = spacy.load(router_path)
    calls = encoder_passes(nlp)
    docs = list(nlp.pipe(TEXTS, batch_size=len(TEXTS)))
    passes = len(calls)
    assert passes >= 1
    vectors = numpy.stack([doc.vector for doc in docs])
    assert len(calls) == passes  # reading doc.vector runs no encoder
    expected = prototype_vectors(nlp, "bert_textcat", TEXTS)  # the old path: a second pass
    assert vectors.shape == expected.shape == (len(TEXTS), 32)
    numpy.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert all(doc.has_vector for doc in docs)
    numpy.testing.assert_allclose([doc.vector_norm for doc in docs], 1.0, atol=1e-5)
    # the same vectors in a batch of one
    numpy.testing.assert_allclose(nlp(TEXTS[0]).vector, vectors[0], atol=1e-5)


def test_similarity_is_the_cosine_without_spacy_warnings(router_path: Path) -> None:
    nlp = spacy.load(router_path)
    a, b = nlp.pipe(TEXTS[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # W007: "no word vectors loaded"
        similarity = a.similarity(b)
    assert similarity == pytest.approx(float(numpy.dot(a.vector, b.vector)), abs=1e-5)
    assert a.similarity(a) == pytest.approx(1.0, abs=1e-5)


def test_the_vector_survives_pickling_and_a_saved_router(router_path: Path, tmp_path: Path) -> None:
    nlp = spacy.load(router_path)
    doc = nlp(TEXTS[0])
    copy = pickle.loads(pickle.dumps(doc))
    assert copy.has_vector and numpy.array_equal(copy.vector, doc.vector)
    # the hooks hold the vector, not doc.user_data: Doc.to_bytes carries nothing big
    assert list(doc.user_data) == [("._.", "route", None, None)]
    nlp.to_disk(tmp_path / "again")
    assert numpy.array_equal(spacy.load(tmp_path / "again")(TEXTS[0]).vector, doc.vector)


def test_a_pipeline_with_vectors_of_its_own_keeps_them(router_path: Path) -> None:
    """Static word vectors (or another component's vector hook): doc.vector is
    theirs, for every doc, also one whose words have none."""
    nlp = spacy.load(router_path)
    rng = numpy.random.default_rng(0)
    for word in ("top", "up", "my", "account"):
        nlp.vocab.set_vector(word, rng.standard_normal(8).astype("float32"))
    doc, unknown = nlp.pipe(["top up my account", "what is the weather"])
    numpy.testing.assert_allclose(
        doc.vector, numpy.mean([nlp.vocab.get_vector(w) for w in doc.text.split()], axis=0)
    )
    assert "vector" not in doc.user_hooks and not unknown.has_vector

    @Language.component("test_router_vectors_hook")
    def hook(doc: Doc) -> Doc:
        doc.user_hooks["vector"] = lambda doc: numpy.ones(3, dtype="f")
        return doc

    nlp = spacy.load(router_path)
    nlp.add_pipe("test_router_vectors_hook", first=True)
    assert nlp(TEXTS[0]).vector.tolist() == [1.0, 1.0, 1.0]


def test_a_classifier_without_prototypes_sets_no_vector(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    doc = nlp(TEXTS[0])
    assert "vector" not in doc.user_hooks and not doc.has_vector
    textcat: Any = nlp.get_pipe("bert_textcat")
    assert textcat.predict([doc]).vectors is None
    assert sorted(doc.cats) == sorted(LABELS)


def test_a_knn_router_vectors_are_its_features(router_path: Path) -> None:
    """Calibrated with knn, the router takes the features it scores by and the
    doc vectors from one forward."""
    nlp = spacy.load(router_path, config={"components": {"bert_textcat": {"oos_method": "knn"}}})
    textcat: Any = nlp.get_pipe("bert_textcat")
    examples = textcat_examples(nlp)
    textcat.calibrate(examples, examples)
    calls = encoder_passes(nlp)
    docs = list(nlp.pipe(WORDS[:8], batch_size=8))
    passes = len(calls)
    numpy.testing.assert_allclose(
        numpy.stack([doc.vector for doc in docs]),
        prototype_vectors(nlp, "bert_textcat", list(WORDS[:8])),
        atol=1e-5,
    )
    assert passes == len(calls) - passes  # prototype_vectors: as many passes again


def test_router_vector_hooks_compare_with_spans() -> None:
    hooks = RouterVector(numpy.asarray([0.6, 0.8], dtype="f"))
    doc = spacy.blank("en")("a b")
    hooks.install(doc)
    assert doc.vector.tolist() == pytest.approx([0.6, 0.8])
    with pytest.raises(ValueError, match="width"):
        doc.similarity(doc[0:1])  # a span of a doc without static vectors: width 0
