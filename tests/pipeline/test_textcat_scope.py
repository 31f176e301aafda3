"""Routing with bert_textcat on a tiny random BERT: doc._.route, abstention,
calibration, saving and loading, spaCy's evaluate and find-threshold."""

from pathlib import Path
from typing import Any, List

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, TRAIN_TEXTS, loader_config, textcat_examples
from spacy.language import Language
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_bert_pipes.models.heads.scope import SCOPE_ATTR, TEMPERATURE_ATTR, knn_scores
from spacy_bert_pipes.pipeline.new_labels import Guarding
from spacy_bert_pipes.pipeline.textcat_scope import calibrate_pipeline
from spacy_bert_pipes.pipeline.textcat_threshold import sweep_thresholds

OUT_OF_SCOPE = ["the weather in rome", "play some jazz music", "book a table for two"]
# held-out in-scope texts (the training texts would find themselves)
DEV_TEXTS = [
    ("my new card has not come", "card"),
    ("the card is broken", "card"),
    ("exchange rate today", "fx"),
    ("which rate of exchange", "fx"),
    ("hello there", "other"),
    ("new york city", "other"),
]


# The tests set a threshold at one doc's confidence and route the same docs in
# other batches: fp32, whose rows barely depend on their batch, where "auto" may
# be int8 (one activation scale per batch, docs/precision.md).
ENCODER = {**SMALL_ENCODER, "predict_precision": "fp32"}


def make_nlp(tiny_bert: Path, model: str = "TextCatModel", **settings: Any) -> Language:
    nlp = spacy.blank("en")
    config: dict = {"model": {"encoder": ENCODER}, **settings}
    if model == "PrototypeCatModel":
        config["model"] = {
            "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
            "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **ENCODER},
        }
    else:
        config["model"]["pooling"] = "mean"
    nlp.add_pipe("bert_textcat", config=config)
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    return nlp


def trained(tiny_bert: Path, model: str = "TextCatModel", **settings: Any) -> Language:
    nlp = make_nlp(tiny_bert, model, **settings)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(20):
        nlp.update(examples, sgd=optimizer)
    return nlp


def dev_examples(nlp: Language) -> List[Example]:
    """Held-out in-scope texts and three texts without a label."""
    examples = textcat_examples(nlp, DEV_TEXTS)
    for text in OUT_OF_SCOPE:
        examples.append(
            Example.from_dict(nlp.make_doc(text), {"cats": {label: 0.0 for label in LABELS}})
        )
    return examples


def write_corpus(path: Path, examples: List[Example]) -> Path:
    DocBin(docs=[eg.reference for eg in examples], store_user_data=False).to_disk(path)
    return path


def test_every_doc_gets_a_route(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert)
    doc = nlp("my card is lost")
    route = doc._.route
    assert set(route) == {"label", "top", "confidence", "decision"}
    assert route["top"] == max(doc.cats, key=doc.cats.__getitem__)
    # not calibrated: the confidence is the top probability, and threshold 0 routes all
    assert route["confidence"] == pytest.approx(max(doc.cats.values()), abs=1e-6)
    assert route["decision"] == "routed" and route["label"] == route["top"]


def test_a_threshold_above_every_confidence_routes_nothing(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, oos_threshold=1.0)
    for doc in nlp.pipe(["my card is lost", "hello"]):
        assert doc._.route["decision"] == "out_of_scope"
        assert doc._.route["label"] is None
        assert doc._.route["top"] in LABELS
        assert sum(doc.cats.values()) == pytest.approx(1.0, abs=1e-5)  # cats stay


def test_ambiguity_margin_marks_close_calls(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, ambiguity_margin=1.0)
    assert nlp("my card is lost")._.route["decision"] == "ambiguous"


def test_the_oos_label_is_out_of_scope(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, oos_label="other")
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(30):
        nlp.update(examples, sgd=optimizer)
    doc = nlp("hello world")
    assert doc._.route["top"] == "other"
    assert doc._.route["decision"] == "out_of_scope"
    scores = nlp.evaluate(examples)
    # the two "other" docs are the out-of-scope class
    assert scores["cats_oos_r"] == 1.0
    assert scores["cats_accuracy"] == 1.0


