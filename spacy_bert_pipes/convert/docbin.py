"""`write_docbin`: Docs of any task saved to a `.spacy` file."""

from pathlib import Path
from typing import Iterable

from spacy.tokens import Doc, DocBin


def write_docbin(docs: Iterable[Doc], output: Path, *, store_user_data: bool = False) -> int:
    """Save Docs to a `.spacy` file. The file is written once all Docs are
    made, so an error while making them leaves no partial file.

    docs (Iterable[Doc]): The Docs to save.
    output (Path): The `.spacy` file; missing parent folders are made.
    store_user_data (bool): Whether to save `doc.user_data`, which holds the
        values of custom extensions such as `doc._.gold_answers`. spaCy reads
        it back with the lists in it as tuples.
    RETURNS (int): The number of Docs written.
    """
    output = Path(output)
    doc_bin = DocBin(store_user_data=store_user_data)
    n_docs = 0
    for doc in docs:
        doc_bin.add(doc)
        n_docs += 1
    output.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output)
    return n_docs
