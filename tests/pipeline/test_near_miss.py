"""Near misses made from the training data (pipeline/near_miss.py) and
bert_textcat's near_miss_weight, on a tiny random BERT."""

from pathlib import Path

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, TRAIN_TEXTS, loader_config, textcat_examples
from spacy.language import Language

from spacy_bert_pipes.pipeline.near_miss import label_keywords, without_keywords

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = [
    ("my card has not arrived yet", 0),
    ("when will my new card arrive", 0),
    ("the card I ordered has not arrived", 0),
    ("is there any fee for this transfer", 1),
    ("why was I charged a fee for my transfer", 1),
    ("what fee do you charge per transfer", 1),
    ("hello there", -1),
]


def test_keywords_are_the_words_that_set_a_label_apart() -> None:
    nlp = spacy.blank("en")
    docs = [nlp.make_doc(text) for text, _ in CORPUS]
    ids = [label for _, label in CORPUS]
    card, fee = label_keywords(docs, ids, 2, top=2, min_docs=2)
    # "card" is in every card doc; "arrived", "has" and "not" in two of them and
    # in no fee doc, a tie broken alphabetically
    assert card == {"card", "arrived"}
    assert fee == {"fee", "transfer"}  # in every fee doc and no card doc
    # a word in fewer than min_docs of the label's docs is no keyword
    assert label_keywords(docs, ids, 2, top=5, min_docs=3) == [{"card"}, {"fee", "transfer"}]
    assert label_keywords([], [], 2) == [frozenset(), frozenset()]


def test_a_doc_without_its_keywords() -> None:
    nlp = spacy.blank("en")
    doc = nlp.make_doc("My Card has not arrived , yet")
    near = without_keywords(doc, frozenset({"card", "arrived"}))
    assert near is not None and near.text == "My has not , yet"
    assert without_keywords(doc, frozenset({"fee"})) is None  # no keyword: no near miss
    assert without_keywords(nlp.make_doc("card !"), frozenset({"card"})) is None  # no word left


def make_nlp(tiny_bert: Path, **settings: object) -> Language:
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "exclusive_classes": True,
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    nlp.add_pipe("bert_textcat", config={"model": model, **settings})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    return nlp


def test_near_misses_are_trained_towards_no_label(tiny_bert: Path) -> None:
    """The same training with and without near_miss_weight: with it, the
    training docs without their keywords end with a flatter distribution over
    the labels, and the training docs themselves are still classified."""
    data = TRAIN_TEXTS * 2
    top_prob = {}
    for weight in (0.0, 2.0):
        nlp = make_nlp(tiny_bert, near_miss_weight=weight)
        examples = textcat_examples(nlp, data)
        optimizer = nlp.initialize(lambda examples=examples: examples)
        optimizer.learn_rate = 2e-3
        textcat = nlp.get_pipe("bert_textcat")
        keywords = label_keywords(
            [eg.reference for eg in examples],
            [LABELS.index(gold) for _, gold in data],
            len(LABELS),
        )
        if weight:
            assert textcat._keywords == keywords
        losses = [nlp.update(examples, sgd=optimizer, losses={})["bert_textcat"] for _ in range(40)]
        assert losses[-1] < losses[0]
        for text, gold in TRAIN_TEXTS:
            cats = nlp(text).cats
            assert max(cats, key=cats.__getitem__) == gold
        near = [
            without_keywords(eg.reference, keywords[LABELS.index(gold)])
            for eg, (_, gold) in zip(examples, data)
        ]
        texts = sorted({doc.text for doc in near if doc is not None})
        assert texts  # the corpus has near misses
        top_prob[weight] = float(numpy.mean([max(nlp(text).cats.values()) for text in texts]))
    assert top_prob[2.0] < top_prob[0.0] - 0.05, top_prob


def test_training_without_initialize_keywords_is_an_error(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert, near_miss_weight=1.0)
    examples = textcat_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    nlp.get_pipe("bert_textcat")._keywords = None  # as after spacy.load
    with pytest.raises(ValueError, match="near_miss_weight needs the labels' keywords"):
        nlp.update(examples, sgd=optimizer)


@pytest.mark.parametrize(
    "settings,exclusive,message",
    [
        ({"near_miss_weight": -0.5}, True, "near_miss_weight must be >= 0"),
        ({"near_miss_weight": 1.0}, False, "exclusive_classes = true"),
    ],
)
def test_near_miss_settings_are_checked(
    tiny_bert: Path, settings: dict, exclusive: bool, message: str
) -> None:
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "exclusive_classes": exclusive,
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    with pytest.raises(Exception, match=message):
        nlp.add_pipe("bert_textcat", config={"model": model, **settings})
