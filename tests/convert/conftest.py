"""Fixtures of the convert tests."""

import pytest
import spacy
from spacy.language import Language


@pytest.fixture(scope="module")
def nlp() -> Language:
    # One per test module: the tests only tokenize and add strings to the vocab.
    return spacy.blank("en")
