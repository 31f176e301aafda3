import itertools

import numpy
import pytest

from spacy_bert_pipes.models.heads.tags import (
    biluo_to_scheme,
    is_valid,
    is_valid_array,
    make_tag_set,
    path_to_spans,
    viterbi,
    viterbi_batch,
)


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_tag_set_order(scheme: str) -> None:
    tags = make_tag_set(["LOC", "PER"], scheme).tags
    assert tags[0] == "O"
    assert tags[1:3] == ("B-LOC", "I-LOC")
    assert len(tags) == 1 + 2 * len(scheme[:-1])


def test_bad_scheme_and_label() -> None:
    with pytest.raises(ValueError, match="Unknown tag scheme"):
        make_tag_set(["PER"], "IOB1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Invalid entity label"):
        make_tag_set(["O"])


def brute_force(log_probs: numpy.ndarray, tag_set) -> float:  # type: ignore[no-untyped-def]
    n_tokens, n_tags = log_probs.shape
    best = -numpy.inf
    for path in itertools.product(range(n_tags), repeat=n_tokens):
        if is_valid(path, tag_set):
            best = max(best, float(log_probs[numpy.arange(n_tokens), list(path)].sum()))
    return best


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
@pytest.mark.parametrize("seed", range(6))
def test_viterbi_is_the_best_valid_path(scheme: str, seed: int) -> None:
    tag_set = make_tag_set(["A", "B"], scheme)
    rng = numpy.random.default_rng(seed)
    n_tokens = 4
    log_probs = numpy.log(rng.dirichlet(numpy.ones(len(tag_set.tags)), size=n_tokens))
    path = viterbi(log_probs, tag_set)
    assert is_valid(path, tag_set)
    score = float(log_probs[numpy.arange(n_tokens), path].sum())
    assert score == pytest.approx(brute_force(log_probs, tag_set))


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_viterbi_shortcut_agrees_with_the_full_search(scheme: str) -> None:
    """Peaked scores, as from a trained tagger: the per-token argmax is often valid
    and returned without the search; either way the result is the best valid path."""
    tag_set = make_tag_set(["A", "B"], scheme)
    rng = numpy.random.default_rng(7)
    n_shortcut = 0
    for trial in range(40):
        log_probs = numpy.log(rng.dirichlet(numpy.full(len(tag_set.tags), 0.2), size=5))
        if trial % 2:  # confident, like a trained tagger: peaks on some valid path
            peaks = viterbi(rng.normal(size=log_probs.shape), tag_set)
            log_probs[numpy.arange(5), peaks] += 40.0
        path = viterbi(log_probs, tag_set)
        greedy = log_probs.argmax(axis=1)
        n_shortcut += bool(is_valid(greedy.tolist(), tag_set))
        assert is_valid_array(path, tag_set) == is_valid(path.tolist(), tag_set) is True
        score = float(log_probs[numpy.arange(5), path].sum())
        assert score == pytest.approx(brute_force(log_probs, tag_set))
    assert 5 <= n_shortcut < 40  # both branches ran


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_viterbi_batch_equals_one_by_one(scheme: str) -> None:
    """Sequences of different lengths decoded together (padded) get the best valid
    path of each, as brute force finds it; empty sequences and forced tokens too."""
    tag_set = make_tag_set(["A", "B"], scheme)
    rng = numpy.random.default_rng(3)
    lengths = [1, 5, 0, 3, 4, 2, 5]
    n_tags = len(tag_set.tags)
    log_probs = [numpy.log(rng.dirichlet(numpy.ones(n_tags), size=n)) for n in lengths]
    forced = [None] * len(lengths)
    forced[4] = numpy.asarray([False, True, False, False])
    paths = viterbi_batch(log_probs, tag_set, forced)
    for n, scores, path, force in zip(lengths, log_probs, paths, forced):
        assert len(path) == n and is_valid(path.tolist(), tag_set)
        assert path.tolist() == viterbi(scores, tag_set, force).tolist()
        if n and force is None:
            score = float(scores[numpy.arange(n), path].sum())
            assert score == pytest.approx(brute_force(scores, tag_set))
    assert paths[4][1] == 0  # forced "O"


