"""Loading a saved pipeline with its bert encoders at another precision, and
whatever fails in reading its config.cfg as one line (spacy_bert_pipes.loading)."""

import configparser
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pytest
import spacy
import torch
from confection import ConfigValidationError
from helpers import SMALL_ENCODER, loader_config, ner_examples, textcat_examples
from spacy.training import Example

from spacy_bert_pipes.loading import PipelineLoadError, encoder_config_paths, load_pipeline

torch.set_num_threads(1)
LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1", "upstream": "*"}
TEXTS = ["my card is not working", "exchange rate for dollars", "hello there", ""]


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A shared bert_encoder with a listening bert_textcat, and a bert_ner with
    its own encoder: two encoders, one of them behind a listener."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": SMALL_ENCODER}})
    for name in ("bert_encoder", "bert_ner"):
        nlp.config["initialize"]["components"][name] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp) + ner_examples(nlp))
    path = tmp_path_factory.mktemp("util") / "nlp"
    nlp.to_disk(path)
    return str(path)


def cats(nlp: spacy.Language) -> Dict[str, numpy.ndarray]:
    return {t: numpy.array(list(d.cats.values())) for t, d in zip(TEXTS, nlp.pipe(TEXTS))}


def test_encoder_config_paths_finds_the_component_and_the_head_encoders(pipeline: str) -> None:
    config = spacy.util.load_config(Path(pipeline) / "config.cfg")
    assert encoder_config_paths(config) == [
        "components.bert_encoder.model",
        "components.bert_ner.model.encoder",
    ]


def test_precision_is_set_on_every_encoder_and_saved_with_the_pipeline(
    pipeline: str, tmp_path: Path
) -> None:
    # BertEncoder.v2: the prediction precision is set; training keeps its own
    nlp = load_pipeline(pipeline, precision="int8")
    encoder = nlp.config["components"]["bert_encoder"]["model"]
    assert encoder["predict_precision"] == "int8" and encoder["precision"] == "fp32"
    assert nlp.config["components"]["bert_ner"]["model"]["encoder"]["predict_precision"] == "int8"
    nlp.to_disk(tmp_path / "int8")
    again = spacy.load(tmp_path / "int8")
    saved = again.config["components"]["bert_ner"]["model"]["encoder"]
    assert saved["predict_precision"] == "int8"


def test_int8_outputs_stay_close_to_fp32(pipeline: str) -> None:
    fp32 = cats(load_pipeline(pipeline))
    int8 = cats(load_pipeline(pipeline, precision="int8"))
    for text in TEXTS:
        assert int8[text].shape == fp32[text].shape
        numpy.testing.assert_allclose(int8[text], fp32[text], atol=0.05)


def test_no_precision_loads_the_pipeline_as_saved(pipeline: str) -> None:
    nlp = load_pipeline(pipeline, config={"nlp": {"batch_size": 7}})
    assert nlp.config["components"]["bert_encoder"]["model"]["precision"] == "fp32"
    assert nlp.batch_size == 7


def test_a_pipeline_without_a_bert_encoder_names_its_components(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.initialize(lambda: [Example(nlp.make_doc("a b."), nlp.make_doc("a b."))])
    nlp.to_disk(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"no spacy-bert-pipes.BertEncoder.v1.*sentencizer"):
        load_pipeline(tmp_path / "plain", precision="bf16")


def test_reproducible_is_set_on_every_encoder(pipeline: str, tmp_path: Path) -> None:
    nlp = load_pipeline(pipeline, reproducible=True)
    encoders = [
        node
        for _, proc in nlp.components
        for node in proc.model.walk()
        if node.name == "bert_encoder"
    ]
    assert len(encoders) == 2 and all(node.attrs["reproducible"] for node in encoders)
    assert not any(
        node.attrs["reproducible"]
        for _, proc in load_pipeline(pipeline).components
        for node in proc.model.walk()
        if node.name == "bert_encoder"
    )
    plain = spacy.blank("en")
    plain.add_pipe("sentencizer")
    plain.to_disk(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"reproducible batches.*no bert encoder.*sentencizer"):
        load_pipeline(tmp_path / "plain", reproducible=True)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def config_errors() -> List[Any]:
    """An error reading or building config.cfg, and words of its reason: the
    shapes configparser, confection and spaCy raise, and odd ones."""
    no_header = configparser.MissingSectionHeaderError("<string>", 1, "this is not [[[\n")
    # confection raises its own error `from None` while handling configparser's
    wrapped = ConfigValidationError(desc="Make sure the sections and values are formatted")
    wrapped.__context__ = no_header
    parsing = configparser.ParsingError("<string>")
    parsing.append(5, "'this line is not config\n'")
    odd_parsing = configparser.ParsingError("<string>")
    odd_parsing.errors = [("not", "a", "pair")]  # type: ignore[list-item]
    validation = ConfigValidationError(errors=[{"loc": ["nlp", "lang"], "msg": "Field required"}])
    odd_errors = ConfigValidationError(desc="a ${paths.nope} that names nothing")
    odd_errors.errors = ["not a dict"]
    odd_loc = ConfigValidationError(errors=[{"loc": [], "msg": "wrong"}])
    odd_loc.errors = [{"loc": None, "msg": "wrong"}]
    duplicate = configparser.DuplicateSectionError("a", "<string>", 3)
    not_utf8 = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    return [
        pytest.param(no_header, "at line 1, before any [section] header: 'this is", id="header"),
        pytest.param(wrapped, "at line 1, before any [section] header", id="wrapped_header"),
        pytest.param(parsing, "syntax at line 5: 'this line is not config", id="parsing"),
        pytest.param(configparser.ParsingError("<string>"), "not valid config", id="no_lines"),
        pytest.param(odd_parsing, "not valid config syntax", id="odd_parsing"),
        pytest.param(duplicate, "at line 3: section 'a' already exists", id="duplicate"),
        pytest.param(validation, "nlp.lang: Field required", id="validation"),
        pytest.param(odd_errors, "a ${paths.nope} that names nothing", id="odd_validation"),
        pytest.param(odd_loc, "wrong", id="odd_loc"),
        pytest.param(ConfigValidationError(), "Config validation error", id="bare_validation"),
        pytest.param(not_utf8, "not UTF-8 text", id="not_utf8"),
        pytest.param(Unprintable(), "Unprintable", id="unprintable"),
        pytest.param(RuntimeError("\n\nfirst\nsecond"), "RuntimeError: first", id="lines"),
    ]


@pytest.mark.parametrize("error, reason", config_errors())
def test_any_error_in_config_cfg_is_one_line_naming_it(
    pipeline: str, monkeypatch: pytest.MonkeyPatch, error: Exception, reason: str
) -> None:
    def load_config(*args: Any, **kwargs: Any) -> None:
        raise error

    monkeypatch.setattr(spacy.util, "load_config", load_config)
    with pytest.raises(PipelineLoadError) as info:
        load_pipeline(pipeline)
    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    config_path = Path(pipeline) / "config.cfg"
    assert message.startswith(f"Cannot load the pipeline {pipeline}: file {config_path}: ")
    assert reason in info.value.reason, info.value.reason
