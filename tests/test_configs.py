"""Every shipped config loads, builds and initializes (on the tiny BERT)."""

from pathlib import Path

import pytest
import spacy
from conftest import SMALL_ENCODER, textcat_examples
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
    examples = textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    doc = nlp("my card still not arrived")
    assert doc.cats
