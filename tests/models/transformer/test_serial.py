"""Saved encoders are input: names read from their bytes never pick a path."""

import tempfile
from pathlib import Path
from typing import Any, Dict, Set

import pytest
import spacy
from damage import rewrite_encoder
from helpers import SMALL_ENCODER, loader_config, textcat_examples

from spacy_bert_pipes.models.transformer.serial import (
    DamagedEncoderError,
    safe_file_name,
    without_file_settings,
)


@pytest.mark.parametrize("name", ["vocab.txt", "tokenizer.json", "special_tokens_map.json", "x"])
def test_plain_names_pass(name: str) -> None:
    assert safe_file_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b", "C:x", "a\x00b", "x" * 256, 3, None],
)
def test_paths_and_odd_names_are_refused(name: Any) -> None:
    with pytest.raises(DamagedEncoderError, match="refusing the saved tokenizer file name"):
        safe_file_name(name)


def test_file_settings_are_dropped() -> None:
    settings = {"vocab_file": "/etc/passwd", "tokenizer_file": "x", "do_lower_case": True}
    assert without_file_settings(settings) == {"do_lower_case": True}


def files_under(path: Path) -> Set[Path]:
    return {p for p in path.rglob("*")}


@pytest.fixture(scope="module")
def saved_pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("pipeline") / "pipe"
    nlp.to_disk(path)
    return path


def copy_pipeline(source: Path, target: Path) -> Path:
    import shutil

    shutil.copytree(source, target)
    return target


def test_crafted_tokenizer_names_write_nothing_outside(
    saved_pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipeline whose tokenizer file names are absolute or climb out with ../
    is refused by spacy.load, and no file appears anywhere but where it was."""
    pipe = copy_pipeline(saved_pipeline, tmp_path / "pipe")
    temp_root = tmp_path / "temp"
    temp_root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    absolute = outside / "absolute.txt"

    def craft(msg: Dict[str, Any]) -> None:
        files = dict(msg["tokenizer"])
        files[str(absolute)] = b"written through an absolute name"
        files["../climbed.txt"] = b"written through ../"
        files["../../climbed2.txt"] = b"written through ../../"
        msg["tokenizer"] = files

    rewrite_encoder(pipe / "bert_textcat" / "model", craft)
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    before = files_under(tmp_path)
    with pytest.raises(DamagedEncoderError, match="refusing the saved tokenizer file name"):
        spacy.load(pipe)
    assert files_under(tmp_path) == before
    assert not absolute.exists()
    assert not (temp_root / "climbed.txt").exists()
    assert not (tmp_path / "climbed2.txt").exists()
    # nothing was left in the temporary folder either
    assert list(temp_root.iterdir()) == []


def test_tokenizer_config_cannot_point_at_files(
    saved_pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tokenizer_config.json settings naming files are dropped: the tokenizer is
    read from its own saved files, never from a path the pipeline names."""
    import json

    pipe = copy_pipeline(saved_pipeline, tmp_path / "pipe")
    decoy = tmp_path / "decoy_vocab.txt"
    decoy.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nzzz\n", encoding="utf8")
    opened = []
    real_open = open

    def craft(msg: Dict[str, Any]) -> None:
        files = dict(msg["tokenizer"])
        settings = json.loads(files["tokenizer_config.json"])
        settings["vocab_file"] = str(decoy)
        settings["tokenizer_file"] = str(decoy)
        files["tokenizer_config.json"] = json.dumps(settings).encode("utf8")
        msg["tokenizer"] = files

    rewrite_encoder(pipe / "bert_textcat" / "model", craft)

    def spying_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spying_open)
    nlp = spacy.load(pipe)
    monkeypatch.undo()
    assert str(decoy) not in opened
    original = spacy.load(saved_pipeline)
    text = "my card still not arrived"
    assert nlp(text).cats == original(text).cats


@pytest.fixture(scope="module")
def trf_pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory, extras: None) -> Path:
    """A spacy-transformers `transformer` pipe with a bert_textcat listening to it."""
    pytest.importorskip("spacy_transformers")
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-transformers.TransformerModel.v3",
        "name": str(tiny_bert),
        "get_spans": {
            "@span_getters": "spacy-transformers.strided_spans.v1",
            "window": 16,
            "stride": 12,
        },
    }
    nlp.add_pipe("transformer", config={"model": model})
    encoder = {"@architectures": "spacy-bert-pipes.TrfListenerEncoder.v1"}
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": encoder}})
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("trf") / "pipe"
    nlp.to_disk(path)
    return path


@pytest.mark.parametrize(
    "change",
    [
        {"../climbed.txt": b"x"},
        {"/abs/evil.txt": b"x"},
        {"kwargs": {"use_fast": True, "trust_remote_code": True}},
    ],
    ids=["climbing", "absolute", "remote_code"],
)
def test_load_pipeline_checks_spacy_transformers_tokenizers(
    trf_pipeline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Dict[str, Any]
) -> None:
    """spacy-transformers writes saved tokenizer names unchecked; load_pipeline
    checks them before its `transformer` component loads."""
    from spacy_bert_pipes.loading import PipelineLoadError, load_pipeline

    pipe = copy_pipeline(trf_pipeline, tmp_path / "pipe")
    temp_root = tmp_path / "temp"
    temp_root.mkdir()

    def craft(msg: Dict[str, Any]) -> None:
        msg["tokenizer"] = {**msg["tokenizer"], **change}

    rewrite_encoder(pipe / "transformer" / "model", craft, key="tokenizer")
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    before = files_under(tmp_path)
    with pytest.raises(PipelineLoadError, match="component 'transformer'.*refusing the saved"):
        load_pipeline(pipe)
    assert files_under(tmp_path) == before


def test_intact_spacy_transformers_pipeline_loads(trf_pipeline: Path) -> None:
    from spacy_bert_pipes.loading import load_pipeline

    text = "my card still not arrived"
    assert load_pipeline(trf_pipeline)(text).cats == spacy.load(trf_pipeline)(text).cats
