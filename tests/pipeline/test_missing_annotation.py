"""What a head does with a doc that carries no annotation for it.

In multi-task training over several corpora most docs are annotated for one
head only. Every head reads such a doc as "missing", never as negative: no loss,
no gradient, and it is left out of the head's scores.
"""

from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
from helpers import (
    LABELS,
    NER_TEXTS,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    loader_config,
    ner_examples,
    textcat_examples,
)
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.corpus_attrs import SOURCE_ATTR

pytestmark = pytest.mark.usefixtures("one_thread")

NLU_LABELS = ["greet", "pin"]


def two_classifiers(tiny_bert: Path) -> Language:
    """An exclusive classifier (LABELS) and a multi-label one (NLU_LABELS) whose
    examples come from different corpora."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.add_pipe(
        "bert_textcat",
        name="nlu",
        config={
            "model": {"encoder": SMALL_ENCODER, "exclusive_classes": False},
            "score_prefix": "nlu",
        },
    )
    for name in nlp.pipe_names:
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    nlp.config["initialize"]["components"]["bert_textcat"]["labels"] = LABELS
    nlp.config["initialize"]["components"]["nlu"]["labels"] = NLU_LABELS
    return nlp


def nlu_examples(nlp: Language) -> List[Example]:
    data = [("hello world", {"greet": 1.0, "pin": 0.0}), ("what is my pin", {"pin": 1.0})]
    return [Example.from_dict(nlp.make_doc(text), {"cats": cats}) for text, cats in data]


def test_textcat_learns_nothing_from_another_heads_docs(tiny_bert: Path) -> None:
    nlp = two_classifiers(tiny_bert)
    examples = textcat_examples(nlp) + nlu_examples(nlp)
    nlp.initialize(lambda: examples)
    intents, nlu = nlp.get_pipe("bert_textcat"), nlp.get_pipe("nlu")
    n_own = len(TRAIN_TEXTS)
    probs = numpy.full((len(examples), len(LABELS)), 1 / 3, dtype="f")
    _, d_intents = intents.get_loss(examples, probs)
    assert numpy.abs(d_intents[:n_own]).sum() > 0
    assert not numpy.asarray(d_intents[n_own:]).any()  # NLU++ docs: no gradient
    probs = numpy.full((len(examples), len(NLU_LABELS)), 0.5, dtype="f")
    loss, d_nlu = nlu.get_loss(examples, probs)
    d_nlu = numpy.asarray(d_nlu)
    assert not d_nlu[:n_own].any()  # Banking77-like docs: no gradient
    # the second NLU doc annotates "pin" only: "greet" is unknown there, not negative
    assert d_nlu[n_own + 1, NLU_LABELS.index("greet")] == 0.0
    assert d_nlu[n_own + 1, NLU_LABELS.index("pin")] != 0.0
    losses = nlp.update(examples, sgd=None)
    assert losses["bert_textcat"] > 0 and losses["nlu"] > 0


def test_a_textcats_gradient_scales_with_its_share_of_a_mixed_batch(tiny_bert: Path) -> None:
    """Other heads' docs count in the mean: the head pulls on a shared encoder in
    proportion to its share of the batch, as its sampling weight says."""
    nlp = two_classifiers(tiny_bert)
    own, other = textcat_examples(nlp), nlu_examples(nlp)
    nlp.initialize(lambda: own + other)
    for name, docs in (("bert_textcat", own), ("nlu", other)):
        pipe = nlp.get_pipe(name)
        mixed = other + own if name == "bert_textcat" else own + other
        rng = numpy.random.default_rng(0)
        probs = rng.dirichlet(numpy.ones(len(pipe.labels)), size=len(mixed)).astype("f")
        at = [mixed.index(eg) for eg in docs]
        share = len(docs) / len(mixed)
        alone_loss, alone_d = pipe.get_loss(docs, probs[at])
        mixed_loss, mixed_d = pipe.get_loss(mixed, probs)
        assert mixed_loss == pytest.approx(alone_loss * share)
        numpy.testing.assert_allclose(numpy.asarray(mixed_d)[at], alone_d * share, rtol=1e-5)


def test_a_textcat_has_no_scores_on_docs_it_does_not_annotate(tiny_bert: Path) -> None:
    nlp = two_classifiers(tiny_bert)
    examples = textcat_examples(nlp) + nlu_examples(nlp)
    nlp.initialize(lambda: examples)
    scores = nlp.evaluate(nlu_examples(nlp))
    assert scores["nlu_micro_f"] is not None
    assert scores["cats_micro_f"] is None and scores["cats_accuracy"] is None
    assert scores["cats_score_desc"]  # the descriptions stay


def test_an_exclusive_textcat_never_takes_a_missing_label_as_negative(tiny_bert: Path) -> None:
    nlp = two_classifiers(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    intents = nlp.get_pipe("bert_textcat")
    partial = [Example.from_dict(nlp.make_doc("my card"), {"cats": {"card": 1.0}})]
    probs = numpy.full((1, len(LABELS)), 1 / 3, dtype="f")
    loss, d = intents.get_loss(partial, probs)
    assert loss == 0.0 and not numpy.asarray(d).any()


def test_unknown_labels_in_a_doc_a_head_annotates_are_an_error(tiny_bert: Path) -> None:
    nlp = two_classifiers(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    typo = [Example.from_dict(nlp.make_doc("my card"), {"cats": {"card": 1.0, "crad": 0.0}})]
    with pytest.raises(ValueError, match="unknown label 'crad'"):
        nlp.get_pipe("bert_textcat").get_loss(typo, numpy.zeros((1, 3), dtype="f"))


def test_labels_from_several_corpora_must_be_given(tiny_bert: Path) -> None:
    nlp = two_classifiers(tiny_bert)
    del nlp.config["initialize"]["components"]["bert_textcat"]["labels"]
    examples = textcat_examples(nlp) + nlu_examples(nlp)
    for eg in examples:
        source = "nlu" if "greet" in eg.reference.cats or "pin" in eg.reference.cats else "b77"
        eg.reference._.set(SOURCE_ATTR, source)
    with pytest.raises(ValueError, match=r"several corpora \(b77, nlu\).*labels"):
        nlp.initialize(lambda: examples)


def test_each_classifier_is_scored_on_its_own_docs_under_its_own_names(
    tiny_bert: Path,
) -> None:
    nlp = two_classifiers(tiny_bert)
    examples = textcat_examples(nlp) + nlu_examples(nlp)
    nlp.initialize(lambda: examples)
    scores = nlp.evaluate(examples)
    assert "cats_accuracy" in scores and "nlu_micro_f" in scores
    assert "nlu_accuracy" not in scores  # multi-label: no accuracy
    # the exclusive head is scored on its 6 docs only: accuracy in steps of 1/6
    assert round(scores["cats_accuracy"] * len(TRAIN_TEXTS), 6) % 1 == 0
    alone = nlp.get_pipe("nlu").score(
        [Example(nlp(eg.predicted.text), eg.reference) for eg in nlu_examples(nlp)]
    )
    assert alone["nlu_micro_f"] == pytest.approx(scores["nlu_micro_f"])


def test_ner_learns_nothing_from_a_doc_without_entity_annotation(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_ner", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    examples = ner_examples(nlp)
    nlp.initialize(lambda: examples)
    ner = nlp.get_pipe("bert_ner")
    unannotated = Example(
        nlp.make_doc("john smith is in paris"), nlp.make_doc("john smith is in paris")
    )
    assert not unannotated.reference.has_annotation("ENT_IOB")
    none_at_all = Example.from_dict(nlp.make_doc("what is my pin"), {"entities": []})
    scores = ner.predict([unannotated.predicted, none_at_all.predicted])
    loss, d = ner.get_loss([unannotated, none_at_all], scores)
    assert not numpy.asarray(d[0]).any()  # missing: no gradient
    assert numpy.asarray(d[1]).any()  # annotated as "no entities": O is learned
    # and it is left out of the scores: only annotated docs count
    scored = ner.score([Example(nlp(NER_TEXTS[0][0]), unannotated.reference)])
    assert scored["ents_f"] is None


def test_qa_learns_nothing_from_a_doc_without_gold_answers(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    model = {"encoder": SMALL_ENCODER, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}
    nlp.add_pipe("bert_qa", config={"model": model, "questions": {"what": "what is it"}})
    nlp.config["initialize"]["components"]["bert_qa"] = loader_config(tiny_bert)
    nlp.initialize(lambda: [Example(nlp.make_doc("my card"), nlp.make_doc("my card"))])
    qa = nlp.get_pipe("bert_qa")
    unannotated = Example(nlp.make_doc("my card is new"), nlp.make_doc("my card is new"))
    assert unannotated.reference._.gold_answers is None
    losses = qa.update([unannotated], sgd=None)
    assert losses == {"bert_qa": 0.0}
    scores = qa.score([Example(nlp("my card is new"), unannotated.reference)])
    assert scores["qa_n"] == 0 and scores["qa_f1"] is None
