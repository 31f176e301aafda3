"""Windows over long texts and the packing of windows into batches (plain numpy)."""

import itertools
import random

import numpy
import pytest

from spacy_bert_pipes.models.text.windows import (
    REPRODUCIBLE_BUCKET,
    REPRODUCIBLE_TOKENS,
    bucket_length,
    copy_rows,
    pack_batches,
    pack_reproducible,
    padded_batch,
    plan_windows,
    reproducible_rows,
    segment_sums,
    window_spans,
)

# (n_pieces, size, stride) grid small enough to check exhaustively.
GRID = [
    (n, size, stride)
    for size in range(1, 9)
    for stride in range(size)
    for n in range(0, 3 * size + 5)
]


def test_window_spans_no_pieces_gives_one_empty_window():
    assert window_spans(0, 4, 1) == [(0, 0)]


@pytest.mark.parametrize("n", [1, 3, 4])
def test_window_spans_text_that_fits_is_one_window(n):
    assert window_spans(n, 4, 2) == [(0, n)]


def test_window_spans_one_piece_too_many_adds_a_window():
    # step = size - stride = 3
    assert window_spans(5, 4, 1) == [(0, 4), (3, 5)]
    assert window_spans(10, 4, 1) == [(0, 4), (3, 7), (6, 10)]
    assert window_spans(9, 4, 0) == [(0, 4), (4, 8), (8, 9)]


def test_window_spans_cover_text_and_overlap_by_stride():
    for n, size, stride in GRID:
        _check_spans(n, size, stride)


def _check_spans(n, size, stride):
    spans = window_spans(n, size, stride)
    assert spans[0][0] == 0
    assert spans[-1][1] == n
    covered = set()
    for start, end in spans:
        assert 0 <= start <= end <= n
        assert end - start <= size
        covered.update(range(start, end))
    assert covered == set(range(n))
    for (s1, e1), (s2, _) in zip(spans, spans[1:]):
        assert s2 - s1 == size - stride
        assert e1 - s2 == stride  # consecutive windows share exactly `stride` pieces
        assert e1 - s1 == size  # only the last window may be short
    # No redundant trailing window: the one before the last does not reach the end.
    if len(spans) > 1:
        assert spans[-2][1] < n


@pytest.mark.parametrize("size,stride", [(0, 0), (-1, 0), (4, 4), (4, 5), (4, -1)])
def test_window_spans_invalid_size_or_stride_raise(size, stride):
    with pytest.raises(ValueError):
        window_spans(10, size, stride)


def _context(i, span):
    start, end = span
    return min(i - start, end - 1 - i)


def _check_plan(n, size, stride):
    plan = plan_windows(n, size, stride)
    assert plan.spans == window_spans(n, size, stride)
    assert plan.owner.shape == (n,) and plan.position.shape == (n,)
    assert plan.single == (len(plan.spans) == 1)
    for i in range(n):
        w = int(plan.owner[i])
        start, end = plan.spans[w]
        assert start <= i < end, (i, plan.spans[w])
        assert plan.position[i] == i - start
        containing = [s for s in plan.spans if s[0] <= i < s[1]]
        best = max(_context(i, s) for s in containing)
        assert _context(i, plan.spans[w]) == best, (i, w, plan.spans)
        # Ties go to the longer window.
        tied = [s for s in containing if _context(i, s) == best]
        assert end - start == max(e - s for s, e in tied)


def test_plan_windows_owner_has_max_context():
    for n, size, stride in GRID:
        _check_plan(n, size, stride)


@pytest.mark.parametrize("n,size,stride", [(512, 510, 128), (700, 510, 128), (1000, 254, 64)])
def test_plan_windows_max_context_with_long_windows(n, size, stride):
    # With BERT-sized windows a short last window must still win the pieces where it
    # has more context (a length bonus must only break ties).
    _check_plan(n, size, stride)


def test_plan_windows_owners_split_the_overlap():
    # size 6, stride 4: windows (0,6), (2,8), (4,10)
    plan = plan_windows(10, 6, 4)
    assert plan.spans == [(0, 6), (2, 8), (4, 10)]
    assert plan.owner.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert plan.position.tolist() == [0, 1, 2, 3, 2, 3, 2, 3, 4, 5]


def test_plan_windows_every_piece_owned_once():
    plan = plan_windows(57, 10, 3)
    pairs = set(zip(plan.owner.tolist(), plan.position.tolist()))
    assert len(pairs) == 57  # no two pieces read the same window row


def _check_batches(lengths, budget, min_fill=0.8):
    batches = pack_batches(lengths, budget, min_fill)
    flat = list(itertools.chain.from_iterable(batches))
    assert sorted(flat) == list(range(len(lengths)))
    ordered = [lengths[i] for i in flat]
    assert ordered == sorted(ordered, reverse=True)
    for k, batch in enumerate(batches):
        assert batch
        longest = max(lengths[i] for i in batch)
        if len(batch) > 1:
            assert len(batch) * longest <= budget
            assert min(lengths[i] for i in batch) >= min_fill * longest
        if k + 1 < len(batches):
            # Greedy: the next sequence did not fit in this batch, or would have
            # been padded too much.
            following = lengths[batches[k + 1][0]]
            assert (len(batch) + 1) * longest > budget or following < min_fill * longest
    return batches


def test_pack_batches_random_lengths():
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(2, 130) for _ in range(rng.randint(0, 40))]
        budget = rng.choice([1, 64, 128, 300, 4096])
        _check_batches(lengths, budget)
        _check_batches(lengths, budget, min_fill=0.0)


