"""`bert-pipes shrink PIPELINE OUTPUT --layers K`: a student with K encoder layers."""

from pathlib import Path
from typing import List, Optional

import typer

from ..io.readers import InputFormat
from ..multitask.hidden_states import ALIGN_STEPS
from ..multitask.shrink import Labels, ShrinkError, layer_names, shrink
from .common import (
    app,
    fail,
    input_format_option,
    name_value_pairs,
    overwrite_option,
    refuse_to_overwrite,
    text_column_option,
)


@app.command("shrink")
def shrink_cli(
    pipeline: Path = typer.Argument(..., help="The trained pipeline (the teacher)"),
    output: Path = typer.Argument(
        ..., help="Where to write the student (OUTPUT/model-last) and its corpora", file_okay=False
    ),
    layers: int = typer.Option(..., "--layers", help="K: the student's encoder layers"),
    source: List[str] = typer.Option(
        [],
        "--source",
        help="NAME=PATH of a training corpus (.spacy); repeat for each (default: those "
        "the pipeline's config.cfg trained on, from the current folder)",
    ),
    dev: List[str] = typer.Option(
        [], "--dev", help="NAME=PATH of a dev corpus (default: the pipeline's)"
    ),
    texts: Optional[Path] = typer.Option(
        None, "--texts", help="Unlabelled texts (CSV, JSONL, Parquet, folder of .txt) to learn from"
    ),
    texts_weight: Optional[float] = typer.Option(
        None,
        "--texts-weight",
        help="With --labels teacher: the texts' sampling weight, on the scale of the "
        "pipeline's corpora.train weights (default: their size ** alpha)",
        min=0,
    ),
    text_column: str = text_column_option(),
    input_format: InputFormat = input_format_option(),
    steps: Optional[int] = typer.Option(
        None, "--steps", help="Training steps (default: twice the pipeline's max_steps)", min=1
    ),
    labels: Labels = typer.Option(
        "gold",
        "--labels",
        help="What the heads train on: gold (the corpora's annotation, each head on its "
        "own corpus) or teacher (the teacher's annotation of every doc and text where "
        "gold is missing)",
    ),
    align_steps: int = typer.Option(
        ALIGN_STEPS,
        "--align-steps",
        help="Steps (of 32 encoder windows) in which each cut encoder learns the "
        "teacher's hidden states before its heads train (0: none)",
        min=0,
    ),
    batch_size: int = typer.Option(64, help="Docs per teacher batch", min=1),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to run on (-1: CPU)"),
    overwrite: bool = overwrite_option(),
) -> None:
    """Train a smaller copy of PIPELINE: every encoder keeps K of its layers (spread
    evenly, the top one kept) and learns the teacher's hidden states over the
    training corpora and TEXTS, then every head trains on the corpora (docs/shrink.md)."""
    refuse_to_overwrite(output, overwrite)
    if gpu_id >= 0:
        import spacy

        spacy.require_gpu(gpu_id)
    sources = {n: Path(p) for n, p in name_value_pairs(source, "--source").items()}
    dev_sources = {n: Path(p) for n, p in name_value_pairs(dev, "--dev").items()}
    try:
        result = shrink(
            pipeline,
            output,
            layers,
            sources=sources or None,
            dev=dev_sources or None,
            texts=texts,
            texts_weight=texts_weight,
            text_column=text_column,
            input_format=input_format,
            steps=steps,
            labels=labels,
            align_steps=align_steps,
            batch_size=batch_size,
            gpu_id=gpu_id,
        )
    except ShrinkError as err:
        fail(str(err))
    for name, kept in result.kept.items():
        typer.echo(f"{name}: kept the teacher's layers {layer_names(kept)} (1-based)")
    for name, aligned in result.aligned.items():
        typer.echo(
            f"{name}: hidden states matched in {aligned.steps} steps, loss "
            f"{aligned.loss_first:.3f} -> {aligned.loss_last:.3f}"
        )
    typer.echo(f"The student: {result.student}")
