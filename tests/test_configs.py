"""Every shipped config is complete for `spacy debug config`, and loads, builds and
initializes (on the tiny BERT)."""

import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from helpers import SMALL_ENCODER, ner_examples, textcat_examples
from spacy.util import load_config

ROOT = Path(__file__).parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.cfg"))


def test_there_are_configs() -> None:
    assert CONFIGS


def debug_config(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "spacy", "debug", "config", str(path), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture
def references(request: pytest.FixtureRequest, path: Path) -> None:
    """A config naming spacy-transformers gets it imported (the `extras` fixture):
    spaCy then knows its factory and architectures."""
    if "spacy-transformers." in path.read_text(encoding="utf8"):
        request.getfixturevalue("extras")
        pytest.importorskip("spacy_transformers")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
@pytest.mark.usefixtures("references")
def test_debug_config_passes_as_shipped(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filled config: `spacy debug config` builds the pipeline and resolves
    [initialize], [training] and the corpora with no override. In this process
    (spaCy's own `debug_config`, what the command runs; a new process per
    config cost 5 s of imports each); the command itself runs below."""
    from spacy.cli.debug_config import debug_config as spacy_debug_config

    monkeypatch.chdir(ROOT)
    try:
        spacy_debug_config(path)
    except SystemExit as error:  # spaCy's messages exit on an invalid config
        pytest.fail(f"spacy debug config {path.name} exited with {error.code}")


def test_debug_config_shows_functions() -> None:
    """--show-functions finds every registered function the config names (it
    crashed on spacy.ConsoleLogger.v1, which spaCy resolves only through a fallback;
    our logger is found through its entry point)."""
    result = debug_config(ROOT / "configs" / "textcat.cfg", "--show-functions")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "spacy-bert-pipes.ProgressLogger.v1" in result.stdout


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
@pytest.mark.usefixtures("references")
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
    if "slots" in nlp.pipe_names:  # multitask.cfg: every head on one shared encoder
        nlp.initialize(lambda: ner_examples(nlp) + textcat_examples(nlp))
        doc = nlp("john smith says my card still not arrived in paris")
        assert doc.cats and doc.has_vector
        assert {a["key"] for a in doc._.answers} == set(nlp.get_pipe("slots").cfg["questions"])
        return
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
