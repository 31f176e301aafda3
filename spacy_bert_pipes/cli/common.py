"""What the commands share: the typer app they register on, how they fail, and
the options several of them take."""

from pathlib import Path
from typing import Any, Dict, List, NoReturn

import typer
from spacy.language import Language

app = typer.Typer(
    name="bert-pipes",
    help="BERT components for spaCy: convert data, pretrain, evaluate, report, assemble "
    "pipelines, annotate collections and search their vectors.",
    no_args_is_help=True,
    add_completion=False,
)


def fail(message: str) -> NoReturn:
    """Print the message in red on stderr and exit with status 1.

    message (str): What went wrong, naming the file, line or option.
    """
    typer.secho(message, fg="red", err=True)
    raise typer.Exit(code=1)


def name_value_pairs(values: List[str], option: str) -> Dict[str, str]:
    """The NAME=VALUE values of a repeated option, by name; fails on a value
    without a name or "=", or a name given twice."""
    pairs: Dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            fail(f"{option} {value!r}: expected NAME=PATH")
        if name in pairs:
            fail(f"{option} {value!r}: {name!r} is given twice")
        pairs[name] = path
    return pairs


def refuse_to_overwrite(output: Path, overwrite: bool) -> None:
    """Fail when the output folder holds files and --overwrite was not given."""
    if not overwrite and output.is_dir() and any(output.iterdir()):
        fail(f"{output}: the output folder is not empty; pass --overwrite to write over it")


def save_changed_pipeline(nlp: Language, output: Path) -> None:
    """Save a pipeline whose heads changed. An int8 mark (`bert-pipes check-int8`)
    measured the heads as they were, so the saved copy goes without it, and says so."""
    from ..int8_check import unmark_pipeline

    nlp.to_disk(output)
    if unmark_pipeline(output):
        typer.echo(
            f"{output}: its heads changed since `bert-pipes check-int8`, so 'auto' no longer "
            "picks int8 for it on CPUs without bf16; run check-int8 on it again"
        )


def overwrite_option() -> Any:
    """--overwrite of a command that writes a pipeline folder."""
    return typer.Option(
        False, "--overwrite", help="Write over OUTPUT when it holds files (e.g. an earlier run)"
    )


def input_format_option() -> Any:
    """--input-format of a command that reads a text collection (io.readers)."""
    return typer.Option(
        "auto",
        "--input-format",
        help="The input format; auto: by suffix, and a folder is a folder of .txt files",
    )


def text_column_option() -> Any:
    """--text-column of a command that reads a text collection (io.readers)."""
    return typer.Option(
        "text", "--text-column", help="The column (CSV, Parquet) or field (JSONL) of the text"
    )


def lang_option(what: str = "the tokenizer") -> Any:
    """--lang of a converter: the language of the blank pipeline it tokenizes with."""
    return typer.Option("en", "--lang", help=f"Language code of {what}")
