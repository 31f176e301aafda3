"""Every shipped config loads, builds and initializes (on the tiny BERT)."""

from pathlib import Path

import pytest
import spacy
from conftest import SMALL_ENCODER, ner_examples, textcat_examples
from spacy.util import load_config

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.cfg"))


def test_there_are_configs() -> None:
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_builds_and_initializes(path: Path, tiny_bert: Path) -> None:
    config = load_config(path, overrides={"paths.encoder": str(tiny_bert)}, interpolate=True)
    for _name, component in config["components"].items():
        encoder = component.get("model", {}).get("encoder", component.get("model", {}))
        if encoder.get("@architectures") == "spacy-bert-pipes.BertEncoder.v1":
            encoder.update(SMALL_ENCODER)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    is_ner = "bert_ner" in nlp.pipe_names
    examples = ner_examples(nlp) if is_ner else textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    doc = nlp("john smith says my card still not arrived in paris")
    if is_ner:
        assert all(ent.label_ in ("LOC", "ORG", "PER") for ent in doc.ents)
        assert nlp.get_pipe("bert_ner").labels
    else:
        assert doc.cats
