"""`spacy-bert-pipes.ProgressLogger.v1`: spaCy's console logger, plus a line
at a steady interval between evaluations when no progress bar shows.

spaCy's `ConsoleLogger.v3` prints a table row at each evaluation, and its tqdm
bar disables itself when stderr is not a terminal: a log redirected to a file
(`spacy train ... > train.log 2>&1`) shows nothing between one evaluation and
the next, which for our configs is an epoch (an hour of CPU training). This
logger writes, between evaluations, every `interval_seconds`:

    progress: step 120 of 1880 (6%), epoch 0, 3m12s elapsed, 1.60 s/step, about 47m left

to the stream the table goes to (stdout). The loss is not in the line: spaCy
hands a logger the losses only at an evaluation, where the table shows them.
"""

import sys
import time
from typing import IO, Any, Callable, Dict, Optional, Tuple, Union

from spacy.language import Language
from spacy.training.loggers import console_logger_v3
from spacy.util import registry

# (log_step, finalize): what a spaCy logger's setup returns.
LoggerCallbacks = Tuple[Callable[[Optional[Dict[str, Any]]], None], Callable[[], None]]


@registry.loggers("spacy-bert-pipes.ProgressLogger.v1")
def progress_logger(
    progress_bar: Optional[str] = None,
    console_output: bool = True,
    output_file: Optional[str] = None,
    interval_seconds: float = 60.0,
) -> Callable[[Language, IO, IO], LoggerCallbacks]:
    """spaCy's `ConsoleLogger.v3` with the same first three settings, and a
    progress line on stdout every `interval_seconds` between evaluations when
    no progress bar shows (progress_bar null, or stderr not a terminal, as in
    a redirected log).

    progress_bar (Optional[str]): "train", "eval" or None, as ConsoleLogger.v3.
    console_output (bool): Print the table (and the progress lines).
    output_file (Optional[str]): A JSONL file of the evaluations, as ConsoleLogger.v3.
    interval_seconds (float): Seconds between progress lines (0: every step).
    """
    if interval_seconds < 0:
        raise ValueError(f"interval_seconds must be >= 0, got {interval_seconds!r}")
    console = console_logger_v3(progress_bar, console_output, output_file)

    def setup_printer(
        nlp: Language, stdout: IO = sys.stdout, stderr: IO = sys.stderr
    ) -> LoggerCallbacks:
        log_step, finalize = console(nlp, stdout, stderr)
        bar_shows = progress_bar is not None and _is_terminal(stderr)
        if not console_output or bar_shows:
            return log_step, finalize
        max_steps = int(nlp.config["training"]["max_steps"])
        start = last = time.monotonic()
        step, epoch = 0, 0

        def log_progress(info: Optional[Dict[str, Any]]) -> None:
            nonlocal step, epoch, last
            log_step(info)
            if info is not None:  # an evaluation: the table has its row
                step, epoch = int(info["step"]), int(info["epoch"])
                last = time.monotonic()
                return
            step += 1
            now = time.monotonic()
            if now - last < interval_seconds:
                return
            last = now
            stdout.write(progress_line(step, max_steps, epoch, now - start) + "\n")
            stdout.flush()

        return log_progress, finalize

    return setup_printer


def progress_line(step: int, max_steps: int, epoch: int, elapsed: float) -> str:
    """The line a redirected log gets between evaluations. Steps count from 0,
    as in the table; `epoch` is the last evaluation's (max_steps 0: no end)."""
    per_step = elapsed / max(step, 1)
    line = f"progress: step {step}"
    if max_steps > 0:
        line += f" of {max_steps} ({step / max_steps:.0%})"
    line += f", epoch {epoch}, {_duration(elapsed)} elapsed, {per_step:.2f} s/step"
    if max_steps > step:
        line += f", about {_duration(per_step * (max_steps - step))} left"
    return line


def _duration(seconds: float) -> str:
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _is_terminal(stream: Union[IO, Any]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())
