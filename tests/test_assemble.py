"""assemble: one pipeline from separately trained components, same outputs as the sources."""

import json
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
import spacy
import torch
from helpers import (
    SMALL_ENCODER,
    TRAIN_TEXTS,
    loader_config,
    ner_examples,
    textcat_examples,
)
from spacy.language import Language

from spacy_bert_pipes.assemble import AssembleError, assemble, save_assembled

torch.set_num_threads(1)
LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
TEXTS = [t for t, _ in TRAIN_TEXTS] + ["john smith is in paris", "", "apple in london " * 20]


def _train(nlp: Language, examples: list, steps: int = 15) -> Language:
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 2e-3
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(scope="module")
def sources(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """A textcat, an NER and a shared-encoder textcat pipeline, each trained a little
    (different seeds make their fine-tuned encoders differ)."""
    from thinc.api import fix_random_seed

    root = tmp_path_factory.mktemp("sources")
    paths = {}
    fix_random_seed(1)
    textcat = spacy.blank("en")
    textcat.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    textcat.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    _train(textcat, textcat_examples(textcat))
    textcat.to_disk(root / "textcat")
    paths["textcat"] = str(root / "textcat")
    fix_random_seed(2)
    ner = spacy.blank("en")
    ner.add_pipe("bert_ner", config={"model": {"encoder": SMALL_ENCODER}})
    ner.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    _train(ner, ner_examples(ner))
    ner.to_disk(root / "ner")
    paths["ner"] = str(root / "ner")
    fix_random_seed(3)
    shared = spacy.blank("en")
    shared.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    shared.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    shared.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    _train(shared, textcat_examples(shared))
    shared.to_disk(root / "shared")
    paths["shared"] = str(root / "shared")
    return paths


def outputs(nlp: Language) -> List[Tuple[Dict[str, float], List[Tuple[int, int, str]]]]:
    return [
        (dict(doc.cats), [(e.start_char, e.end_char, e.label_) for e in doc.ents])
        for doc in nlp.pipe(TEXTS)
    ]


def assert_same_cats(a: Dict[str, float], b: Dict[str, float]) -> None:
    assert a.keys() == b.keys()
    for label in a:
        assert b[label] == pytest.approx(a[label], abs=1e-5)


def test_same_outputs_as_the_sources_and_round_trip(
    sources: Dict[str, str], tmp_path: Path
) -> None:
    textcat_out = outputs(spacy.load(sources["textcat"]))
    ner_out = outputs(spacy.load(sources["ner"]))
    assembled = assemble([("textcat", sources["textcat"]), ("ner", sources["ner"])])
    nlp = assembled.nlp
    assert nlp.pipe_names == ["bert_textcat", "bert_ner"]
    assert [c.encoder for c in assembled.components] == ["own", "own"]
    for got, cats, ents in zip(outputs(nlp), textcat_out, ner_out):
        assert_same_cats(cats[0], got[0])
        assert got[1] == ents[1]
    manifest = save_assembled(assembled, tmp_path / "assembled")
    loaded = spacy.load(tmp_path / "assembled")
    assert loaded.pipe_names == ["bert_textcat", "bert_ner"]
    for got, cats, ents in zip(outputs(loaded), textcat_out, ner_out):
        assert_same_cats(cats[0], got[0])
        assert got[1] == ents[1]
    # one vocab: the labels of both sources are in it
    for label in ("card", "PER", "LOC"):
        assert label in loaded.vocab.strings
    data = json.loads(manifest.read_text(encoding="utf8"))
    assert data["pipeline"] == ["bert_textcat", "bert_ner"]
    assert data["encoder_passes"] == 2
    assert [c["source"] for c in data["components"]] == [sources["textcat"], sources["ner"]]
    assert data["components"][1]["labels"] == ["LOC", "ORG", "PER"]
    # a rerun replaces the earlier assembly
    save_assembled(assemble([("ner", sources["ner"])]), tmp_path / "assembled")
    assert spacy.load(tmp_path / "assembled").pipe_names == ["bert_ner"]


def test_clashing_names_are_renamed_and_listeners_get_their_encoder(
    sources: Dict[str, str], tmp_path: Path
) -> None:
    shared_out = outputs(spacy.load(sources["shared"]))
    textcat_out = outputs(spacy.load(sources["textcat"]))
    assembled = assemble([("textcat", sources["textcat"]), ("textcat", sources["shared"])])
    assert assembled.nlp.pipe_names == ["bert_textcat", "bert_textcat_2"]
    assert "copy of 'bert_encoder'" in assembled.components[1].encoder
    assert any("named 'bert_textcat_2'" in note for note in assembled.notes)
    assert any("share the labels card, fx, other" in note for note in assembled.notes)
    save_assembled(assembled, tmp_path / "out")
    loaded = spacy.load(tmp_path / "out")
    # Both write the same labels: doc.cats holds the later one's (the shared source's).
    for got, want in zip(outputs(loaded), shared_out):
        assert_same_cats(want[0], got[0])
    with loaded.select_pipes(disable=["bert_textcat_2"]):
        for got, want in zip(outputs(loaded), textcat_out):
            assert_same_cats(want[0], got[0])


def test_errors_name_the_source(sources: Dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(AssembleError, match="no bert_qa component for --qa"):
        assemble([("qa", sources["textcat"])])
    with pytest.raises(AssembleError, match="unknown kind 'parser'"):
        assemble([("parser", sources["textcat"])])
    with pytest.raises(AssembleError, match="nope"):
        assemble([("ner", str(tmp_path / "nope"))])
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine", encoding="utf8")
    with pytest.raises(AssembleError, match="not an earlier assembly"):
        save_assembled(assemble([("ner", sources["ner"])]), tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").exists()


@pytest.mark.parametrize("position", ["first", "second"])
def test_a_damaged_source_is_one_line_naming_its_file(
    sources: Dict[str, str], tmp_path: Path, position: str
) -> None:
    """The first source is loaded on its own, the others into its vocab: both are
    checked as `load_pipeline` checks a pipeline."""
    damaged = Path(shutil.copytree(sources["ner"], tmp_path / "damaged"))
    weights = damaged / "bert_ner" / "model"
    weights.write_bytes(weights.read_bytes()[:100])
    given = [("ner", str(damaged))]
    if position == "second":
        given.insert(0, ("textcat", sources["textcat"]))
    with pytest.raises(AssembleError) as info:
        assemble(given)
    message = str(info.value)
    assert f"Cannot load the pipeline {damaged}" in message
    assert str(weights) in message and "component 'bert_ner'" in message
    assert "\n" not in message


def test_cli(sources: Dict[str, str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spacy_bert_pipes.cli import app

    runner = CliRunner()
    out = tmp_path / "cli"
    args = ["assemble", str(out), "--ner", sources["ner"], "--textcat", sources["textcat"]]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "bert_textcat (bert_textcat): 'bert_textcat' of" in result.output
    assert "one encoder pass each" in result.output
    assert spacy.load(out).pipe_names == ["bert_textcat", "bert_ner"]
    result = runner.invoke(app, ["assemble", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "Nothing to assemble" in result.output


def test_a_sentence_context_ner_gets_a_sentencizer(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    encoder = {**SMALL_ENCODER, "context": "sentence"}
    nlp.add_pipe("bert_ner", config={"model": {"encoder": encoder}})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    nlp.initialize(lambda: ner_examples(nlp))
    nlp.to_disk(tmp_path / "ner")
    assembled = assemble([("ner", str(tmp_path / "ner"))])
    assert assembled.nlp.pipe_names == ["sentencizer", "bert_ner"]
    assert any("sentencizer runs first" in note for note in assembled.notes)
    # As the source reads a doc whose sentences were set the same way.
    text = "john smith is in paris. apple is in london! google is in new york"
    doc = assembled.nlp(text)
    assert len(list(doc.sents)) == 3
    splitter = spacy.blank("en")
    splitter.add_pipe("sentencizer")
    expected = nlp(splitter(text))
    assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == [
        (e.start_char, e.end_char, e.label_) for e in expected.ents
    ]
    bare = assemble([("ner", str(tmp_path / "ner"))], sentencizer=False)
    assert bare.nlp.pipe_names == ["bert_ner"]
    assert any("nothing sets sentence boundaries" in note for note in bare.notes)
    save_assembled(assembled, tmp_path / "assembled")
    assert spacy.load(tmp_path / "assembled").pipe_names == ["sentencizer", "bert_ner"]


def test_vectors_add_an_encoder_and_bert_vectors(
    sources: Dict[str, str], tiny_bert: Path, tmp_path: Path
) -> None:
    """`vectors=CHECKPOINT`: doc.vector is the checkpoint's pooled embedding, the
    heads' outputs do not change, and it survives save and load."""
    plain = assemble([("textcat", sources["textcat"])])
    assembled = assemble([("textcat", sources["textcat"])], vectors=str(tiny_bert))
    nlp = assembled.nlp
    assert nlp.pipe_names == ["bert_textcat", "vectors_encoder", "bert_vectors"]
    docs = list(nlp.pipe(TEXTS[:3]))
    for doc, expected in zip(docs, plain.nlp.pipe(TEXTS[:3])):
        assert_same_cats(doc.cats, expected.cats)
        assert doc.has_vector and doc.vector.shape == (32,)
    assert docs[0].similarity(docs[0]) == pytest.approx(1.0, abs=1e-5)
    # the same as a bert_encoder + bert_vectors pipeline made from the checkpoint
    reference = spacy.blank("en")
    reference.add_pipe("bert_encoder")
    reference.add_pipe("bert_vectors")
    reference.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    reference.initialize()
    for doc, ref in zip(docs, reference.pipe(TEXTS[:3])):
        assert doc.vector == pytest.approx(ref.vector, abs=1e-5)
    manifest = json.loads(save_assembled(assembled, tmp_path / "a").read_text())
    assert manifest["encoder_passes"] == 2
    assert manifest["vectors"]["source"] == str(tiny_bert)
    assert manifest["vectors"]["pooling"]["modes"] == ["mean"]
    loaded = spacy.load(tmp_path / "a")
    for doc, again in zip(docs, loaded.pipe(TEXTS[:3])):
        assert again.vector == pytest.approx(doc.vector, abs=1e-5)
    with pytest.raises(AssembleError, match="vectors .*nope"):
        assemble([("textcat", sources["textcat"])], vectors=str(tmp_path / "nope"))
