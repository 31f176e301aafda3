"""Write a random sample of a .spacy file (e.g. a monitoring dev set).

    python scripts/sample_docs.py INPUT.spacy OUTPUT.spacy N [--seed 0]

N <= 0 or N >= the number of docs copies every doc, in order.
"""

import random
from pathlib import Path

import spacy
import typer
from spacy.tokens import DocBin


def main(
    input_path: Path = typer.Argument(..., exists=True, dir_okay=False),
    output_path: Path = typer.Argument(...),
    n: int = typer.Argument(..., help="Docs to keep; <= 0 keeps all"),
    seed: int = typer.Option(0, help="Random seed"),
) -> None:
    nlp = spacy.blank("en")
    docs = list(DocBin().from_disk(input_path).get_docs(nlp.vocab))
    if 0 < n < len(docs):
        keep = sorted(random.Random(seed).sample(range(len(docs)), n))
        docs = [docs[i] for i in keep]
    output_path.parent.mkdir(parents=True, exist_ok=True)
    # user data holds e.g. the questions and gold answers of QA docs
    DocBin(docs=docs, store_user_data=True).to_disk(output_path)
    typer.echo(f"Wrote {len(docs)} docs to {output_path}")


if __name__ == "__main__":
    typer.run(main)
