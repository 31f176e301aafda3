"""`write_docbin`: Docs of any task saved to a `.spacy` file."""

from pathlib import Path
from typing import Iterable

from spacy.tokens import Doc

from ..io.docbins import write_docs


def write_docbin(docs: Iterable[Doc], output: Path, *, store_user_data: bool = False) -> int:
    """Save Docs to a `.spacy` file. The file is written once all Docs are
    made, so an error while making them leaves no partial file.

    docs (Iterable[Doc]): The Docs to save.
    output (Path): The `.spacy` file; missing parent folders are made.
    store_user_data (bool): Whether to save `doc.user_data`, which holds the
        values of custom extensions such as `doc._.gold_answers`. spaCy reads
        it back with the lists in it as tuples. It is packed with srsly's
        encoders looked up once (`io/docbins.py`), not once a doc.
    RETURNS (int): The number of Docs written.
    """
    return write_docs(docs, output, store_user_data=store_user_data)
