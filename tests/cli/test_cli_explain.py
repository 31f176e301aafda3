"""`bert-pipes explain`: the command line, its files and its errors."""

from pathlib import Path

import pytest
import spacy
import torch
from helpers import EXPLAIN_FILES_LAYERS_0_1, SMALL_ENCODER, loader_config, textcat_examples
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()
TEXT = "why is my new card not working?"


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    nlp.to_disk(path)
    return str(path)


def test_help_names_every_option() -> None:
    result = runner.invoke(app, ["explain", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--output-dir", "--component", "--layer", "--head", "--question", "--window"):
        assert option in result.output


def test_writes_the_pictures_and_page(pipeline: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["explain", pipeline, TEXT, "-o", str(out), "--layer", "0", "--layer", "-1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Encoder of bert_textcat: 2 layers x 2 heads" in result.output
    assert "Most [CLS] attention (layer 0): " in result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == EXPLAIN_FILES_LAYERS_0_1
    assert (out / "cls_attention.png").read_bytes()[:4] == b"\x89PNG"
    assert ">card</span>" in (out / "explain.html").read_text(encoding="utf8")


def test_text_from_a_file(pipeline: str, tmp_path: Path) -> None:
    text_file = tmp_path / "ticket.txt"
    text_file.write_text("my card payment, in london\n", encoding="utf8")
    result = runner.invoke(
        app, ["explain", pipeline, f"@{text_file}", "-o", str(tmp_path), "--head", "1"]
    )
    assert result.exit_code == 0, result.output
    page = (tmp_path / "explain.html").read_text(encoding="utf8")
    assert ">london</span>" in page and "head 1" in page
    assert not (tmp_path / "attention_layer1_heads.png").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--component", "nope"], "no component 'nope'"),
        (["--component", "sentencizer"], "'sentencizer' has no BERT encoder"),
        (["--layer", "2"], "layer 2 is out of range"),
        (["--head", "-3"], "head -3 is out of range"),
        (["--question", "what?"], "only for a bert_qa component"),
    ],
)
def test_bad_arguments_are_clear_errors(
    pipeline: str, tmp_path: Path, args: list, message: str
) -> None:
    result = runner.invoke(app, ["explain", pipeline, TEXT, "-o", str(tmp_path), *args])
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_empty_text_and_missing_inputs(pipeline: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf8")
    result = runner.invoke(app, ["explain", pipeline, f"@{empty}", "-o", str(tmp_path)])
    assert result.exit_code == 1 and "The text is empty" in result.output
    result = runner.invoke(app, ["explain", pipeline, "@missing.txt", "-o", str(tmp_path)])
    assert result.exit_code == 1 and "Cannot read the text from missing.txt" in result.output
    result = runner.invoke(app, ["explain", str(tmp_path / "nope"), TEXT, "-o", str(tmp_path)])
    assert result.exit_code == 1 and "nope" in result.output
