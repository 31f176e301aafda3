"""The `bert-pipes` command line: thin typer commands over the package."""

# Each module registers its commands on `app` when imported.
from . import (  # noqa: F401
    annotate,
    assemble,
    calibrate,
    check_int8,
    convert,
    convert_ner,
    convert_qa,
    discover,
    distill,
    evaluate,
    explain,
    labels,
    pretrain,
    report,
    shrink,
    similar,
    steps,
)
from .common import app

__all__ = ["app"]
