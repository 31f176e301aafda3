"""`bert-pipes report ...`: a Markdown and HTML report of evaluation metrics and
annotated collections, with plots."""

from pathlib import Path
from typing import List, Optional

import typer

from ..io.errors import ConversionError
from ..report import ReportError, write_report
from ..similar import read_labels
from .common import app, fail


@app.command("report")
def report_cli(
    metrics: Optional[List[Path]] = typer.Argument(
        None,
        help="Metrics JSONs (of spacy evaluate or bert-pipes evaluate) and folders of them "
        "(may be left out when --annotations is given)",
        metavar="METRICS",
        exists=True,
        show_default=False,
    ),
    output_dir: Path = typer.Option(
        Path("reports"),
        "--output-dir",
        "-o",
        help="The folder for report.md, report.html and the PNGs (created if missing)",
        file_okay=False,
    ),
    predictions: Optional[List[Path]] = typer.Option(
        None,
        "--predictions",
        "-p",
        help="A predictions JSONL of bert-pipes evaluate, named <run>_predictions.jsonl "
        "for the run <run>.json (repeat for several; those in a METRICS folder are found)",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
    annotations: Optional[List[Path]] = typer.Option(
        None,
        "--annotations",
        "-a",
        help="An OUTPUT of bert-pipes annotate (.jsonl, .csv, .parquet or a folder of Parquet "
        "shards), described in a section of its own with its OUTPUT.errors.jsonl and the wall "
        "time of <stem>_time.json, among METRICS or beside it (repeat for several)",
        exists=True,
        show_default=False,
    ),
    intents: Optional[Path] = typer.Option(
        None,
        "--intents",
        help="The labels an annotated row's predicted intent is chosen from (its most "
        "probable one), for the map of the collection: a JSON list or one label a line "
        "(default: all categories)",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
    one_pass: Optional[Path] = typer.Option(
        None,
        "--one-pass",
        help="A metrics folder with the one-pass pipeline's multitask_<corpus>.json (the "
        "workflow `all`): adds each head's score beside the head trained apart (textcat.json, "
        "multilabel.json, ner.json, qa_slots.json in the folder), or says how to get those",
        exists=True,
        file_okay=False,
        show_default=False,
    ),
    discovery: Optional[List[Path]] = typer.Option(
        None,
        "--discovery",
        help="A folder `bert-pipes discover` wrote: a section of its clusters (repeatable)",
        exists=True,
        file_okay=False,
        show_default=False,
    ),
    title: str = typer.Option("Evaluation report", "--title", help="The report's title"),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw the PNGs (needs matplotlib)"),
) -> None:
    """Write an evaluation report: Markdown, and HTML with the pictures embedded.

    Per run (a metrics JSON, named by its file name) and task: the overall
    scores, P/R/F per label, and the training time from <run>_train_time.json.
    Pictures: F1 per label (text classification, NER); with predictions, the
    confusion matrix of an exclusive classifier (its most confused labels, and
    all labels), NER error types per label, QA exact match and F1 per
    question and per answer length; QA with and without an answer. Other
    *_time.json files are listed in a timings table. Each --annotations output
    gets its rows, error rows, docs/s, most frequent categories (a router's
    routing decisions, else probability >= 0.5), entities per label and
    answers per question, with bar charts;
    with a vector column (annotate --vectors), a 2-D map of its rows coloured
    by predicted intent, and the near-duplicates of bert-pipes
    similar-collection (<stem>_similar.json beside it). --one-pass adds the
    one-pass pipeline's heads beside the heads trained apart; --discovery the
    clusters of a bert-pipes discover folder, with their review actions.
    """
    try:
        labels = read_labels(intents) if intents is not None else None
        report = write_report(
            metrics or [],
            output_dir,
            predictions=predictions or [],
            annotations=annotations or [],
            title=title,
            plots=plots,
            intents=labels,
            one_pass=one_pass,
            discoveries=discovery or [],
        )
    except (ReportError, ConversionError, ImportError) as err:
        fail(str(err))
    for note in report.notes:
        typer.secho(f"Note: {note}", fg="yellow")
    typer.echo(f"Wrote {report.markdown}, {report.html} and {len(report.images)} pictures")
    typer.secho(f"Open {report.html} in a browser", fg="green")
