"""bert_qa on a tiny random BERT: questions, decoding, training, robustness, persistence."""

from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import SMALL_ENCODER, gold_answers, loader_config
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example

# (context, {key: (question, answer text or None)})
QA_DATA = [
    (
        "john smith is in paris",
        {"who": ("who is it ?", "john smith"), "where": ("where ?", "paris")},
    ),
    (
        "apple is a company in london",
        {"who": ("who is it ?", "apple"), "where": ("where ?", "london")},
    ),
    ("hello world", {"who": ("who is it ?", None), "where": ("where ?", None)}),
    ("google is in new york", {"who": ("who is it ?", "google"), "where": ("where ?", "new york")}),
]
QUESTIONS = {"who": "who is it ?", "where": "where ?"}


def qa_examples(nlp: Language) -> List[Example]:
    examples = []
    for text, asked in QA_DATA:
        reference = nlp.make_doc(text)
        reference._.questions = {k: q for k, (q, _) in asked.items()}
        reference._.gold_answers = gold_answers(text, {k: a for k, (_, a) in asked.items()})
        examples.append(Example(nlp.make_doc(text), reference))
    return examples


def make_nlp(tiny_bert: Path, **config: Any) -> Language:
    nlp = spacy.blank("en")
    model = {"encoder": SMALL_ENCODER, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}
    model.update(config.pop("model", {}))
    nlp.add_pipe("bert_qa", config={"model": model, **config})
    nlp.config["initialize"]["components"]["bert_qa"] = loader_config(tiny_bert)
    return nlp


def trained(tiny_bert: Path, steps: int = 80, **config: Any) -> Language:
    nlp = make_nlp(tiny_bert, **config)
    examples = qa_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 3e-3
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(scope="module")
def trained_nlp(tiny_bert: Path) -> Language:
    return trained(tiny_bert, handle_impossible_answer=True, questions=QUESTIONS)


def best(doc: Doc) -> Dict[str, str]:
    return {a["key"]: a["text"] for a in doc._.answers if a["rank"] == 0}


def test_factory_declares_what_it_assigns(tiny_bert: Path) -> None:
    assigns = make_nlp(tiny_bert).analyze_pipes()["summary"]["bert_qa"]["assigns"]
    assert "doc.spans" in assigns


def test_overfits_including_null_answers(trained_nlp: Language) -> None:
    for text, asked in QA_DATA:
        doc = trained_nlp(text)
        expected = {k: a or "" for k, (_, a) in asked.items()}
        assert best(doc) == expected, text
        for answer in doc._.answers:
            assert 0.0 <= answer["score"] <= 1.0
            if answer["text"]:
                assert doc.text[answer["start"] : answer["end"]] == answer["text"]
            else:
                assert answer["start"] is None and answer["end"] is None
        group = doc.spans["answers"]
        assert sorted(s.label_ for s in group) == sorted(k for k, v in expected.items() if v)
        assert len(group.attrs["scores"]) == len(group)
    scores = trained_nlp.evaluate(qa_examples(trained_nlp))
    assert scores["qa_exact"] == pytest.approx(1.0)
    assert scores["qa_f1"] == pytest.approx(1.0)


def test_per_document_questions_through_pipe_contexts(trained_nlp: Language) -> None:
    nlp = trained_nlp
    items = [
        ("john smith is in paris", {"questions": {"place": "where ?"}, "id": 7}),
        ("google is in new york", {"id": 8}),
    ]
    out = list(nlp.pipe(items, as_tuples=True))
    assert [context["id"] for _, context in out] == [7, 8]
    assert best(out[0][0]) == {"who": "john smith", "where": "paris", "place": "paris"}
    assert set(best(out[1][0])) == {"who", "where"}
    # ... or set doc._.questions on a doc made beforehand:
    doc = nlp.make_doc("john smith is in paris")
    doc._.questions = {"place": "where ?"}
    assert best(nlp(doc))["place"] == "paris"


def test_two_qa_components_keep_each_others_answers(trained_nlp: Language, tmp_path: Path) -> None:
    trained_nlp.to_disk(tmp_path / "copy")
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_qa", source=trained_nlp)
    nlp.add_pipe("bert_qa", name="second", source=spacy.load(tmp_path / "copy"))
    doc = nlp("john smith is in paris")
    by_component = {
        name: {a["key"]: a["text"] for a in doc._.answers if a["component"] == name}
        for name in ("bert_qa", "second")
    }
    assert by_component == {
        "bert_qa": {"who": "john smith", "where": "paris"},
        "second": {"who": "john smith", "where": "paris"},
    }
    group = doc.spans["answers"]
    assert sorted((a["component"], s.label_) for s, a in zip(group, group.attrs["answers"])) == [
        ("bert_qa", "where"),
        ("bert_qa", "who"),
        ("second", "where"),
        ("second", "who"),
    ]
    assert len(group.attrs["scores"]) == len(group)
    # Running a component again replaces its own answers only.
    before = list(doc._.answers)
    doc = nlp.get_pipe("second")(doc)
    assert sorted(doc._.answers, key=repr) == sorted(before, key=repr)
    assert len(doc.spans["answers"]) == 4


