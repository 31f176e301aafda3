"""`spacy-bert-pipes.ProgressLogger.v1`: a redirected training log gets a line
between evaluations; a terminal with spaCy's bar gets none."""

import io
from pathlib import Path
from typing import Any, Dict

import pytest
import spacy
from spacy.util import load_config, registry

from spacy_bert_pipes.training_log import progress_line, progress_logger

ROOT = Path(__file__).parent.parent


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def evaluation(step: int, epoch: int = 0) -> Dict[str, Any]:
    return {"epoch": epoch, "step": step, "score": 0.5, "other_scores": {}, "losses": {}}


def run(logger: Any, stderr: io.StringIO, steps: int = 3) -> str:
    nlp = spacy.blank("en")
    nlp.config["training"]["max_steps"] = 10
    nlp.config["training"]["score_weights"] = {}
    stdout = io.StringIO()
    log_step, finalize = logger(nlp, stdout, stderr)
    log_step(evaluation(0))
    for _ in range(steps):
        log_step(None)  # what spaCy's loop calls at a step without evaluation
    log_step(evaluation(steps + 1, epoch=1))
    finalize()
    return stdout.getvalue()


def test_the_shipped_configs_log_progress_when_redirected() -> None:
    """route.cfg's logger, as `spacy train` resolves it, writes a line between
    evaluations into a log that is not a terminal (spaCy's ConsoleLogger wrote
    only the table rows)."""
    config = load_config(ROOT / "configs" / "route.cfg", interpolate=False)
    settings = dict(config["training"]["logger"], interval_seconds=0)
    logger = registry.resolve({"logger": settings})["logger"]
    out = run(logger, io.StringIO())
    lines = [line for line in out.splitlines() if line.startswith("progress:")]
    assert [line.split(",")[0] for line in lines] == [
        "progress: step 1 of 10 (10%)",
        "progress: step 2 of 10 (20%)",
        "progress: step 3 of 10 (30%)",
    ]
    assert "epoch 0" in lines[0] and "elapsed" in lines[0] and "s/step" in lines[0]


def test_no_progress_lines_within_the_interval_or_under_a_bar() -> None:
    assert "progress:" not in run(progress_logger("eval", interval_seconds=3600), io.StringIO())
    # a terminal shows spaCy's bar on stderr: no lines in the table
    assert "progress:" not in run(progress_logger("eval", interval_seconds=0), Terminal())
    # no bar asked for: the lines, terminal or not
    assert "progress: step 1" in run(progress_logger(None, interval_seconds=0), Terminal())
    assert run(progress_logger(None, console_output=False, interval_seconds=0), Terminal()) == ""
    with pytest.raises(ValueError, match="interval_seconds"):
        progress_logger(interval_seconds=-1)


def test_progress_line_counts_what_is_left() -> None:
    assert progress_line(120, 1880, 0, 192.0) == (
        "progress: step 120 of 1880 (6%), epoch 0, 3m12s elapsed, 1.60 s/step, about 46m56s left"
    )
    assert progress_line(5, 0, 2, 7200.0).startswith("progress: step 5, epoch 2, 2h00m elapsed")
