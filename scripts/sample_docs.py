"""Write a random sample of a .spacy file (e.g. a dev set), and optionally the
docs not drawn (the training set that the dev set is held out of).

    python scripts/sample_docs.py INPUT.spacy OUTPUT.spacy N [--seed 0] [--rest REST.spacy]

N <= 0 or N >= the number of docs copies every doc, in order. REST may be INPUT.
"""

import random
from pathlib import Path
from typing import List, Optional

import spacy
import typer
from spacy.tokens import Doc

from spacy_bert_pipes.io.docbins import read_docs, write_docs


def main(
    input_path: Path = typer.Argument(..., exists=True, dir_okay=False),
    output_path: Path = typer.Argument(...),
    n: int = typer.Argument(..., help="Docs to keep; <= 0 keeps all"),
    seed: int = typer.Option(0, help="Random seed"),
    rest: Optional[Path] = typer.Option(None, help="Also write the docs not drawn here"),
) -> None:
    nlp = spacy.blank("en")
    docs = read_docs(input_path, nlp.vocab)
    drawn = set(range(len(docs)))
    if 0 < n < len(docs):
        drawn = set(random.Random(seed).sample(range(len(docs)), n))
    write([docs[i] for i in sorted(drawn)], output_path)
    if rest is not None:
        write([doc for i, doc in enumerate(docs) if i not in drawn], rest)


def write(docs: List[Doc], path: Path) -> None:
    # user data holds e.g. the questions and gold answers of QA docs; a DocBin
    # that stores it unpacks each doc's (even an empty one) on every read, which
    # costs ~1.5 ms a doc in spaCy's own corpus reader: store it only where there is some
    store = any(doc.user_data for doc in docs)
    write_docs(docs, path, store_user_data=store)
    typer.echo(f"Wrote {len(docs)} docs to {path}")


if __name__ == "__main__":
    typer.run(main)
