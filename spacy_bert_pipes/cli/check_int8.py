"""`bert-pipes check-int8 PIPELINE DATA...`: score a pipeline at fp32 and at int8
and, where every head stays within the tolerance, let its "auto" precision pick
int8 on CPUs without fast bf16 (docs/precision.md)."""

from pathlib import Path
from typing import List, Optional

import srsly
import typer
from wasabi import Printer

from ..int8_check import TOLERANCE, Int8CheckError, check_int8, mark_pipeline
from .common import app, fail


@app.command("check-int8")
def check_int8_cli(
    pipeline: Path = typer.Argument(
        ..., help="A trained pipeline folder", metavar="PIPELINE", exists=True, file_okay=False
    ),
    data_paths: List[Path] = typer.Argument(
        ...,
        help="Held-out .spacy corpora to score on, e.g. each head's dev set",
        metavar="DATA...",
        exists=True,
        dir_okay=False,
    ),
    tolerance: float = typer.Option(
        TOLERANCE,
        "--tolerance",
        min=0.0,
        help="The loss in points (0.3: 85.42 -> 85.12) a head may have at int8",
    ),
    scores: Optional[List[str]] = typer.Option(
        None,
        "--score",
        help="A score to compare, e.g. cats_accuracy (repeatable; default: the keys of "
        "the pipeline's [training.score_weights] above zero, one per head)",
        show_default=False,
    ),
    sample: int = typer.Option(
        0, "--sample", min=0, help="Score a random sample of this many docs of each DATA (0: all)"
    ),
    seed: int = typer.Option(0, "--seed", help="The seed of --sample"),
    batch_size: Optional[int] = typer.Option(
        None, "--batch-size", "-b", min=1, help="Docs per batch (default: the pipeline's)"
    ),
    mark: bool = typer.Option(
        True,
        "--mark/--dry-run",
        help="Write the outcome into PIPELINE (config.cfg's int8_checked, meta.json's "
        "int8_check), or only print it",
    ),
    report: Optional[Path] = typer.Option(
        None, "--report", help="Also write the figures to this JSON file", dir_okay=False
    ),
) -> None:
    """Score PIPELINE on each DATA with its bert encoders at fp32 and at int8 (ONNX
    Runtime), and compare each head's score.

    When no head loses more than --tolerance points at int8, PIPELINE is marked:
    its encoders' predict_precision "auto" then runs int8 on CPUs without AMX or
    AVX-512 BF16 (where int8 is 1.2-1.9x faster than fp32); otherwise the mark is
    taken off and "auto" stays fp32 there. Either way the figures go into its
    meta.json. Run it again after the weights change (training, add-label).
    """
    msg = Printer()
    try:
        check = check_int8(
            pipeline,
            data_paths,
            keys=scores,
            tolerance=tolerance,
            sample=sample,
            seed=seed,
            batch_size=batch_size,
        )
        rows = [
            (s.corpus, s.key, f"{s.fp32 * 100:.2f}", f"{s.int8 * 100:.2f}", f"{s.points:+.2f}")
            for s in check.scores
        ]
        msg.table(
            rows,
            header=("DATA", "score", "fp32", "int8", "points"),
            aligns=("l", "l", "r", "r", "r"),
            title=f"{pipeline} at fp32 and int8 ({check.cpu} CPU)",
        )
        if report is not None:
            srsly.write_json(report, check.to_dict())
            msg.good(f"Saved the figures to {report}")
        marked = mark_pipeline(pipeline, check) if mark else []
    except Int8CheckError as err:
        fail(str(err))
    for corpus, points in check.coarse().items():
        msg.info(
            f"{corpus} has {check.docs[corpus]} docs: one doc moves a per-doc score by "
            f"{points} point, more than the tolerance; more docs make the check surer"
        )
    lost = ", ".join(f"{s.key} on {s.corpus} ({s.points:+.2f})" for s in check.failed())
    if check.passed:
        msg.good(f"Every score within {tolerance} point of fp32 at int8")
        if marked:
            msg.text(f"Marked {pipeline}: 'auto' predicts in int8 on CPUs without fast bf16")
    else:
        msg.warn(f"int8 loses more than {tolerance} point: {lost}")
        if marked:
            msg.text(f"{pipeline} stays unmarked: 'auto' predicts in fp32 on CPUs without bf16")
