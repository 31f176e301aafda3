"""Several `.spacy` corpora read as one: the reader `spacy-bert-pipes.MultiCorpus.v1`.

Each call yields `epoch_size` examples (by default as many as all sources hold).
Source s gets the share w_s / sum(w), where w_s = size_s ** alpha unless `weights`
names s (size_s: its examples after `limit` and `max_length`). alpha = 1 samples in
proportion to size, as MT-DNN's merged and shuffled batches do; alpha = 0 gives every
source the same share; 0.75, BAM!'s choice (Clark et al. 2019), lets small corpora be
seen more often than their size alone would, without letting them take over. The
shares are rounded to whole counts that sum to `epoch_size` (largest remainders) and
the sources are interleaved at random. Within a source the examples come in a shuffled
order that carries on from one call to the next and is reshuffled when it runs out, so
every example is seen before any is repeated. The draw depends on `seed` and on how
many times the reader was called before: spaCy calls a train corpus once per epoch
when `[training] max_epochs = -1`, and once in all otherwise.

`shuffle = false` reads every source whole, in order, once, and samples nothing: for
dev corpora. Every example's docs carry their source's name in `doc._.bert_pipes_source`.

When sampling, the sources' files are read once per `nlp` object and every call
yields copies of those examples: spaCy's initialization calls a train corpus once
per component that looks at the data, and reading a corpus of requests with their
gold answers costs several times what copying its examples does. `spacy train`
makes the reader twice (to initialize, then for the loop), with the same `nlp`:
the second reader takes the first one's examples while the files are unchanged.
"""

import random
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from spacy.training import Corpus, Example
from spacy.util import registry

from ..corpus_attrs import SOURCE_ATTR
from ..io.docbins import codecs_looked_up_once

if TYPE_CHECKING:
    from spacy.language import Language

READER = "spacy-bert-pipes.MultiCorpus.v1"

# Each nlp object's sources as read: (path, its files' sizes and times, max_length,
# limit) -> the examples. Entries go with their nlp object.
_READ: "weakref.WeakKeyDictionary[Language, Dict[Tuple[Any, ...], List[Example]]]" = (
    weakref.WeakKeyDictionary()
)


@registry.readers(READER)
def create_multi_corpus_reader(
    sources: Dict[str, str],
    alpha: float = 0.75,
    weights: Optional[Dict[str, float]] = None,
    shuffle: bool = True,
    epoch_size: Optional[int] = None,
    max_length: int = 0,
    limit: int = 0,
    seed: int = 0,
) -> Callable[["Language"], Iterator[Example]]:
    return MultiCorpus(
        sources,
        alpha=alpha,
        weights=weights,
        shuffle=shuffle,
        epoch_size=epoch_size,
        max_length=max_length,
        limit=limit,
        seed=seed,
    )


