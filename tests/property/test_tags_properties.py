"""Properties of constrained decoding (models/heads/tags.py) and of bert_ner writing
its entities to Docs of arbitrary Unicode text."""

import itertools
from typing import Any, List, Optional, Tuple

import numpy
import pytest
import spacy
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from strategies import PROPERTY, texts

from spacy_bert_pipes.models.heads.tags import (
    is_valid,
    make_tag_set,
    path_to_spans,
    split_tag,
    viterbi,
    viterbi_batch,
)

LABELS = ["PER", "LOC", "ORG"]


@st.composite
def scored(
    draw: Any, max_tokens: int = 12, tag_set: Any = None
) -> Tuple[Any, numpy.ndarray, Optional[numpy.ndarray]]:
    if tag_set is None:
        scheme = draw(st.sampled_from(["BIO", "BILUO"]))
        tag_set = make_tag_set(LABELS[: draw(st.integers(1, 3))], scheme)
    n = draw(st.integers(0, max_tokens))
    log_probs = draw(
        arrays(
            "f8",
            (n, len(tag_set.tags)),
            elements=st.one_of(
                st.floats(-30.0, 0.0, allow_nan=False), st.just(-numpy.inf), st.just(0.0)
            ),
        )
    )
    # every token keeps "O" as a finite option, as the pipe's probability floor does
    log_probs[:, 0] = numpy.maximum(log_probs[:, 0], -60.0)
    forced = draw(st.none() | arrays(bool, (n,)))
    return tag_set, log_probs, forced


def path_score(log_probs: numpy.ndarray, path: List[int]) -> float:
    return float(sum(log_probs[i, t] for i, t in enumerate(path)))


@PROPERTY
@given(case=scored())
def test_viterbi_path_is_valid_and_spans_cover_it(case: Any) -> None:
    tag_set, log_probs, forced = case
    path = viterbi(log_probs, tag_set, forced).tolist()
    assert len(path) == len(log_probs)
    assert is_valid(path, tag_set)
    if forced is not None:
        assert all(path[i] == 0 for i in numpy.nonzero(forced)[0])
    spans = path_to_spans(path, tag_set)
    inside = [False] * len(path)
    for start, end, label in spans:
        assert 0 <= start < end <= len(path)
        assert label in tag_set.labels
        for i in range(start, end):
            assert not inside[i], "overlapping spans"
            inside[i] = True
            prefix, tag_label = split_tag(tag_set.tags[path[i]])
            assert tag_label == label
    # every token tagged as part of an entity is in exactly one span
    assert inside == [tag_set.tags[t] != "O" for t in path]


@PROPERTY
@given(case=scored(max_tokens=4))
def test_viterbi_finds_the_best_valid_path(case: Any) -> None:
    """Against brute force over every tag sequence (short sequences only)."""
    tag_set, log_probs, forced = case
    scores = log_probs.copy()
    if forced is not None and len(scores):
        scores[forced, 1:] = -numpy.inf
    path = viterbi(log_probs, tag_set, forced).tolist()
    valid = [
        list(p)
        for p in itertools.product(range(len(tag_set.tags)), repeat=len(scores))
        if is_valid(list(p), tag_set)
    ]
    best = max(path_score(scores, p) for p in valid)
    assert path_score(scores, path) == pytest.approx(best, rel=1e-9)


BIO_TAGS = make_tag_set(LABELS, "BIO")
BILUO_TAGS = make_tag_set(LABELS, "BILUO")


@PROPERTY
@given(
    bio=st.lists(scored(tag_set=BIO_TAGS), max_size=5),
    biluo=st.lists(scored(tag_set=BILUO_TAGS), max_size=5),
)
def test_batch_decoding_equals_one_by_one(bio: List[Any], biluo: List[Any]) -> None:
    for tag_set, cases in ((BIO_TAGS, bio), (BILUO_TAGS, biluo)):
        log_probs = [lp for _, lp, _ in cases]
        forced = [f for _, _, f in cases]
        for lp, f, path in zip(log_probs, forced, viterbi_batch(log_probs, tag_set, forced)):
            single = viterbi(lp, tag_set, f)
            assert is_valid(path.tolist(), tag_set)
            assert path_score(lp, path.tolist()) == pytest.approx(
                path_score(lp, single.tolist()), rel=1e-9
            )


NLP = spacy.blank("en")
# bert_ner is built but never initialized: set_annotations needs only its labels.
for _mode in ("ents", "spans"):
    _ner = NLP.add_pipe("bert_ner", name=f"ner_{_mode}", config={"annotate": _mode})
    for _label in LABELS:
        _ner.add_label(_label)


@PROPERTY
@given(
    text=texts(),
    seed=st.integers(0, 2**32 - 1),
    mode=st.sampled_from(["ents", "spans"]),
    sharpness=st.sampled_from([0.1, 1.0, 10.0]),
)
@example(text="\u200b\u200bparis\u0301 \u202enew york\x00 ", seed=0, mode="ents", sharpness=10.0)
def test_bert_ner_writes_spans_covering_exactly_their_characters(
    text: str, seed: int, mode: str, sharpness: float
) -> None:
    ner = NLP.get_pipe(f"ner_{mode}")
    doc = NLP.make_doc(text)
    rng = numpy.random.default_rng(seed)
    logits = rng.normal(0.0, sharpness, (len(doc), len(ner.tag_set.tags)))
    probs = numpy.exp(logits) / numpy.exp(logits).sum(axis=1, keepdims=True)
    ner.set_annotations([doc], [probs.astype("f")])
    spans = list(doc.ents) if mode == "ents" else list(doc.spans[ner.cfg["spans_key"]])
    assert doc.text == text
    expected = path_to_spans(
        viterbi(
            numpy.log(numpy.maximum(probs, 1e-12)),
            ner.tag_set,
            numpy.array([t.is_space for t in doc], dtype=bool),
        ).tolist(),
        ner.tag_set,
    )
    assert [(s.start, s.end, s.label_) for s in spans] == expected
    for span in spans:
        assert span.start_char == doc[span.start].idx
        assert span.end_char == doc[span.end - 1].idx + len(doc[span.end - 1])
        assert span.text == text[span.start_char : span.end_char]
        assert not any(token.is_space for token in span)
        assert 0.0 <= span._.bert_ner_score <= 1.0 + 1e-6
    if mode == "spans":
        scores = doc.spans[ner.cfg["spans_key"]].attrs["scores"]
        assert scores == [s._.bert_ner_score for s in spans]
