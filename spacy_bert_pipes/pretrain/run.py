"""`pretrain`: a run in stages. Check the settings and any earlier run in the
output folder; read the texts and load the encoder; cut them into windows and
batches; start or resume from the latest checkpoint; train, logging and
checkpointing as it goes; save the encoder and the metrics (written last)."""

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ..io import durable
from ..io.errors import ConversionError
from ..io.readers import input_format_for
from ..progress import progress_bar
from .checkpoints import (
    append_log,
    clear_output,
    earlier_run,
    latest_checkpoint,
    save_checkpoint,
    settings_record,
    truncate_log,
    write_json,
)
from .data import (
    TextCollection,
    encode_windows,
    epoch_batches,
    held_out_split,
    read_texts,
    sorted_batches,
)
from .settings import (
    CHECKPOINTS_DIR,
    ENCODER_DIR,
    METRICS_NAME,
    SETTINGS_NAME,
    STATE_NAME,
    PretrainError,
    PretrainSettings,
    PretrainSummary,
    check_settings,
    perplexity,
    total_steps,
)

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from .mlm import MaskedLM, Window
    from .trainer import MLMTrainer


@dataclass
class RunData:
    """The texts of a run, cut into windows and batches.

    collection (TextCollection): The texts read.
    held_texts (int): The texts held out.
    train_texts (int): The texts trained on.
    windows (List[Window]): The training windows.
    lengths (List[int]): Their lengths, for batching.
    held_batches (List[List[Window]]): The held-out windows, batched by length.
    total_steps (int): The steps of the whole run.
    """

    collection: TextCollection
    held_texts: int
    train_texts: int
    windows: List["Window"]
    lengths: List[int]
    held_batches: List[List["Window"]]
    total_steps: int


class HeldOut:
    """Scores the held-out batches at a step, once, and logs the loss."""

    def __init__(self, trainer: "MLMTrainer", data: RunData, seed: int, output_dir: Path):
        self.trainer = trainer
        self.batches = data.held_batches
        self.seed = seed
        self.output_dir = output_dir
        self.losses: Dict[int, Optional[float]] = {}

    def __call__(self, step: int) -> Optional[float]:
        if step in self.losses or not self.batches:
            return self.losses.get(step)
        loss, _ = self.trainer.evaluate(self.batches, self.seed)
        self.losses[step] = loss
        append_log(
            self.output_dir,
            {"step": step, "held_out_loss": loss, "held_out_perplexity": perplexity(loss)},
        )
        return loss


def pretrain(
    input_path: Path,
    output_dir: Path,
    settings: PretrainSettings = PretrainSettings(),
    *,
    progress: bool = False,
    report: Callable[[str], None] = lambda message: None,
) -> PretrainSummary:
    """Continue the masked-LM pretraining of an encoder on a text collection.

    input_path (Path): A .csv, .jsonl or .parquet file, or a folder of .txt files.
    output_dir (Path): The output folder (see the package docstring).
    settings (PretrainSettings): The settings.
    progress (bool): Show a progress bar (on stderr) with the loss.
    report (Callable[[str], None]): Receives messages about the run: what was
        read, resuming, a newly initialised MLM head.
    RETURNS (PretrainSummary): What the run did.
    """
    from .mlm import load_masked_lm
    from .trainer import MLMTrainer

    check_settings(settings)
    input_path = Path(input_path)
    output_dir = Path(output_dir)
    if not input_path.exists():
        raise ConversionError(str(input_path), "no such file or folder")
    input_format_for(input_path, settings.input_format)  # a bad suffix fails first
    record = settings_record(input_path, settings)
    start_over = settings.overwrite
    if not start_over:
        finished, start_over = earlier_run(output_dir, record, report)
        if finished is not None:
            return finished
    collection = read_texts(input_path, settings)
    if collection.skipped:
        report(
            f"Skipped {collection.skipped} rows without a usable text "
            f"(the first: {collection.first_skipped})"
        )
    train_ids, held_ids = held_out_split(len(collection.texts), settings.held_out, settings.seed)
    mlm = load_masked_lm(settings.encoder)
    _check_encoder(mlm, settings, report)
    data = _prepare_data(collection, train_ids, held_ids, mlm, settings, report)
    trainer = MLMTrainer(
        mlm,
        total_steps=data.total_steps,
        warmup_steps=int(settings.warmup * data.total_steps),
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        mlm_probability=settings.mlm_probability,
        whole_word_masking=settings.whole_word_masking,
        precision=settings.precision,
        gpu_id=settings.gpu_id,
        seed=settings.seed,
    )
    evaluate = HeldOut(trainer, data, settings.seed + 1, output_dir)
    state, resumed_from = _start_or_resume(
        trainer, output_dir, record, start_over, evaluate, data.total_steps, report
    )
    step, seconds, run_seconds = _train(
        trainer, data, settings, state, evaluate, output_dir, progress
    )
    return _finish(
        trainer,
        mlm,
        data,
        settings,
        output_dir,
        state,
        evaluate,
        step,
        seconds,
        run_seconds,
        resumed_from,
    )


