"""Domain-adaptive pretraining: continue an encoder's masked-LM training on a
text collection, then hand the encoder to any component's config.

`pretrain` reads the texts of a CSV, JSONL or Parquet file or a folder of
`.txt` files (with `io.readers.read_input`), holds out a seeded sample of them,
cuts the rest into windows of at most `max_length` wordpieces and trains with
BERT's masking (`models.mlm.mask_tokens`: 15% of the wordpieces chosen, of
those 80% masked, 10% replaced by a random wordpiece, 10% kept). Batches are
padded to their longest window, and windows of similar length are batched
together (sorted within pools of 50 batches, the batches then shuffled), so
little time goes to padding. It writes into OUTPUT:

    pretrain_settings.json   the input's identity and the settings of the run
    pretrain_log.jsonl       the mean loss every `log_every` steps, and the
                             held-out loss at the start, at each checkpoint
                             and at the end
    checkpoints/step-N/      model, optimizer, schedule, random and data
                             position state every `checkpoint_every` steps
                             (the last `keep_checkpoints` are kept)
    encoder/                 the trained encoder without its MLM head, and
                             its tokenizer: set a component's
                             [initialize.components.X.encoder_loader] source
                             to this folder
    pretrain_metrics.json    the summary, written last: the run is finished

Run the same command again after a crash or a kill and it resumes from the
latest checkpoint, provided the input and the settings are unchanged; the
resumed run ends with the same weights as an uninterrupted one (on the same
device). An unfinished run with another input or other settings is an error
(`overwrite` discards it). A finished run with the same input and settings is
not repeated; with others it is replaced, as spaCy's commands replace their
output.
"""

import json
import math
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple

import numpy

from .io import durable
from .io.errors import ConversionError
from .io.readers import InputFormat, input_format_for, read_input
from .models.loaders import DEFAULT_ENCODER

if TYPE_CHECKING:  # torch is imported when a run starts, not with this module
    from .models.mlm import MLMTrainer, Window

# "auto": bf16 on GPUs that support it and on CPUs with AMX / AVX-512 BF16.
PretrainPrecision = Literal["fp32", "bf16", "auto"]

SETTINGS_NAME = "pretrain_settings.json"
LOG_NAME = "pretrain_log.jsonl"
METRICS_NAME = "pretrain_metrics.json"
ENCODER_DIR = "encoder"
CHECKPOINTS_DIR = "checkpoints"
STATE_NAME = "state.json"
SETTINGS_VERSION = 1
# Windows are sorted by length within pools of this many batches: batches of
# similar lengths waste little on padding, and the order stays random enough.
POOL_BATCHES = 50
# Texts are tokenized this many at a time.
_TOKENIZE_CHUNK = 1000
_STEP_DIR = re.compile(r"step-(\d+)")


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
_RUN_ONLY = ("gpu_id", "checkpoint_every", "keep_checkpoints", "log_every", "overwrite")


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
        return _perplexity(self.held_out_loss_before)

    @property
    def perplexity_after(self) -> Optional[float]:
        return _perplexity(self.held_out_loss_after)


@dataclass(frozen=True)
class TextCollection:
    """The usable texts of an input.

    texts (List[str]): The texts, in input order.
    skipped (int): Rows without a usable text.
    first_skipped (Optional[str]): Where the first of them is and why, e.g.
        "train.csv:12: text is null".
    """

    texts: List[str]
    skipped: int
    first_skipped: Optional[str]


def read_texts(path: Path, settings: PretrainSettings) -> TextCollection:
    """Read the texts to pretrain on. Rows that cannot be read (see
    `io.readers.read_input`) and blank texts are skipped and counted.

    path (Path): The input file or folder.
    settings (PretrainSettings): The input format and columns.
    RETURNS (TextCollection): The texts.
    """
    rows = read_input(
        path,
        input_format=settings.input_format,
        text_column=settings.text_column,
        id_column=settings.id_column,
    )
    texts: List[str] = []
    skipped = 0
    first_skipped = None
    for row in rows:
        if row.text is not None and row.text.strip():
            texts.append(row.text)
            continue
        skipped += 1
        if first_skipped is None:
            first_skipped = f"{row.source}: {row.error or 'blank text'}"
    if not texts:
        detail = f" (the first: {first_skipped})" if first_skipped else ""
        raise ConversionError(
            str(path),
            f"no texts to pretrain on in column {settings.text_column!r}: "
            f"{skipped} rows, none with a non-blank text{detail}",
        )
    return TextCollection(texts, skipped, first_skipped)


