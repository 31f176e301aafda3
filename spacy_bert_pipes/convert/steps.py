"""The training steps a corpus takes: epochs of its docs turned into spaCy's
`max_steps`, `eval_frequency` and warm-up, so that the model `spacy train`
saves last is scored on the dev set.

spaCy's training loop counts steps from 0, scores the dev set at every step
that is a multiple of `eval_frequency` and stops after step `max_steps`: the
last step is scored only when `max_steps` is a multiple of `eval_frequency`.
Counting epochs (`max_epochs` with `max_steps = 0`) does not work with our
configs: their learning rate decays linearly to 0 at `total_steps =
${training.max_steps}`.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import List

from spacy.tokens import DocBin

from ..io.errors import ConversionError

# The warm-up takes this share of the steps (configs/*.cfg: 188 of 1,880).
WARMUP_SHARE = 10


@dataclass(frozen=True)
class TrainingSteps:
    """The steps of a training run over `epochs` passes of a corpus.

    n_docs (int): The training docs.
    batch_size (int): Docs per step.
    epochs (int): Passes over the docs.
    eval_frequency (int): Steps of one epoch, ceil(n_docs / batch_size): the
        dev set is scored after each epoch.
    max_steps (int): epochs * eval_frequency, so that the last step is scored.
    warmup_steps (int): A tenth of max_steps, rounded down.
    """

    n_docs: int
    batch_size: int
    epochs: int
    eval_frequency: int
    max_steps: int
    warmup_steps: int

    def overrides(self) -> List[str]:
        """The `spacy train` options that set these steps."""
        return [
            "--training.max_steps",
            str(self.max_steps),
            "--training.eval_frequency",
            str(self.eval_frequency),
            "--training.optimizer.learn_rate.warmup_steps",
            str(self.warmup_steps),
        ]


def training_steps(n_docs: int, *, epochs: int, batch_size: int = 32) -> TrainingSteps:
    """The steps of `epochs` passes over `n_docs` docs in batches of `batch_size`.

    n_docs (int): The training docs (at least 1).
    epochs (int): Passes over them (at least 1).
    batch_size (int): Docs per step, the batcher's `size` (32 in configs/).
    RETURNS (TrainingSteps): max_steps, eval_frequency and warmup_steps.
    """
    if n_docs < 1 or epochs < 1 or batch_size < 1:
        raise ValueError(
            f"training steps need at least 1 doc, epoch and doc per batch, got n_docs={n_docs}, "
            f"epochs={epochs}, batch_size={batch_size}"
        )
    per_epoch = math.ceil(n_docs / batch_size)
    max_steps = epochs * per_epoch
    return TrainingSteps(
        n_docs=n_docs,
        batch_size=batch_size,
        epochs=epochs,
        eval_frequency=per_epoch,
        max_steps=max_steps,
        warmup_steps=max_steps // WARMUP_SHARE,
    )


def count_docs(path: Path) -> int:
    """The number of docs in a `.spacy` file."""
    path = Path(path)
    try:
        return len(DocBin().from_disk(path))
    except (OSError, ValueError) as err:
        raise ConversionError(str(path), f"not a readable .spacy file: {err}") from None
