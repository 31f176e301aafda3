"""The labels of one corpus, for a head of a pipeline trained on several.

A classifier gathers its labels from the training docs' `cats` in `initialize`.
With several corpora (multi-task training) the docs hold every classifier's
labels, so each one is given the labels of its own corpus instead:

    [initialize.components.intents.labels]
    @readers = "spacy-bert-pipes.corpus_labels.v1"
    path = ${paths.banking77_train}
"""

from pathlib import Path
from typing import List, Literal, Optional, Set, Union

from spacy.util import registry
from spacy.vocab import Vocab

from ..io.docbins import read_docs


@registry.readers("spacy-bert-pipes.corpus_labels.v1")
def corpus_labels(
    path: Union[str, Path], attr: Literal["cats", "ents"] = "cats", require: bool = False
) -> Optional[List[str]]:
    """Every label in a `.spacy` corpus (a DocBin file, or a folder of them), sorted.

    path (Union[str, Path]): The corpus.
    attr (str): "cats" (doc.cats keys) or "ents" (entity labels).
    require (bool): Whether a missing corpus is an error; else (as spaCy's
        `spacy.read_labels.v1`) it gives None, and the component gathers its labels
        from the training docs (so that `spacy debug config` runs before the
        corpora are made).
    """
    source = Path(path)
    files = sorted(source.rglob("*.spacy")) if source.is_dir() else [source]
    if not files or not all(f.is_file() for f in files):
        if not require:
            return None
        raise ValueError(f"spacy-bert-pipes.corpus_labels.v1: no .spacy corpus at {source}")
    labels: Set[str] = set()
    vocab = Vocab()
    for file in files:
        for doc in read_docs(file, vocab):
            if attr == "cats":
                labels.update(doc.cats)
            else:
                labels.update(ent.label_ for ent in doc.ents)
    if not labels:
        raise ValueError(f"spacy-bert-pipes.corpus_labels.v1: the corpus {source} has no {attr}")
    return sorted(labels)
