"""BERT's masking (80/10/10, special tokens, whole words) and the masked-LM trainer."""

from pathlib import Path

import numpy
import pytest
import torch
from safetensors.torch import load_file

from spacy_bert_pipes.pretrain.mlm import (
    encode_texts,
    load_masked_lm,
)
from spacy_bert_pipes.pretrain.trainer import MLMTrainer


def windows_of(tokenizer: object, texts: list) -> list:
    return [w for _, w in encode_texts(tokenizer, texts, 32, words=True)]


TEXTS = ["my card still not arrived", "what exchange rate is this", "hello world", "top up"]


def test_loss_at_masked_positions_equals_the_models_own(tiny_bert: Path) -> None:
    """The head runs at the masked positions only; the loss is the same as the
    full forward pass's."""
    trainer = MLMTrainer(load_masked_lm(str(tiny_bert)), total_steps=10, warmup_steps=0)
    batches = [windows_of(trainer.mlm.tokenizer, TEXTS * 4)]
    sparse, n = trainer.evaluate(batches, seed=3)
    assert n > 0
    trainer._head = None
    full, n_full = trainer.evaluate(batches, seed=3)
    assert n_full == n
    assert sparse == pytest.approx(full, rel=1e-5)


def test_training_lowers_the_loss_and_follows_the_schedule(tiny_bert: Path) -> None:
    trainer = MLMTrainer(
        load_masked_lm(str(tiny_bert)),
        total_steps=30,
        warmup_steps=3,
        learning_rate=1e-2,
        whole_word_masking=True,
    )
    windows = windows_of(trainer.mlm.tokenizer, TEXTS * 4)
    before, _ = trainer.evaluate([windows], seed=0)
    rates = []
    for _ in range(30):
        loss, masked = trainer.train_step(windows)
        assert numpy.isfinite(loss) and masked > 0
        rates.append(trainer.learning_rate)
    after, _ = trainer.evaluate([windows], seed=0)
    assert after < before - 1.0
    assert rates[1] > rates[0] and max(rates) == pytest.approx(1e-2)
    assert rates[-1] == 0.0


def test_checkpoint_restores_weights_optimizer_and_random_state(
    tiny_bert: Path, tmp_path: Path
) -> None:
    def new_trainer() -> MLMTrainer:
        return MLMTrainer(load_masked_lm(str(tiny_bert)), total_steps=10, warmup_steps=2)

    first = new_trainer()
    windows = windows_of(first.mlm.tokenizer, TEXTS)
    first.train_step(windows)
    first.save_checkpoint(tmp_path / "ckpt")
    expected = [first.train_step(windows)[0] for _ in range(3)]
    second = new_trainer()
    second.load_checkpoint(tmp_path / "ckpt")
    assert second.learning_rate == pytest.approx(
        first.scheduler.lr_lambdas[0](1) * first.scheduler.base_lrs[0]
    )
    assert [second.train_step(windows)[0] for _ in range(3)] == pytest.approx(expected)


def test_saved_encoder_keeps_the_pooler_and_loads(tiny_bert: Path, tmp_path: Path) -> None:
    from spacy_bert_pipes.models.encoder.loaders import HFCheckpointLoader

    trainer = MLMTrainer(
        load_masked_lm(str(tiny_bert)), total_steps=5, warmup_steps=0, learning_rate=1e-2
    )
    windows = windows_of(trainer.mlm.tokenizer, TEXTS)
    for _ in range(3):
        trainer.train_step(windows)
    trainer.save_encoder(tmp_path / "encoder")
    files = {p.name for p in (tmp_path / "encoder").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= files
    assert not any(name.endswith(".bin") for name in files)
    saved = load_file(str(tmp_path / "encoder" / "model.safetensors"))
    original = load_file(str(tiny_bert / "model.safetensors"))
    assert torch.equal(saved["pooler.dense.weight"], original["pooler.dense.weight"])
    assert not torch.equal(
        saved["embeddings.word_embeddings.weight"], original["embeddings.word_embeddings.weight"]
    )
    assert not any(name.startswith("cls.") for name in saved)
    model, _ = HFCheckpointLoader(str(tmp_path / "encoder"))._load()
    trained = trainer.model.base_model.state_dict()
    for name, value in model.state_dict().items():
        if name in trained:
            assert torch.allclose(value, trained[name].cpu())
