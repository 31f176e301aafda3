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
    n_tokens, n_tags = log_probs.shape
    if n_tokens == 0:
        return numpy.zeros((0,), dtype="i")
    scores = numpy.asarray(log_probs, dtype="f8").copy()
    if forced is not None and forced.any():
        scores[forced, 1:] = -numpy.inf  # column 0 is "O"
    # The unconstrained best path (each token's own best tag) scores at least as
    # high as any valid path, so when it is valid it is the answer; a trained
    # tagger's output usually is, and this skips the per-token loop below.
    greedy = scores.argmax(axis=1).astype("i")
    if is_valid_array(greedy, tag_set):
        return greedy
    transition = numpy.where(tag_set.allowed, 0.0, -numpy.inf)  # (n_tags, n_tags)
    best = numpy.where(tag_set.start, scores[0], -numpy.inf)  # (n_tags,)
    back = numpy.zeros((n_tokens, n_tags), dtype="i")
    for t in range(1, n_tokens):
        candidates = best[:, None] + transition  # (prev, next)
        back[t] = candidates.argmax(axis=0)
        best = candidates.max(axis=0) + scores[t]
    best = numpy.where(tag_set.end, best, -numpy.inf)
    path = numpy.zeros((n_tokens,), dtype="i")
    path[-1] = int(best.argmax())
    for t in range(n_tokens - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path


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
    spans: List[Tuple[int, int, str]] = []
    begin = -1
    for i, tag_id in enumerate(path):
        prefix, label = split_tag(tag_set.tags[tag_id])
        if prefix in ("B", "U") or prefix == OUTSIDE:
            if begin >= 0:
                spans.append((begin, i, split_tag(tag_set.tags[path[begin]])[1]))
                begin = -1
            if prefix == "U":
                spans.append((i, i + 1, label))
            elif prefix == "B":
                begin = i
        elif prefix == "L":
            spans.append((begin, i + 1, label))
            begin = -1
    if begin >= 0:
        spans.append((begin, len(path), split_tag(tag_set.tags[path[begin]])[1]))
    return spans


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
