"""Properties of loading a pipeline folder whose config.cfg is damaged (loading.py):
random bytes, a config cut off anywhere and text before the first [section] header
each fail with one PipelineLoadError line naming the folder and config.cfg (or,
for a cut that leaves a valid config, load), never with another error."""

import shutil
from pathlib import Path
from typing import Optional

import pytest
import spacy
from helpers import SMALL_ENCODER, loader_config, ner_examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import PROPERTY

from spacy_bert_pipes.loading import PipelineLoadError, load_pipeline

# Each example loads a pipeline: fewer of them than the suite's default.
LOADS = settings(PROPERTY, max_examples=60)

# Text before any [section]: a first line that is neither blank, a comment
# ("#", ";") nor a section header, then anything at all.
headerless = st.builds(
    lambda head, rest: head + rest,
    st.text("abcxyz0123456789_=:@\"'{}()<>\\ \t", min_size=1).filter(
        lambda head: bool(head.strip())
    ),
    st.text(),
)


@pytest.fixture(scope="module")
def folder(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a saved pipeline (a bert_ner), whose config.cfg each example
    overwrites; its original config is kept beside it as config.cfg.orig."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_ner", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_ner"] = loader_config(tiny_bert)
    nlp.initialize(lambda: ner_examples(nlp))
    path = tmp_path_factory.mktemp("config_load") / "pipe"
    nlp.to_disk(path)
    shutil.copyfile(path / "config.cfg", path / "config.cfg.orig")
    return path


def load_error(folder: Path, config: bytes) -> Optional[PipelineLoadError]:
    """The error of loading the folder with this config.cfg (None if it loads),
    checked: one line that names the folder and its config.cfg."""
    (folder / "config.cfg").write_bytes(config)
    try:
        load_pipeline(folder)
    except PipelineLoadError as err:
        message = str(err)
        assert len(message.splitlines()) == 1, message
        assert message.startswith(f"Cannot load the pipeline {folder}: "), message
        assert err.file == str(folder / "config.cfg"), message
        assert f"file {folder / 'config.cfg'}: " in message
        assert err.reason.strip(), message
        return err
    return None


@LOADS
@given(data=st.binary(max_size=4096))
@example(data=b"")
@example(data=b"\xff\xfe\x00[nlp]")  # not UTF-8
@example(data=b"\x00\x01\x02")  # UTF-8, but no section
@example(data=b"[nlp]\n\x85\xe2\x80\xa8 = 1\n")  # not UTF-8 after a valid header
def test_random_bytes_fail_with_one_line(folder: Path, data: bytes) -> None:
    assert load_error(folder, data) is not None


@LOADS
@given(text=headerless, then_the_config=st.booleans())
@example(text="this is not a config [[[", then_the_config=False)
@example(text="lang = en\n", then_the_config=True)
def test_text_before_any_section_header_fails_with_one_line(
    folder: Path, text: str, then_the_config: bool
) -> None:
    config = text + "\n" + (folder / "config.cfg.orig").read_text(encoding="utf8")
    err = load_error(folder, (config if then_the_config else text).encode("utf8"))
    assert err is not None
    assert "line 1, before any [section] header" in err.reason


@LOADS
@given(cut=st.floats(min_value=0.0, max_value=1.0, exclude_max=True))
@example(cut=0.0)
@example(cut=0.003)  # inside the first "[paths]"
def test_a_config_cut_off_anywhere_loads_or_fails_with_one_line(folder: Path, cut: float) -> None:
    """Most cuts break the syntax or leave a section or a value out; a cut
    between settings whose defaults are the saved values leaves a valid config."""
    original = (folder / "config.cfg.orig").read_bytes()
    load_error(folder, original[: int(cut * len(original))])
