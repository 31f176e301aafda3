"""bert_textcat on a tiny random BERT: contract, training, robustness, persistence."""

from pathlib import Path

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, TRAIN_TEXTS, loader_config, textcat_examples
from spacy.language import Language
from spacy.training import Example


def make_nlp(tiny_bert: Path, **model: object) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER, **model}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    return nlp


def trained(tiny_bert: Path, steps: int = 40, **model: object) -> Language:
    nlp = make_nlp(tiny_bert, **model)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


def assert_valid_cats(doc: spacy.tokens.Doc, exclusive: bool = True) -> None:
    assert sorted(doc.cats) == sorted(LABELS)
    values = numpy.asarray(list(doc.cats.values()))
    assert numpy.isfinite(values).all()
    assert ((values >= 0) & (values <= 1)).all()
    if exclusive:
        assert values.sum() == pytest.approx(1.0, abs=1e-5)


def test_factory_declares_what_it_assigns(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    analysis = nlp.analyze_pipes()
    assert analysis["summary"]["bert_textcat"]["assigns"] == ["doc.cats", "doc.user_hooks"]


def test_predict_shapes_and_empty_batch(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    textcat = nlp.get_pipe("bert_textcat")
    assert textcat.labels == tuple(sorted(LABELS))
    scores = textcat.predict([nlp.make_doc("hello"), nlp.make_doc("my card")])
    assert scores.probs.shape == (2, 3)
    assert scores.confidence is not None and scores.confidence.shape == (2,)
    assert textcat.predict([]).probs.shape == (0, 3)
    assert list(nlp.pipe([])) == []


def test_labels_added_before_initialize_are_kept(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.get_pipe("bert_textcat").add_label("pin")
    nlp.initialize(lambda: textcat_examples(nlp))
    assert nlp.get_pipe("bert_textcat").labels == ("pin", *sorted(LABELS))
    assert list(nlp("my card").cats) == ["pin", *sorted(LABELS)]


def test_initialize_twice(tiny_bert: Path) -> None:
    """A second nlp.initialize() sets the head up again with the labels of the
    first (as spaCy's textcat keeps its labels)."""
    nlp = make_nlp(tiny_bert)
    textcat = nlp.get_pipe("bert_textcat")
    textcat.add_label("pin")
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(20):
        nlp.update(examples, sgd=optimizer)
    trained = [nlp(text).cats for text, _ in TRAIN_TEXTS]
    nlp.initialize(lambda: examples)
    assert textcat.labels == ("pin", *sorted(LABELS))
    again = [nlp(text).cats for text, _ in TRAIN_TEXTS]
    assert all(list(cats) == list(textcat.labels) for cats in again)
    # the head starts again: the training of the first run is gone
    assert [cats["card"] for cats in again] != pytest.approx([cats["card"] for cats in trained])
    # fewer labels in the examples: the first initialize's are kept
    nlp.initialize(lambda: examples[:2])
    assert textcat.labels == ("pin", *sorted(LABELS))
    # a label the head has no room for
    more = textcat_examples(nlp, data=[("top up my account", "top_up")], labels=["top_up"])
    with pytest.raises(ValueError, match="adds \\['top_up'\\], for which its head has no room"):
        nlp.initialize(lambda: [*examples, *more])
    assert textcat.labels == ("pin", *sorted(LABELS))


def test_overfits_a_handful_of_examples(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, steps=60)
    for text, gold in TRAIN_TEXTS:
        cats = nlp(text).cats
        assert max(cats, key=cats.get) == gold, (text, cats)


@pytest.mark.parametrize("pooling,pooler", [("mean", "none"), ("cls", "tanh")])
def test_pooling_options_train(tiny_bert: Path, pooling: str, pooler: str) -> None:
    nlp = trained(tiny_bert, steps=60, pooling=pooling, pooler_activation=pooler)
    correct = sum(max(nlp(t).cats, key=nlp(t).cats.get) == g for t, g in TRAIN_TEXTS)
    assert correct == len(TRAIN_TEXTS)


def test_multilabel_mode(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, exclusive_classes=False)
    data = [
        ("my card still not arrived", {"card": 1.0, "fx": 0.0, "other": 0.0}),
        ("exchange rate for my card", {"card": 1.0, "fx": 1.0, "other": 0.0}),
        ("hello world", {"card": 0.0, "fx": 0.0, "other": 0.0}),
    ]
    examples = [Example.from_dict(nlp.make_doc(t), {"cats": c}) for t, c in data]
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(60):
        nlp.update(examples, sgd=optimizer)
    for text, gold in data:
        cats = nlp(text).cats
        assert_valid_cats(nlp(text), exclusive=False)
        assert {k for k, v in cats.items() if v >= 0.5} == {k for k, v in gold.items() if v}
    scores = nlp.evaluate(examples)
    assert scores["cats_micro_f"] == pytest.approx(1.0)


def test_class_weights_balanced_and_mapping(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "bert_textcat",
        config={"model": {"encoder": SMALL_ENCODER}, "class_weights": "balanced"},
    )
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    data = TRAIN_TEXTS + [("my card", "card")] * 4
    nlp.initialize(lambda: textcat_examples(nlp, data))
    weights = nlp.get_pipe("bert_textcat").label_weights()
    assert weights is not None
    n = len(data)
    assert weights["card"] == pytest.approx(n / (3 * 6))
    assert weights["fx"] == pytest.approx(n / (3 * 2))
    nlp2 = spacy.blank("en")
    nlp2.add_pipe(
        "bert_textcat",
        config={"model": {"encoder": SMALL_ENCODER}, "class_weights": {"nope": 2.0}},
    )
    nlp2.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    with pytest.raises(ValueError, match="nope"):
        nlp2.initialize(lambda: textcat_examples(nlp2))


def test_weighted_loss_gradient(tiny_bert: Path) -> None:
    """The gradient of weighted cross-entropy is w_gold * (p - onehot) / n."""
    nlp = make_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    textcat = nlp.get_pipe("bert_textcat")
    weights = {"card": 2.0, "fx": 1.0, "other": 0.5}
    textcat.cfg["class_weights"] = weights
    probs = numpy.full((len(examples), 3), 1 / 3, dtype="f")
    loss, d = textcat.get_loss(examples, probs)
    labels = list(textcat.labels)
    for i, (_, gold) in enumerate(TRAIN_TEXTS):
        w = weights[gold]
        onehot = numpy.asarray([float(lb == gold) for lb in labels])
        numpy.testing.assert_allclose(d[i], w * (probs[i] - onehot) / len(examples), rtol=1e-5)
    assert loss == pytest.approx(
        numpy.mean([weights[g] * numpy.log(3) for _, g in TRAIN_TEXTS]),
        rel=1e-4,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\n\t  \n",
        "my card 😀😀 🏦 still not arrived",
        "control \x00\x01\x07 chars\u200b\ufeff here",
        "Привет, моя карта не пришла",
        "我的卡还没有到",
        "بطاقتي لم تصل بعد",
        "a" * 3000,
    ],
)
def test_odd_texts_get_valid_cats(tiny_bert: Path, text: str) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    assert_valid_cats(nlp(text))


def test_20000_word_document(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    words = ("my card still not arrived exchange rate hello world now " * 2000).split()
    assert len(words) == 20000
    doc = nlp(" ".join(words))
    assert_valid_cats(doc)


def test_unknown_label_in_training_names_the_example(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    # a doc that annotates the head's labels may not hold others (a doc that holds
    # none of them is another head's: tests/pipeline/test_missing_annotation.py)
    cats = {"card": 0.0, "fx": 0.0, "other": 1.0, "surprise": 1.0}
    bad = Example.from_dict(nlp.make_doc("hello"), {"cats": cats})
    with pytest.raises(ValueError, match="unknown label 'surprise'"):
        nlp.update(examples[:2] + [bad], sgd=optimizer)


def test_exclusive_with_two_positive_labels_fails(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    bad = Example.from_dict(nlp.make_doc("hello"), {"cats": {"card": 1.0, "fx": 1.0, "other": 0.0}})
    with pytest.raises(ValueError, match="exclusive"):
        nlp.update([bad], sgd=optimizer)


def test_scores_have_spacy_textcat_keys(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, steps=10)
    scores = nlp.evaluate(textcat_examples(nlp))
    for key in ("cats_score", "cats_micro_f", "cats_macro_f", "cats_macro_auc", "cats_f_per_type"):
        assert key in scores
    assert 0.0 <= scores["cats_accuracy"] <= 1.0


def test_to_disk_and_load_give_identical_cats(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = trained(tiny_bert, steps=5)
    texts = ["my card", "", " ".join(["exchange rate"] * 200), "hello world"]
    before = [nlp(t).cats for t in texts]
    nlp.to_disk(tmp_path / "model")
    assert not list((tmp_path / "model").rglob("*.pkl"))
    loaded = spacy.load(tmp_path / "model")
    for cats, text in zip(before, texts):
        after = loaded(text).cats
        assert after.keys() == cats.keys()
        for label in cats:
            assert after[label] == pytest.approx(cats[label], abs=1e-6)


def test_save_before_training_and_load(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.to_disk(tmp_path / "untrained")
    loaded = spacy.load(tmp_path / "untrained")
    assert loaded.pipe_names == ["bert_textcat"]
    with pytest.raises(ValueError, match="initialize"):
        loaded("hello")
    loaded.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    loaded.initialize(lambda: textcat_examples(loaded))
    assert_valid_cats(loaded("hello"))


def test_pipe_with_two_processes_matches_one(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, steps=5)
    texts = [t for t, _ in TRAIN_TEXTS] * 4 + ["", "a longer text " * 30]
    one = [doc.cats for doc in nlp.pipe(texts, batch_size=4)]
    two = [doc.cats for doc in nlp.pipe(texts, batch_size=4, n_process=2)]
    assert len(one) == len(two) == len(texts)
    for a, b in zip(one, two):
        for label in a:
            assert a[label] == pytest.approx(b[label], abs=1e-6)


def test_after_a_trained_pipeline_leaves_its_annotations(tiny_bert: Path) -> None:
    """bert_textcat added after tagger/parser/ner trains and predicts without
    changing what those components predict."""
    nlp = spacy.blank("en")
    nlp.add_pipe("tagger")
    # min_action_freq=1: keep the dependency labels of this tiny treebank.
    nlp.add_pipe("parser", config={"min_action_freq": 1})
    nlp.add_pipe("ner")
    base = [
        (
            "John Smith is in London",
            ["PROPN", "PROPN", "AUX", "ADP", "PROPN"],
            [1, 2, 2, 2, 3],
            ["compound", "nsubj", "ROOT", "prep", "pobj"],
            [(0, 10, "PER"), (17, 23, "LOC")],
        ),
        (
            "Apple is a company",
            ["PROPN", "AUX", "DET", "NOUN"],
            [1, 1, 3, 1],
            ["nsubj", "ROOT", "det", "attr"],
            [(0, 5, "ORG")],
        ),
    ]
    base_examples = [
        Example.from_dict(
            nlp.make_doc(text), {"tags": tags, "heads": heads, "deps": deps, "entities": ents}
        )
        for text, tags, heads, deps, ents in base
    ]
    optimizer = nlp.initialize(lambda: base_examples)
    for _ in range(20):
        nlp.update(base_examples, sgd=optimizer)
    texts = [t for t, _ in TRAIN_TEXTS] + [b[0] for b in base]

    def annotations(pipeline: Language) -> list:
        out = []
        for doc in pipeline.pipe(texts):
            out.append(
                (
                    [t.tag_ for t in doc],
                    [t.head.i for t in doc],
                    [t.dep_ for t in doc],
                    [(e.start_char, e.end_char, e.label_) for e in doc.ents],
                )
            )
        return out

    before = annotations(nlp)
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    textcat = nlp.get_pipe("bert_textcat")
    examples = textcat_examples(nlp)
    textcat.initialize(
        lambda: examples,
        nlp=nlp,
        encoder_loader=spacy.registry.misc.get("spacy-bert-pipes.HFCheckpoint.v1")(str(tiny_bert)),
    )
    optimizer = nlp.resume_training()
    optimizer.learn_rate = 2e-3
    for _ in range(40):
        nlp.update(examples, sgd=optimizer, exclude=["tagger", "parser", "ner"])
    assert annotations(nlp) == before
    for text, gold in TRAIN_TEXTS:
        cats = nlp(text).cats
        assert max(cats, key=cats.get) == gold


def test_first_update_reaches_the_encoder(tiny_bert: Path) -> None:
    """The output layer starts random, not zero: a zero output layer would send no
    gradient to the encoder until it had grown (training stalled on Banking77)."""
    nlp = make_nlp(tiny_bert)
    examples = textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    textcat = nlp.get_pipe("bert_textcat")
    scores, backprop = textcat.model.begin_update([eg.predicted for eg in examples])
    _, d_scores = textcat.get_loss(examples, scores)
    backprop(d_scores)
    module = textcat.model.get_ref("encoder").shims[0].module
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    assert grads and max(float(g.abs().max()) for g in grads) > 0.0
