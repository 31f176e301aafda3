"""`bert-pipes convert ner`: named entity data (CoNLL, JSONL or spaCy v2 JSON)
to a `.spacy` file, thin over `spacy_bert_pipes.convert.read_ner_docs`."""

from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import typer
from spacy.tokens import Doc

from ..convert import NerFileFormat, read_ner_docs, write_docbin
from ..io.errors import ConversionError
from .common import fail, lang_option
from .convert import blank, convert_app


@convert_app.command("ner")
def convert_ner_cli(
    input_path: Path = typer.Argument(
        ...,
        help="A CoNLL file (.txt, .conll, .iob), a .jsonl file of texts with entity "
        "offsets, or a spaCy v2 .json training file",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_path: Path = typer.Argument(
        ..., help="The .spacy file to write", dir_okay=False, metavar="OUTPUT"
    ),
    file_format: NerFileFormat = typer.Option(
        "auto",
        "--format",
        help="The input format; auto: .jsonl is JSONL, .json is spaCy v2 JSON, anything else CoNLL",
    ),
    n_sents: int = typer.Option(
        0,
        "--n-sents",
        min=0,
        help="CoNLL only: sentences per Doc, never crossing a -DOCSTART- line; "
        "0 makes one Doc per document (the whole file if it has no -DOCSTART-)",
    ),
    lang: str = lang_option("the vocab and tokenizer"),
) -> None:
    """Convert named entity data (CoNLL, JSONL or spaCy v2 JSON) for NER.

    CoNLL: one token per line in whitespace-separated columns, the NER tag
    last (IOB1 or IOB2), blank lines between sentences and -DOCSTART- lines
    between documents; the Doc text is the tokens joined by spaces. JSONL: one
    object per line with a "text" and its entities as character offsets on
    token boundaries, in "entities" (lists of start, end and label) or "spans"
    (objects with "start", "end" and "label"). spaCy v2 JSON: one Doc per
    paragraph, with BILUO tags.
    """
    nlp = blank(lang)
    try:
        docs = read_ner_docs(input_path, nlp, file_format=file_format, n_sents=n_sents)
    except ValueError as err:  # the options do not fit the input; nothing is read yet
        raise typer.BadParameter(str(err), param_hint="--n-sents") from None
    labels: Counter[str] = Counter()
    try:
        n_docs = write_docbin(_count_entities(docs, labels), output_path)
    except ConversionError as err:
        fail(str(err))
    n_ents = sum(labels.values())
    typer.secho(f"Wrote {n_docs} docs with {n_ents} entities to {output_path}", fg="green")
    if labels:
        typer.echo(
            "Entities per label: " + ", ".join(f"{lb} {n}" for lb, n in sorted(labels.items()))
        )


def _count_entities(docs: Iterable[Doc], labels: Counter[str]) -> Iterator[Doc]:
    for doc in docs:
        labels.update(ent.label_ for ent in doc.ents)
        yield doc
