"""Every shipped config loads, builds and initializes (on the tiny BERT)."""

from pathlib import Path

import pytest
import spacy
from helpers import SMALL_ENCODER, ner_examples, textcat_examples
from spacy.util import load_config

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.cfg"))


def test_there_are_configs() -> None:
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_builds_and_initializes(path: Path, tiny_bert: Path) -> None:
    config = load_config(path, overrides={"paths.encoder": str(tiny_bert)}, interpolate=True)
    for _name, component in config["components"].items():
        encoder = component.get("model", {}).get("encoder", component.get("model", {}))
        if encoder.get("@architectures", "").startswith("spacy-bert-pipes.BertEncoder."):
            encoder.update(SMALL_ENCODER)
    if "bert_qa" in config["components"]:  # windows that fit the tiny BERT's 128 positions
        qa_model = config["components"]["bert_qa"]["model"]
        qa_model.update({"max_seq_len": 64, "doc_stride": 16, "max_question_len": 16})
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    is_ner = "bert_ner" in nlp.pipe_names
    if "bert_qa" in nlp.pipe_names:
        nlp.initialize(lambda: qa_examples(nlp))
        doc = nlp.make_doc("john smith is in paris")
        doc._.questions = {"where": "where is john smith ?"}
        doc = nlp(doc)
        fixed = set(nlp.get_pipe("bert_qa").cfg["questions"])
        assert {a["key"] for a in doc._.answers} == fixed | {"where"}
        return
    examples = ner_examples(nlp) if is_ner else textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    doc = nlp("john smith says my card still not arrived in paris")
    if is_ner:
        assert all(ent.label_ in ("LOC", "ORG", "PER") for ent in doc.ents)
        assert nlp.get_pipe("bert_ner").labels
    else:
        assert doc.cats


def qa_examples(nlp):  # type: ignore[no-untyped-def]
    from spacy.training import Example

    reference = nlp.make_doc("john smith is in paris")
    reference._.questions = {"where": "where is john smith ?"}
    reference._.gold_answers = {"where": [{"text": "paris", "start": 17, "end": 22}]}
    return [Example(nlp.make_doc(reference.text), reference)]
