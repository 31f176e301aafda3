"""bert_ner's `join_sentences`: training on examples joined as raw text arrives."""

from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import spacy
from helpers import NER_TEXTS, SMALL_ENCODER, loader_config, ner_examples
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

from spacy_bert_pipes.pipeline import ner_pipe as ner_module
from spacy_bert_pipes.pipeline.joined import joined_examples

pytestmark = pytest.mark.usefixtures("one_thread")

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}


def initialized(tiny_bert: Path, encoder: Any = None, data: Any = None, **config: Any) -> Language:
    nlp = spacy.blank("en")
    model = {"encoder": {**SMALL_ENCODER, **(encoder or {})}}
    nlp.add_pipe("bert_ner", config={"model": model, **config})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    nlp.initialize(lambda: ner_examples(nlp, data or NER_TEXTS))
    return nlp


def sizes(*drawn: int) -> Any:
    """A `randint` that draws the given run sizes, in turn."""
    it: Iterator[int] = iter(drawn)
    return lambda low, high: next(it)


def entities(doc: Doc) -> List[tuple]:
    return [(e.start_char, e.end_char, e.label_) for e in doc.ents]


def test_runs_are_raw_text_with_exactly_the_gold_entities(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    examples = ner_examples(nlp)  # 6 examples
    joined = joined_examples(examples, 4, sizes(3, 1, 4))
    assert [len(eg.predicted) for eg in joined] == [
        sum(len(eg.predicted) for eg in examples[:3]),
        len(examples[3].predicted),
        sum(len(eg.predicted) for eg in examples[4:]),
    ]
    runs = [examples[:3], examples[3:4], examples[4:]]
    for eg, run in zip(joined, runs):
        assert eg.predicted.text == " ".join(part.predicted.text for part in run)
        assert eg.reference.text == eg.predicted.text
        if len(run) > 1:
            assert not eg.predicted.has_annotation("SENT_START")
        expected, offset = [], 0
        for part in run:
            expected += [(s + offset, e + offset, lb) for s, e, lb in entities(part.reference)]
            offset += len(part.predicted.text) + 1
        assert entities(eg.reference) == expected
        ner = eg.get_aligned_ner()
        assert ner == [tag for part in run for tag in part.get_aligned_ner()]


def test_unknown_gold_stays_unknown_and_sentences_stay_alone() -> None:
    nlp = spacy.blank("en")
    unknown = Example.from_dict(nlp.make_doc("john is here"), {"entities": ["U-PER", "-", "O"]})
    with_sents = Example(
        Doc(nlp.vocab, words=["hi", "paris"], spaces=[True, False], sent_starts=[True, False]),
        Doc(nlp.vocab, words=["hi", "paris"], spaces=[True, False], ents=["O", "B-LOC"]),
    )
    plain = ner_examples(nlp)[:2]
    joined = joined_examples([unknown, plain[0], with_sents, plain[1]], 8, sizes(8, 8))
    assert [eg.predicted.text for eg in joined] == [
        "john is here john smith is in paris",
        "hi paris",
        "apple is a company in london",
    ]
    assert joined[0].get_aligned_ner()[:3] == ["U-PER", None, "O"]
    assert joined[1] is with_sents


def test_factory_default_joins_for_sentence_level_training_docs(tiny_bert: Path) -> None:
    nlp = initialized(tiny_bert)
    assert nlp.config["components"]["bert_ner"]["join_sentences"] == 32
    ner = nlp.get_pipe("bert_ner")
    assert ner.cfg["join_sentences"] == 32
    assert ner.joins_sentences


@pytest.mark.parametrize(
    "encoder,config,data",
    [
        ({"context": "sentence"}, {}, None),
        ({"context": "doc"}, {}, None),
        ({}, {"join_sentences": 1}, None),
        ({}, {}, [(f"{text} . what is my pin . hello", ents) for text, ents in NER_TEXTS]),
    ],
    ids=["context-sentence", "context-doc", "join-1", "document-training-docs"],
)
def test_examples_stay_apart_unless_sentences_are_read_by_rule(
    tiny_bert: Path, encoder: Dict, config: Dict, data: Any
) -> None:
    assert not initialized(tiny_bert, encoder, data, **config).get_pipe("bert_ner").joins_sentences


def test_a_shared_encoder_trains_on_the_batch_as_given(tiny_bert: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": {**SMALL_ENCODER, "context": "auto"}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": LISTENER}})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: ner_examples(nlp))
    assert not nlp.get_pipe("bert_ner").joins_sentences


@pytest.mark.parametrize("join_sentences,joined", [(32, True), (0, False)])
def test_update_trains_on_the_joined_docs(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch, join_sentences: int, joined: bool
) -> None:
    nlp = initialized(tiny_bert, join_sentences=join_sentences)
    seen: List[List[Doc]] = []
    train_step = ner_module.train_step

    def recording(pipe: Any, inputs: List[Doc], *args: Any, **kwargs: Any) -> Any:
        seen.append(inputs)
        return train_step(pipe, inputs, *args, **kwargs)

    monkeypatch.setattr(ner_module, "train_step", recording)
    monkeypatch.setattr(ner_module.random, "randint", lambda low, high: high)
    examples = ner_examples(nlp)
    losses = nlp.update(examples, sgd=nlp.resume_training())
    assert losses["bert_ner"] > 0
    texts = [doc.text for doc in seen[0]]
    if joined:
        assert texts == [" ".join(eg.predicted.text for eg in examples)]
    else:
        assert texts == [eg.predicted.text for eg in examples]


def test_a_negative_join_is_refused(tiny_bert: Path) -> None:
    with pytest.raises(ValueError, match="join_sentences"):
        initialized(tiny_bert, join_sentences=-1)
