"""Windows over long texts and length-sorted packing of windows into batches.

Everything here is plain numpy on wordpiece indices; the vectors themselves are
handled by the encoder. Conventions:

* A text's *pieces* are its wordpieces without special tokens.
* A *window* holds at most `size` consecutive pieces; windows overlap by `stride`
  pieces, so consecutive windows start `size - stride` pieces apart.
* Each piece is *owned* by the window in which it has the most context on both
  sides (BERT's SQuAD recipe: max of min(left, right) context, ties to the longer
  window), so window edges do not decide the vector a piece gets.
"""

import functools
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple, cast

import numpy
from thinc.types import Ints1d


@dataclass(frozen=True)
class WindowPlan:
    """The windows of one text and which window owns each piece.

    spans (List[Tuple[int, int]]): (start, end) piece indices of each window.
    owner (Ints1d): For each piece, the index of its owning window. (n_pieces,)
    position (Ints1d): For each piece, its index inside the owning window. (n_pieces,)
    """

    spans: List[Tuple[int, int]]
    owner: Ints1d
    position: Ints1d

    @property
    def single(self) -> bool:
        """Whether the whole text fits one window (the common, copy-free case)."""
        return len(self.spans) == 1


def window_spans(n_pieces: int, size: int, stride: int) -> List[Tuple[int, int]]:
    """Split `n_pieces` into windows of at most `size` pieces overlapping by `stride`.

    A text with no pieces still gets one (empty) window, so that every doc has a
    [CLS] vector.
    """
    if size < 1:
        raise ValueError(f"Window size must be at least 1 wordpiece, got {size}")
    if not 0 <= stride < size:
        raise ValueError(f"Stride must be in [0, window size {size}), got {stride}")
    if n_pieces <= size:
        return [(0, n_pieces)]
    step = size - stride
    spans = []
    start = 0
    while True:
        end = min(start + size, n_pieces)
        spans.append((start, end))
        if end == n_pieces:
            return spans
        start += step


def plan_windows(n_pieces: int, size: int, stride: int) -> WindowPlan:
    """Choose windows for a text and assign each piece to its max-context window."""
    spans = window_spans(n_pieces, size, stride)
    if len(spans) == 1:
        idx = numpy.arange(n_pieces, dtype="i")
        zeros = numpy.zeros(n_pieces, dtype="i")
        return WindowPlan(spans, cast(Ints1d, zeros), cast(Ints1d, idx))
    best = numpy.full(n_pieces, -1.0, dtype="f")
    owner = numpy.zeros(n_pieces, dtype="i")
    for w, (start, end) in enumerate(spans):
        idx = numpy.arange(start, end)
        # The length term only breaks ties: it stays below 1, one piece of context
        # (BERT's 0.01 * length outweighs real context once lengths differ by 100+).
        score = numpy.minimum(idx - start, end - 1 - idx) + (end - start) / (size + 1)
        better = score > best[start:end]
        best[start:end][better] = score[better]
        owner[start:end][better] = w
    starts = numpy.asarray([s for s, _ in spans], dtype="i")
    position = numpy.arange(n_pieces, dtype="i") - starts[owner]
    return WindowPlan(spans, cast(Ints1d, owner), cast(Ints1d, position))


@functools.lru_cache(maxsize=4096)
def cached_plan(n_pieces: int, size: int, stride: int) -> WindowPlan:
    """`plan_windows`, memoized: a plan depends only on these three numbers, and a
    collection has few distinct lengths. Its arrays are read-only."""
    plan = plan_windows(n_pieces, size, stride)
    for array in (plan.owner, plan.position):
        cast(numpy.ndarray, array).setflags(write=False)
    return plan


# A batch is closed when the next sequence would fill less than this share of the
# batch's padded width. Without it, length-sorted batches of short texts still
# spanned 5-80 wordpieces: Banking77 batches ran 2.3x more padded wordpieces than
# real ones, and the transformer's cost grows with padded wordpieces.
MIN_FILL = 0.8