def held_out_split(n_texts: int, held_out: int, seed: int) -> Tuple[List[int], List[int]]:
    """Split text indices into training and held-out ones (a seeded sample of at
    most a tenth of the texts).

    n_texts (int): The number of texts.
    held_out (int): The held-out texts wanted.
    seed (int): Seeds the sample.
    RETURNS (Tuple[List[int], List[int]]): Training and held-out indices, ascending.
    """
    n_held = min(held_out, n_texts // 10)
    order = numpy.random.default_rng(seed).permutation(n_texts)
    return sorted(order[n_held:].tolist()), sorted(order[:n_held].tolist())


def epoch_batches(
    lengths: Sequence[int], batch_size: int, seed: int, epoch: int
) -> List[List[int]]:
    """The batches of one epoch, as window indices. Windows are shuffled, sorted
    by length within pools of `POOL_BATCHES` batches and cut into batches,
    whose order is then shuffled. The same seed and epoch give the same batches
    (a resumed run skips the ones done), and every epoch has as many batches.

    lengths (Sequence[int]): The length of each window.
    batch_size (int): Windows per batch.
    seed (int): The run's seed.
    epoch (int): The epoch, from 0.
    RETURNS (List[List[int]]): The batches.
    """
    rng = numpy.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    pool = batch_size * POOL_BATCHES
    batches: List[List[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


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
    output_dir (Path): The output folder (see the module docstring).
    settings (PretrainSettings): The settings.
    progress (bool): Show a progress bar (on stderr) with the loss.
    report (Callable[[str], None]): Receives messages about the run: what was
        read, resuming, a newly initialised MLM head.
    RETURNS (PretrainSummary): What the run did.
    """
    from .models.mlm import MLMTrainer, load_masked_lm

    _check_settings(settings)
    input_path = Path(input_path)
    output_dir = Path(output_dir)
    if not input_path.exists():
        raise ConversionError(str(input_path), "no such file or folder")
    input_format_for(input_path, settings.input_format)  # a bad suffix fails first
    record = _settings_record(input_path, settings)
    start_over = settings.overwrite
    if not start_over:
        finished, start_over = _earlier_run(output_dir, record, report)
        if finished is not None:
            return finished
    collection = read_texts(input_path, settings)
    texts = collection.texts
    if collection.skipped:
        report(
            f"Skipped {collection.skipped} rows without a usable text "
            f"(the first: {collection.first_skipped})"
        )
    train_ids, held_ids = held_out_split(len(texts), settings.held_out, settings.seed)
    mlm = load_masked_lm(settings.encoder)
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
    words = settings.whole_word_masking
    windows = _encode(mlm.tokenizer, [texts[i] for i in train_ids], settings)
    held_windows = _encode(mlm.tokenizer, [texts[i] for i in held_ids], settings)
    lengths = [len(w.ids) for w in windows]
    n_batches = len(epoch_batches(lengths, settings.batch_size, settings.seed, 0))
    total_steps = _total_steps(n_batches, settings)
    report(
        f"Pretraining on {len(train_ids)} texts ({len(windows)} windows, {n_batches} "
        f"batches an epoch) for {total_steps} steps; {len(held_ids)} texts held out"
        + (" (whole-word masking)" if words else "")
    )
    trainer = MLMTrainer(
        mlm,
        total_steps=total_steps,
        warmup_steps=int(settings.warmup * total_steps),
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        mlm_probability=settings.mlm_probability,
        whole_word_masking=words,
        precision=settings.precision,
        gpu_id=settings.gpu_id,
        seed=settings.seed,
    )
    held_batches = [
        [held_windows[i] for i in batch]
        for batch in _sorted_batches([len(w.ids) for w in held_windows], settings.batch_size)
    ]
    eval_seed = settings.seed + 1
    held_out_losses: Dict[int, Optional[float]] = {}

    def evaluate(step: int) -> Optional[float]:
        if step in held_out_losses or not held_batches:
            return held_out_losses.get(step)
        loss, _ = trainer.evaluate(held_batches, eval_seed)
        held_out_losses[step] = loss
        _append_log(
            output_dir,
            {"step": step, "held_out_loss": loss, "held_out_perplexity": _perplexity(loss)},
        )
        return loss

    checkpoints = output_dir / CHECKPOINTS_DIR
    latest = None if start_over else _latest_checkpoint(checkpoints)
    if latest is not None:
        state = json.loads((latest / STATE_NAME).read_text(encoding="utf8"))
        trainer.load_checkpoint(latest)
        _truncate_log(output_dir, state["step"])
        resumed_from: Optional[int] = state["step"]
        report(f"Resuming from {latest} (step {state['step']} of {total_steps})")
    else:
        _clear(output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        _write_json(output_dir / SETTINGS_NAME, record)
        state = {"step": 0, "epoch": 0, "batch": 0, "seconds": 0.0}
        resumed_from = None
        state["held_out_loss_before"] = evaluate(0)
    step, epoch, position = state["step"], state["epoch"], state["batch"]
    seconds = float(state["seconds"])
    bar = _progress_bar(total_steps, step, disable=not progress)
    window_loss, window_masked = 0.0, 0
    started = time.perf_counter()
    while step < total_steps:
        batches = epoch_batches(lengths, settings.batch_size, settings.seed, epoch)
        for batch in batches[position:]:
            learning_rate = trainer.learning_rate
            loss, masked = trainer.train_step([windows[i] for i in batch])
            step += 1
            position += 1
            window_loss += loss * masked
            window_masked += masked
            bar.update(1)
            if step % settings.log_every == 0 or step == total_steps:
                mean = window_loss / window_masked if window_masked else math.nan
                _append_log(
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
                _save_checkpoint(trainer, checkpoints, state, settings.keep_checkpoints)
            if step >= total_steps:
                break
        if position >= len(batches):
            epoch, position = epoch + 1, 0
    bar.close()
    run_seconds = time.perf_counter() - started
    seconds += run_seconds
    loss_after = evaluate(step)
    encoder_path = output_dir / ENCODER_DIR
    durable.replace_dir(encoder_path, trainer.save_encoder)
    summary = PretrainSummary(
        output_dir=output_dir,
        encoder_path=encoder_path,
        texts=len(texts),
        skipped_rows=collection.skipped,
        held_out_texts=len(held_ids),
        windows=len(windows),
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
    _write_json(output_dir / METRICS_NAME, metrics)
    return summary


def _check_settings(settings: PretrainSettings) -> None:
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


def _total_steps(n_batches: int, settings: PretrainSettings) -> int:
    limits = []
    if settings.epochs:
        limits.append(settings.epochs * n_batches)
    if settings.max_steps:
        limits.append(settings.max_steps)
    return min(limits)


def _encode(tokenizer: Any, texts: List[str], settings: PretrainSettings) -> List["Window"]:
    from .models.mlm import encode_texts

    windows: List[Window] = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        chunk = texts[start : start + _TOKENIZE_CHUNK]
        encoded = encode_texts(
            tokenizer, chunk, settings.max_length, words=settings.whole_word_masking
        )
        windows.extend(window for _, window in encoded)
    return windows


def _sorted_batches(lengths: Sequence[int], batch_size: int) -> List[List[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _settings_record(input_path: Path, settings: PretrainSettings) -> Dict[str, Any]:
    """What the result depends on: the input's identity and the settings."""
    if input_path.is_dir():
        stats = [p.stat() for p in sorted(input_path.rglob("*.txt")) if p.is_file()]
        identity: Dict[str, Any] = {
            "files": len(stats),
            "size": sum(s.st_size for s in stats),
            "mtime_ns": max((s.st_mtime_ns for s in stats), default=0),
        }
    else:
        stat = input_path.stat()
        identity = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    values = {k: v for k, v in asdict(settings).items() if k not in _RUN_ONLY}
    return {
        "version": SETTINGS_VERSION,
        "input": {"path": str(input_path.resolve()), **identity},
        "settings": values,
    }


def _earlier_run(
    output_dir: Path, record: Dict[str, Any], report: Callable[[str], None]
) -> Tuple[Optional[PretrainSummary], bool]:
    """Check an earlier run in the output folder. Returns the summary of a
    finished run with the same input and settings (else None), and whether a
    finished run with others is to be replaced. An unfinished run with other
    settings is an error: its checkpoints are kept."""
    settings_path = output_dir / SETTINGS_NAME
    if not settings_path.exists():
        return None, False
    earlier = json.loads(settings_path.read_text(encoding="utf8"))
    metrics_path = output_dir / METRICS_NAME
    finished = metrics_path.exists() and (output_dir / ENCODER_DIR).is_dir()
    if earlier != record:
        if finished:
            report(
                f"Replacing the finished run in {output_dir}: another input or other "
                f"settings ({_differences(earlier, record)})"
            )
            return None, True
        raise PretrainError(
            f"{output_dir} holds an unfinished run with another input or other settings "
            f"({_differences(earlier, record)}): rerun with the same ones to resume it, "
            "or pass --overwrite to discard it and start over"
        )
    if not finished:
        return None, False
    metrics = json.loads(metrics_path.read_text(encoding="utf8"))
    summary = PretrainSummary(
        output_dir=output_dir,
        encoder_path=output_dir / ENCODER_DIR,
        texts=metrics["texts"],
        skipped_rows=metrics["skipped_rows"],
        held_out_texts=metrics["held_out_texts"],
        windows=metrics["windows"],
        steps=metrics["steps"],
        resumed_from=metrics["resumed_from"],
        held_out_loss_before=metrics["held_out_loss_before"],
        held_out_loss_after=metrics["held_out_loss_after"],
        seconds=metrics["seconds"],
        new_head=metrics["new_head"],
        already_finished=True,
    )
    return summary, False


def _differences(earlier: Dict[str, Any], now: Dict[str, Any]) -> str:
    changes = []
    for section in ("input", "settings"):
        old, new = earlier.get(section, {}), now.get(section, {})
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                changes.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return ", ".join(changes) or "another version of the settings file"


def _clear(output_dir: Path) -> None:
    """Remove what a run writes into the output folder (and nothing else)."""
    leftovers = (ENCODER_DIR + durable.TMP_SUFFIX, ENCODER_DIR + durable.OLD_SUFFIX)
    for name in (CHECKPOINTS_DIR, ENCODER_DIR, *leftovers):
        if (output_dir / name).exists():
            shutil.rmtree(output_dir / name)
    for name in (SETTINGS_NAME, LOG_NAME, METRICS_NAME):
        (output_dir / name).unlink(missing_ok=True)


def _latest_checkpoint(checkpoints: Path) -> Optional[Path]:
    """The complete checkpoint with the highest step (a folder still being
    written has a .tmp name)."""
    if not checkpoints.is_dir():
        return None
    found = []
    for path in checkpoints.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and (path / STATE_NAME).exists():
            found.append((int(match[1]), path))
    return max(found)[1] if found else None


def _save_checkpoint(
    trainer: "MLMTrainer", checkpoints: Path, state: Dict[str, Any], keep: int
) -> None:
    """Write a checkpoint durably under a temporary name and rename it into
    place (the state file, written last, marks it complete); drop the oldest
    beyond `keep`."""

    def write(tmp: Path) -> None:
        trainer.save_checkpoint(tmp)
        _write_json(tmp / STATE_NAME, state)

    durable.replace_dir(checkpoints / f"step-{state['step']}", write)
    done = sorted(
        (int(m[1]), p)
        for p in checkpoints.iterdir()
        if (m := _STEP_DIR.fullmatch(p.name)) is not None
    )
    for _, path in done[:-keep]:
        shutil.rmtree(path)


def _append_log(output_dir: Path, entry: Dict[str, Any]) -> None:
    with (output_dir / LOG_NAME).open("a", encoding="utf8") as file:
        file.write(json.dumps(entry) + "\n")


def _truncate_log(output_dir: Path, step: int) -> None:
    """Keep the log lines up to a checkpoint: a resumed run writes the rest again."""
    path = output_dir / LOG_NAME
    if not path.exists():
        return
    lines = path.read_text(encoding="utf8").splitlines()
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    durable.write_text(path, "".join(line + "\n" for line in kept))


def _write_json(path: Path, data: Dict[str, Any]) -> None:
    durable.write_text(path, json.dumps(data, indent=2) + "\n")


def _perplexity(loss: Optional[float]) -> Optional[float]:
    if loss is None or math.isnan(loss):
        return None
    return math.exp(min(loss, 700.0))


def _rate(steps: int, seconds: float) -> Optional[float]:
    return round(steps / seconds, 3) if seconds > 0 else None


def _progress_bar(total: int, initial: int, disable: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit=" steps",
        desc="Pretraining",
        file=sys.stderr,
        dynamic_ncols=True,
        disable=disable,
    )
