"""`bert-pipes pretrain`: the command line, its messages and exit codes."""

import json
from pathlib import Path

import torch
from helpers import write_texts
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()


def test_help_names_every_option() -> None:
    result = runner.invoke(app, ["pretrain", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--encoder",
        "--input-format",
        "--text-column",
        "--id-column",
        "--epochs",
        "--max-steps",
        "--batch-size",
        "--max-length",
        "--learning-rate",
        "--warmup",
        "--weight-decay",
        "--mlm-probability",
        "--masking",
        "--precision",
        "--gpu-id",
        "--checkpoint-every",
        "--keep-checkpoints",
        "--log-every",
        "--held-out",
        "--seed",
        "--overwrite",
    ):
        assert option in result.output
    assert "80% of" in result.output


def test_pretrain_then_rerun(tiny_bert: Path, tmp_path: Path) -> None:
    texts = write_texts(tmp_path / "texts.jsonl")
    output = tmp_path / "out"
    args = [
        "pretrain",
        str(texts),
        str(output),
        "--encoder",
        str(tiny_bert),
        "--max-steps",
        "4",
        "--batch-size",
        "4",
        "--max-length",
        "16",
        "--checkpoint-every",
        "2",
        "--held-out",
        "6",
        "--masking",
        "whole-word",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "no masked-LM head" in result.output
    assert "Held-out masked-LM loss:" in result.output
    assert f"Trained 4 steps; the encoder is in {output / 'encoder'}" in result.output
    assert json.loads((output / "pretrain_metrics.json").read_text())["steps"] == 4
    again = runner.invoke(app, args)
    assert again.exit_code == 0
    assert "already holds a finished run" in again.output
    changed = runner.invoke(app, [*args, "--learning-rate", "1e-3"])
    assert changed.exit_code == 0
    assert "Replacing the finished run" in changed.output


def test_unfinished_run_with_other_settings_exits_with_1(tiny_bert: Path, tmp_path: Path) -> None:
    texts = write_texts(tmp_path / "texts.jsonl")
    output = tmp_path / "out"
    args = ["pretrain", str(texts), str(output), "--encoder", str(tiny_bert), "--max-steps", "2"]
    assert runner.invoke(app, [*args, "--checkpoint-every", "1"]).exit_code == 0
    (output / "pretrain_metrics.json").unlink()  # as if killed before the end
    result = runner.invoke(app, [*args, "--checkpoint-every", "1", "--seed", "1"])
    assert result.exit_code == 1
    assert "unfinished run" in result.output and "--overwrite" in result.output


def test_bad_input_and_encoder_exit_with_1(tiny_bert: Path, tmp_path: Path) -> None:
    csv = tmp_path / "texts.csv"
    csv.write_text("sentence\nhello\n", encoding="utf8")
    result = runner.invoke(
        app, ["pretrain", str(csv), str(tmp_path / "out"), "--encoder", str(tiny_bert)]
    )
    assert result.exit_code == 1
    assert f"{csv}: no column 'text'" in result.output
    texts = write_texts(tmp_path / "texts.jsonl")
    result = runner.invoke(
        app, ["pretrain", str(texts), str(tmp_path / "out"), "--encoder", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "no config.json" in result.output
