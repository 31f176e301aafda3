"""bert_textcat with a PrototypeCatModel on a tiny random BERT: labels from
descriptions (no examples), few-shot training with the pair loss, new labels."""

import json
from pathlib import Path

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, TRAIN_TEXTS, loader_config, textcat_examples
from spacy.language import Language

pytestmark = pytest.mark.usefixtures("one_thread")

DESCRIPTIONS = {
    "card": "my card still not arrived",
    "fx": ["exchange rate for cash", "what exchange rate is this"],
    "other": "hello world",
}


def make_nlp(
    tiny_bert: Path,
    exclusive: bool = True,
    prototype_norm: float = 1.0,
    example_weight: float = 0.0,
    **settings: object,
) -> Language:
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "exclusive_classes": exclusive,
        "prototype_norm": prototype_norm,
        "example_weight": example_weight,
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    nlp.add_pipe("bert_textcat", config={"model": model, **settings})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    return nlp


def top(nlp: Language, text: str) -> str:
    cats = nlp(text).cats
    return max(cats, key=cats.__getitem__)


def test_zero_shot_initializes_without_examples(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    textcat = nlp.get_pipe("bert_textcat")
    assert textcat.labels == ("card", "fx", "other")
    # a doc that is a label's only description has cosine 1 with its prototype
    assert top(nlp, "my card still not arrived") == "card"
    assert top(nlp, "hello world") == "other"
    cats = nlp("something else entirely").cats
    assert sum(cats.values()) == pytest.approx(1.0, abs=1e-5)
    assert textcat.predict([]).probs.shape == (0, 3)


def test_label_names_as_descriptions(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_names_as_descriptions=True)
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = ["money_transfer", "pin"]
    nlp.initialize()
    assert top(nlp, "money transfer") == "money_transfer"
    assert top(nlp, "pin") == "pin"


@pytest.mark.parametrize("names_as_descriptions", [True, False])
def test_a_label_name_without_words_is_an_error(
    tiny_bert: Path, names_as_descriptions: bool
) -> None:
    nlp = make_nlp(tiny_bert, label_names_as_descriptions=names_as_descriptions)
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = ["money_transfer", "___"]
    with pytest.raises(ValueError, match="the label '___' has no words") as error:
        nlp.initialize()
    assert "[components.bert_textcat.label_descriptions]" in str(error.value)
    # described, the label is fine, beside one described by its name
    nlp = make_nlp(
        tiny_bert, label_descriptions={"___": "anything else"}, label_names_as_descriptions=True
    )
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = ["___", "pin"]
    nlp.initialize()
    assert top(nlp, "anything else") == "___"


def test_zero_shot_initialize_twice(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    textcat = nlp.get_pipe("bert_textcat")
    textcat.add_label("money_transfer")
    textcat.add_label("pin")
    nlp.initialize()
    nlp.initialize()
    assert textcat.labels == ("money_transfer", "pin")
    assert top(nlp, "money transfer") == "money_transfer"
    assert top(nlp, "pin") == "pin"


def test_labels_added_before_initialize_are_described_by_their_names(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    textcat = nlp.get_pipe("bert_textcat")
    assert textcat.add_label("money_transfer") == 1
    assert textcat.add_label("pin") == 1
    nlp.initialize()  # no descriptions, no examples: the names are all there is
    assert textcat.labels == ("money_transfer", "pin")
    assert top(nlp, "money transfer") == "money_transfer"
    assert top(nlp, "pin") == "pin"


def test_labels_added_before_initialize_come_before_the_examples_labels(
    tiny_bert: Path,
) -> None:
    nlp = make_nlp(tiny_bert, label_names_as_descriptions=True)
    nlp.get_pipe("bert_textcat").add_label("pin")
    nlp.initialize(lambda: textcat_examples(nlp))
    assert nlp.get_pipe("bert_textcat").labels == ("pin", *LABELS)
    assert top(nlp, "pin") == "pin"


def test_an_added_label_beside_examples_needs_a_description(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.get_pipe("bert_textcat").add_label("pin")
    with pytest.raises(ValueError, match=r"'pin'.*label_names_as_descriptions"):
        nlp.initialize(lambda: textcat_examples(nlp))


def test_no_labels_at_all_says_where_zero_shot_labels_come_from(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    with pytest.raises(ValueError, match="No labels for 'bert_textcat'") as error:
        nlp.initialize()
    assert "add_label" in str(error.value) and "label_descriptions" in str(error.value)


@pytest.mark.parametrize("labels", ["card, fx", "card"])
def test_initialize_labels_given_as_a_string_are_an_error(tiny_bert: Path, labels: str) -> None:
    nlp = make_nlp(tiny_bert, label_names_as_descriptions=True)
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = labels
    # in the config: spaCy's validation of the initialize settings
    with pytest.raises(ValueError, match=r"bert_textcat -> labels\s+Input should be a valid list"):
        nlp.initialize()
    # in Python
    textcat = nlp.get_pipe("bert_textcat")
    with pytest.raises(ValueError, match="'bert_textcat' must be a list") as error:
        textcat.initialize(lambda: textcat_examples(nlp), nlp=nlp, labels=labels)
    assert repr(labels) in str(error.value)


@pytest.mark.parametrize("label", [["card", "fx"], "", "  "])
def test_add_label_refuses_what_is_not_one_label(tiny_bert: Path, label: object) -> None:
    textcat = make_nlp(tiny_bert).get_pipe("bert_textcat")
    with pytest.raises(ValueError, match="'bert_textcat'") as error:
        textcat.add_label(label)
    assert repr(label) in str(error.value)
    assert textcat.labels == ()


def test_descriptions_and_examples_of_a_new_label_must_be_lists(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    textcat = nlp.get_pipe("bert_textcat")
    with pytest.raises(ValueError, match="'bert_textcat'.*a list.*'a new pin'"):
        textcat.add_described_label("pin", "a new pin")
    with pytest.raises(ValueError, match="'bert_textcat'.*a list.*'new pin'"):
        textcat.add_described_label("pin", ["a new pin"], "new pin")
    with pytest.raises(ValueError, match="'bert_textcat'.*''"):
        textcat.add_described_label("", ["a new pin"])
    assert textcat.labels == tuple(LABELS)


def test_descriptions_from_a_json_file(tiny_bert: Path, tmp_path: Path) -> None:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps(DESCRIPTIONS), encoding="utf8")
    nlp = make_nlp(tiny_bert, label_descriptions=str(path))
    nlp.initialize()
    assert top(nlp, "what exchange rate is this") == "fx"


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "cannot read the label descriptions"),
        ("{not json", "not valid JSON"),
        ('["card"]', "expected an object"),
        ('{"card": ""}', "label 'card'"),
        ('{"card": ["ok", 3]}', "label 'card'"),
    ],
)
def test_a_bad_description_file_names_the_file(
    tiny_bert: Path, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "labels.json"
    if content is not None:
        path.write_text(content, encoding="utf8")
    nlp = make_nlp(tiny_bert, label_descriptions=str(path))
    with pytest.raises(ValueError, match=message) as error:
        nlp.initialize()
    assert str(path) in str(error.value)


def test_a_described_label_must_be_a_label(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions={"unknown_label": "something"})
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = LABELS
    with pytest.raises(ValueError, match="unknown_label"):
        nlp.initialize(lambda: textcat_examples(nlp))


def test_a_label_without_example_or_description_is_an_error(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions={"card": "my card"})
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = ["card", "pin"]
    with pytest.raises(ValueError, match="'pin'"):
        nlp.initialize()


def test_descriptions_need_a_prototype_model(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "bert_textcat",
        config={"model": {"encoder": SMALL_ENCODER}, "label_descriptions": DESCRIPTIONS},
    )
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    with pytest.raises(ValueError, match="PrototypeCatModel"):
        nlp.initialize()


def test_prototypes_from_examples_predict_before_training(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, description_weight=0.0)
    nlp.initialize(lambda: textcat_examples(nlp))
    # one example per label here for "other"... each text is nearest its own label's mean
    hits = sum(top(nlp, text) == gold for text, gold in TRAIN_TEXTS)
    assert hits >= 4


@pytest.mark.parametrize("contrastive_weight", [0.0, 1.0])
def test_few_shot_training_fits_the_examples(tiny_bert: Path, contrastive_weight: float) -> None:
    nlp = make_nlp(tiny_bert, contrastive_weight=contrastive_weight)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    losses = [nlp.update(examples, sgd=optimizer, losses={})["bert_textcat"] for _ in range(40)]
    assert losses[-1] < losses[0]
    assert all(top(nlp, text) == gold for text, gold in TRAIN_TEXTS)


def test_vector_anchor_keeps_the_sentence_vectors_near_the_start(tiny_bert: Path) -> None:
    """The same training with and without vector_anchor: anchored, the docs'
    sentence vectors end nearer where the loaded encoder had them, and the
    classifier still fits; the teacher itself does not move."""
    texts = [text for text, _ in TRAIN_TEXTS] + ["hello there world", "exchange my card"]
    drift = {}
    for anchor in (0.0, 5.0):
        nlp = make_nlp(tiny_bert, vector_anchor=anchor)
        examples = textcat_examples(nlp)
        optimizer = nlp.initialize(lambda examples=examples: examples)
        optimizer.learn_rate = 2e-3
        textcat = nlp.get_pipe("bert_textcat")
        start = textcat.prototypes.sentence_vectors([nlp.make_doc(t) for t in texts])
        for _ in range(40):
            nlp.update(examples, sgd=optimizer)
        end = textcat.prototypes.sentence_vectors([nlp.make_doc(t) for t in texts])
        drift[anchor] = float((1 - (start * end).sum(axis=1)).mean())
        assert all(top(nlp, text) == gold for text, gold in TRAIN_TEXTS)
        if anchor:
            teacher = textcat._vector_teacher()
            assert teacher is not None
            kept = teacher.predict([nlp.make_doc(t) for t in texts])
            assert numpy.allclose(kept, start, atol=1e-5)
    assert drift[0.0] > 0.01
    assert drift[5.0] < drift[0.0] / 2, drift


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"vector_anchor": -1.0}, "vector_anchor must be >= 0"),
        ({"vector_anchor": 1.0, "prototype": False}, "needs a spacy-bert-pipes.PrototypeCatModel"),
    ],
)
def test_vector_anchor_settings_are_checked(tiny_bert: Path, settings: dict, message: str) -> None:
    settings = dict(settings)
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1"
        if settings.pop("prototype", True)
        else "spacy-bert-pipes.TextCatModel.v1",
        "exclusive_classes": True,
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    with pytest.raises(Exception, match=message):
        nlp.add_pipe("bert_textcat", config={"model": model, **settings})


