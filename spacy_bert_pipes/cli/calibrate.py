"""`bert-pipes calibrate PIPELINE OUTPUT`: fit a trained `bert_textcat`'s
temperature and out-of-scope score on held-out data; `bert-pipes threshold
PIPELINE DEV OUTPUT`: choose its abstention threshold for an in-scope
coverage, a cost ratio or a score, show what each threshold does and save it
(docs/routing.md)."""

from pathlib import Path
from typing import Any, List, Optional, Tuple, cast

import srsly
import typer
from wasabi import Printer

from ..loading import PipelineLoadError, Precision, load_pipeline
from ..pipeline.textcat_holdout import calibration_overlap, margin_95
from ..pipeline.textcat_scope import calibrate_pipeline
from ..pipeline.textcat_threshold import (
    DEFAULT_COVERAGE,
    DEFAULT_KEY,
    ThresholdSweep,
    sweep_thresholds,
)
from .common import app, fail, overwrite_option, refuse_to_overwrite, save_changed_pipeline

# The report `bert-pipes threshold` writes into OUTPUT (unless --report).
THRESHOLD_REPORT = "threshold.json"


@app.command("calibrate")
def calibrate_cli(
    pipeline: Path = typer.Argument(
        ..., help="A trained pipeline folder", metavar="PIPELINE", exists=True, file_okay=False
    ),
    output: Path = typer.Argument(
        ...,
        help="The folder for the calibrated pipeline: new or empty, unless --overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    dev: Path = typer.Option(
        ...,
        "--dev",
        help="Held-out .spacy docs: the in-scope ones fit the temperature and the "
        "confidence (docs without a positive label are left out)",
        exists=True,
        dir_okay=False,
    ),
    train: Optional[Path] = typer.Option(
        None,
        "--train",
        help="The training .spacy docs: oos_method mahalanobis or knn fits on their "
        "in-scope docs (not needed for max_prob)",
        exists=True,
        dir_okay=False,
    ),
    coverage: Optional[float] = typer.Option(
        None,
        "--coverage",
        help="Set oos_threshold to route this share of the in-scope dev docs, e.g. 0.95 "
        "(default: keep the threshold; choose one with spacy find-threshold)",
    ),
    component: Optional[str] = typer.Option(
        None, "--component", help="The bert_textcat to calibrate (default: the only one)"
    ),
    report: Optional[Path] = typer.Option(
        None, "--report", help="Also write what was fit to this JSON file", dir_okay=False
    ),
    hold_out: Optional[Path] = typer.Option(
        None,
        "--hold-out",
        help="Calibrate on part of --dev and write the rest to this .spacy file, for "
        "bert-pipes threshold: a share of each label's in-scope docs (--hold-out-share) "
        "and every out-of-scope doc",
        dir_okay=False,
    ),
    hold_out_share: float = typer.Option(
        0.5,
        "--hold-out-share",
        help="With --hold-out: the share of each label's in-scope dev docs held out",
        min=0.0,
        max=1.0,
    ),
    seed: int = typer.Option(0, "--seed", help="With --hold-out: the seed of the draw"),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to use, -1 for CPU"),
    precision: Optional[Precision] = typer.Option(
        None,
        "--precision",
        help="Calibrate with the pipeline's bert encoders at this precision, and save it "
        "so (default: as saved; the confidences follow the precision they were fit at)",
        show_default=False,
    ),
    overwrite: bool = overwrite_option(),
) -> None:
    """Calibrate a trained bert_textcat: temperature scaling and the out-of-scope
    confidence (its oos_method) on held-out docs; with --coverage, also the
    threshold below which a doc is not routed."""
    import spacy

    refuse_to_overwrite(output, overwrite)
    if hold_out is not None and not 0.0 < hold_out_share < 1.0:
        fail(f"--hold-out-share must be between 0 and 1, got {hold_out_share}")
    if hold_out is not None and hold_out.resolve() == dev.resolve():
        fail(f"--hold-out {hold_out} would overwrite --dev: name another file")
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    try:
        nlp = load_pipeline(pipeline, precision=precision)
        fitted = calibrate_pipeline(
            nlp,
            train,
            dev,
            component=component,
            coverage=coverage,
            hold_out=hold_out_share if hold_out is not None else 0.0,
            held_out=hold_out,
            seed=seed,
        )
    except (PipelineLoadError, ValueError) as error:
        fail(str(error))
    save_changed_pipeline(nlp, output)
    if report is not None:
        srsly.write_json(report, fitted)
    typer.echo(
        f"Calibrated '{fitted['component']}' ({fitted['method']}) on "
        f"{fitted['dev_in_scope_docs']} in-scope dev docs: temperature "
        f"{fitted['temperature']:.3f}, dev ECE {fitted['dev_ece_before']:.4f} -> "
        f"{fitted['dev_ece_after']:.4f}"
        + (
            f"; oos_threshold {fitted['oos_threshold']:.4f} routes {fitted['coverage']:.0%} of them"
            if "oos_threshold" in fitted
            else ""
        )
    )
    if hold_out is not None:
        typer.echo(
            f"Held out {fitted['dev_held_out_docs']} dev docs (in scope and out of scope) "
            f"in {hold_out}: choose the threshold on them with bert-pipes threshold"
        )
    typer.echo(f"Saved to {output}")