def pack_batches(
    lengths: Sequence[int], max_batch_tokens: int, min_fill: float = MIN_FILL
) -> List[List[int]]:
    """Group sequences into batches sorted by length, under a padded-token budget.

    Sequences are taken longest first; a batch holds as many as fit in
    `max_batch_tokens` once padded to its longest member (a single sequence longer
    than the budget forms a batch of its own), and a sequence shorter than
    `min_fill` times the batch's longest starts a new batch, so padding stays
    below 1 / min_fill of the real wordpieces.

    lengths (Sequence[int]): The length (in wordpieces, with special tokens) of each sequence.
    max_batch_tokens (int): Budget of padded tokens per batch.
    min_fill (float): Shortest sequence of a batch relative to its longest (0 disables).
    RETURNS (List[List[int]]): Indices into `lengths`, one list per batch.
    """
    order = numpy.argsort(-numpy.asarray(lengths, dtype="i"), kind="stable")
    batches: List[List[int]] = []
    current: List[int] = []
    longest = 0
    for i in order.tolist():
        length = int(lengths[i])
        over_budget = (len(current) + 1) * max(longest, length) > max_batch_tokens
        if current and (over_budget or length < min_fill * longest):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


# The padded width of a reproducible batch (see `pack_reproducible`) is its
# windows' length rounded up to a multiple of this, and each of its transformer
# calls holds enough rows for this many padded wordpieces.
REPRODUCIBLE_BUCKET = 16
REPRODUCIBLE_TOKENS = 512


def padded_batch(
    ids: Sequence[Any],
    types: Sequence[Any],
    width: int,
    pad: int,
    cases: Optional[Sequence[Any]] = None,
) -> List[numpy.ndarray]:
    """A batch of windows (each window's ids, segment ids and casing classes: 1d
    integer arrays) as the transformer reads it, each array (rows, width) of
    int32: the ids (`pad` after each window), the attention mask, the segment ids
    and, given `cases`, the casing classes (0 on the padding). Built with a few
    numpy calls: the windows concatenated, then written under the mask."""
    lengths = numpy.asarray([len(row) for row in ids])
    # (rows, width): True over each window's real wordpieces, row by row
    mask = numpy.arange(width)[None, :] < lengths[:, None]
    padded = numpy.full((len(ids), width), pad, dtype="i")
    padded[mask] = numpy.concatenate(ids)
    segments = numpy.zeros((len(ids), width), dtype="i")
    segments[mask] = numpy.concatenate(types)
    arrays = [padded, mask.astype("i"), segments]
    if cases is not None:
        case_ids = numpy.zeros((len(ids), width), dtype="i")
        case_ids[mask] = numpy.concatenate(cases)
        arrays.append(case_ids)
    return arrays


