"""`bert-pipes train-steps CORPUS --epochs N`: the `spacy train` options that
train N epochs of a corpus and score the last step (docs/routing.md)."""

from pathlib import Path

import typer

from ..convert.steps import count_docs, training_steps
from ..io.errors import ConversionError
from .common import app, fail


@app.command("train-steps")
def train_steps_cli(
    corpus: Path = typer.Argument(
        ..., help="The training .spacy file", metavar="CORPUS", exists=True, dir_okay=False
    ),
    epochs: int = typer.Option(..., "--epochs", min=1, help="Passes over the training docs"),
    batch_size: int = typer.Option(
        32, "--batch-size", min=1, help="Docs per step: the size of the config's training batcher"
    ),
) -> None:
    """Print the spacy train options for EPOCHS passes over CORPUS: max_steps
    (epochs x steps of one epoch), eval_frequency (one epoch, so that the dev
    set is scored after each epoch and the model saved last is scored) and
    warmup_steps (a tenth of max_steps). The options go to stdout, to paste
    or to use as $(bert-pipes train-steps ...); what they mean goes to stderr.
    """
    try:
        steps = training_steps(count_docs(corpus), epochs=epochs, batch_size=batch_size)
    except ConversionError as err:
        fail(str(err))
    # what the options mean, on stderr, one short line each: a terminal shows
    # them above the options, and $(...) takes stdout's one line alone
    typer.echo(
        f"{corpus}: {steps.n_docs} docs, {steps.eval_frequency} steps of {batch_size} an epoch\n"
        f"  {epochs} epochs: {steps.max_steps} steps (max_steps)\n"
        f"  the dev set scored every {steps.eval_frequency} steps, the last included "
        "(eval_frequency)\n"
        f"  {steps.warmup_steps} warm-up steps (warmup_steps)",
        err=True,
    )
    typer.echo(" ".join(steps.overrides()))
