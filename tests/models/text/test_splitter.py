"""The sentence splitter learned from consecutive training docs (`models/text/splitter.py`)."""

from typing import List

import numpy
import spacy
import srsly
from spacy.tokens import Doc

from spacy_bert_pipes.models.text.splitter import Splitter, learn_splitter

nlp = spacy.blank("en")

# Units as CoNLL-2003 has them: datelines, bylines and table rows without final
# punctuation, between ordinary sentences.
UNITS = [
    "LONDON 1996-12-06",
    "Japan beat Syria 2-1 on Friday .",
    "Peter Blackburn",
    "Results of the games played on Friday :",
    "Plymouth 4 Exeter 1",
    "Leeds 2 Chelsea 0",
    "Oleg Salenko scored twice in the second half .",
    "PARIS 1996-08-22",
    "The committee said it would meet in Paris .",
]


def joined(texts: List[str]) -> Doc:
    """One doc of the texts joined by spaces, without sentence boundaries."""
    return nlp(" ".join(texts))


def start_words(splitter: Splitter, doc: Doc) -> List[str]:
    return [doc[i].text for i in splitter.starts(doc)]


def test_learns_where_units_without_punctuation_end() -> None:
    splitter = learn_splitter(nlp(text) for text in UNITS * 30)
    doc = joined(["ROME 1996-12-07", "Italy beat Wales 3-0 on Sunday .", "Anna Smith"])
    # a dateline runs into a sentence, a sentence into a byline: both are cut
    assert start_words(splitter, doc) == ["Italy", "Anna"]
    assert splitter.starts(nlp("Japan beat Syria 2-1 on Friday .")) == []


def test_no_boundary_seen_never_cuts() -> None:
    splitter = learn_splitter([nlp("Japan beat Syria 2-1 on Friday . Leeds 2")])
    assert splitter.starts(joined(UNITS)) == []
    assert learn_splitter([]).starts(joined(UNITS)) == []


def test_empty_and_one_token_docs_have_no_gaps() -> None:
    splitter = learn_splitter(nlp(text) for text in UNITS * 5)
    assert splitter.starts(nlp("")) == []
    assert splitter.starts(nlp("Hello")) == []
    after, probs = splitter.probabilities(nlp(""))
    assert after.shape == probs.shape == (0,)


def test_space_tokens_are_skipped_and_indices_are_the_docs() -> None:
    splitter = learn_splitter(nlp(text) for text in UNITS * 30)
    dateline = [t.text for t in nlp("ROME 1996-12-07")]
    words = dateline + [" ", "Italy", "beat", "Wales", "on", "Sunday", "."]
    doc = Doc(nlp.vocab, words=words)
    assert doc[len(dateline)].is_space
    assert start_words(splitter, doc) == ["Italy"]


def test_learning_is_deterministic() -> None:
    first = learn_splitter(nlp(text) for text in UNITS * 10)
    second = learn_splitter(nlp(text) for text in UNITS * 10)
    assert first.to_dict() == second.to_dict()


def test_round_trip_through_msgpack_keeps_the_predictions() -> None:
    splitter = learn_splitter(nlp(text) for text in UNITS * 10)
    data = srsly.msgpack_loads(srsly.msgpack_dumps(splitter.to_dict()))
    loaded = Splitter.from_dict(data)
    doc = joined(UNITS)
    numpy.testing.assert_array_equal(loaded.probabilities(doc)[1], splitter.probabilities(doc)[1])
    assert loaded.threshold == splitter.threshold
    assert loaded.bits == splitter.bits
