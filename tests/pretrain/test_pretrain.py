"""`pretrain`: reading, batching, checkpoints, resuming and the encoder it writes."""

import json
import random
import shutil
from dataclasses import replace
from pathlib import Path
from typing import List

import numpy
import pytest
import spacy
import torch
from helpers import SMALL_ENCODER, loader_config, textcat_examples, write_texts
from safetensors.torch import load_file

from spacy_bert_pipes.convert import ConversionError
from spacy_bert_pipes.pretrain import (
    PretrainError,
    PretrainSettings,
    epoch_batches,
    held_out_split,
    pretrain,
)

torch.set_num_threads(1)


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    return write_texts(tmp_path / "texts.jsonl")


def settings(tiny_bert: Path, **changes: object) -> PretrainSettings:
    base = PretrainSettings(
        encoder=str(tiny_bert),
        epochs=0,
        max_steps=6,
        batch_size=4,
        max_length=16,
        learning_rate=1e-3,
        checkpoint_every=3,
        log_every=2,
        held_out=6,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def read_log(output: Path) -> List[dict]:
    lines = (output / "pretrain_log.jsonl").read_text(encoding="utf8").splitlines()
    return [json.loads(line) for line in lines]


def test_a_short_run_writes_log_checkpoints_and_encoder(
    tiny_bert: Path, texts: Path, tmp_path: Path
) -> None:
    messages: List[str] = []
    output = tmp_path / "out"
    summary = pretrain(texts, output, settings(tiny_bert), report=messages.append)
    assert summary.steps == 6 and summary.resumed_from is None
    assert summary.texts == 60 and summary.held_out_texts == 6
    assert summary.windows > 54  # texts over 16 pieces make several windows
    assert summary.new_head and any("no masked-LM head" in m for m in messages)
    assert numpy.isfinite(summary.held_out_loss_before)
    assert numpy.isfinite(summary.held_out_loss_after)
    log = read_log(output)
    losses = [entry for entry in log if "loss" in entry]
    assert [entry["step"] for entry in losses] == [2, 4, 6]
    assert all(numpy.isfinite(entry["loss"]) and entry["masked"] > 0 for entry in losses)
    assert [e["step"] for e in log if "held_out_loss" in e] == [0, 3, 6]
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == ["step-3", "step-6"]
    state = json.loads((output / "checkpoints" / "step-3" / "state.json").read_text())
    assert state["step"] == 3 and state["epoch"] == 0 and state["batch"] == 3
    encoder = output / "encoder"
    assert (encoder / "model.safetensors").exists() and (encoder / "tokenizer.json").exists()
    config = json.loads((encoder / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]
    metrics = json.loads((output / "pretrain_metrics.json").read_text())
    assert metrics["steps"] == 6 and metrics["device"] == "cpu"
    assert metrics["held_out_perplexity_after"] > 1.0


def test_resumed_run_ends_like_an_uninterrupted_one(
    tiny_bert: Path, texts: Path, tmp_path: Path
) -> None:
    run = settings(
        tiny_bert, epochs=2, max_steps=0, checkpoint_every=4, keep_checkpoints=20, log_every=2
    )
    whole = tmp_path / "whole"
    total = pretrain(texts, whole, run).steps
    # A run killed after a checkpoint in its second epoch: no later checkpoint, no encoder.
    steps = sorted(int(p.name.split("-")[1]) for p in (whole / "checkpoints").iterdir())
    resume_at = max(step for step in steps if total // 2 < step < total)
    killed = tmp_path / "killed"
    shutil.copytree(whole, killed)
    for step in steps:
        if step > resume_at:
            shutil.rmtree(killed / "checkpoints" / f"step-{step}")
    shutil.rmtree(killed / "encoder")
    (killed / "pretrain_metrics.json").unlink()
    messages: List[str] = []
    summary = pretrain(texts, killed, run, report=messages.append)
    assert summary.resumed_from == resume_at and summary.steps == total
    assert any("Resuming from" in m and f"step {resume_at}" in m for m in messages)
    first = load_file(str(whole / "encoder" / "model.safetensors"))
    second = load_file(str(killed / "encoder" / "model.safetensors"))
    assert first.keys() == second.keys()
    for name in first:
        assert torch.allclose(first[name], second[name], atol=1e-6), name

    # Checkpoints fall on logged steps: the resumed log windows match too.
    def without_time(log: List[dict]) -> List[dict]:
        return [{k: v for k, v in e.items() if k != "seconds"} for e in log]

    assert without_time(read_log(killed)) == without_time(read_log(whole))


def test_finished_run_is_not_repeated_and_replaced_when_settings_change(
    tiny_bert: Path, texts: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    run = settings(tiny_bert, max_steps=2, checkpoint_every=1)
    pretrain(texts, output, run)
    again = pretrain(texts, output, replace(run, log_every=1))  # logging changes nothing
    assert again.already_finished and again.steps == 2
    messages: List[str] = []
    changed = replace(run, max_steps=3, learning_rate=2e-3)
    redone = pretrain(texts, output, changed, report=messages.append)
    assert not redone.already_finished and redone.resumed_from is None and redone.steps == 3
    assert any("Replacing the finished run" in m and "learning_rate" in m for m in messages)
    assert json.loads((output / "pretrain_settings.json").read_text())["settings"]["max_steps"] == 3


def test_unfinished_run_with_other_settings_is_kept(
    tiny_bert: Path, texts: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    run = settings(tiny_bert, max_steps=4, checkpoint_every=2)
    pretrain(texts, output, run)
    shutil.rmtree(output / "encoder")  # as if killed after the checkpoint at step 4
    (output / "pretrain_metrics.json").unlink()
    with pytest.raises(PretrainError, match="learning_rate: 0.001 -> 0.002.*--overwrite"):
        pretrain(texts, output, replace(run, learning_rate=2e-3))
    assert (output / "checkpoints" / "step-4").exists()
    redone = pretrain(texts, output, replace(run, learning_rate=2e-3, overwrite=True))
    assert redone.resumed_from is None and redone.steps == 4


def test_pretrained_encoder_loads_into_bert_textcat(
    tiny_bert: Path, texts: Path, tmp_path: Path
) -> None:
    summary = pretrain(texts, tmp_path / "out", settings(tiny_bert, whole_word_masking=True))
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(summary.encoder_path)
    examples = textcat_examples(nlp)
    nlp.initialize(lambda: examples)
    doc = nlp("my card still not arrived")
    assert sum(doc.cats.values()) == pytest.approx(1.0, abs=1e-5)


def test_rows_without_text_are_skipped_and_counted(tiny_bert: Path, tmp_path: Path) -> None:
    path = tmp_path / "texts.csv"
    rows = ["text,label"] + [f"my card {i} still not arrived,a" for i in range(30)]
    path.write_text("\n".join(rows + ['"   ",b', ",c"]) + "\n", encoding="utf8")
    messages: List[str] = []
    summary = pretrain(path, tmp_path / "out", settings(tiny_bert), report=messages.append)
    assert summary.texts == 30 and summary.skipped_rows == 2
    assert any("Skipped 2 rows" in m and "texts.csv:32" in m for m in messages)


def test_empty_collection_names_the_file(tiny_bert: Path, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text('{"text": ""}\n{"text": null}\n', encoding="utf8")
    with pytest.raises(
        ConversionError, match=r"empty.jsonl: no texts to pretrain on.*empty.jsonl:1"
    ):
        pretrain(path, tmp_path / "out", settings(tiny_bert))


def test_missing_column_names_the_columns(tiny_bert: Path, tmp_path: Path) -> None:
    path = tmp_path / "texts.csv"
    path.write_text("sentence,label\nhello,a\n", encoding="utf8")
    with pytest.raises(ConversionError, match=r"texts.csv: no column 'text'.*'sentence'"):
        pretrain(path, tmp_path / "out", settings(tiny_bert))


def test_bad_encoder_and_settings_fail_before_training(texts: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no config.json"):
        pretrain(texts, tmp_path / "out", PretrainSettings(encoder=str(tmp_path), max_steps=1))
    with pytest.raises(PretrainError, match="set epochs or max_steps"):
        pretrain(texts, tmp_path / "out", PretrainSettings(epochs=0, max_steps=0))
    assert not (tmp_path / "out" / "pretrain_settings.json").exists()


def test_max_length_beyond_the_encoder_fails(tiny_bert: Path, texts: Path, tmp_path: Path) -> None:
    with pytest.raises(PretrainError, match="longer than the encoder's 128 positions"):
        pretrain(texts, tmp_path / "out", settings(tiny_bert, max_length=256))


def test_epoch_batches_cover_every_window_once() -> None:
    lengths = [random.Random(i).randint(3, 128) for i in range(1000)]
    first = epoch_batches(lengths, 8, seed=0, epoch=0)
    assert sorted(i for batch in first for i in batch) == list(range(1000))
    assert first == epoch_batches(lengths, 8, seed=0, epoch=0)
    second = epoch_batches(lengths, 8, seed=0, epoch=1)
    assert len(second) == len(first) and second != first
    # Sorted within pools: a batch's lengths are close (much less spread than random).
    spread = numpy.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in first])
    assert spread < 10


def test_held_out_split_is_at_most_a_tenth() -> None:
    train, held = held_out_split(100, 500, seed=0)
    assert len(held) == 10 and not set(train) & set(held)
    assert sorted(train + held) == list(range(100))
    assert held_out_split(100, 3, seed=0)[1] == held_out_split(100, 3, seed=0)[1]
    assert held_out_split(5, 500, seed=0)[1] == []


@pytest.mark.gpu
def test_bf16_run_and_resume_on_the_gpu(tiny_bert: Path, texts: Path, tmp_path: Path) -> None:
    output = tmp_path / "out"
    run = settings(tiny_bert, gpu_id=0, precision="bf16", max_steps=4, checkpoint_every=2)
    summary = pretrain(texts, output, run)
    assert summary.steps == 4 and numpy.isfinite(summary.held_out_loss_after)
    metrics = json.loads((output / "pretrain_metrics.json").read_text())
    assert metrics["device"] == "cuda:0" and metrics["precision"] == "bf16"
    shutil.rmtree(output / "checkpoints" / "step-4")
    (output / "pretrain_metrics.json").unlink()
    resumed = pretrain(texts, output, run)
    assert resumed.resumed_from == 2 and resumed.steps == 4
