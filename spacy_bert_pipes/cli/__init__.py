"""The `bert-pipes` command line: thin typer commands over the package."""

import typer

app = typer.Typer(
    name="bert-pipes",
    help="BERT components for spaCy: convert data, pretrain, evaluate, report, assemble "
    "pipelines, annotate collections and search their vectors.",
    no_args_is_help=True,
    add_completion=False,
)

# Each module registers its commands on `app` when imported.
from . import (  # noqa: E402,F401
    annotate,
    assemble,
    convert,
    evaluate,
    explain,
    pretrain,
    report,
    similar,
)

__all__ = ["app"]