def plain_viterbi(log_probs: numpy.ndarray, tag_set) -> list:  # type: ignore[no-untyped-def]
    """Textbook constrained Viterbi over one whole sequence: the reference."""
    transition = numpy.where(tag_set.allowed, 0.0, -numpy.inf)
    best = numpy.where(tag_set.start, log_probs[0], -numpy.inf)
    back = []
    for scores in log_probs[1:]:
        candidates = best[:, None] + transition
        back.append(candidates.argmax(axis=0))
        best = candidates.max(axis=0) + scores
    tag = int(numpy.where(tag_set.end, best, -numpy.inf).argmax())
    path = [tag]
    for pointers in reversed(back):
        tag = int(pointers[tag])
        path.append(tag)
    return path[::-1]


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
@pytest.mark.parametrize("inside_bias", [0.0, 2.0])
def test_viterbi_of_long_sequences_equals_the_whole_search(scheme: str, inside_bias: float) -> None:
    """Long docs with peaked scores, as a trained tagger gives, many with broken
    greedy paths: decoding only the broken pieces (BIO) gives exactly the path
    the textbook search over each whole sequence gives."""
    tag_set = make_tag_set(["A", "B", "C"], scheme)
    rng = numpy.random.default_rng(11)
    inside = [i for i, t in enumerate(tag_set.tags) if t[:2] in ("I-", "L-")]
    lengths = rng.integers(1, 200, size=40)
    log_probs = []
    for n in lengths:
        logits = rng.normal(0.0, 3.0, size=(n, len(tag_set.tags)))
        logits[:, 0] += 4.0  # mostly "O"
        logits[:, inside] += inside_bias
        log_probs.append(logits - numpy.log(numpy.exp(logits).sum(axis=1, keepdims=True)))
    paths = viterbi_batch(log_probs, tag_set)
    n_broken = sum(not is_valid(lp.argmax(axis=1).tolist(), tag_set) for lp in log_probs)
    assert n_broken >= 10  # the search ran on many docs, not only the shortcut
    for scores, path in zip(log_probs, paths):
        assert path.tolist() == plain_viterbi(scores, tag_set)


@pytest.mark.parametrize("scheme", ["BIO", "BILUO"])
def test_viterbi_never_invalid_on_adversarial_scores(scheme: str) -> None:
    """Scores that love I- tags (the argmax would be invalid everywhere)."""
    tag_set = make_tag_set(["A", "B", "C"], scheme)
    rng = numpy.random.default_rng(1)
    inside = [i for i, t in enumerate(tag_set.tags) if t.startswith("I-")]
    for _ in range(200):
        n = int(rng.integers(1, 30))
        log_probs = rng.normal(size=(n, len(tag_set.tags)))
        log_probs[:, inside] += 5.0
        assert is_valid(viterbi(log_probs, tag_set), tag_set)


def test_viterbi_forced_outside_and_empty() -> None:
    tag_set = make_tag_set(["PER"])
    log_probs = numpy.log(numpy.array([[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.1, 0.1, 0.8]]))
    assert list(viterbi(log_probs, tag_set)) == [1, 2, 2]
    forced = numpy.array([False, True, False])
    path = viterbi(log_probs, tag_set, forced)
    assert path[1] == 0 and is_valid(path, tag_set)
    assert viterbi(numpy.zeros((0, 3)), tag_set).shape == (0,)


def test_viterbi_finite_with_impossible_tags() -> None:
    tag_set = make_tag_set(["PER"])
    log_probs = numpy.full((3, 3), -numpy.inf)
    log_probs[:, 2] = 0.0  # only I-PER is "possible": still decodes to a valid path
    path = viterbi(numpy.maximum(log_probs, -1e9), tag_set)
    assert is_valid(path, tag_set)


@pytest.mark.parametrize(
    "tags,expected",
    [
        (["O", "B-PER", "I-PER", "O", "B-LOC"], [(1, 3, "PER"), (4, 5, "LOC")]),
        (["B-PER", "B-PER", "I-PER"], [(0, 1, "PER"), (1, 3, "PER")]),
        (["B-LOC", "I-LOC", "B-PER"], [(0, 2, "LOC"), (2, 3, "PER")]),
        ([], []),
    ],
)
def test_path_to_spans_bio(tags: list, expected: list) -> None:
    tag_set = make_tag_set(["LOC", "PER"], "BIO")
    assert path_to_spans([tag_set.index(t) for t in tags], tag_set) == expected


def test_path_to_spans_biluo() -> None:
    tag_set = make_tag_set(["LOC", "PER"], "BILUO")
    tags = ["U-PER", "O", "B-LOC", "I-LOC", "L-LOC", "U-LOC"]
    assert path_to_spans([tag_set.index(t) for t in tags], tag_set) == [
        (0, 1, "PER"),
        (2, 5, "LOC"),
        (5, 6, "LOC"),
    ]


def test_biluo_to_scheme() -> None:
    gold = ["U-PER", "B-LOC", "I-LOC", "L-LOC", "O", "-", None]
    assert biluo_to_scheme(gold, "BIO") == ["B-PER", "B-LOC", "I-LOC", "I-LOC", "O", None, None]
    assert biluo_to_scheme(gold, "BILUO") == gold[:5] + [None, None]
