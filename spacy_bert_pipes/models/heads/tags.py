"""Entity tag schemes and constrained decoding (numpy only, no torch).

A tagger scores every token against the tags of a scheme:
* "BIO": O, then B-X and I-X for each entity label X;
* "BILUO": O, then B-X, I-X, L-X and U-X (spaCy's own scheme).
`viterbi` finds the best tag sequence among the *valid* ones only (an I-X must
follow a B-X or I-X, ...), so decoding can never produce a broken entity.
"""

from dataclasses import dataclass
from typing import List, Literal, Optional, Sequence, Tuple

import numpy

Scheme = Literal["BIO", "BILUO"]
OUTSIDE = "O"
_PREFIXES = {"BIO": ("B", "I"), "BILUO": ("B", "I", "L", "U")}


@dataclass(frozen=True)
class TagSet:
    """The tags of a scheme over some labels, with the allowed transitions.

    tags (Tuple[str, ...]): "O" first, then the prefixed tags of each label.
    allowed (numpy.ndarray): allowed[i, j] is True when tag j may follow tag i. (n_tags, n_tags)
    start (numpy.ndarray): Tags that may open a sequence. (n_tags,)
    end (numpy.ndarray): Tags that may close a sequence. (n_tags,)
    """

    scheme: str
    labels: Tuple[str, ...]
    tags: Tuple[str, ...]
    allowed: numpy.ndarray
    start: numpy.ndarray
    end: numpy.ndarray

    def index(self, tag: str) -> int:
        return self.tags.index(tag)


def make_tag_set(labels: Sequence[str], scheme: Scheme = "BIO") -> TagSet:
    """Tags and transition constraints for entity labels."""
    if scheme not in _PREFIXES:
        raise ValueError(f"Unknown tag scheme {scheme!r}: use 'BIO' or 'BILUO'")
    for label in labels:
        if not label or "-" == label[0] or label == OUTSIDE:
            raise ValueError(f"Invalid entity label {label!r}")
    tags = [OUTSIDE] + [f"{p}-{label}" for label in labels for p in _PREFIXES[scheme]]
    n = len(tags)
    parsed = [split_tag(t) for t in tags]
    allowed = numpy.zeros((n, n), dtype=bool)
    start = numpy.zeros((n,), dtype=bool)
    end = numpy.zeros((n,), dtype=bool)
    for j, (p_next, l_next) in enumerate(parsed):
        start[j] = p_next in ("O", "B", "U")
        end[j] = p_next in ("O", "U", "L") if scheme == "BILUO" else True
        for i, (p_prev, l_prev) in enumerate(parsed):
            allowed[i, j] = _may_follow(scheme, p_prev, l_prev, p_next, l_next)
    return TagSet(scheme, tuple(labels), tuple(tags), allowed, start, end)


