"""`bert-pipes calibrate PIPELINE OUTPUT`: fit a trained `bert_textcat`'s
temperature and out-of-scope score on held-out data; `bert-pipes threshold
PIPELINE DEV OUTPUT`: choose its abstention threshold by spaCy's
find-threshold's trials and save it (docs/routing.md)."""

from pathlib import Path
from typing import Any, Optional, cast

import srsly
import typer

from ..pipeline.textcat_scope import calibrate_pipeline, sweep_thresholds
from .common import app, fail, overwrite_option, refuse_to_overwrite


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
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to use, -1 for CPU"),
    overwrite: bool = overwrite_option(),
) -> None:
    """Calibrate a trained bert_textcat: temperature scaling and the out-of-scope
    confidence (its oos_method) on held-out docs; with --coverage, also the
    threshold below which a doc is not routed."""
    import spacy

    refuse_to_overwrite(output, overwrite)
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    try:
        nlp = spacy.load(pipeline)
        fitted = calibrate_pipeline(nlp, train, dev, component=component, coverage=coverage)
    except ValueError as error:
        fail(str(error))
    nlp.to_disk(output)
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
    typer.echo(f"Saved to {output}")


@app.command("threshold")
def threshold_cli(
    pipeline: Path = typer.Argument(
        ..., help="A trained pipeline folder", metavar="PIPELINE", exists=True, file_okay=False
    ),
    dev: Path = typer.Argument(
        ...,
        help="Dev .spacy docs with out-of-scope docs (no positive label, or the oos_label)",
        metavar="DEV",
        exists=True,
        dir_okay=False,
    ),
    output: Path = typer.Argument(
        ...,
        help="The folder for the pipeline with the best threshold: new or empty, unless "
        "--overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    component: str = typer.Option("bert_textcat", "--component", help="The bert_textcat"),
    key: str = typer.Option("cats_oos_f2", "--key", help="The score to maximise (docs/routing.md)"),
    trials: int = typer.Option(101, "--trials", "-n", help="Thresholds tried, 0 to 1"),
    report: Optional[Path] = typer.Option(
        None, "--report", help="Also write every threshold's score to this JSON file"
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to use, -1 for CPU"),
    overwrite: bool = overwrite_option(),
) -> None:
    """Choose a bert_textcat's oos_threshold on dev data with out-of-scope docs
    and save the pipeline with it. The trials and the best threshold are those of
    `python -m spacy find-threshold PIPELINE DEV COMPONENT oos_threshold KEY -n
    TRIALS`, from one prediction pass instead of a pipeline run a trial."""
    import spacy

    refuse_to_overwrite(output, overwrite)
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    nlp = spacy.load(pipeline)
    try:
        best, score, scores = sweep_thresholds(nlp, dev, component, key, trials)
    except ValueError as error:
        fail(str(error))
    cast(Any, nlp.get_pipe(component)).cfg["oos_threshold"] = best
    nlp.get_pipe_config(component)["oos_threshold"] = best
    nlp.to_disk(output)
    if report is not None:
        srsly.write_json(
            report,
            {
                "component": component,
                "key": key,
                "best_threshold": best,
                "best_score": score,
                "scores": [{"threshold": t, key: v} for t, v in sorted(scores.items())],
            },
        )
    typer.echo(f"Best {key} {score:.4f} at oos_threshold {best:.4f}; saved to {output}")
