"""Settings given at `spacy.load(path, config=...)` are what the loaded pipes do.

Each case saves a small pipeline, loads it with one setting overridden and checks
both `nlp.config` and the behaviour the setting controls. What was learned
(labels, label counts, weights, the encoder's source) stays as saved.
"""

from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy
import pytest
import spacy
from helpers import (
    LABELS,
    NER_TEXTS,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    count_calls,
    loader_config,
    textcat_examples,
)
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.models.encoder import bert as encoder_module

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = {"what": "what is my card", "where": "where is the bank"}
TEXTS = [text for text, _ in TRAIN_TEXTS] + [text for text, _ in NER_TEXTS]
LONG_TEXT = " ".join(text for text, _ in TRAIN_TEXTS * 3)


@pytest.fixture(scope="module")
def heads_path(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bert_textcat (multi-label, balanced class weights), bert_ner and bert_qa,
    each on its own tiny encoder, initialized and saved."""
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "bert_textcat",
        config={
            "model": {"encoder": SMALL_ENCODER, "exclusive_classes": False},
            "class_weights": "balanced",
        },
    )
    nlp.add_pipe("bert_ner", config={"model": {"encoder": SMALL_ENCODER}})
    qa_model = {"encoder": SMALL_ENCODER, "max_seq_len": 24, "doc_stride": 4}
    nlp.add_pipe(
        "bert_qa",
        config={"model": {**qa_model, "max_question_len": 8}, "questions": QUESTIONS},
    )
    for name in nlp.pipe_names:
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    examples = textcat_examples(nlp) + [
        Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in NER_TEXTS
    ]
    nlp.initialize(lambda: examples)
    path = tmp_path_factory.mktemp("heads") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture(scope="module")
def shared_path(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bert_encoder with a listening bert_textcat and bert_vectors, saved."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v1"}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}})
    nlp.add_pipe("bert_vectors")
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("shared") / "pipeline"
    nlp.to_disk(path)
    return path


def load(path: Path, component: str, settings: Dict[str, Any]) -> Language:
    nlp = spacy.load(path, config={"components": {component: settings}})
    assert_config_says(nlp.config["components"][component], settings)
    return nlp


def assert_config_says(section: Dict[str, Any], settings: Dict[str, Any]) -> None:
    for key, value in settings.items():
        if isinstance(value, dict) and "@architectures" not in value:
            assert_config_says(section[key], value)
        else:
            assert section[key] == value, key


def answers(nlp: Language, text: str = "my card is in the bank of london") -> List[Dict]:
    return nlp(text)._.answers


# --- bert_textcat -------------------------------------------------------------


def test_textcat_threshold(heads_path: Path) -> None:
    for threshold, recall in ((0.0, 1.0), (1.0, 0.0)):
        nlp = load(heads_path, "bert_textcat", {"threshold": threshold})
        assert nlp.get_pipe("bert_textcat").cfg["threshold"] == threshold
        scores = nlp.get_pipe("bert_textcat").score(
            [Example(nlp(eg.predicted.text), eg.reference) for eg in textcat_examples(nlp)]
        )
        assert scores["cats_micro_r"] == pytest.approx(recall)


def test_textcat_class_weights(heads_path: Path) -> None:
    saved = spacy.load(heads_path).get_pipe("bert_textcat")
    n, card = len(TRAIN_TEXTS), sum(gold == "card" for _, gold in TRAIN_TEXTS)
    assert saved.label_weights()["card"] == pytest.approx((n - card) / card)
    nlp = load(heads_path, "bert_textcat", {"class_weights": None})
    textcat = nlp.get_pipe("bert_textcat")
    assert textcat.label_weights() is None
    examples = textcat_examples(nlp)
    probs = numpy.full((len(examples), len(LABELS)), 0.5, dtype="f")
    assert textcat.get_loss(examples, probs)[0] != pytest.approx(saved.get_loss(examples, probs)[0])
    # learned state stays as saved: the labels and their counts
    assert textcat.labels == saved.labels
    assert textcat.cfg["label_counts"] == saved.cfg["label_counts"]


def test_textcat_exclusive_classes(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_textcat", {"model": {"exclusive_classes": True}})
    assert nlp.get_pipe("bert_textcat").exclusive
    assert sum(nlp("my card").cats.values()) == pytest.approx(1.0, abs=1e-5)


# --- the encoder ----------------------------------------------------------------


def test_encoder_max_batch_tokens(heads_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n_batches: Dict[int, int] = {}
    for budget in (16, 1024):
        settings = {"model": {"encoder": {"max_batch_tokens": budget}}}
        nlp = load(heads_path, "bert_textcat", settings)
        encoder = nlp.get_pipe("bert_textcat").model.get_ref("encoder")
        assert encoder.attrs["max_batch_tokens"] == budget
        assert encoder.attrs["source"]  # learned: where the weights came from
        calls = count_calls(monkeypatch, encoder_module, "run_batch")
        list(nlp.get_pipe("bert_textcat").pipe(nlp.make_doc(t) for t in TEXTS))
        n_batches[budget] = len(calls)
        monkeypatch.undo()
    assert n_batches[16] > n_batches[1024]


def test_encoder_windows(heads_path: Path) -> None:
    default = spacy.load(heads_path)
    nlp = load(heads_path, "bert_textcat", {"model": {"encoder": {"max_length": 32, "stride": 8}}})
    encoder = nlp.get_pipe("bert_textcat").model.get_ref("encoder")
    assert (encoder.attrs["max_length"], encoder.attrs["stride"]) == (32, 8)
    before = default.get_pipe("bert_textcat").predict([default.make_doc(LONG_TEXT)]).probs
    after = nlp.get_pipe("bert_textcat").predict([nlp.make_doc(LONG_TEXT)]).probs
    assert not numpy.allclose(before, after)


def test_encoder_predict_precision(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_ner", {"model": {"encoder": {"predict_precision": "bf16"}}})
    encoder = nlp.get_pipe("bert_ner").model.get_ref("encoder")
    assert encoder_module.hf_shim(encoder).prediction_precision == "bf16"


def test_shared_encoder_settings(shared_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nlp = load(shared_path, "bert_encoder", {"model": {"max_batch_tokens": 16}})
    assert nlp.get_pipe("bert_encoder").model.attrs["max_batch_tokens"] == 16
    calls = count_calls(monkeypatch, encoder_module, "run_batch")
    list(nlp.pipe(TEXTS))
    assert len(calls) > 1


# --- bert_vectors -----------------------------------------------------------------


def test_vectors_normalize_and_pooling(shared_path: Path) -> None:
    default = spacy.load(shared_path)
    assert default("my card").vector_norm != pytest.approx(1.0)
    nlp = load(shared_path, "bert_vectors", {"normalize": True, "pooling": ["cls"]})
    assert nlp("my card").vector_norm == pytest.approx(1.0, abs=1e-5)
    recipe = nlp.get_pipe("bert_vectors").recipe
    assert (recipe.modes, recipe.normalize) == (("cls",), True)


# --- bert_ner -----------------------------------------------------------------------


def test_ner_annotate_and_spans_key(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_ner", {"annotate": "spans", "spans_key": "found"})
    doc = nlp("john smith is in paris")
    assert "found" in doc.spans and doc.ents == ()


def test_ner_join_sentences(heads_path: Path) -> None:
    assert spacy.load(heads_path).get_pipe("bert_ner").joins_sentences
    nlp = load(heads_path, "bert_ner", {"join_sentences": 1})
    assert not nlp.get_pipe("bert_ner").joins_sentences


def test_ner_scheme_is_fixed_by_the_weights(heads_path: Path) -> None:
    with pytest.raises(ValueError, match="scheme = 'BILUO'"):
        spacy.load(heads_path, config={"components": {"bert_ner": {"scheme": "BILUO"}}})


# --- bert_qa ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings,check",
    [
        ({"top_k": 3}, lambda found: {a["rank"] for a in found} == {0, 1, 2}),
        ({"handle_impossible_answer": True}, lambda found: len(found) == 2),
        # spaCy merges a dict given at load into the saved one, and so does nlp.config
        (
            {"questions": {"who": "who is it"}},
            lambda found: {a["key"] for a in found} == {"what", "where", "who"},
        ),
    ],
    ids=["top_k", "handle_impossible_answer", "questions"],
)
def test_qa_settings(heads_path: Path, settings: Dict, check: Callable[[List], bool]) -> None:
    nlp = load(heads_path, "bert_qa", settings)
    assert check(answers(nlp)), answers(nlp)


def test_qa_max_answer_len(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_qa", {"max_answer_len": 1, "align_to_words": False, "top_k": 5})
    tokenizer = encoder_module.hf_shim(nlp.get_pipe("bert_qa").model.get_ref("encoder")).tokenizer
    for answer in answers(nlp):
        pieces = tokenizer(answer["text"], add_special_tokens=False)["input_ids"]
        assert len(pieces) <= 1, answer


def test_qa_spans_key(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_qa", {"spans_key": "slots"})
    doc = nlp("my card is in the bank of london")
    assert "slots" in doc.spans and "answers" not in doc.spans


def test_qa_max_question_len(heads_path: Path) -> None:
    nlp = load(heads_path, "bert_qa", {"model": {"max_question_len": 2}})
    assert nlp.get_pipe("bert_qa").model.attrs["max_question_len"] == 2
    assert all(a["question_truncated"] for a in answers(nlp))


# A different valid value for every setting of every component: each, given at
# load, is what the loaded pipe holds (the tests above check what they change).
EVERY_SETTING = [
    ("bert_textcat", {"threshold": 0.25}, "threshold", 0.25),
    ("bert_textcat", {"class_weights": None}, "class_weights", None),
    ("bert_textcat", {"score_prefix": "intent"}, "score_prefix", "intent"),
    ("bert_ner", {"annotate": "spans"}, "annotate", "spans"),
    ("bert_ner", {"spans_key": "found"}, "spans_key", "found"),
    ("bert_ner", {"join_sentences": 1}, "join_sentences", 1),
    ("bert_qa", {"max_answer_len": 3}, "max_answer_len", 3),
    ("bert_qa", {"top_k": 2}, "top_k", 2),
    ("bert_qa", {"handle_impossible_answer": True}, "handle_impossible_answer", True),
    ("bert_qa", {"align_to_words": False}, "align_to_words", False),
    ("bert_qa", {"spans_key": "slots"}, "spans_key", "slots"),
]


@pytest.mark.parametrize(
    "component,settings,key,value", EVERY_SETTING, ids=[f"{c}.{k}" for c, _, k, _ in EVERY_SETTING]
)
def test_every_component_setting_is_taken_at_load(
    heads_path: Path, component: str, settings: Dict[str, Any], key: str, value: Any
) -> None:
    saved = spacy.load(heads_path).get_pipe(component).cfg[key]
    assert saved != value
    nlp = load(heads_path, component, settings)
    assert nlp.get_pipe(component).cfg[key] == value


MODEL_SETTINGS = [
    ("bert_textcat", {"pooling": "mean"}, None, "pooling", "mean"),
    ("bert_ner", {"token_vector": "mean"}, None, "token_vector", "mean"),
    ("bert_qa", {"doc_stride": 2}, None, "doc_stride", 2),
    ("bert_qa", {"max_seq_len": 20}, None, "max_seq_len", 20),
    ("bert_ner", {"encoder": {"context": "doc"}}, "encoder", "context", "doc"),
    ("bert_ner", {"encoder": {"stride": 2}}, "encoder", "stride", 2),
]


@pytest.mark.parametrize(
    "component,settings,ref,key,value",
    MODEL_SETTINGS,
    ids=[f"{c}.{r or 'model'}.{k}" for c, _, r, k, _ in MODEL_SETTINGS],
)
def test_every_model_setting_is_taken_at_load(
    heads_path: Path, component: str, settings: Dict, ref: Any, key: str, value: Any
) -> None:
    nlp = load(heads_path, component, {"model": settings})
    model = nlp.get_pipe(component).model
    node = model.get_ref(ref) if ref else model
    assert node.attrs[key] == value
