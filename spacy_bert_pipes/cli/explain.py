"""`bert-pipes explain ...`: draw a component's encoder attention for one text."""

from pathlib import Path
from typing import List, Optional

import typer

from ..explain import ExplainError, explain
from ..loading import PipelineLoadError, load_pipeline
from .common import app, fail


@app.command("explain")
def explain_cli(
    pipeline: str = typer.Argument(
        ...,
        help="A pipeline: a folder saved with nlp.to_disk, or a package name",
        metavar="PIPELINE",
    ),
    text: str = typer.Argument(
        ..., help="The text to explain, or @FILE to read it from a UTF-8 file", metavar="TEXT"
    ),
    output_dir: Path = typer.Option(
        Path("explain"),
        "--output-dir",
        "-o",
        help="The folder for the PNGs and explain.html (created if missing)",
        file_okay=False,
    ),
    component: Optional[str] = typer.Option(
        None,
        "--component",
        "-c",
        help="The component whose encoder to draw (default: the first with one); a "
        "listener is drawn through its bert_encoder",
        show_default=False,
    ),
    layers: List[int] = typer.Option(
        [-1],
        "--layer",
        "-l",
        help="A layer to draw, from 0; negative counts from the end (repeat for several)",
    ),
    heads: Optional[List[int]] = typer.Option(
        None,
        "--head",
        help="A head to draw and average, from 0 (repeat for several; default: all)",
        show_default=False,
    ),
    question: Optional[str] = typer.Option(
        None,
        "--question",
        "-q",
        help="For bert_qa: the question paired with TEXT (default: its first fixed question)",
        show_default=False,
    ),
    window: int = typer.Option(
        0, "--window", help="Which window of a text longer than the encoder's window, from 0"
    ),
) -> None:
    """Draw the attention of a component's encoder for one text.

    Writes to the output folder: a heatmap of each chosen layer (the chosen
    heads averaged), the chosen heads side by side, the attention from [CLS]
    to every wordpiece in each layer, and explain.html, a page with those
    pictures and the text, each word shaded by its [CLS] attention. The
    weights are the encoder's own (output_attentions, fp32, eval mode) for
    the window it runs. Attention shows where the model looks, not why it
    decides.
    """
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf8")
        except (OSError, UnicodeDecodeError) as err:
            fail(f"Cannot read the text from {path}: {err}")
    try:
        nlp = load_pipeline(pipeline)
    except PipelineLoadError as err:  # missing, foreign or damaged: one line
        fail(str(err))
    try:
        result = explain(
            nlp,
            text,
            component=component,
            layers=layers,
            heads=heads or None,
            question=question,
            window=window,
            output_dir=output_dir,
        )
    except (ExplainError, ImportError) as err:
        fail(str(err))
    maps = result.attention
    encoder = result.encoder_component
    if encoder != result.component:
        encoder += f" (the shared encoder of {result.component})"
    typer.echo(
        f"Encoder of {encoder}: {maps.n_layers} layers x {maps.n_heads} heads, "
        f"{len(maps.tokens)} wordpieces"
    )
    if result.question is not None:
        truncated = " (cut to the component's max_question_len)" * maps.question_truncated
        typer.echo(f"Question: {result.question}{truncated}")
    if maps.n_windows > 1:
        typer.echo(
            f"The text needs {maps.n_windows} windows; drawn: window {maps.window} "
            f"(wordpieces {maps.pieces[0]} to {maps.pieces[1] - 1} of {maps.n_pieces})"
        )
    top = sorted((w for w in result.words if w.score is not None), key=lambda w: -(w.score or 0))
    typer.echo(
        f"Most [CLS] attention (layer {result.layers[0]}): "
        + ", ".join(f"{w.text} {w.score:.3f}" for w in top[:5])
    )
    for note in result.notes:
        typer.echo(f"Note: {note}")
    for path in result.files:
        typer.echo(f"Wrote {path}")
    typer.secho(f"Open {result.html} in a browser", fg="green")
