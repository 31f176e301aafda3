"""The output folder between runs: the settings record that decides whether
an earlier run is resumed, kept or replaced, the log, and the checkpoints."""

import json
import re
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

from ..io import durable
from .settings import (
    CHECKPOINTS_DIR,
    ENCODER_DIR,
    LOG_NAME,
    METRICS_NAME,
    RUN_ONLY,
    SETTINGS_NAME,
    SETTINGS_VERSION,
    STATE_NAME,
    PretrainError,
    PretrainSettings,
    PretrainSummary,
)

if TYPE_CHECKING:
    from .trainer import MLMTrainer

_STEP_DIR = re.compile(r"step-(\d+)")


def settings_record(input_path: Path, settings: PretrainSettings) -> Dict[str, Any]:
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
    values = {k: v for k, v in asdict(settings).items() if k not in RUN_ONLY}
    return {
        "version": SETTINGS_VERSION,
        "input": {"path": str(input_path.resolve()), **identity},
        "settings": values,
    }


def earlier_run(
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


def clear_output(output_dir: Path) -> None:
    """Remove what a run writes into the output folder (and nothing else)."""
    leftovers = (ENCODER_DIR + durable.TMP_SUFFIX, ENCODER_DIR + durable.OLD_SUFFIX)
    for name in (CHECKPOINTS_DIR, ENCODER_DIR, *leftovers):
        if (output_dir / name).exists():
            shutil.rmtree(output_dir / name)
    for name in (SETTINGS_NAME, LOG_NAME, METRICS_NAME):
        (output_dir / name).unlink(missing_ok=True)


def latest_checkpoint(checkpoints: Path) -> Optional[Path]:
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


def save_checkpoint(
    trainer: "MLMTrainer", checkpoints: Path, state: Dict[str, Any], keep: int
) -> None:
    """Write a checkpoint durably under a temporary name and rename it into
    place (the state file, written last, marks it complete); drop the oldest
    beyond `keep`."""

    def write(tmp: Path) -> None:
        trainer.save_checkpoint(tmp)
        write_json(tmp / STATE_NAME, state)

    durable.replace_dir(checkpoints / f"step-{state['step']}", write)
    done = sorted(
        (int(m[1]), p)
        for p in checkpoints.iterdir()
        if (m := _STEP_DIR.fullmatch(p.name)) is not None
    )
    for _, path in done[:-keep]:
        shutil.rmtree(path)


def append_log(output_dir: Path, entry: Dict[str, Any]) -> None:
    with (output_dir / LOG_NAME).open("a", encoding="utf8") as file:
        file.write(json.dumps(entry) + "\n")


def truncate_log(output_dir: Path, step: int) -> None:
    """Keep the log lines up to a checkpoint: a resumed run writes the rest again."""
    path = output_dir / LOG_NAME
    if not path.exists():
        return
    lines = path.read_text(encoding="utf8").splitlines()
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    durable.write_text(path, "".join(line + "\n" for line in kept))


def write_json(path: Path, data: Dict[str, Any]) -> None:
    durable.write_text(path, json.dumps(data, indent=2) + "\n")