def _check_encoder(
    mlm: "MaskedLM", settings: PretrainSettings, report: Callable[[str], None]
) -> None:
    """Warn about a new MLM head; fail when max_length exceeds the positions."""
    if mlm.new_head:
        report(
            f"Warning: encoder {settings.encoder!r} has no masked-LM head: a new one was "
            f"initialised ({len(mlm.new_head)} weights, e.g. {mlm.new_head[0]}). The "
            "first steps mostly train the head, and the held-out loss starts high."
        )
    max_positions = getattr(mlm.model.config, "max_position_embeddings", None)
    if max_positions is not None and settings.max_length > max_positions:
        raise PretrainError(
            f"max_length {settings.max_length} is longer than the encoder's "
            f"{max_positions} positions"
        )


def _prepare_data(
    collection: TextCollection,
    train_ids: List[int],
    held_ids: List[int],
    mlm: "MaskedLM",
    settings: PretrainSettings,
    report: Callable[[str], None],
) -> RunData:
    """Cut the training and held-out texts into windows, and count the steps."""
    texts = collection.texts
    windows = encode_windows(mlm.tokenizer, [texts[i] for i in train_ids], settings)
    held_windows = encode_windows(mlm.tokenizer, [texts[i] for i in held_ids], settings)
    lengths = [len(w.ids) for w in windows]
    n_batches = len(epoch_batches(lengths, settings.batch_size, settings.seed, 0))
    steps = total_steps(n_batches, settings)
    report(
        f"Pretraining on {len(train_ids)} texts ({len(windows)} windows, {n_batches} "
        f"batches an epoch) for {steps} steps; {len(held_ids)} texts held out"
        + (" (whole-word masking)" if settings.whole_word_masking else "")
    )
    held_batches = [
        [held_windows[i] for i in batch]
        for batch in sorted_batches([len(w.ids) for w in held_windows], settings.batch_size)
    ]
    return RunData(collection, len(held_ids), len(train_ids), windows, lengths, held_batches, steps)


