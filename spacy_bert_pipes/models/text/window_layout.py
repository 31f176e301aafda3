"""Where every wordpiece and window of a tokenized batch sits: the encoder's
windows over long texts laid end to end, planned with whole-array numpy
(`layout_windows`), before they are packed into transformer batches.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, cast

import numpy
from thinc.types import Ints1d, Ints2d

from .casing import NO_CASE
from .windows import cached_plan

if TYPE_CHECKING:
    from .tokens import TokenizedBatch


@dataclass
class WindowLayout:
    """Where every wordpiece and window of a batch sits (numpy, host side).

    Segments (the spans encoded apart: a doc, or its sentences) are laid end to
    end; so are their wordpieces and their windows.

    windows (List[Tuple[Ints1d, Ints1d]]): Each window's ids and segment ids,
        specials included (views into one flat array).
    cases (Optional[List[Ints1d]]): Each window's casing classes, if used.
    owner (numpy.ndarray): The window owning each wordpiece. (n_pieces,)
    position (numpy.ndarray): The wordpiece's row in that window, after [CLS]. (n_pieces,)
    doc_of_window (numpy.ndarray): (n_windows,)
    windows_per_doc (numpy.ndarray): (n_docs,)
    piece_bounds (List[int]): Doc i's wordpieces are piece_bounds[i]:piece_bounds[i + 1].
    offsets (List[Ints2d]): Each doc's wordpiece offsets in its text.
    """

    windows: List[Tuple[Ints1d, Ints1d]]
    cases: Optional[List[Ints1d]]
    owner: numpy.ndarray
    position: numpy.ndarray
    doc_of_window: numpy.ndarray
    windows_per_doc: numpy.ndarray
    piece_bounds: List[int]
    offsets: List[Ints2d]


def layout_windows(
    batch: "TokenizedBatch", cls_id: int, sep_id: int, size: int, stride: int
) -> WindowLayout:
    """Plan the windows of a tokenized batch with whole-array numpy: only texts
    longer than a window get a Python `plan_windows` call."""
    seg_pieces = batch.pieces
    n_segs = len(seg_pieces)
    counts = numpy.asarray([len(p.ids) for p in seg_pieces], dtype="int64")
    bases = numpy.cumsum(counts) - counts  # first wordpiece of each segment
    n_pieces = int(counts.sum())
    # the extra 0 at the end stands in for the specials
    id_parts: List[Any] = [p.ids for p in seg_pieces] + [numpy.zeros((1,), "i")]
    all_ids: numpy.ndarray = numpy.concatenate(id_parts)
    segs_per_doc = numpy.asarray([len(spans) for spans in batch.spans], dtype="int64")
    doc_of_seg = numpy.repeat(numpy.arange(len(batch.spans)), segs_per_doc)
    # windows: (segment, first piece, length); one per segment unless it is long
    win_seg = numpy.arange(n_segs)
    win_start = bases.copy()
    win_len = counts.copy()
    owner_local = numpy.zeros((n_pieces,), dtype="int64")
    seg_of_piece = numpy.repeat(numpy.arange(n_segs), counts)
    position = numpy.arange(n_pieces, dtype="int64") - numpy.repeat(bases, counts)
    long_segs = numpy.flatnonzero(counts > size).tolist()
    if long_segs:
        seg_list, start_list, len_list = [], [], []
        plans = {i: cached_plan(int(counts[i]), size, stride) for i in long_segs}
        for i in range(n_segs):
            plan = plans.get(i)
            if plan is None:
                seg_list.append(i)
                start_list.append(int(bases[i]))
                len_list.append(int(counts[i]))
                continue
            for start, end in plan.spans:
                seg_list.append(i)
                start_list.append(int(bases[i]) + start)
                len_list.append(end - start)
            lo, hi = int(bases[i]), int(bases[i] + counts[i])
            owner_local[lo:hi] = plan.owner
            position[lo:hi] = plan.position
        win_seg = numpy.asarray(seg_list, dtype="int64")
        win_start = numpy.asarray(start_list, dtype="int64")
        win_len = numpy.asarray(len_list, dtype="int64")
    n_windows = len(win_seg)
    first_window = numpy.searchsorted(win_seg, numpy.arange(n_segs))  # of each segment
    owner = first_window[seg_of_piece] + owner_local
    # every window as [CLS] pieces [SEP], all end to end
    full = win_len + 2
    full_starts = numpy.cumsum(full) - full
    total = int(full.sum())
    pos = numpy.arange(total, dtype="int64") - numpy.repeat(full_starts, full)
    source = numpy.repeat(win_start - 1, full) + pos
    is_cls = pos == 0
    is_sep = pos == numpy.repeat(full - 1, full)
    specials = is_cls | is_sep
    source = numpy.where(specials, n_pieces, source)  # the extra 0 at the end
    flat_ids = all_ids[source].astype("i")
    flat_ids[is_cls] = cls_id
    flat_ids[is_sep] = sep_id
    flat_types = numpy.zeros((total,), dtype="i")
    bounds = numpy.concatenate((full_starts, [total])).tolist()
    windows = [
        (
            cast(Ints1d, flat_ids[bounds[w] : bounds[w + 1]]),
            cast(Ints1d, flat_types[bounds[w] : bounds[w + 1]]),
        )
        for w in range(n_windows)
    ]
    cases = None
    if n_segs and seg_pieces[0].cases is not None:
        case_parts: List[Any] = [p.cases for p in seg_pieces] + [numpy.full((1,), NO_CASE, "i")]
        all_cases: numpy.ndarray = numpy.concatenate(case_parts)
        flat_cases = all_cases[source].astype("i")
        flat_cases[specials] = NO_CASE
        cases = [cast(Ints1d, flat_cases[bounds[w] : bounds[w + 1]]) for w in range(n_windows)]
    doc_of_window = doc_of_seg[win_seg] if n_windows else numpy.zeros((0,), "int64")
    windows_per_doc = numpy.bincount(doc_of_window, minlength=len(batch.spans))
    pieces_per_doc = numpy.bincount(doc_of_seg, weights=counts, minlength=len(batch.spans))
    piece_bounds = numpy.concatenate(([0], numpy.cumsum(pieces_per_doc))).astype("int64").tolist()
    offsets: List[Ints2d] = []
    seg = 0
    for doc_spans in batch.spans:
        parts = seg_pieces[seg : seg + len(doc_spans)]
        if len(parts) == 1 and doc_spans[0][0] == 0:
            offsets.append(parts[0].offsets)
        else:
            shifted: List[Any] = [p.offsets + start for p, (start, _) in zip(parts, doc_spans)]
            offsets.append(cast(Ints2d, numpy.concatenate(shifted).astype("i")))
        seg += len(doc_spans)
    return WindowLayout(
        windows, cases, owner, position, doc_of_window, windows_per_doc, piece_bounds, offsets
    )
