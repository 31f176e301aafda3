"""The data of a run: the texts read, the held-out split, the windows and the
batches of each epoch."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

import numpy

from ..io.errors import ConversionError
from ..io.readers import read_input
from .settings import PretrainSettings

if TYPE_CHECKING:
    from .mlm import Window

# Windows are sorted by length within pools of this many batches: batches of
# similar lengths waste little on padding, and the order stays random enough.
POOL_BATCHES = 50
# Texts are tokenized this many at a time.
_TOKENIZE_CHUNK = 1000


@dataclass(frozen=True)
class TextCollection:
    """The usable texts of an input.

    texts (List[str]): The texts, in input order.
    skipped (int): Rows without a usable text.
    first_skipped (Optional[str]): Where the first of them is and why, e.g.
        "train.csv:12: text is null".
    """

    texts: List[str]
    skipped: int
    first_skipped: Optional[str]


def read_texts(path: Path, settings: PretrainSettings) -> TextCollection:
    """Read the texts to pretrain on. Rows that cannot be read (see
    `io.readers.read_input`) and blank texts are skipped and counted.

    path (Path): The input file or folder.
    settings (PretrainSettings): The input format and columns.
    RETURNS (TextCollection): The texts.
    """
    rows = read_input(
        path,
        input_format=settings.input_format,
        text_column=settings.text_column,
        id_column=settings.id_column,
    )
    texts: List[str] = []
    skipped = 0
    first_skipped = None
    for row in rows:
        if row.text is not None and row.text.strip():
            texts.append(row.text)
            continue
        skipped += 1
        if first_skipped is None:
            first_skipped = f"{row.source}: {row.error or 'blank text'}"
    if not texts:
        detail = f" (the first: {first_skipped})" if first_skipped else ""
        raise ConversionError(
            str(path),
            f"no texts to pretrain on in column {settings.text_column!r}: "
            f"{skipped} rows, none with a non-blank text{detail}",
        )
    return TextCollection(texts, skipped, first_skipped)


def held_out_split(n_texts: int, held_out: int, seed: int) -> Tuple[List[int], List[int]]:
    """Split text indices into training and held-out ones (a seeded sample of at
    most a tenth of the texts).

    n_texts (int): The number of texts.
    held_out (int): The held-out texts wanted.
    seed (int): Seeds the sample.
    RETURNS (Tuple[List[int], List[int]]): Training and held-out indices, ascending.
    """
    n_held = min(held_out, n_texts // 10)
    order = numpy.random.default_rng(seed).permutation(n_texts)
    return sorted(order[n_held:].tolist()), sorted(order[:n_held].tolist())


def epoch_batches(
    lengths: Sequence[int], batch_size: int, seed: int, epoch: int
) -> List[List[int]]:
    """The batches of one epoch, as window indices. Windows are shuffled, sorted
    by length within pools of `POOL_BATCHES` batches and cut into batches,
    whose order is then shuffled. The same seed and epoch give the same batches
    (a resumed run skips the ones done), and every epoch has as many batches.

    lengths (Sequence[int]): The length of each window.
    batch_size (int): Windows per batch.
    seed (int): The run's seed.
    epoch (int): The epoch, from 0.
    RETURNS (List[List[int]]): The batches.
    """
    rng = numpy.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    pool = batch_size * POOL_BATCHES
    batches: List[List[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: lengths[i])
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def encode_windows(tokenizer: Any, texts: List[str], settings: PretrainSettings) -> List["Window"]:
    from .mlm import encode_texts

    windows: List[Window] = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        chunk = texts[start : start + _TOKENIZE_CHUNK]
        encoded = encode_texts(
            tokenizer, chunk, settings.max_length, words=settings.whole_word_masking
        )
        windows.extend(window for _, window in encoded)
    return windows


def sorted_batches(lengths: Sequence[int], batch_size: int) -> List[List[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