def _start_or_resume(
    trainer: "MLMTrainer",
    output_dir: Path,
    record: Dict[str, Any],
    start_over: bool,
    evaluate: HeldOut,
    steps: int,
    report: Callable[[str], None],
) -> Tuple[Dict[str, Any], Optional[int]]:
    """Restore the latest checkpoint, or start a fresh output folder (and score
    the held-out texts before training). Returns the run's state and the step
    it resumed from (None for a fresh start)."""
    latest = None if start_over else latest_checkpoint(output_dir / CHECKPOINTS_DIR)
    if latest is not None:
        state = json.loads((latest / STATE_NAME).read_text(encoding="utf8"))
        trainer.load_checkpoint(latest)
        truncate_log(output_dir, state["step"])
        report(f"Resuming from {latest} (step {state['step']} of {steps})")
        return state, state["step"]
    clear_output(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_json(output_dir / SETTINGS_NAME, record)
    state = {"step": 0, "epoch": 0, "batch": 0, "seconds": 0.0}
    state["held_out_loss_before"] = evaluate(0)
    return state, None


def _train(
    trainer: "MLMTrainer",
    data: RunData,
    settings: PretrainSettings,
    state: Dict[str, Any],
    evaluate: HeldOut,
    output_dir: Path,
    progress: bool,
) -> Tuple[int, float, float]:
    """Train from the step in `state` to the last, logging every `log_every`
    steps and checkpointing every `checkpoint_every`. Returns the last step,
    the seconds of the whole run (earlier runs included) and of this one."""
    step, epoch, position = state["step"], state["epoch"], state["batch"]
    seconds = float(state["seconds"])
    bar = progress_bar(
        data.total_steps, step, unit=" steps", desc="Pretraining", disable=not progress
    )
    window_loss, window_masked = 0.0, 0
    started = time.perf_counter()
    while step < data.total_steps:
        batches = epoch_batches(data.lengths, settings.batch_size, settings.seed, epoch)
        for batch in batches[position:]:
            learning_rate = trainer.learning_rate
            loss, masked = trainer.train_step([data.windows[i] for i in batch])
            step += 1
            position += 1
            window_loss += loss * masked
            window_masked += masked
            bar.update(1)
            if step % settings.log_every == 0 or step == data.total_steps:
                mean = window_loss / window_masked if window_masked else math.nan
                append_log(
                    output_dir,
                    {
                        "step": step,
                        "epoch": round(epoch + position / len(batches), 4),
                        "loss": mean,
                        "masked": window_masked,
                        "learning_rate": learning_rate,
                        "seconds": round(seconds + time.perf_counter() - started, 2),
                    },
                )
                bar.set_postfix(loss=f"{mean:.3f}", lr=f"{learning_rate:.2e}")
                window_loss, window_masked = 0.0, 0
            if settings.checkpoint_every and step % settings.checkpoint_every == 0:
                next_epoch, next_position = (
                    (epoch + 1, 0) if position == len(batches) else (epoch, position)
                )
                state.update(
                    step=step,
                    epoch=next_epoch,
                    batch=next_position,
                    seconds=seconds + time.perf_counter() - started,
                )
                # Logged before the checkpoint exists: a resumed run keeps the line.
                evaluate(step)
                save_checkpoint(
                    trainer, output_dir / CHECKPOINTS_DIR, state, settings.keep_checkpoints
                )
            if step >= data.total_steps:
                break
        if position >= len(batches):
            epoch, position = epoch + 1, 0
    bar.close()
    run_seconds = time.perf_counter() - started
    return step, seconds + run_seconds, run_seconds


def _finish(
    trainer: "MLMTrainer",
    mlm: "MaskedLM",
    data: RunData,
    settings: PretrainSettings,
    output_dir: Path,
    state: Dict[str, Any],
    evaluate: HeldOut,
    step: int,
    seconds: float,
    run_seconds: float,
    resumed_from: Optional[int],
) -> PretrainSummary:
    """Score the held-out texts, save the encoder, then write the metrics:
    written last, they mark the run finished."""
    loss_after = evaluate(step)
    encoder_path = output_dir / ENCODER_DIR
    durable.replace_dir(encoder_path, trainer.save_encoder)
    summary = PretrainSummary(
        output_dir=output_dir,
        encoder_path=encoder_path,
        texts=len(data.collection.texts),
        skipped_rows=data.collection.skipped,
        held_out_texts=data.held_texts,
        windows=len(data.windows),
        steps=step,
        resumed_from=resumed_from,
        held_out_loss_before=state.get("held_out_loss_before"),
        held_out_loss_after=loss_after,
        seconds=seconds,
        new_head=mlm.new_head,
    )
    metrics = {
        **{k: v for k, v in asdict(summary).items() if k not in ("output_dir", "already_finished")},
        "encoder_path": str(encoder_path),
        "encoder": settings.encoder,
        "held_out_perplexity_before": summary.perplexity_before,
        "held_out_perplexity_after": summary.perplexity_after,
        "precision": trainer.precision,
        "device": str(trainer.device),
        "steps_per_second": _rate(step - (resumed_from or 0), run_seconds),
    }
    write_json(output_dir / METRICS_NAME, metrics)
    return summary


def _rate(steps: int, seconds: float) -> Optional[float]:
    return round(steps / seconds, 3) if seconds > 0 else None
