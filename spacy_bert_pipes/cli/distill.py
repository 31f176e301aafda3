"""`bert-pipes distill ...`: teachers trained apart annotate a one-pass student's corpora."""

from pathlib import Path
from typing import List

import typer

from ..multitask.distill import DistillError, distill, load_teacher
from .common import app, fail, name_value_pairs


@app.command("distill")
def distill_cli(
    output_dir: Path = typer.Argument(
        ..., help="Where to write <source>.spacy and distill.json", file_okay=False
    ),
    source: List[str] = typer.Option(
        ..., "--source", help="NAME=PATH of a training corpus (.spacy); repeat for each"
    ),
    teacher: List[str] = typer.Option(
        ...,
        "--teacher",
        help="COMPONENT=PIPELINE: a pipeline trained apart (one bert_textcat, bert_ner or "
        "bert_qa) that teaches the student's COMPONENT; repeat for each",
    ),
    batch_size: int = typer.Option(64, help="Docs per teacher batch", min=1),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to run the teachers on (-1: CPU)"),
) -> None:
    """Give every training doc every head's annotation: each teacher annotates the
    docs of every source that lack its head's (soft class probabilities for a
    classifier, entities, slot answers); gold annotation is kept. Train the student
    on OUTPUT_DIR/<source>.spacy (docs/multitask.md, "Distillation")."""
    if gpu_id >= 0:
        import spacy

        spacy.require_gpu(gpu_id)
    sources = {name: Path(path) for name, path in name_value_pairs(source, "--source").items()}
    try:
        teachers = [
            load_teacher(name, Path(path))
            for name, path in name_value_pairs(teacher, "--teacher").items()
        ]
        summary = distill(sources, teachers, output_dir, batch_size=batch_size)
    except DistillError as err:
        fail(str(err))
    for name, entry in summary.items():
        done = ", ".join(f"{component} {n}" for component, n in entry.annotated.items())
        typer.echo(
            f"{output_dir / (name + '.spacy')}: {entry.docs} docs; teacher-annotated: {done}"
        )