@pytest.mark.parametrize(
    "setting,value,message",
    [
        ("oos_method", "energy", "oos_method"),
        ("oos_threshold", 1.5, "oos_threshold"),
        ("ambiguity_margin", -0.1, "ambiguity_margin"),
        ("oos_label", " ", "oos_label"),
    ],
)
def test_bad_settings_are_named(tiny_bert: Path, setting: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_nlp(tiny_bert, **{setting: value})


@pytest.mark.parametrize(
    "model,method",
    [
        ("TextCatModel", "max_prob"),
        ("TextCatModel", "mahalanobis"),
        ("PrototypeCatModel", "knn"),
    ],
)
def test_calibrate_save_load_and_score(
    tiny_bert: Path, tmp_path: Path, model: str, method: str
) -> None:
    nlp = trained(tiny_bert, model, oos_method=method)
    train = write_corpus(tmp_path / "train.spacy", textcat_examples(nlp))
    dev = write_corpus(tmp_path / "dev.spacy", dev_examples(nlp))
    report = calibrate_pipeline(nlp, train, dev, coverage=0.5)
    textcat = nlp.get_pipe("bert_textcat")
    assert report["method"] == method and report["temperature"] > 0
    assert textcat.model.attrs[TEMPERATURE_ATTR] == report["temperature"]
    assert textcat.model.attrs[SCOPE_ATTR]["method"] == method
    assert report["dev_in_scope_docs"] == len(DEV_TEXTS)
    threshold = report["oos_threshold"]
    assert textcat.cfg["oos_threshold"] == threshold
    # at least half the in-scope dev docs are routed, those at or above the threshold
    routes = [doc._.route for doc in nlp.pipe(text for text, _ in DEV_TEXTS)]
    routed = [r["decision"] == "routed" for r in routes]
    assert routed == [r["confidence"] >= threshold for r in routes]
    assert sum(routed) >= len(DEV_TEXTS) // 2
    nlp.to_disk(tmp_path / "calibrated")
    loaded = spacy.load(tmp_path / "calibrated")
    assert loaded.config["components"]["bert_textcat"]["oos_threshold"] == threshold
    assert [doc._.route for doc in loaded.pipe(text for text, _ in DEV_TEXTS)] == routes
    assert loaded.get_pipe("bert_textcat").model.attrs[SCOPE_ATTR]["method"] == method
    scores = loaded.evaluate(dev_examples(loaded))
    for key in ("cats_oos_auroc", "cats_oos_fpr95", "cats_oos_f", "cats_ece", "cats_coverage"):
        assert scores[key] is not None, key
    assert scores["cats_coverage"] == pytest.approx(sum(routed) / len(DEV_TEXTS))
    # a load-time override of the threshold wins over the saved one
    everything = spacy.load(
        tmp_path / "calibrated", config={"components": {"bert_textcat": {"oos_threshold": 0.0}}}
    )
    assert all(d._.route["decision"] == "routed" for d in everything.pipe(["a", "b"]))


def test_calibrate_errors_name_what_is_missing(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = trained(tiny_bert, oos_method="mahalanobis")
    only_oos = dev_examples(nlp)[len(DEV_TEXTS) :]
    dev = write_corpus(tmp_path / "dev.spacy", only_oos)
    with pytest.raises(ValueError, match="in-scope dev docs"):
        calibrate_pipeline(nlp, None, dev)
    good_dev = write_corpus(tmp_path / "good.spacy", dev_examples(nlp))
    with pytest.raises(ValueError, match="needs in-scope training docs"):
        calibrate_pipeline(nlp, None, good_dev)
    with pytest.raises(ValueError, match="coverage"):
        calibrate_pipeline(nlp, None, good_dev, coverage=1.5)
    with pytest.raises(ValueError, match="No component 'nope'"):
        calibrate_pipeline(nlp, None, good_dev, component="nope")


def test_multilabel_classes_have_no_routes(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert)
    nlp.remove_pipe("bert_textcat")
    nlp.add_pipe(
        "bert_textcat",
        name="multi",
        config={
            "score_prefix": "multi",
            "model": {"encoder": SMALL_ENCODER, "exclusive_classes": False},
        },
    )
    nlp.config["initialize"]["components"]["multi"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    doc = nlp("my card")
    assert not doc.has_extension("multi_route")
    with pytest.raises(ValueError, match="exclusive"):
        nlp.get_pipe("multi").calibrate([], [])


def test_spacy_find_threshold_finds_the_routing_threshold(tiny_bert: Path, tmp_path: Path) -> None:
    from spacy.cli.find_threshold import find_threshold

    nlp = trained(tiny_bert, oos_method="max_prob")
    dev = write_corpus(tmp_path / "dev.spacy", dev_examples(nlp))
    nlp.to_disk(tmp_path / "model")
    best, score, scores = find_threshold(
        tmp_path / "model", dev, "bert_textcat", "oos_threshold", "cats_oos_f", n_trials=5
    )
    assert set(scores) == {0.0, 0.25, 0.5, 0.75, 1.0}
    assert score == max(scores.values())
    # what find-threshold measured at its best threshold is what the pipeline does with it
    loaded = spacy.load(
        tmp_path / "model", config={"components": {"bert_textcat": {"oos_threshold": best}}}
    )
    assert loaded.evaluate(dev_examples(loaded))["cats_oos_f"] == pytest.approx(score)
    assert numpy.isfinite(score)
    # one prediction pass gives find-threshold's table and its best threshold
    ours = sweep_thresholds(spacy.load(tmp_path / "model"), dev, "bert_textcat", "cats_oos_f", 5)
    assert ours.rule == "max cats_oos_f"
    assert ours.best.threshold == best and ours.best.score == pytest.approx(score)
    assert {t.threshold: t.score for t in ours.trials} == pytest.approx(scores)
    # spaCy's evaluate at each threshold gives the same routing figures
    for trial in ours.trials[1:4]:
        at = spacy.load(
            tmp_path / "model",
            config={"components": {"bert_textcat": {"oos_threshold": trial.threshold}}},
        ).evaluate(dev_examples(loaded))
        assert trial.coverage == pytest.approx(at["cats_coverage"])
        assert trial.routed_accuracy == pytest.approx(at["cats_routed_accuracy"])
        assert trial.oos_recall == pytest.approx(at["cats_oos_r"])
        assert trial.abstained == round(len(DEV_TEXTS) * (1 - at["cats_coverage"]))
        assert trial.foreign_routed == round(len(OUT_OF_SCOPE) * (1 - at["cats_oos_r"]))


def test_a_listener_calibrates_on_the_shared_encoder(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    listener = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": listener}, "oos_method": "knn"})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    train = write_corpus(tmp_path / "train.spacy", textcat_examples(nlp))
    dev = write_corpus(tmp_path / "dev.spacy", dev_examples(nlp))
    report = calibrate_pipeline(nlp, train, dev, coverage=0.5)
    assert report["method"] == "knn" and report["dev_in_scope_docs"] == len(DEV_TEXTS)
    routes = [doc._.route for doc in nlp.pipe(text for text, _ in DEV_TEXTS)]
    assert [r["decision"] == "routed" for r in routes] == [
        r["confidence"] >= report["oos_threshold"] for r in routes
    ]


@pytest.mark.parametrize("method", ["knn", "mahalanobis", "max_prob"])
def test_a_new_labels_examples_join_the_out_of_scope_fit(
    tiny_bert: Path, tmp_path: Path, method: str
) -> None:
    nlp = trained(tiny_bert, "PrototypeCatModel", oos_method=method)
    train = write_corpus(tmp_path / "train.spacy", textcat_examples(nlp))
    calibrate_pipeline(nlp, train, write_corpus(tmp_path / "dev.spacy", dev_examples(nlp)))
    textcat = nlp.get_pipe("bert_textcat")
    before = dict(textcat.model.attrs[SCOPE_ATTR])
    new = [nlp.make_doc(text) for text in OUT_OF_SCOPE[:2]]
    conf_before = textcat.router.confidences(new)
    textcat.add_described_label("elsewhere", [], new)
    after = textcat.model.attrs[SCOPE_ATTR]
    numpy.testing.assert_array_equal(after["reference"], before["reference"])
    if method == "max_prob":
        assert after == before
        return
    if method == "knn":  # the examples are their own nearest training docs
        assert len(after["vectors"]) == len(before["vectors"]) + 2
        assert (textcat.router.confidences(new) == 1.0).all()
    else:  # one more class mean, the examples' mean
        assert len(after["means"]) == len(before["means"]) + 1
        X, _ = textcat.router.forward(new)
        numpy.testing.assert_allclose(after["means"][-1], X.mean(axis=0), atol=1e-5)
    assert (textcat.router.confidences(new) >= conf_before).all()
    # saved and loaded with the pipeline
    nlp.to_disk(tmp_path / "extended")
    loaded = spacy.load(tmp_path / "extended").get_pipe("bert_textcat")
    numpy.testing.assert_allclose(
        loaded.router.confidences(new), textcat.router.confidences(new), atol=1e-6
    )


def test_a_new_label_takes_no_doc_the_fit_remembers(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = trained(tiny_bert, "PrototypeCatModel", oos_method="knn")
    examples = textcat_examples(nlp)
    train = write_corpus(tmp_path / "train.spacy", examples)
    calibrate_pipeline(nlp, train, write_corpus(tmp_path / "dev.spacy", dev_examples(nlp)))
    textcat = nlp.get_pipe("bert_textcat")
    docs = [eg.predicted for eg in examples]
    before = [max(doc.cats, key=doc.cats.get) for doc in nlp.pipe(doc.text for doc in docs)]
    # examples worded as the training docs of one label: the new label's
    # prototype sits on that label's docs
    label = before[0]
    copies = [nlp.make_doc(doc.text) for doc, top in zip(docs, before) if top == label]
    textcat.add_described_label("lookalike", [], copies)
    bias = textcat.model.get_ref("output").get_param("b")[-1]
    assert bias < 0
    after = [max(doc.cats, key=doc.cats.get) for doc in nlp.pipe(doc.text for doc in docs)]
    assert after == before
    # without a fit to guard with (not calibrated), the bias is zero
    # which then takes docs of the label it looks like
    plain = trained(tiny_bert, "PrototypeCatModel")
    plain.get_pipe("bert_textcat").add_described_label("lookalike", [], copies)
    assert plain.get_pipe("bert_textcat").model.get_ref("output").get_param("b")[-1] == 0.0
    taken = [max(doc.cats, key=doc.cats.get) for doc in plain.pipe(doc.text for doc in docs)]
    assert "lookalike" in taken


def test_nearest_examples_route_by_the_docs_the_fit_remembers(
    tiny_bert: Path, tmp_path: Path
) -> None:
    nlp = trained(tiny_bert, "PrototypeCatModel", oos_method="knn")
    examples = textcat_examples(nlp)
    textcat = nlp.get_pipe("bert_textcat")
    # not calibrated: no remembered docs to route by
    with pytest.raises(ValueError, match="calibrate"):
        textcat.route_by_nearest_examples(1.0)
    train = write_corpus(tmp_path / "train.spacy", examples)
    calibrate_pipeline(nlp, train, write_corpus(tmp_path / "dev.spacy", dev_examples(nlp)))
    gold = [
        textcat.labels.index(max(eg.reference.cats, key=eg.reference.cats.get)) for eg in examples
    ]
    assert textcat.router.remembered_labels().tolist() == gold
    assert textcat.route_by_nearest_examples(1.0) == len(examples)
    nlp.get_pipe_config("bert_textcat")["model"]["example_weight"] = 1.0  # as add_labels does
    output = textcat.model.get_ref("output")
    assert output.attrs["example_weight"] == 1.0
    numpy.testing.assert_allclose(output.get_param("E"), textcat.router.remembered(), atol=1e-6)
    docs = [eg.predicted for eg in examples]
    before = [max(doc.cats, key=doc.cats.get) for doc in nlp.pipe(doc.text for doc in docs)]
    # a label made of copies of one label's docs: the guard, computed as the
    # term predicts (each remembered doc without itself), keeps their labels
    label = before[0]
    copies = [nlp.make_doc(doc.text) for doc, top in zip(docs, before) if top == label]
    textcat.add_described_label("lookalike", [], copies)
    assert output is not textcat.model.get_ref("output")  # grown by one label
    grown = textcat.model.get_ref("output")
    assert grown.attrs["example_weight"] == 1.0
    assert len(grown.get_param("E")) == len(examples) + len(copies)
    assert grown.get_param("E_label")[-1] == textcat.labels.index("lookalike")
    assert textcat.router.remembered_labels()[-1] == textcat.labels.index("lookalike")
    assert grown.get_param("b")[-1] < 0
    after = [max(doc.cats, key=doc.cats.get) for doc in nlp.pipe(doc.text for doc in docs)]
    assert after == before
    # saved and loaded with the pipeline, the term and the examples included
    nlp.to_disk(tmp_path / "extended")
    loaded = spacy.load(tmp_path / "extended")
    assert loaded.get_pipe("bert_textcat").model.get_ref("output").attrs["example_weight"] == 1.0
    texts = [doc.text for doc in docs] + OUT_OF_SCOPE
    for mine, theirs in zip(nlp.pipe(texts), loaded.pipe(texts)):
        assert mine.cats == pytest.approx(theirs.cats, abs=1e-5)
        assert mine._.route == theirs._.route


def test_labels_added_in_a_row_guard_as_if_each_came_alone(tiny_bert: Path, tmp_path: Path) -> None:
    from spacy_bert_pipes.pipeline.new_labels import add_labels

    nlp = trained(tiny_bert, "PrototypeCatModel", oos_method="knn")
    examples = textcat_examples(nlp)
    train = write_corpus(tmp_path / "train.spacy", examples)
    calibrate_pipeline(nlp, train, write_corpus(tmp_path / "dev.spacy", dev_examples(nlp)))
    nlp.get_pipe("bert_textcat").route_by_nearest_examples(1.0)
    nlp.get_pipe_config("bert_textcat")["model"]["example_weight"] = 1.0
    nlp.to_disk(tmp_path / "router")
    texts = [eg.reference.text for eg in examples]
    new = {
        "lookalike": texts[:3],  # worded as training docs: a bias below 0
        "elsewhere": OUT_OF_SCOPE[:2],
        # worded as lookalike's: its guard meets the docs lookalike took
        "twin": [f"{text} please" for text in texts[:3]],
        "mixed": [texts[3], OUT_OF_SCOPE[2]],
    }
    # all at once, the guard's logits carried from label to label
    together = spacy.load(tmp_path / "router")
    add_labels(together, {}, new, allowance=0.1)
    # one by one, each guard computed from scratch
    apart = spacy.load(tmp_path / "router")
    pipe = apart.get_pipe("bert_textcat")
    for label, label_texts in new.items():
        docs = [apart.make_doc(t) for t in label_texts]
        pipe.add_described_label(label, [], docs, Guarding(allowance=0.1))
    b_together = together.get_pipe("bert_textcat").model.get_ref("output").get_param("b")
    b_apart = pipe.model.get_ref("output").get_param("b")
    assert b_apart[-4] < 0
    numpy.testing.assert_allclose(b_together, b_apart, atol=1e-4)


def test_scope_correction_gives_a_new_labels_examples_their_reach(
    tiny_bert: Path, tmp_path: Path
) -> None:
    nlp = trained(tiny_bert, "PrototypeCatModel", oos_method="knn")
    # the fit remembers 4 docs a label: enough to measure the reach of 2 examples
    docs = textcat_examples(nlp, TRAIN_TEXTS + DEV_TEXTS)
    train = write_corpus(tmp_path / "train.spacy", docs)
    calibrate_pipeline(nlp, train, write_corpus(tmp_path / "dev.spacy", dev_examples(nlp)))
    nlp.to_disk(tmp_path / "router")
    near = ["the weather in paris", "play some rock music"]  # near the examples below
    plain = spacy.load(tmp_path / "router").get_pipe("bert_textcat")
    plain.add_described_label("elsewhere", [], [nlp.make_doc(t) for t in OUT_OF_SCOPE[:2]])
    corrected = spacy.load(tmp_path / "router").get_pipe("bert_textcat")
    reach = corrected.router.example_reach(2)
    corrected.add_described_label(
        "elsewhere",
        [],
        [nlp.make_doc(t) for t in OUT_OF_SCOPE[:2]],
        Guarding(scope_correction=True),
    )
    fit = corrected.router.fit
    assert fit is not None and fit.reach is not None and reach > 1.0
    assert fit.reach[-2:].tolist() == [pytest.approx(reach)] * 2
    assert (fit.reach[:-2] == 1.0).all()
    queries = [nlp.make_doc(t) for t in near]

    def distances(pipe: Any) -> numpy.ndarray:
        fit = pipe.router.fit
        return knn_scores(pipe.router.forward(queries)[0], fit.vectors, fit.k, fit.reach)

    # nearest the new examples, the queries are nearer by the reach: more in scope
    before, after = distances(plain), distances(corrected)
    assert (after <= before).all() and (after < before).any()
    assert (corrected.router.confidences(queries) >= plain.router.confidences(queries)).all()
    # a router without a knn fit has no reach to measure
    other = trained(tiny_bert, "PrototypeCatModel", oos_method="mahalanobis")
    calibrate_pipeline(other, train, tmp_path / "dev.spacy")
    with pytest.raises(ValueError, match="knn"):
        other.get_pipe("bert_textcat").add_described_label(
            "elsewhere", [], [other.make_doc(OUT_OF_SCOPE[0])], Guarding(scope_correction=True)
        )
    assert "elsewhere" not in other.get_pipe("bert_textcat").labels  # nothing half-added