def split_tag(tag: str) -> Tuple[str, str]:
    """("B", "PER") for "B-PER", ("O", "") for "O"."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, label = tag.partition("-")
    return prefix, label


def _may_follow(scheme: str, p_prev: str, l_prev: str, p_next: str, l_next: str) -> bool:
    if scheme == "BIO":
        # An I-X continues an entity of the same label; anything else may start fresh.
        return p_next != "I" or (p_prev in ("B", "I") and l_prev == l_next)
    inside = p_prev in ("B", "I")  # an entity is open and must go on
    if inside:
        return p_next in ("I", "L") and l_prev == l_next
    return p_next in ("O", "B", "U")


def viterbi(
    log_probs: numpy.ndarray, tag_set: TagSet, forced: Optional[numpy.ndarray] = None
) -> numpy.ndarray:
    """The highest-scoring valid tag sequence.

    log_probs (numpy.ndarray): Log-probability of each tag at each token. (n_tokens, n_tags)
    forced (Optional[numpy.ndarray]): Tokens that must be tagged "O" (e.g. whitespace). (n_tokens,)
    RETURNS (numpy.ndarray): The tag index of each token. (n_tokens,)
    """
    return viterbi_batch([log_probs], tag_set, [forced])[0]


def viterbi_batch(
    log_probs: Sequence[numpy.ndarray],
    tag_set: TagSet,
    forced: Optional[Sequence[Optional[numpy.ndarray]]] = None,
) -> List[numpy.ndarray]:
    """`viterbi` for several sequences at once (see `viterbi_ragged`)."""
    sizes = numpy.asarray([len(lp) for lp in log_probs], dtype="i")
    n_tags = len(tag_set.tags)
    flat = (
        numpy.concatenate([numpy.asarray(lp).reshape((-1, n_tags)) for lp in log_probs])
        if len(log_probs)
        else numpy.zeros((0, n_tags))
    )
    flat_forced = None
    if forced is not None:
        flat_forced = numpy.zeros((len(flat),), dtype=bool)
        bounds = numpy.cumsum(sizes) - sizes
        for start, doc_forced in zip(bounds.tolist(), forced):
            if doc_forced is not None:
                flat_forced[start : start + len(doc_forced)] = doc_forced
    path = viterbi_ragged(flat, sizes, tag_set, flat_forced)
    return numpy.split(path, numpy.cumsum(sizes)[:-1]) if len(sizes) else []


def viterbi_ragged(
    log_probs: numpy.ndarray,
    sizes: numpy.ndarray,
    tag_set: TagSet,
    forced: Optional[numpy.ndarray] = None,
) -> numpy.ndarray:
    """`viterbi` for a batch of sequences laid end to end.

    log_probs (numpy.ndarray): Log-probabilities of the tags. (n_tokens, n_tags)
    sizes (numpy.ndarray): Tokens of each sequence. (n_seqs,)
    forced (Optional[numpy.ndarray]): Tokens that must be "O". (n_tokens,)
    RETURNS (numpy.ndarray): The tag index of each token. (n_tokens,)

    The unconstrained best path (each token's own best tag) scores at least as
    high as any valid path, so where it is valid it is the answer; a trained
    tagger's output usually is. The greedy path and its validity are computed for
    the whole batch with array operations. Only the pieces (`_pieces`) that
    contain a break are searched, together (`_viterbi_padded`): for a trained
    tagger they are a few tokens long, so the search takes a few steps where
    padding to the longest broken doc took hundreds.
    """
    sizes = numpy.asarray(sizes, dtype="i")
    scores = numpy.asarray(log_probs, dtype="f8").copy()
    if forced is not None and forced.any():
        scores[forced, 1:] = -numpy.inf  # column 0 is "O"
    path = scores.argmax(axis=1).astype("i") if len(scores) else numpy.zeros((0,), "i")
    if len(path) == 0:
        return path
    starts = numpy.cumsum(sizes) - sizes
    nonempty = sizes > 0
    first = starts[nonempty]
    last = (starts + sizes - 1)[nonempty]
    # A break: a disallowed transition inside a sequence, a bad first or last tag.
    broken = numpy.zeros((len(path),), dtype=bool)
    broken[1:] = ~tag_set.allowed[path[:-1], path[1:]]
    broken[first] = ~tag_set.start[path[first]]  # the step into a sequence is no transition
    broken[last] |= ~tag_set.end[path[last]]
    if not broken.any():
        return path
    piece_starts = _pieces(scores, first, tag_set)
    starts_piece = numpy.zeros((len(path),), dtype="i")
    starts_piece[piece_starts] = 1
    piece_of_token = numpy.cumsum(starts_piece) - 1
    piece_ends = numpy.append(piece_starts[1:], len(path))
    pending = numpy.unique(piece_of_token[broken]).tolist()
    bounds = [(int(piece_starts[i]), int(piece_ends[i])) for i in pending]
    decoded = _viterbi_padded([scores[start:end] for start, end in bounds], tag_set)
    for (start, end), piece_path in zip(bounds, decoded):
        path[start:end] = piece_path
    return path


def _pieces(scores: numpy.ndarray, first: numpy.ndarray, tag_set: TagSet) -> numpy.ndarray:
    """Where the batch's tokens can be cut into pieces whose best valid paths,
    found apart, make the best valid path of their sequence. (n_pieces,) sorted

    Every sequence's first token starts a piece. In BIO so does every token where
    each label's B- scores higher than its I- (or I- is impossible): the best
    path cannot continue an entity there, since B-X in place of I-X is valid
    wherever I-X is and scores higher, so the path before it may end in any tag
    and the path from it must start as a sequence does. The cut is exact, not a
    heuristic; BILUO sequences are not cut.
    """
    if tag_set.scheme != "BIO" or not tag_set.labels:
        return first
    begin = scores[:, 1::2]  # B-X of each label: "O", then B-X, I-X per label
    inside = scores[:, 2::2]
    cut = ((begin > inside) | (inside == -numpy.inf)).all(axis=1)
    cut[first] = True
    return numpy.flatnonzero(cut)


def _viterbi_padded(scores: List[numpy.ndarray], tag_set: TagSet) -> List[numpy.ndarray]:
    """Constrained Viterbi over several sequences at once (none empty).

    The sequences are sorted longest first and laid out time-major, so step t
    updates only the first k rows (those longer than t). Each step uses the
    schemes' structure instead of an (n_tags x n_tags) transition table: a tag
    that opens (O, B-, U-) may follow exactly the tags that close (`closers`),
    and a tag that continues an entity (I-, L-) may follow exactly its label's
    B- and I-. The result, ties included (the lower tag index wins, as argmax
    does), is the textbook search's.
    """
    n_tags = scores[0].shape[1]
    closers, opens, continuing, after_begin, after_inside = _transitions(tag_set)
    lengths = numpy.asarray([len(s) for s in scores], dtype="i")
    order = numpy.argsort(-lengths, kind="stable")
    longest = int(lengths[order[0]])
    n_seqs = len(scores)
    padded = numpy.full((longest, n_seqs, n_tags), -numpy.inf)  # time-major
    for rank, row in enumerate(order.tolist()):
        padded[: lengths[row], rank] = scores[row]
    active = (lengths[order][None, :] > numpy.arange(longest)[:, None]).sum(axis=1)
    best = numpy.where(tag_set.start, padded[0], -numpy.inf)  # (n_seqs, n_tags)
    back = numpy.zeros((longest, n_seqs, n_tags), dtype="i")
    for t in range(1, longest):
        k = int(active[t])
        prev = best[:k]
        closing = prev[:, closers]
        which = closing.argmax(axis=1)
        top = closing[numpy.arange(k), which]
        step = numpy.empty((k, n_tags))
        step[:, opens] = top[:, None]
        back[t, :k][:, opens] = closers[which][:, None]
        from_inside = prev[:, after_inside] > prev[:, after_begin]  # ties: B- wins
        step[:, continuing] = numpy.where(from_inside, prev[:, after_inside], prev[:, after_begin])
        back[t, :k][:, continuing] = numpy.where(from_inside, after_inside, after_begin)
        best[:k] = step + padded[t, :k]
    # each sequence ends in the best tag that may close it, then walks back
    path = numpy.zeros((longest, n_seqs), dtype="i")
    ends = lengths[order] - 1
    path[ends, numpy.arange(n_seqs)] = numpy.where(tag_set.end, best, -numpy.inf).argmax(axis=1)
    for t in range(longest - 1, 0, -1):
        k = int(active[t])
        path[t - 1, :k] = back[t, numpy.arange(k), path[t, :k]]
    rank_of = numpy.empty_like(order)
    rank_of[order] = numpy.arange(n_seqs)
    return [path[:n, rank].copy() for n, rank in zip(lengths.tolist(), rank_of.tolist())]


def _transitions(
    tag_set: TagSet,
) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """The tag set's transitions as index arrays: the tags that opening tags may
    follow, the opening tags, the continuing tags and each continuing tag's two
    possible predecessors (its label's B- and I-), read from `allowed`."""
    allowed = tag_set.allowed
    closers = numpy.flatnonzero(allowed[:, 0])  # "O" opens
    opening = (allowed == allowed[:, :1]).all(axis=0)
    opens = numpy.flatnonzero(opening)
    continuing = numpy.flatnonzero(~opening)
    before = [numpy.flatnonzero(allowed[:, j]) for j in continuing.tolist()]
    if any(len(p) != 2 for p in before):
        raise ValueError(f"Unsupported transitions in the {tag_set.scheme} tag set")
    after_begin = numpy.asarray([p[0] for p in before], dtype="i")
    after_inside = numpy.asarray([p[1] for p in before], dtype="i")
    return closers, opens, continuing, after_begin, after_inside


def is_valid_array(path: numpy.ndarray, tag_set: TagSet) -> bool:
    """`is_valid` for a numpy array of tag ids, without a Python loop."""
    if len(path) == 0:
        return True
    return bool(
        tag_set.start[path[0]]
        and tag_set.end[path[-1]]
        and tag_set.allowed[path[:-1], path[1:]].all()
    )


def is_valid(path: Sequence[int], tag_set: TagSet) -> bool:
    """Whether a tag sequence obeys the scheme (used by tests and checks)."""
    if len(path) == 0:
        return True
    if not tag_set.start[path[0]] or not tag_set.end[path[-1]]:
        return False
    return all(tag_set.allowed[a, b] for a, b in zip(path[:-1], path[1:]))


def path_to_spans(path: Sequence[int], tag_set: TagSet) -> List[Tuple[int, int, str]]:
    """Entities (start token, end token exclusive, label) of a valid tag sequence."""
    path_array = numpy.asarray(path, dtype="i").reshape((-1,))
    entities = ragged_entities(path_array, numpy.asarray([len(path_array)], "i"), tag_set)
    return [
        (start, end, tag_set.labels[label])
        for start, end, label in zip(
            entities.starts.tolist(), entities.ends.tolist(), entities.labels.tolist()
        )
    ]


@dataclass(frozen=True)
class Entities:
    """Entities of a batch of tag sequences, in order, as parallel arrays.

    seqs (numpy.ndarray): The sequence (doc) of each entity. (n_entities,)
    starts, ends (numpy.ndarray): Token offsets in its sequence, end exclusive.
    labels (numpy.ndarray): Index into the tag set's labels. (n_entities,)
    flat_starts, flat_ends (numpy.ndarray): The same offsets in the batch's tokens.
    """

    seqs: numpy.ndarray
    starts: numpy.ndarray
    ends: numpy.ndarray
    labels: numpy.ndarray
    flat_starts: numpy.ndarray
    flat_ends: numpy.ndarray


def ragged_entities(path: numpy.ndarray, sizes: numpy.ndarray, tag_set: TagSet) -> Entities:
    """The entities of valid tag sequences laid end to end (`viterbi_ragged`).

    An entity opens at a B- or U- tag and takes the I- and L- tags that follow;
    a valid path never runs one into the next sequence (a sequence cannot start
    with I- or L-), but the end is clipped to the sequence all the same.
    """
    prefixes = [split_tag(tag)[0] for tag in tag_set.tags]
    opens = numpy.asarray([p in ("B", "U") for p in prefixes], dtype=bool)
    goes_on = numpy.asarray([p in ("I", "L") for p in prefixes], dtype=bool)
    label_of = numpy.asarray(
        [tag_set.labels.index(split_tag(tag)[1]) if tag != OUTSIDE else -1 for tag in tag_set.tags],
        dtype="i",
    )
    sizes = numpy.asarray(sizes, dtype="i")
    seq_starts = numpy.cumsum(sizes) - sizes
    n_tokens = len(path)
    begins = numpy.flatnonzero(opens[path]) if n_tokens else numpy.zeros((0,), "int64")
    stops = numpy.flatnonzero(~goes_on[path]) if n_tokens else numpy.zeros((0,), "int64")
    stops = numpy.append(stops, n_tokens)
    ends = stops[numpy.searchsorted(stops, begins, side="right")]
    seqs = numpy.searchsorted(seq_starts, begins, side="right") - 1 if len(begins) else begins
    seq_ends = (seq_starts + sizes)[seqs] if len(begins) else begins
    ends = numpy.minimum(ends, seq_ends)
    offset = seq_starts[seqs] if len(begins) else begins
    return Entities(
        seqs=seqs.astype("i"),
        starts=(begins - offset).astype("i"),
        ends=(ends - offset).astype("i"),
        labels=label_of[path[begins]] if len(begins) else numpy.zeros((0,), "i"),
        flat_starts=begins.astype("i"),
        flat_ends=ends.astype("i"),
    )


def biluo_to_scheme(biluo: Sequence[Optional[str]], scheme: Scheme) -> List[Optional[str]]:
    """spaCy's aligned BILUO gold tags in the tagger's scheme. Unknown tags
    (None, or "-" for missing annotation) stay None, so they add no loss."""
    out: List[Optional[str]] = []
    for tag in biluo:
        if tag is None or tag == "-" or tag == "":
            out.append(None)
        elif scheme == "BILUO" or tag == OUTSIDE:
            out.append(tag)
        else:
            prefix, label = split_tag(tag)
            out.append(("B-" if prefix in ("B", "U") else "I-") + label)
    return out
