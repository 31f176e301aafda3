"""Reading and writing `.spacy` files whose docs carry user data, at the speed
of the rest.

srsly looks its msgpack decoders up again on every `msgpack_loads`, and its
encoders on every `msgpack_dumps`: a scan of catalogue's whole registry and of
every installed package's entry points, about 1.5 ms. spaCy's `DocBin` packs
(`add`) and unpacks (`get_docs`) each doc's user data with a call of its own, so
reading or writing 8,000 Restaurant-8k requests with their gold answers spends
~12 s on that lookup alone. Within `codecs_looked_up_once()` the lookups are
done once, on entry: the same encoders and decoders, as long as none is
registered meanwhile (nothing registers one while a corpus is read or written).

The reader `spacy-bert-pipes.Corpus.v1` is `spacy.Corpus.v1` (the same settings and
examples) reading within such blocks, a thousand docs at a time: the training
configs whose corpora carry user data (`configs/qa*.cfg`) use it.
"""

import threading
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, List, Optional, Union

import srsly.msgpack
from spacy.tokens import Doc, DocBin
from spacy.training import Corpus, Example
from spacy.util import registry as spacy_registry

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.vocab import Vocab

READER = "spacy-bert-pipes.Corpus.v1"
DOCS_PER_LOOKUP = 1000

_lock = threading.Lock()
_depth = 0


@contextmanager
def codecs_looked_up_once() -> Iterator[None]:
    """srsly's msgpack encoders and decoders looked up once for the block, not
    once a doc."""
    global _depth
    registries = (srsly.msgpack.msgpack_encoders, srsly.msgpack.msgpack_decoders)
    with _lock:
        if _depth == 0:
            for registry in registries:
                found = registry.get_all()
                registry.get_all = lambda found=found: dict(found)  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for registry in registries:
                    del registry.get_all  # the class's method again


def read_docs(path: Union[str, Path], vocab: "Vocab") -> List[Doc]:
    """Every doc of a `.spacy` file, its user data read with the decoders looked
    up once."""
    doc_bin = DocBin().from_disk(path)
    with codecs_looked_up_once():
        return list(doc_bin.get_docs(vocab))


def write_docs(docs: Iterable[Doc], path: Union[str, Path], *, store_user_data: bool) -> int:
    """Save docs to a `.spacy` file, their user data packed with the encoders
    looked up once; missing parent folders are made. Returns the number of docs."""
    doc_bin = DocBin(store_user_data=store_user_data)
    with codecs_looked_up_once():
        for doc in docs:
            doc_bin.add(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(path)
    return len(doc_bin)


@spacy_registry.readers(READER)
def create_corpus_reader(
    path: Optional[Union[str, Path]],
    gold_preproc: bool = False,
    max_length: int = 0,
    limit: int = 0,
    augmenter: Optional[Callable] = None,
) -> Callable[["Language"], Iterable[Example]]:
    """`spacy.Corpus.v1`, its docs' user data read with the decoders looked up once
    a thousand docs (module docstring). The settings are spaCy's."""
    if path is None:
        raise ValueError(f"{READER}: path is null: name a .spacy file or a folder of them")
    return UserDataCorpus(
        path, gold_preproc=gold_preproc, max_length=max_length, limit=limit, augmenter=augmenter
    )


class UserDataCorpus(Corpus):
    """spaCy's `Corpus`, reading its DocBins within `codecs_looked_up_once()`."""

    def read_docbin(self, vocab: "Vocab", locs: Iterable[Union[str, Path]]) -> Iterator[Doc]:
        docs = super().read_docbin(vocab, locs)
        while True:
            with codecs_looked_up_once():
                batch = list(islice(docs, DOCS_PER_LOOKUP))
            if not batch:
                return
            yield from batch