def test_top_k_answers_are_ranked(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, steps=10, top_k=3, questions=QUESTIONS)
    doc = nlp("john smith is in paris and google is in new york")
    for key in QUESTIONS:
        ranked = [a for a in doc._.answers if a["key"] == key]
        assert [a["rank"] for a in ranked] == list(range(len(ranked)))
        assert 1 <= len(ranked) <= 3
        scores = [a["score"] for a in ranked]
        assert scores == sorted(scores, reverse=True)


def test_answers_respect_max_answer_len(tiny_bert: Path) -> None:
    nlp = trained(tiny_bert, steps=5, max_answer_len=1, top_k=5, questions=QUESTIONS)
    doc = nlp("john smith is in paris and google is in new york")
    tokenizer = nlp.get_pipe("bert_qa").model.get_ref("encoder").shims[0].tokenizer
    for answer in doc._.answers:
        assert len(tokenizer(answer["text"], add_special_tokens=False)["input_ids"]) == 1


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\n\t ",
        "control \x00\x01 chars\u200b here",
        "Привет, Джон",
        "约翰在伦敦",
        "a" * 3000,
    ],
)
def test_odd_contexts(trained_nlp: Language, text: str) -> None:
    doc = trained_nlp(text)
    assert {a["key"] for a in doc._.answers} == set(QUESTIONS)  # every question answered
    for answer in doc._.answers:
        if answer["start"] is not None:
            assert doc.text[answer["start"] : answer["end"]] == answer["text"]


def test_long_context_is_not_truncated(trained_nlp: Language) -> None:
    """Every wordpiece of a long context is in some window of every question,
    and answers can come from its end."""
    text = "hello world " * 300 + "john smith is in paris"
    qa = trained_nlp.get_pipe("bert_qa")
    doc = trained_nlp.make_doc(text)
    (scores,) = qa.predict([doc])
    n_pieces = len(scores.offsets)
    assert n_pieces > 600
    for windows in scores.questions:
        assert len(windows) > 30
        covered = set()
        for w in windows:
            covered.update(range(w.start, w.end))
        assert covered == set(range(n_pieces))
    doc = trained_nlp(text)
    assert all(a["start"] is None or a["end"] <= len(text) for a in doc._.answers)
    assert {a["key"] for a in doc._.answers} == set(QUESTIONS)


def test_empty_question_is_a_clear_error(trained_nlp: Language, tiny_bert: Path) -> None:
    doc = trained_nlp.make_doc("john smith")
    doc._.questions = {"blank": "   "}
    with pytest.raises(ValueError, match="doc 0.*'blank' is empty"):
        trained_nlp(doc)
    with pytest.raises(Exception, match="empty"):
        make_nlp(tiny_bert, questions={"x": ""})


def test_over_long_question_is_truncated_and_flagged(trained_nlp: Language) -> None:
    doc = trained_nlp.make_doc("john smith is in paris")
    doc._.questions = {"long": "where is it " * 30}
    doc = trained_nlp(doc)
    flags = {a["key"]: a["question_truncated"] for a in doc._.answers}
    assert flags == {"who": False, "where": False, "long": True}


def test_no_questions_means_no_answers(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    nlp.initialize(lambda: qa_examples(nlp))
    doc = nlp("john smith is in paris")
    assert doc._.answers == [] and len(doc.spans["answers"]) == 0
    assert list(nlp.pipe([])) == []


def test_gold_without_question_text_is_named(tiny_bert: Path) -> None:
    nlp = make_nlp(tiny_bert)
    examples = qa_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    bad = examples[0].reference.copy()
    bad._.questions = {}
    bad._.gold_answers = {"mystery": []}
    with pytest.raises(ValueError, match="Example 1 .*'mystery'"):
        nlp.update([examples[1], Example(nlp.make_doc(bad.text), bad)], sgd=optimizer)


def test_to_disk_and_load_give_identical_answers(trained_nlp: Language, tmp_path: Path) -> None:
    texts = [t for t, _ in QA_DATA] + ["", "hello world . " * 50]
    before = [d._.answers for d in trained_nlp.pipe(texts)]
    trained_nlp.to_disk(tmp_path / "qa")
    assert not list((tmp_path / "qa").rglob("*.pkl"))
    loaded = spacy.load(tmp_path / "qa")
    after = [d._.answers for d in loaded.pipe(texts)]
    for a, b in zip(before, after):
        assert [(x["key"], x["text"], x["start"]) for x in a] == [
            (x["key"], x["text"], x["start"]) for x in b
        ]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-6)


