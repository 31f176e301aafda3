"""`bert-pipes evaluate ...`: score a pipeline on .spacy corpora, keep its predictions."""

from pathlib import Path
from typing import List, Optional, Sequence

import spacy
import typer
from spacy.language import Language
from wasabi import Printer

from ..evaluate import (
    EvaluateError,
    evaluate,
    prediction_records,
    read_examples,
    routing_summary,
    summary_rows,
    write_predictions,
    write_scores,
)
from ..loading import PipelineLoadError, Precision, load_pipeline
from .common import app, fail

# Per-label tables longer than this are left to the metrics JSON.
MAX_LABEL_ROWS = 30


@app.command("evaluate")
def evaluate_cli(
    pipeline: str = typer.Argument(
        ...,
        help="A trained pipeline: a folder saved with nlp.to_disk, or a package name",
        metavar="PIPELINE",
    ),
    data_paths: List[Path] = typer.Argument(
        ...,
        help="The evaluation data: one or more .spacy files, each scored on its own "
        "(the pipeline is loaded once)",
        metavar="DATA...",
        exists=True,
    ),
    outputs: Optional[List[Path]] = typer.Option(
        None,
        "--output",
        "-o",
        help="The metrics JSON to write (the keys of `spacy evaluate --output`); "
        "with several DATA, one --output for each, in their order",
        dir_okay=False,
        show_default=False,
    ),
    predictions: Optional[List[Path]] = typer.Option(
        None,
        "--predictions",
        "-p",
        help="A JSONL file for each doc's predictions beside its gold annotations "
        "(for `bert-pipes report`); with several DATA, one for each, in their order",
        dir_okay=False,
        show_default=False,
    ),
    gpu_id: int = typer.Option(-1, "--gpu-id", "-g", help="The GPU to use; -1 runs on the CPU"),
    precision: Optional[Precision] = typer.Option(
        None,
        "--precision",
        help="Run the pipeline's bert encoders at this precision, to measure its "
        "accuracy cost (default: as saved)",
        show_default=False,
    ),
    batch_size: Optional[int] = typer.Option(
        None,
        "--batch-size",
        "-b",
        min=1,
        help="Docs per batch (default: the pipeline's [nlp] batch_size)",
        show_default=False,
    ),
    sample: int = typer.Option(
        0,
        "--sample",
        min=0,
        help="Score a random sample of this many docs of each DATA, for a quick check "
        "(0, or a corpus this small: every doc)",
    ),
    seed: int = typer.Option(0, "--seed", help="The seed of --sample"),
) -> None:
    """Score a pipeline on one or more .spacy corpora with its components' scorers.

    The scores are those of `spacy evaluate` (bert_qa asks the questions of the
    reference docs itself). With --predictions, each doc's predictions are
    written beside its gold annotations, one JSON object per line: the top
    label and gold label(s) of each text classifier, predicted and gold
    entities, and each question's answer, gold answers, exact match and F1.
    Several DATA (e.g. each head's test set of a multi-task pipeline) are
    scored one after the other with the pipeline loaded once, each with its
    own --output and --predictions.
    """
    msg = Printer()
    for option, given in (("--output", outputs), ("--predictions", predictions)):
        paths = given or []
        if paths and len(paths) != len(data_paths):
            fail(_count_mismatch(option, len(paths), data_paths))
        twice = [path for i, path in enumerate(paths) if path in paths[:i]]
        if twice:
            fail(f"{option} {twice[0]} is given for more than one DATA: each needs its own file")
    if gpu_id >= 0:
        spacy.require_gpu(gpu_id)
    try:
        nlp = load_pipeline(pipeline, precision=precision)
    except PipelineLoadError as err:  # missing, foreign or damaged: one line
        fail(str(err))
    except ValueError as err:  # a precision, but no bert encoder
        fail(str(err))
    for i, data_path in enumerate(data_paths):
        if i:
            msg.text("")
        _evaluate_one(
            msg,
            nlp,
            pipeline,
            data_path,
            outputs[i] if outputs else None,
            predictions[i] if predictions else None,
            batch_size=batch_size,
            sample=sample,
            seed=seed,
        )


def _count_mismatch(option: str, given: int, data_paths: Sequence[Path]) -> str:
    files = ", ".join(str(path) for path in data_paths)
    times = "once" if given == 1 else f"{given} times"
    return (
        f"{option} is given {times} for {len(data_paths)} DATA files ({files}): "
        f"give one {option} for each DATA, in the same order, or none"
    )


def _evaluate_one(
    msg: Printer,
    nlp: Language,
    pipeline: str,
    data_path: Path,
    output: Optional[Path],
    predictions: Optional[Path],
    *,
    batch_size: Optional[int],
    sample: int,
    seed: int,
) -> None:
    """Score the pipeline on one corpus: print the summary, write the files."""
    try:
        examples = read_examples(nlp, data_path, sample=sample, seed=seed)
        result = evaluate(nlp, examples, batch_size=batch_size)
    except EvaluateError as err:
        fail(str(err))
    scores = result.scores
    # a corpus no larger than --sample is scored whole
    drawn = f"a sample of {sample} docs" if len(examples) == sample else f"{len(examples)} docs"
    msg.table(summary_rows(scores), title=f"{pipeline} on {data_path} ({drawn})")
    for line in routing_summary(scores):
        msg.info(f"Routing: {line}")
    for key, name in (("ents_per_type", "NER"), ("cats_f_per_type", "Textcat")):
        per_label = scores.get(key) or {}
        if 0 < len(per_label) <= MAX_LABEL_ROWS:
            rows = [
                (label, *(_percent(prf.get(k)) for k in ("p", "r", "f")))
                for label, prf in per_label.items()
            ]
            msg.table(rows, header=("", "P", "R", "F"), aligns=("l", "r", "r", "r"), title=name)
        elif per_label:
            msg.info(f"{name}: {len(per_label)} labels; their P/R/F are in the metrics JSON")
    if output is not None:
        write_scores(output, scores)
        msg.good(f"Saved the scores to {output}")
    if predictions is not None:
        n = write_predictions(predictions, prediction_records(nlp, result.examples))
        msg.good(f"Saved the predictions of {n} docs to {predictions}")


def _percent(value: object) -> str:
    return f"{value * 100:.2f}" if isinstance(value, (int, float)) else "-"