class MultiCorpus:
    """Iterate Examples from several `.spacy` files or folders, sampled or in order.

    sources (Dict[str, str]): Source name -> a `.spacy` file or a folder of them, as
        `spacy.Corpus.v1` reads. The name is written to `doc._.bert_pipes_source`.
    alpha (float): Sample each source in proportion to its size ** alpha: 1.0 is
        proportional, 0.0 uniform. Defaults to 0.75.
    weights (Optional[Dict[str, float]]): Sampling weights for the sources they name,
        used instead of size ** alpha (on the same scale). Defaults to None.
    shuffle (bool): False reads every source whole, in order, once, without sampling.
        Defaults to True.
    epoch_size (Optional[int]): Examples per call when sampling. Defaults to None:
        the total size of the sources.
    max_length (int): As `spacy.Corpus.v1`, per source. Defaults to 0 (no limit).
    limit (int): As `spacy.Corpus.v1`, per source. Defaults to 0 (no limit).
    seed (int): Seed of the draw. Defaults to 0.
    """

    def __init__(
        self,
        sources: Dict[str, str],
        *,
        alpha: float = 0.75,
        weights: Optional[Dict[str, float]] = None,
        shuffle: bool = True,
        epoch_size: Optional[int] = None,
        max_length: int = 0,
        limit: int = 0,
        seed: int = 0,
    ) -> None:
        weights = dict(weights or {})
        if not sources:
            raise ValueError(f"{READER}: sources is empty: name at least one .spacy source")
        if alpha < 0:
            raise ValueError(f"{READER}: alpha = {alpha!r}: it must be 0 or more")
        for name, weight in weights.items():
            if name not in sources:
                known = ", ".join(sources)
                raise ValueError(f"{READER}: weights.{name}: no source {name!r} (sources: {known})")
            if weight < 0:
                raise ValueError(f"{READER}: weights.{name} = {weight!r}: it must be 0 or more")
        if epoch_size is not None and epoch_size < 1:
            raise ValueError(f"{READER}: epoch_size = {epoch_size!r}: it must be 1 or more")
        self.sources = {
            name: Corpus(path, max_length=max_length, limit=limit) for name, path in sources.items()
        }
        self.paths = dict(sources)
        self.alpha = alpha
        self.weights = weights
        self.shuffle = shuffle
        self.epoch_size = epoch_size
        self.seed = seed
        self.calls = 0
        # the examples of each source as first read, for the nlp object they were
        # read with; never yielded (copies are), so that training cannot change them
        self._read_for: Any = None
        self._examples: Dict[str, List[Example]] = {}

    def __call__(self, nlp: "Language") -> Iterator[Example]:
        """Yield the examples of one epoch.

        nlp (Language): The current nlp object.
        YIELDS (Example): The examples, each doc with its source in `doc._.bert_pipes_source`.
        """
        # checked when read, not when the config is resolved (as spacy.Corpus.v1),
        # so that `spacy debug config` runs before the corpora are made
        for name, path in self.paths.items():
            if not Path(path).exists():
                raise ValueError(f"{READER}: sources.{name} = {path!r}: no such file or folder")
        if not self.shuffle:
            for name, corpus in self.sources.items():
                n_read = 0
                for eg in corpus(nlp):
                    n_read += 1
                    yield _with_source(eg, name)
                if not n_read:
                    raise self._empty(name)
            return
        examples = self._read(nlp)
        epoch = self.calls
        self.calls += 1
        counts = self.counts({name: len(egs) for name, egs in examples.items()})
        # Each call takes the same number from each source, so where a source's order
        # stands at the start of this call is known without replaying earlier draws.
        streams = {
            name: self._stream(name, examples[name], epoch * count)
            for name, count in counts.items()
        }
        order = [name for name, count in counts.items() for _ in range(count)]
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        for name in order:
            yield _with_source(next(streams[name]), name)

    def _read(self, nlp: "Language") -> Dict[str, List[Example]]:
        """Every source's examples, read from its files at the first call with `nlp`."""
        if self._read_for is not nlp:
            self._examples = {}
            read = _READ.setdefault(nlp, {})
            for name, corpus in self.sources.items():
                key = (str(corpus.path), _stamp(corpus.path), corpus.max_length, corpus.limit)
                if key not in read:
                    with codecs_looked_up_once():
                        read[key] = list(corpus(nlp))
                self._examples[name] = read[key]
                if not self._examples[name]:
                    raise self._empty(name)
            self._read_for = nlp
        return self._examples

    def counts(self, sizes: Dict[str, int]) -> Dict[str, int]:
        """How many examples of each source one sampled call yields.

        sizes (Dict[str, int]): Examples per source.
        RETURNS (Dict[str, int]): Examples per call, summing to `epoch_size`.
        """
        total = self.epoch_size if self.epoch_size is not None else sum(sizes.values())
        weights = {
            name: self.weights.get(name, float(size) ** self.alpha) for name, size in sizes.items()
        }
        norm = sum(weights.values())
        if norm <= 0:
            raise ValueError(f"{READER}: weights = {self.weights!r}: every source has weight 0")
        shares = {name: total * weight / norm for name, weight in weights.items()}
        counts = {name: int(share) for name, share in shares.items()}
        # Largest remainders first; ties go to the source named first.
        by_remainder = sorted(shares, key=lambda name: counts[name] - shares[name])
        for name in by_remainder[: total - sum(counts.values())]:
            counts[name] += 1
        return counts

    def _empty(self, name: str) -> ValueError:
        corpus = self.sources[name]
        message = (
            f"{READER}: sources.{name} = {str(corpus.path)!r}: no docs to read (it must be a "
            ".spacy file, or a folder of them, holding at least one non-empty doc)"
        )
        if corpus.max_length:
            message += (
                f"; max_length = {corpus.max_length} leaves out longer docs without sentences"
            )
        return ValueError(message)

    def _stream(self, name: str, examples: List[Example], start: int) -> Iterator[Example]:
        """Copies of the source's examples from position `start` on, in an endless
        order: pass after pass over the source, each pass in a new shuffled order. A
        small source comes round more than once a call, each time as a new copy, so
        that no Example object is in a batch twice."""
        size = len(examples)
        cycle, offset = divmod(start, size)
        while True:
            order = list(range(size))
            random.Random(f"{self.seed}:{name}:{cycle}").shuffle(order)
            for i in order[offset:]:
                yield examples[i].copy()
            cycle, offset = cycle + 1, 0


def _stamp(path: Path) -> Tuple[Tuple[str, int, int], ...]:
    """Name, size and modification time of each `.spacy` file the path holds."""
    files = sorted(path.rglob("*.spacy")) if path.is_dir() else [path]
    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)


def _with_source(eg: Example, name: str) -> Example:
    eg.predicted._.set(SOURCE_ATTR, name)
    eg.reference._.set(SOURCE_ATTR, name)
    return eg