def bucket_length(length: int, bucket: int = REPRODUCIBLE_BUCKET) -> int:
    """`length` rounded up to a multiple of `bucket`."""
    return -(-length // bucket) * bucket


def reproducible_rows(width: int, tokens: int = REPRODUCIBLE_TOKENS) -> int:
    """The rows of every reproducible transformer call of a padded width."""
    return max(1, -(-tokens // width))


def pack_reproducible(
    lengths: Sequence[int], bucket: int = REPRODUCIBLE_BUCKET, tokens: int = REPRODUCIBLE_TOKENS
) -> List[List[int]]:
    """Group sequences into batches of one shape per padded width, so that a
    sequence's output does not depend on the others in its batch.

    A matrix product's rounding depends on the kernel the library picks, and
    that depends on the shapes: on a CPU the rows of the same input came out
    different in their last bits (bf16: up to 0.002 in a probability) in
    batches of 1 and of 64. Here every sequence is padded to its own length
    rounded up to a multiple of `bucket`, and a batch holds sequences of one
    width only, `reproducible_rows(width)` of them (the encoder fills a short
    batch up with copies of its first row): every transformer call of a width
    has the same shape, whatever the docs around.

    lengths (Sequence[int]): The length (in wordpieces, with special tokens) of each sequence.
    bucket (int): The multiple padded widths are rounded up to.
    tokens (int): Padded wordpieces per transformer call (see `reproducible_rows`).
    RETURNS (List[List[int]]): Indices into `lengths`, one list per batch.
    """
    widths = numpy.asarray([bucket_length(int(n), bucket) for n in lengths], dtype="i")
    batches: List[List[int]] = []
    for width in sorted(set(widths.tolist()), reverse=True):
        members = numpy.flatnonzero(widths == width).tolist()
        rows = reproducible_rows(width, tokens)
        batches.extend(members[i : i + rows] for i in range(0, len(members), rows))
    return batches


def is_cupy(xp: Any) -> bool:
    """Whether `xp` is cupy (which has `cuda`) rather than numpy (or a wrapper of it)."""
    return hasattr(xp, "cuda")


def segment_sums(xp: Any, rows: Any, counts: numpy.ndarray) -> Any:
    """Sums of consecutive runs of `counts[i]` rows of a (n_rows, width) array
    (numpy or cupy), zeros for an empty run, adding rows in order as
    `rows[a:b].sum(axis=0)` does. (len(counts), width)

    On cupy, one thread per output value adds its run's rows in order
    (`_ordered_segment_sum`): the same additions as on numpy, whatever the docs
    around. `cupyx.scatter_add` (atomic adds, in whatever order the threads
    arrive) gave another last bit from run to run on a GPU, so the same
    collection came out as other bytes."""
    counts = numpy.asarray(counts)
    out = xp.zeros((len(counts), rows.shape[1]), dtype=rows.dtype)
    has = counts > 0
    if not has.any():
        return out
    if not is_cupy(xp):
        # One contiguous sum per run: ~10x faster than `add.reduceat` along axis 0,
        # and the same additions in the same order as `rows[a:b].sum(axis=0)`.
        bounds = numpy.cumsum(counts).tolist()
        for i in numpy.flatnonzero(has).tolist():
            out[i] = rows[bounds[i] - int(counts[i]) : bounds[i]].sum(axis=0)
    else:
        starts = numpy.concatenate(([0], numpy.cumsum(counts)[:-1])).astype("int64")
        _ordered_segment_sum()(
            xp.ascontiguousarray(rows),
            xp.asarray(starts),
            xp.asarray(counts.astype("int64")),
            int(rows.shape[1]),
            out,
        )
    return out


@functools.cache
def _ordered_segment_sum() -> Any:
    """A cupy kernel over `out` (n_runs, width), zeros to start with: each value
    of a non-empty run becomes the sum of its column over the run's rows, added
    one row after the other (compiled once)."""
    import cupy

    return cupy.ElementwiseKernel(
        "raw T rows, raw int64 starts, raw int64 counts, int64 width",
        "T out",
        """
        const long long run = i / width;
        const long long first = starts[run] * width + i % width;
        const long long n = counts[run];
        if (n > 0) {
            T sum = rows[first];
            for (long long k = 1; k < n; ++k) {
                sum = sum + rows[first + k * width];
            }
            out = sum;
        }
        """,
        "spacy_bert_pipes_ordered_segment_sum",
    )


def copy_rows(xp: Any, dest: Any, dest_rows: numpy.ndarray, source: Any, source_rows: Any) -> None:
    """dest[dest_rows] = source[source_rows] for (n, width) arrays (numpy or cupy).

    On numpy, one slice copy per run of rows that are consecutive in both: a
    window's wordpieces are one run, so this is a copy per window instead of a
    gather into a temporary and a scatter from it (half the memory traffic).
    """
    dest_rows = numpy.asarray(dest_rows)
    source_rows = numpy.asarray(source_rows)
    if not len(dest_rows):
        return
    if is_cupy(xp):  # one gather and one scatter on the device
        dest[xp.asarray(dest_rows)] = source[xp.asarray(source_rows)]
        return
    steps = (numpy.diff(dest_rows) != 1) | (numpy.diff(source_rows) != 1)
    starts = numpy.concatenate(([0], numpy.flatnonzero(steps) + 1))
    ends = numpy.append(starts[1:], len(dest_rows))
    for start, end, to, fro in zip(
        starts.tolist(), ends.tolist(), dest_rows[starts].tolist(), source_rows[starts].tolist()
    ):
        dest[to : to + end - start] = source[fro : fro + end - start]