def test_save_load_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    texts = ["my card", "exchange rate", "hello there world"]
    before = [nlp(t).cats for t in texts]
    nlp.to_disk(tmp_path / "zero")
    loaded = spacy.load(tmp_path / "zero")
    for text, cats in zip(texts, before):
        assert loaded(text).cats == pytest.approx(cats, abs=1e-6)


def test_a_new_label_by_description(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(10):
        nlp.update(examples, sgd=optimizer)
    textcat = nlp.get_pipe("bert_textcat")
    before = nlp("why is my card not working").cats
    textcat.add_described_label("pin", ["pin"], [nlp.make_doc("new pin")])
    assert textcat.labels == (*LABELS, "pin")
    after = nlp("why is my card not working").cats
    assert set(after) == {*LABELS, "pin"}
    # the trained labels keep their scores relative to each other
    old = numpy.asarray([after[lb] for lb in LABELS]) / sum(after[lb] for lb in LABELS)
    assert old == pytest.approx([before[lb] for lb in LABELS], abs=1e-5)
    assert after["pin"] > 0
    with pytest.raises(ValueError, match="already has the label 'pin'"):
        textcat.add_described_label("pin", ["pin"])


def test_a_new_label_at_load_time(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    nlp.to_disk(tmp_path / "trained")
    new_labels = tmp_path / "new_labels.json"
    new_labels.write_text(json.dumps({"pin": "a new pin"}), encoding="utf8")
    overrides = {"components": {"bert_textcat": {"label_descriptions": str(new_labels)}}}
    loaded = spacy.load(tmp_path / "trained", config=overrides)
    assert loaded.get_pipe("bert_textcat").labels == (*LABELS, "pin")
    assert top(loaded, "a new pin") == "pin"
    plain = spacy.load(tmp_path / "trained")
    assert plain.get_pipe("bert_textcat").labels == tuple(LABELS)


def test_adding_a_label_needs_a_prototype_model(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    with pytest.raises(ValueError, match="PrototypeCatModel"):
        nlp.get_pipe("bert_textcat").add_described_label("pin", ["pin"])


def test_multi_label_zero_shot_thresholds(tiny_bert: Path) -> None:
    nlp = make_nlp(
        tiny_bert, exclusive=False, label_descriptions=DESCRIPTIONS, similarity_threshold=0.99
    )
    nlp.initialize()
    cats = nlp("hello world").cats
    # only the label whose description is the text reaches cosine 0.99
    assert cats["other"] > 0.5
    assert cats["card"] < 0.5 and cats["fx"] < 0.5


def test_multi_label_thresholds_are_calibrated_on_examples(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, exclusive=False, similarity_threshold=0.99)
    examples = textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    hits = sum(nlp(text).cats[gold] >= 0.5 for text, gold in TRAIN_TEXTS)
    assert hits == len(TRAIN_TEXTS)


def test_prototype_norm_changes_storage_not_predictions(tiny_bert: Path) -> None:
    cats = []
    for norm in (1.0, 0.01):
        nlp = make_nlp(tiny_bert, prototype_norm=norm)
        nlp.initialize(lambda examples=textcat_examples(nlp): examples)
        W = nlp.get_pipe("bert_textcat").model.get_ref("output").get_param("W")
        assert numpy.linalg.norm(W, axis=1) == pytest.approx(norm, rel=1e-4)
        cats.append(nlp("my card is not working").cats)
    assert cats[0] == pytest.approx(cats[1], abs=1e-5)


def test_examples_are_remembered_through_training_and_saving(
    tiny_bert: Path, tmp_path: Path
) -> None:
    nlp = make_nlp(tiny_bert, example_weight=0.5)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    output = nlp.get_pipe("bert_textcat").model.get_ref("output")
    assert len(output.attrs["example_keys"]) == len(TRAIN_TEXTS)
    E0 = output.get_param("E").copy()
    optimizer.learn_rate = 2e-3
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    # one row per training text, refreshed by the updates (the encoder moved)
    assert len(output.attrs["example_keys"]) == len(TRAIN_TEXTS)
    assert not numpy.allclose(output.get_param("E"), E0)
    texts = [text for text, _ in TRAIN_TEXTS] + ["something else"]
    before = [nlp(t).cats for t in texts]
    nlp.to_disk(tmp_path / "memory")
    loaded = spacy.load(tmp_path / "memory")
    for text, cats in zip(texts, before):
        assert loaded(text).cats == pytest.approx(cats, abs=1e-6)
    # the examples change predictions: without them the scores differ
    loaded.get_pipe("bert_textcat").model.get_ref("output").attrs["example_weight"] = 0.0
    assert loaded(texts[0]).cats != pytest.approx(before[0], abs=1e-6)


def test_a_new_label_keeps_the_examples_and_adds_its_own(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, example_weight=0.5)
    nlp.initialize(lambda: textcat_examples(nlp))
    textcat = nlp.get_pipe("bert_textcat")
    textcat.add_described_label("pin", ["pin"], [nlp.make_doc("new pin please")])
    output = textcat.model.get_ref("output")
    # the trained examples, then the new label's example and its description
    assert len(output.attrs["example_keys"]) == len(TRAIN_TEXTS) + 2
    assert output.get_param("E_label")[-2:].tolist() == [len(LABELS), len(LABELS)]
    assert top(nlp, "new pin please") == "pin"
    textcat.add_described_label("fee", ["a fee"])  # one description: its prototype stands in
    output = textcat.model.get_ref("output")
    assert len(output.attrs["example_keys"]) == len(TRAIN_TEXTS) + 3
    assert output.get_param("E").shape == (len(TRAIN_TEXTS) + 3, output.get_dim("nI"))
    assert top(nlp, "a fee") == "fee"


def test_descriptions_are_remembered_and_refreshed_in_training(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, example_weight=0.5, label_descriptions=DESCRIPTIONS)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    output = nlp.get_pipe("bert_textcat").model.get_ref("output")
    phrases = sum(len([d] if isinstance(d, str) else d) for d in DESCRIPTIONS.values())
    assert len(output.attrs["example_keys"]) == len(TRAIN_TEXTS) + phrases
    E0 = output.get_param("E").copy()
    optimizer.learn_rate = 2e-3
    for _ in range(2):  # nlp.update steps the optimizer after the component's update
        nlp.update(examples[:2], sgd=optimizer)  # two "card" examples
    E1 = output.get_param("E")
    changed = ~numpy.isclose(E0, E1).all(axis=1)
    labels = output.get_param("E_label")
    described = numpy.arange(len(E0)) >= len(TRAIN_TEXTS)
    # the batch's examples and its label's description are re-encoded, no others
    assert changed[:2].all() and not changed[2 : len(TRAIN_TEXTS)].any()
    assert (changed[described] == (labels[described] == LABELS.index("card"))).all()


def test_adapting_to_unlabelled_texts_moves_the_prototypes(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    textcat = nlp.get_pipe("bert_textcat")
    W0 = textcat.model.get_ref("output").get_param("W").copy()
    docs = [nlp.make_doc(text) for text, _ in TRAIN_TEXTS]
    counts = textcat.adapt_to_texts(docs, rounds=2, weight=1.0, min_confidence=0.0)
    assert set(counts) == set(textcat.labels) and sum(counts.values()) == len(docs)
    W1 = textcat.model.get_ref("output").get_param("W")
    changed = [not numpy.allclose(W0[j], W1[j]) for j in range(len(textcat.labels))]
    assert any(changed)
    for j, label in enumerate(textcat.labels):
        if counts[label] == 0:  # no doc nearest it: the prototype stays
            assert not changed[j]
    cats = nlp("hello world").cats
    assert sum(cats.values()) == pytest.approx(1.0, abs=1e-5)


def test_adapting_uses_only_the_texts_it_would_route(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    textcat = nlp.get_pipe("bert_textcat")
    docs = [nlp.make_doc(text) for text, _ in TRAIN_TEXTS]
    confidence = [doc._.route["confidence"] for doc in nlp.pipe(text for text, _ in TRAIN_TEXTS)]
    cut = sorted(confidence)[len(confidence) // 2]
    state = textcat.model.to_bytes()
    counts = textcat.adapt_to_texts(docs, rounds=2, weight=1.0, min_confidence=cut)
    assert sum(counts.values()) == sum(c >= cut for c in confidence) < len(docs)
    # nothing confident enough: the prototypes stay
    textcat.model.from_bytes(state)
    W0 = textcat.model.get_ref("output").get_param("W").copy()
    counts = textcat.adapt_to_texts(docs, min_confidence=max(confidence) + 1e-3)
    assert sum(counts.values()) == 0
    assert numpy.array_equal(W0, textcat.model.get_ref("output").get_param("W"))
    # the default: oos_threshold when set
    textcat.cfg["oos_threshold"] = cut
    assert sum(textcat.adapt_to_texts(docs, rounds=2).values()) == sum(c >= cut for c in confidence)


def test_adapting_needs_exclusive_prototypes_and_texts(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, exclusive=False, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    with pytest.raises(ValueError, match="exclusive_classes"):
        nlp.get_pipe("bert_textcat").adapt_to_texts([nlp.make_doc("hello")])
    nlp = make_nlp(tiny_bert, label_descriptions=DESCRIPTIONS)
    nlp.initialize()
    with pytest.raises(ValueError, match="no texts"):
        nlp.get_pipe("bert_textcat").adapt_to_texts([])
    with pytest.raises(ValueError, match="rounds"):
        nlp.get_pipe("bert_textcat").adapt_to_texts([nlp.make_doc("hello")], rounds=0)
    plain = spacy.blank("en")
    plain.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    plain.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    plain.initialize(lambda: textcat_examples(plain))
    with pytest.raises(ValueError, match="PrototypeCatModel"):
        plain.get_pipe("bert_textcat").adapt_to_texts([plain.make_doc("hello")])