def test_pack_batches_examples():
    assert pack_batches([], 100) == []
    assert pack_batches([10, 50, 20, 50], 100) == [[1, 3], [2], [0]]
    assert pack_batches([10, 50, 20, 50], 100, min_fill=0.0) == [[1, 3], [2, 0]]
    assert pack_batches([18, 50, 20, 45], 200) == [[1, 3], [2, 0]]
    # A sequence over the budget forms a batch of its own.
    assert pack_batches([5, 500, 5], 100) == [[1], [0, 2]]
    assert pack_batches(numpy.asarray([3, 3, 3]), 9) == [[0, 1, 2]]


@pytest.mark.parametrize("counts", [[3, 0, 5, 1], [0, 0], [7], [0, 2, 0]])
def test_segment_sums_add_each_run_in_order(counts):
    """Each run's sum is exactly `rows[a:b].sum(axis=0)` (the pooling of one doc
    alone), zeros for an empty run."""
    rng = numpy.random.default_rng(0)
    rows = rng.standard_normal((sum(counts), 5)).astype("f")
    out = segment_sums(numpy, rows, numpy.asarray(counts))
    assert out.shape == (len(counts), 5) and out.dtype == rows.dtype
    start = 0
    for i, count in enumerate(counts):
        expected = rows[start : start + count].sum(axis=0)
        assert numpy.array_equal(out[i], expected if count else numpy.zeros(5, "f"))
        start += count


@pytest.mark.gpu
def test_segment_sums_on_the_gpu_are_the_bits_of_the_cpu_every_time():
    """On cupy each run is added row after row as numpy adds it: the CPU's bits,
    on every call. Atomic adds (`cupyx.scatter_add`) were neither: on an H200 a
    collection came out as other bytes from one run to the next."""
    import cupy

    rng = numpy.random.default_rng(0)
    counts = rng.integers(1, 400, size=96)
    counts[[0, 7, 95]] = 0
    rows = rng.standard_normal((int(counts.sum()), 384)).astype("f")
    expected = segment_sums(numpy, rows, counts)
    on_gpu = cupy.asarray(rows)
    for _ in range(5):
        assert numpy.array_equal(cupy.asnumpy(segment_sums(cupy, on_gpu, counts)), expected)
    # a (n, width) slice that is not contiguous is summed like its copy
    wide = cupy.asarray(numpy.repeat(rows, 2, axis=1))[:, ::2]
    assert numpy.array_equal(cupy.asnumpy(segment_sums(cupy, wide, counts)), expected)


@pytest.mark.parametrize("seed", range(5))
def test_copy_rows_equals_fancy_indexing(seed):
    """Runs consecutive in both arrays, runs broken in only one of them, single
    rows and nothing: the same as dest[dest_rows] = source[source_rows]."""
    rng = numpy.random.default_rng(seed)
    source = rng.standard_normal((60, 4)).astype("f")
    pieces = []  # runs of (dest start, source start, length); dest rows are distinct
    end = 0
    for _ in range(int(rng.integers(0, 8))):
        start, n = end + int(rng.integers(0, 2)), int(rng.integers(1, 8))
        pieces.append((start, int(rng.integers(0, 50)), n))
        end = start + n
    dest_rows = numpy.concatenate([numpy.arange(d, d + n) for d, _, n in pieces] or [[]])
    source_rows = numpy.concatenate([numpy.arange(s, s + n) for _, s, n in pieces] or [[]])
    dest_rows, source_rows = dest_rows.astype("int64"), source_rows.astype("int64")
    expected = numpy.zeros((70, 4), "f")
    expected[dest_rows] = source[source_rows]
    dest = numpy.zeros((70, 4), "f")
    copy_rows(numpy, dest, dest_rows, source, source_rows)
    assert numpy.array_equal(dest, expected)


def test_pack_reproducible_batches_one_shape_per_width():
    rng = random.Random(0)
    lengths = [rng.randint(3, 130) for _ in range(300)]
    batches = pack_reproducible(lengths)
    assert sorted(itertools.chain(*batches)) == list(range(len(lengths)))
    for batch in batches:
        widths = {bucket_length(lengths[i]) for i in batch}
        assert len(widths) == 1  # every member padded as it would be alone
        (width,) = widths
        assert width % REPRODUCIBLE_BUCKET == 0 and width - REPRODUCIBLE_BUCKET < min(
            lengths[i] for i in batch
        )
        assert 1 <= len(batch) <= reproducible_rows(width)
    assert reproducible_rows(16) * 16 == REPRODUCIBLE_TOKENS
    assert reproducible_rows(10_000) == 1


def test_a_padded_batch_holds_each_window_under_its_mask():
    ids = [numpy.array([101, 7, 102]), numpy.array([101, 102])]
    types = [numpy.array([0, 0, 1]), numpy.array([0, 0])]
    padded, mask, segments = padded_batch(ids, types, 4, pad=0)
    assert padded.tolist() == [[101, 7, 102, 0], [101, 102, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]
    assert segments.tolist() == [[0, 0, 1, 0], [0, 0, 0, 0]]
    assert {a.dtype for a in (padded, mask, segments)} == {numpy.dtype("int32")}
    *_, cases = padded_batch(ids, types, 3, pad=0, cases=[numpy.array([4, 2, 4]), [4, 4]])
    assert cases.tolist() == [[4, 2, 4], [4, 4, 0]]