@app.command("threshold")
def threshold_cli(
    pipeline: Path = typer.Argument(
        ..., help="A trained pipeline folder", metavar="PIPELINE", exists=True, file_okay=False
    ),
    dev: Path = typer.Argument(
        ...,
        help="Dev .spacy docs, in-scope ones and, to see what each threshold catches, "
        "out-of-scope ones (no positive label, or the oos_label)",
        metavar="DEV",
        exists=True,
        dir_okay=False,
    ),
    output: Path = typer.Argument(
        ...,
        help="The folder for the pipeline with the chosen threshold: new or empty, unless "
        "--overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    component: str = typer.Option("bert_textcat", "--component", help="The bert_textcat"),
    coverage: Optional[float] = typer.Option(
        None,
        "--coverage",
        help="Choose the highest threshold that routes this share of the in-scope dev "
        f"docs (the default, {DEFAULT_COVERAGE:g}, when no rule is given)",
        show_default=False,
    ),
    cost_ratio: Optional[float] = typer.Option(
        None,
        "--cost-ratio",
        help="Choose the threshold of least cost, where an out-of-scope doc routed costs "
        "this many times an in-scope doc not routed",
        show_default=False,
    ),
    key: Optional[str] = typer.Option(
        None,
        "--key",
        help="Choose the threshold that maximises this score, as spacy find-threshold "
        "(e.g. cats_oos_f2); with --coverage or --cost-ratio, only shown "
        f"(default: {DEFAULT_KEY})",
        show_default=False,
    ),
    trials: int = typer.Option(101, "--trials", "-n", help="Thresholds tried, 0 to 1"),
    report: Optional[Path] = typer.Option(
        None,
        "--report",
        help=f"The JSON of every threshold's figures (default: OUTPUT/{THRESHOLD_REPORT})",
        dir_okay=False,
        show_default=False,
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to use, -1 for CPU"),
    overwrite: bool = overwrite_option(),
) -> None:
    """Choose a bert_textcat's oos_threshold on dev data and save the pipeline
    with it. Prints and writes, per threshold, the in-scope docs routed
    (coverage), routed right, the out-of-scope docs caught and the key. The
    rule: --coverage (default 0.97: route 97% of the in-scope docs, whatever
    share of the dev docs is out of scope), --cost-ratio, or --key, which gives
    `python -m spacy find-threshold PIPELINE DEV COMPONENT oos_threshold KEY -n
    TRIALS`'s choice from one prediction pass."""
    import spacy

    if coverage is not None and cost_ratio is not None:
        fail("Give one rule: --coverage or --cost-ratio (with --key, the key is only shown)")
    refuse_to_overwrite(output, overwrite)
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    nlp = spacy.load(pipeline)
    msg = Printer()
    calibrated_on = calibration_overlap(nlp, component, dev)
    if calibrated_on is not None:
        msg.warn(
            f"{dev} is the dev file '{component}' was calibrated on ({calibrated_on}): a "
            "confidence is a doc's rank among those in-scope docs, so on them a threshold "
            "routes the coverage it is chosen for by construction and does not show how it "
            "carries to new traffic. Hold docs out for the threshold: bert-pipes calibrate "
            "... --hold-out FILE, then bert-pipes threshold PIPELINE FILE OUTPUT"
        )
    try:
        sweep = sweep_thresholds(
            nlp, dev, component, key, trials, coverage=coverage, cost_ratio=cost_ratio
        )
    except ValueError as error:
        fail(str(error))
    best = sweep.best.threshold
    cast(Any, nlp.get_pipe(component)).cfg["oos_threshold"] = best
    nlp.get_pipe_config(component)["oos_threshold"] = best
    save_changed_pipeline(nlp, output)
    report = report if report is not None else output / THRESHOLD_REPORT
    srsly.write_json(report, sweep.to_json())
    msg.table(
        threshold_rows(sweep),
        header=(
            "",
            "threshold",
            "in-scope routed",
            "routed right",
            "out-of-scope caught",
            sweep.key,
        ),
        aligns=("l", "r", "r", "r", "r", "r"),
        title=(
            f"{sweep.in_scope_docs} in-scope and {sweep.out_of_scope_docs} out-of-scope docs "
            f"of {dev} (%)"
        ),
    )
    b = sweep.best
    caught = (
        f"catches {_pct(b.oos_recall)}% (+/- {_points(b.oos_recall, sweep.out_of_scope_docs)}) "
        "of the out-of-scope docs"
        if sweep.out_of_scope_docs and b.oos_recall is not None
        else f"{dev} has no out-of-scope docs, so what it catches is not measured"
    )
    msg.good(
        f"oos_threshold {best:.4f} ({sweep.rule}): routes {_pct(b.coverage)}% "
        f"(+/- {_points(b.coverage, sweep.in_scope_docs)}) of the in-scope docs, "
        f"{_pct(b.routed_accuracy)}% right; {caught}"
    )
    msg.text(
        "(+/- : the 95% interval of a share measured on this many docs, how far new "
        "traffic's may lie from it; docs/routing.md#how-many-dev-docs)"
    )
    msg.good(f"Saved to {output}; every threshold's figures in {report}")


# Rows of the printed table: about this many, plus the chosen threshold.
PRINTED_TRIALS = 21


def threshold_rows(sweep: ThresholdSweep) -> List[Tuple[str, ...]]:
    """The printed table: every k-th trial, so that about PRINTED_TRIALS are
    shown, and the chosen threshold (marked) in its place."""
    step = max(1, round((len(sweep.trials) - 1) / (PRINTED_TRIALS - 1)))
    shown = [t for i, t in enumerate(sweep.trials) if i % step == 0 or i == len(sweep.trials) - 1]
    shown = sorted({t.threshold: t for t in shown + [sweep.best]}.values())
    return [
        (
            "chosen" if t == sweep.best else "",
            f"{t.threshold:.4f}",
            _pct(t.coverage),
            _pct(t.routed_accuracy),
            _pct(t.oos_recall),
            f"{t.score:.4f}" if t.score is not None else "-",
        )
        for t in shown
    ]


def _points(share: Optional[float], n: int) -> str:
    """The 95% margin of a share measured on n docs, in points."""
    return f"{margin_95(share or 0.0, n) * 100:.1f} points"


def _pct(value: Optional[float]) -> str:
    return f"{value * 100:.1f}" if value is not None else "-"
