"""`bert-pipes add-label PIPELINE OUTPUT`: new labels on a trained `bert_textcat`
(with label prototypes) from their descriptions and a few examples, no training."""

from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

import srsly
import typer

from ..pipeline.label_prototypes import add_labels, read_label_descriptions
from .common import app, fail


@app.command("add-label")
def add_label_cli(
    pipeline: Path = typer.Argument(..., help="A trained pipeline folder", metavar="PIPELINE"),
    output: Path = typer.Argument(
        ...,
        help="The folder for the pipeline with the new labels: new or empty, unless --overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    descriptions: Optional[Path] = typer.Option(
        None, "--descriptions", help="JSON file: label -> description or list of descriptions"
    ),
    examples: Optional[Path] = typer.Option(
        None, "--examples", help="JSONL file of {'text': ..., 'label': ...} examples of new labels"
    ),
    component: Optional[str] = typer.Option(
        None, "--component", help="The bert_textcat to extend (default: the only one)"
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Write over OUTPUT when it holds files (e.g. an earlier run)"
    ),
) -> None:
    """Add labels to a trained bert_textcat whose model is a PrototypeCatModel."""
    import spacy

    if not overwrite and output.is_dir() and any(output.iterdir()):
        fail(f"{output}: the output folder is not empty; pass --overwrite to write over it")
    try:
        described = read_label_descriptions(str(descriptions), "add-label") if descriptions else {}
        by_label: Dict[str, List[str]] = defaultdict(list)
        for i, row in enumerate(srsly.read_jsonl(examples) if examples else []):
            if not isinstance(row, dict) or not {"text", "label"} <= set(row):
                fail(f"{examples}:{i + 1}: expected an object with 'text' and 'label'")
            if not isinstance(row["label"], str) or not row["label"].strip():
                fail(
                    f"{examples}:{i + 1}: 'label' must be one label, a string, got {row['label']!r}"
                )
            by_label[row["label"]].append(str(row["text"]))
        if not described and not by_label:
            fail("Give --descriptions and/or --examples")
        nlp = spacy.load(pipeline)
        added = add_labels(nlp, described, dict(by_label), component)
    except ValueError as error:
        fail(str(error))
    nlp.to_disk(output)
    typer.echo(f"Added {len(added)} label(s) to {output}: {', '.join(added)}")
