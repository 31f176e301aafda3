"""hidden_states.align: a cut student encoder learns the teacher's hidden states."""

from pathlib import Path

import pytest
import spacy
import torch
from helpers import SMALL_ENCODER, loader_config, textcat_examples, write_tiny_bert

from spacy_bert_pipes.models.encoder.bert import hf_shim, special_ids
from spacy_bert_pipes.multitask.hidden_states import align, encoder_windows, pad_batch, states
from spacy_bert_pipes.multitask.shrink import cut, encoders

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = [
    "my card still has not arrived",
    "what is the exchange rate for paris",
    "john smith lost his pin in london",
    "can i top up by bank transfer",
] * 4


def textcat(path: Path, layers: int) -> spacy.Language:
    """A bert_textcat with its own random encoder of `layers` layers."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    tiny = write_tiny_bert(path, num_hidden_layers=layers)
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny)
    nlp.initialize(lambda: textcat_examples(nlp))
    return nlp


def distance(teacher: spacy.Language, student: spacy.Language, kept: list) -> list:
    """Per student layer, its mean squared distance to the teacher layer it stands for."""
    t_enc = encoders(teacher)["bert_textcat"]
    s_enc = encoders(student)["bert_textcat"]
    docs = [student.make_doc(text) for text in TEXTS]
    windows = encoder_windows(s_enc, docs)
    tensors = pad_batch(windows, special_ids(s_enc)[2], torch.device("cpu"))
    with torch.no_grad():
        t_hidden, _ = states(hf_shim(t_enc).module.eval(), *tensors, False)
        s_hidden, _ = states(hf_shim(s_enc).module.eval(), *tensors, False)
    mask = tensors[1].bool()
    return [
        float(((s_hidden[i + 1] - t_hidden[j + 1])[mask] ** 2).mean()) for i, j in enumerate(kept)
    ]


def test_align_brings_each_kept_layer_to_the_teachers(tmp_path: Path) -> None:
    teacher = textcat(tmp_path / "bert", 4)
    teacher.to_disk(tmp_path / "teacher")
    student = spacy.load(tmp_path / "teacher")
    kept = cut(student, 2, "teacher")["bert_textcat"]
    assert kept == [1, 3]
    before = distance(teacher, student, kept)
    summary = align(
        encoders(teacher)["bert_textcat"],
        encoders(student)["bert_textcat"],
        kept,
        [student.make_doc(text) for text in TEXTS],
        40,
        batch_size=8,
        learn_rate=1e-3,
        progress=False,
    )
    after = distance(teacher, student, kept)
    assert summary.windows == len(TEXTS)
    assert summary.targets == ["layer 1 <- teacher layer 2", "layer 2 <- teacher layer 4"]
    assert summary.loss_last < summary.loss_first
    # both kept layers now compute closer to what the teacher's layers compute
    assert all(a < 0.5 * b for a, b in zip(after, before)), (before, after)
    # the teacher is untouched and the student still annotates
    assert distance(teacher, spacy.load(tmp_path / "teacher"), [0, 1, 2, 3]) == [0.0] * 4
    assert student("my card").cats


def test_align_refuses_nothing_to_do(tmp_path: Path) -> None:
    teacher = textcat(tmp_path / "bert", 2)
    enc = encoders(teacher)["bert_textcat"]
    with pytest.raises(ValueError, match="at least 1 step"):
        align(enc, enc, [0, 1], [teacher.make_doc("a")], 0, progress=False)
    with pytest.raises(ValueError, match="bert_textcat: no text"):
        align(enc, enc, [0, 1], [], 1, name="bert_textcat", progress=False)
