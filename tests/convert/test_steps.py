"""Training steps from epochs: the rule, spaCy's own training loop scoring the
last step under it, and the shipped configs that follow it."""

from pathlib import Path

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.training.loop import train_while_improving
from spacy.util import load_config
from thinc.api import Adam

from spacy_bert_pipes.convert import ConversionError, count_docs, training_steps

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_training_steps_rule() -> None:
    steps = training_steps(3000, epochs=4)
    assert (steps.eval_frequency, steps.max_steps, steps.warmup_steps) == (94, 376, 37)
    assert steps.overrides() == [
        "--training.max_steps",
        "376",
        "--training.eval_frequency",
        "94",
        "--training.optimizer.learn_rate.warmup_steps",
        "37",
    ]
    small = training_steps(10, epochs=3, batch_size=4)
    assert (small.eval_frequency, small.max_steps, small.warmup_steps) == (3, 9, 0)
    with pytest.raises(ValueError, match="at least 1 doc"):
        training_steps(0, epochs=4)


def test_textcat_cfg_follows_the_rule() -> None:
    # configs/textcat.cfg: 5 epochs of Banking77's 10,003 training queries
    config = load_config(CONFIGS / "textcat.cfg", interpolate=False)
    training = config["training"]
    steps = training_steps(10003, epochs=5, batch_size=training["batcher"]["size"])
    assert training["max_steps"] == steps.max_steps
    assert training["eval_frequency"] == steps.eval_frequency
    assert training["optimizer"]["learn_rate"]["warmup_steps"] == steps.warmup_steps


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.cfg")), ids=lambda p: p.name)
def test_shipped_configs_score_their_last_step(path: Path) -> None:
    training = load_config(path, interpolate=False)["training"]
    assert training["max_steps"] > 0
    assert training["max_steps"] % training["eval_frequency"] == 0


@pytest.mark.parametrize("n_docs,epochs,batch_size", [(3000, 4, 32), (100, 3, 32), (7, 2, 3)])
def test_spacy_scores_the_last_step(n_docs: int, epochs: int, batch_size: int) -> None:
    """spaCy's training loop, on a pipeline with nothing to train, scores the
    dev set at the last step under the rule, once an epoch."""
    steps = training_steps(n_docs, epochs=epochs, batch_size=batch_size)
    nlp = spacy.blank("en")
    examples = [Example(Doc(nlp.vocab, words=["w"]), Doc(nlp.vocab, words=["w"]))] * n_docs

    def batches():  # spaCy's create_train_batches with max_epochs = 0: no end
        epoch = 0
        while True:
            for start in range(0, n_docs, batch_size):
                yield epoch, examples[start : start + batch_size]
            epoch += 1

    loop = train_while_improving(
        nlp,
        Adam(0.001),
        batches(),
        lambda: (0.0, {}),
        dropout=0.0,
        eval_frequency=steps.eval_frequency,
        accumulate_gradient=1,
        patience=0,
        max_steps=steps.max_steps,
        exclude=[],
        annotating_components=[],
        before_update=None,
    )
    infos = [info for _, info, _ in loop]
    scored = [info for info in infos if info["score"] is not None]
    assert infos[-1]["step"] == steps.max_steps
    assert scored[-1] is infos[-1]
    # scored at the start and after each epoch
    assert [info["step"] for info in scored] == [
        epoch * steps.eval_frequency for epoch in range(epochs + 1)
    ]
    # spaCy's steps count from 0: step max_steps is the first batch after them
    assert infos[-1]["epoch"] == epochs


def test_count_docs(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    path = tmp_path / "train.spacy"
    DocBin(docs=[nlp("a b"), nlp("c")]).to_disk(path)
    assert count_docs(path) == 2
    bad = tmp_path / "bad.spacy"
    bad.write_text("not a DocBin")
    with pytest.raises(ConversionError, match="bad.spacy: not a readable .spacy file"):
        count_docs(bad)