def test_pipe_with_two_processes_matches_one(trained_nlp: Language) -> None:
    texts = [t for t, _ in QA_DATA] * 2
    # the same batches in both: in bf16 (the default on a CPU with fast bf16) a
    # batch of other lengths rounds differently
    one = [d._.answers for d in trained_nlp.pipe(texts, batch_size=2)]
    two = [d._.answers for d in trained_nlp.pipe(texts, n_process=2, batch_size=2)]
    assert len(one) == len(two)
    for a, b in zip(one, two):
        assert [x["text"] for x in a] == [x["text"] for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-6)


def test_evaluate_asks_the_reference_questions(trained_nlp: Language) -> None:
    """spaCy's Corpus does not copy doc._.questions: score() asks them itself."""
    nlp = spacy.blank("en")
    examples = qa_examples(nlp)
    for eg in examples:
        assert eg.predicted._.questions is None
    scores = trained_nlp.evaluate(examples)
    assert scores["qa_f1"] == pytest.approx(1.0)


@pytest.mark.parametrize("question", ["\u200b", "\x00\x00", " \u200b\u2060\x07 ", "\u0301"])
def test_question_without_wordpieces_is_a_clear_error(
    trained_nlp: Language, tiny_bert: Path, question: str
) -> None:
    """Characters the tokenizer drops (zero-width spaces, NUL, control characters,
    lone combining marks) are no question: answered, it would be [CLS] [SEP]
    context, as if nothing had been asked."""
    from spacy_bert_pipes.models.heads.qa_types import QAQuery
    from spacy_bert_pipes.models.text.tokens import tokenize
    from spacy_bert_pipes.pipeline.common import own_encoder

    qa = trained_nlp.get_pipe("bert_qa")
    encoder = own_encoder(qa.model)
    assert encoder is not None and len(tokenize(encoder, [question])[0].ids) == 0
    doc = trained_nlp.make_doc("john smith is in paris")
    doc._.questions = {"ghost": question}
    with pytest.raises(ValueError, match="doc 0: the question for 'ghost' is empty to the"):
        trained_nlp(doc)
    with pytest.raises(Exception, match=r"questions\]: the question for 'x' is empty to the"):
        make_nlp(tiny_bert, questions={"x": question})
    # past the component's check, the model refuses it too
    with pytest.raises(ValueError, match="Doc 0 of the batch: .* has no wordpieces"):
        qa.model.predict([QAQuery(trained_nlp.make_doc("paris"), [question])])
    # inside a question, such characters are harmless
    doc = trained_nlp.make_doc("john smith is in paris")
    doc._.questions = {"who": f"who{question}is it ?"}
    assert {a["key"] for a in trained_nlp(doc)._.answers} == set(QUESTIONS)


@pytest.mark.parametrize("impossible", [False, True])
def test_doc_without_wordpieces_gets_null_answers(tiny_bert: Path, impossible: bool) -> None:
    """A doc with nothing to answer from gets the null answer to each question,
    whether or not handle_impossible_answer allows it elsewhere."""
    nlp = make_nlp(tiny_bert, questions=QUESTIONS, top_k=2, handle_impossible_answer=impossible)
    nlp.initialize(lambda: qa_examples(nlp))
    texts = ["", "john smith is in paris", "  \n ", "\u200b\x00"]
    docs = list(nlp.pipe(texts, batch_size=4))
    for doc in (docs[0], docs[2], docs[3]):
        assert [(a["key"], a["text"], a["start"], a["end"], a["rank"]) for a in doc._.answers] == [
            ("who", "", None, None, 0),
            ("where", "", None, None, 0),
        ]
        assert [a["score"] for a in doc._.answers] == pytest.approx([1.0, 1.0])
        assert len(doc.spans["answers"]) == 0
    answered = docs[1]._.answers
    assert [a["key"] for a in answered] == ["who", "who", "where", "where"]
    if not impossible:
        assert all(a["start"] is not None for a in answered)
