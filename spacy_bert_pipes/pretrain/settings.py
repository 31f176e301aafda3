"""The settings of a pretraining run, its summary, and the names of what it
writes into its output folder."""

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Literal, Optional

from ..io.readers import InputFormat
from ..models.encoder.loaders import DEFAULT_ENCODER

# "auto": bf16 on GPUs that support it and on CPUs with AMX / AVX-512 BF16.
PretrainPrecision = Literal["fp32", "bf16", "auto"]

SETTINGS_NAME = "pretrain_settings.json"
LOG_NAME = "pretrain_log.jsonl"
METRICS_NAME = "pretrain_metrics.json"
ENCODER_DIR = "encoder"
CHECKPOINTS_DIR = "checkpoints"
STATE_NAME = "state.json"
SETTINGS_VERSION = 1


class PretrainError(ValueError):
    """A problem with the settings or with an earlier run in the output folder."""


@dataclass(frozen=True)
class PretrainSettings:
    """The settings of a pretraining run.

    encoder (str): The encoder to start from: a folder, an installed model
        package or a hub name.
    input_format (InputFormat): "auto" infers it from the suffix (a folder is "txt").
    text_column (str): The column or field holding the text.
    id_column (Optional[str]): The column or field holding the id (named in
        messages about unreadable rows).
    epochs (int): Passes over the training texts; 0 for no limit (then
        `max_steps` must be set).
    max_steps (int): Stop after this many steps, if fewer than `epochs` take; 0
        for no limit.
    batch_size (int): Windows per step.
    max_length (int): The most wordpieces per window, special tokens included;
        a longer text is cut into several windows.
    learning_rate (float): The peak learning rate of AdamW.
    warmup (float): The share of the steps over which the learning rate rises
        linearly from 0; it then falls linearly to 0 at the last step.
    weight_decay (float): AdamW weight decay (not applied to biases and norms).
    mlm_probability (float): The share of wordpieces (or words) chosen.
    whole_word_masking (bool): Choose whole words: all pieces of a chosen word
        are predicted.
    precision (PretrainPrecision): "fp32", "bf16" autocast, or "auto".
    gpu_id (int): The GPU to train on; -1 for the CPU.
    checkpoint_every (int): Steps between checkpoints; 0 for none.
    keep_checkpoints (int): How many of the latest checkpoints to keep.
    log_every (int): Steps between lines of the log.
    held_out (int): Texts held out to measure the masked-LM loss before, during
        and after training: at most a tenth of the texts; 0 for none.
    seed (int): Seeds the held-out sample, the batch order, masks and dropout.
    overwrite (bool): Discard an earlier run in the output folder, finished or
        not, and start over.
    """

    encoder: str = DEFAULT_ENCODER
    input_format: InputFormat = "auto"
    text_column: str = "text"
    id_column: Optional[str] = None
    epochs: int = 3
    max_steps: int = 0
    batch_size: int = 32
    max_length: int = 128
    learning_rate: float = 5e-5
    warmup: float = 0.06
    weight_decay: float = 0.01
    mlm_probability: float = 0.15
    whole_word_masking: bool = False
    precision: PretrainPrecision = "fp32"
    gpu_id: int = -1
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    log_every: int = 10
    held_out: int = 500
    seed: int = 0
    overwrite: bool = False


# Settings that do not change the result: a run may resume with other values.
RUN_ONLY = ("gpu_id", "checkpoint_every", "keep_checkpoints", "log_every", "overwrite")


@dataclass
class PretrainSummary:
    """What a run did.

    output_dir (Path): The output folder.
    encoder_path (Path): The trained encoder's folder.
    texts (int): Texts read (held-out ones included).
    skipped_rows (int): Rows without a usable text (unreadable or blank).
    held_out_texts (int): Texts held out.
    windows (int): Training windows.
    steps (int): Steps trained in all (in this and earlier runs).
    resumed_from (Optional[int]): The checkpoint step this run resumed from.
    held_out_loss_before (Optional[float]): The held-out masked-LM loss before
        training (None without held-out texts).
    held_out_loss_after (Optional[float]): The same after training.
    seconds (float): Training time, over all runs.
    new_head (List[str]): MLM head weights the encoder lacked and that were
        newly initialised.
    already_finished (bool): The output folder held a finished run with these
        settings, and nothing was trained.
    """

    output_dir: Path
    encoder_path: Path
    texts: int
    skipped_rows: int
    held_out_texts: int
    windows: int
    steps: int
    resumed_from: Optional[int]
    held_out_loss_before: Optional[float]
    held_out_loss_after: Optional[float]
    seconds: float
    new_head: List[str] = field(default_factory=list)
    already_finished: bool = False

    @property
    def perplexity_before(self) -> Optional[float]:
        return perplexity(self.held_out_loss_before)

    @property
    def perplexity_after(self) -> Optional[float]:
        return perplexity(self.held_out_loss_after)


def check_settings(settings: PretrainSettings) -> None:
    problems = []
    if settings.epochs < 0 or settings.max_steps < 0:
        problems.append("epochs and max_steps must be 0 or more")
    if settings.epochs == 0 and settings.max_steps == 0:
        problems.append("set epochs or max_steps (both are 0: no end)")
    if settings.batch_size < 1:
        problems.append(f"batch_size must be at least 1, got {settings.batch_size}")
    if settings.max_length < 3:
        problems.append(f"max_length must be at least 3, got {settings.max_length}")
    if not 0.0 <= settings.warmup < 1.0:
        problems.append(f"warmup is a share of the steps in [0, 1), got {settings.warmup}")
    if not 0.0 < settings.mlm_probability < 1.0:
        problems.append(f"mlm_probability must be in (0, 1), got {settings.mlm_probability}")
    if settings.log_every < 1:
        problems.append(f"log_every must be at least 1, got {settings.log_every}")
    if settings.checkpoint_every < 0 or settings.keep_checkpoints < 1:
        problems.append("checkpoint_every must be 0 or more and keep_checkpoints at least 1")
    if settings.held_out < 0:
        problems.append(f"held_out must be 0 or more, got {settings.held_out}")
    if problems:
        raise PretrainError("; ".join(problems))


def total_steps(n_batches: int, settings: PretrainSettings) -> int:
    limits = []
    if settings.epochs:
        limits.append(settings.epochs * n_batches)
    if settings.max_steps:
        limits.append(settings.max_steps)
    return min(limits)


def perplexity(loss: Optional[float]) -> Optional[float]:
    if loss is None or math.isnan(loss):
        return None
    return math.exp(min(loss, 700.0))
