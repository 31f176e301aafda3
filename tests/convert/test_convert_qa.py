import json
from pathlib import Path
from typing import Any, List, Tuple

import pytest
from helpers import DATASETS, write
from spacy.tokens import Doc, DocBin

from spacy_bert_pipes.convert import (
    RESTAURANT8K_QUESTIONS,
    RESTAURANT8K_SLOTS,
    ConversionError,
    read_restaurant8k,
    read_squad,
    write_docbin,
)

BRONCOS = "The Broncos beat the Panthers in Santa Clara. The Broncos won."
PARIS = "Paris is big. I love Paris, and Paris loves me."


def squad_article(contexts_and_qas: List[Tuple[str, List[dict]]]) -> dict:
    return {
        "title": "t",
        "paragraphs": [{"context": context, "qas": qas} for context, qas in contexts_and_qas],
    }


def qa(key: Any, question: str, *answers: Tuple[str, int], **extra: Any) -> dict:
    found = [{"text": text, "answer_start": start} for text, start in answers]
    return {"id": key, "question": question, "answers": found, **extra}


def write_squad(path: Path, articles: List[dict], version: str = "1.1") -> Path:
    return write(path, json.dumps({"version": version, "data": articles}))


@pytest.fixture
def squad_path(tmp_path):
    articles = [
        squad_article(
            [
                (
                    BRONCOS,
                    [
                        # Three references, two of them the same span.
                        qa("q1", "Who won?", ("The Broncos", 0), ("Broncos", 4), ("Broncos", 4)),
                        qa("q2", "Where?", ("Santa Clara", BRONCOS.index("Santa"))),
                    ],
                ),
                (PARIS, [qa("q3", "What is big?", ("Paris", 0))]),
            ]
        ),
        squad_article([("Second article.", [qa("q4", "Which?", ("Second", 0))])]),
        squad_article([("Third article.", [qa("q5", "Which?", ("Third", 0))])]),
    ]
    return write_squad(tmp_path / "squad.json", articles)


def gold(doc: Doc) -> dict:
    return {
        key: [(a["text"], a["start"], a["end"]) for a in answers]
        for key, answers in doc._.gold_answers.items()
    }


def test_read_squad_one_doc_per_context_with_all_references(nlp, squad_path):
    stats: dict = {}
    docs = list(read_squad(squad_path, nlp, stats=stats))
    assert [doc.text for doc in docs] == [BRONCOS, PARIS, "Second article.", "Third article."]
    assert docs[0]._.questions == {"q1": "Who won?", "q2": "Where?"}
    santa = BRONCOS.index("Santa")
    assert gold(docs[0]) == {
        "q1": [("The Broncos", 0, 11), ("Broncos", 4, 11)],
        "q2": [("Santa Clara", santa, santa + 11)],
    }
    assert gold(docs[3]) == {"q5": [("Third", 0, 5)]}
    assert stats == {"corrected_offsets": 0, "trimmed_answers": 0}


@pytest.mark.parametrize(
    "articles,texts",
    [
        ((1, 1), [BRONCOS, PARIS]),
        ((2, 3), ["Second article.", "Third article."]),
        ((3, 3), ["Third article."]),
    ],
)
def test_read_squad_articles(nlp, squad_path, articles, texts):
    assert [doc.text for doc in read_squad(squad_path, nlp, articles=articles)] == texts


def test_read_squad_articles_errors(nlp, squad_path):
    with pytest.raises(
        ConversionError, match=r"asked for articles 2-4, but the file has 3 articles"
    ):
        list(read_squad(squad_path, nlp, articles=(2, 4)))
    for articles in ((0, 2), (3, 2)):
        with pytest.raises(ValueError, match="1 <= first <= last"):
            read_squad(squad_path, nlp, articles=articles)


def test_read_squad_corrects_offsets_by_text_nearest_first(nlp, tmp_path):
    second, third = PARIS.index("Paris,"), PARIS.rindex("Paris")
    qas = [
        # One too high, as ~17% of COVID-QA: the nearest "Paris" is the second.
        qa("near", "Which?", ("Paris", second + 1)),
        # Nearer the third than the second.
        qa("far", "Which?", ("Paris", third - 3)),
        # Past the end of the context.
        qa("end", "Which?", ("Paris", 500)),
        # Right where it says: not corrected.
        qa("ok", "Which?", ("Paris", second)),
    ]
    path = write_squad(tmp_path / "squad.json", [squad_article([(PARIS, qas)])])
    stats: dict = {}
    (doc,) = read_squad(path, nlp, stats=stats)
    assert gold(doc) == {
        "near": [("Paris", second, second + 5)],
        "far": [("Paris", third, third + 5)],
        "end": [("Paris", third, third + 5)],
        "ok": [("Paris", second, second + 5)],
    }
    assert stats == {"corrected_offsets": 3, "trimmed_answers": 0}


def test_read_squad_trims_whitespace_around_answers(nlp, tmp_path):
    # COVID-QA's answers often start with a space, with answer_start at the
    # word after it: found one earlier, then trimmed back to the word.
    start = BRONCOS.index("Panthers")
    qas = [qa(262, "Who lost?", (" Panthers ", start)), qa(263, "Who?", ("Panthers", start))]
    path = write_squad(tmp_path / "covid.json", [squad_article([(BRONCOS, qas)])])
    stats: dict = {}
    (doc,) = read_squad(path, nlp, stats=stats)
    # Numbers as ids (COVID-QA) become strings.
    assert doc._.questions == {"262": "Who lost?", "263": "Who?"}
    assert gold(doc) == {
        "262": [("Panthers", start, start + 8)],
        "263": [("Panthers", start, start + 8)],
    }
    assert stats == {"corrected_offsets": 1, "trimmed_answers": 1}


def test_read_squad_v2_unanswerable(nlp, tmp_path):
    qas = [
        qa("yes", "Who won?", ("Broncos", 4), is_impossible=False),
        {
            "id": "no",
            "question": "Who lost the 1999 final?",
            "answers": [],
            "plausible_answers": [{"text": "Panthers", "answer_start": 21}],
            "is_impossible": True,
        },
    ]
    path = write_squad(tmp_path / "v2.json", [squad_article([(BRONCOS, qas)])], "v2.0")
    (doc,) = read_squad(path, nlp)
    assert doc._.questions == {"yes": "Who won?", "no": "Who lost the 1999 final?"}
    assert gold(doc) == {"yes": [("Broncos", 4, 11)], "no": []}


@pytest.mark.parametrize(
    "qas,location,fragment",
    [
        (
            [qa("q1", "Who?", ("Denver", 0))],
            "article 1, paragraph 1, question q1",
            'answer "Denver" (answer_start 0) is not in the context',
        ),
        (
            [qa("q1", "  ", ("Broncos", 4))],
            "article 1, paragraph 1, question q1",
            '"question" must be a non-empty string',
        ),
        (
            [qa("q1", "Who?", ("", 4))],
            "article 1, paragraph 1, question q1",
            'answer "text" must be a non-empty string, found ""',
        ),
        (
            [qa("q1", "Who?", ("Broncos", 4)), qa("q1", "Who?", ("Broncos", 4))],
            "article 1, paragraph 1, question q1",
            "question id 'q1' repeats",
        ),
        ([qa(None, "Who?", ("Broncos", 4))], "article 1, paragraph 1, qas item 1", '"id" must'),
        ([qa("q1", "Who?")], "article 1, paragraph 1, question q1", "no answers"),
        (
            [qa("q1", "Who?", ("Broncos", 4), is_impossible=True)],
            "article 1, paragraph 1, question q1",
            '"is_impossible" is true, but it has answers',
        ),
        (
            [{"id": "q1", "question": "Who?", "answers": [{"text": "Broncos"}]}],
            "article 1, paragraph 1, question q1",
            '"answer_start" must be an integer, found null',
        ),
    ],
)
def test_read_squad_errors(nlp, tmp_path, qas, location, fragment):
    article = squad_article([(BRONCOS, [qa("q0", "Who?", ("Broncos", 4))]), (BRONCOS, qas)])
    # The error is in the second paragraph... of the second article.
    path = write_squad(tmp_path / "squad.json", [squad_article([]), article])
    location = location.replace("article 1, paragraph 1", "article 2, paragraph 2")
    with pytest.raises(ConversionError) as err:
        list(read_squad(path, nlp))
    assert str(err.value).startswith(f"{path}:{location}: ")
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    "data,location,fragment",
    [
        ([], "", 'expected a JSON object with a "data" list of articles'),
        ({"data": [{"title": "t"}]}, ":article 1", "expected a 'paragraphs' list, found null"),
        ({"data": [squad_article([(3, [])])]}, ":article 1, paragraph 1", '"context" must be'),
    ],
)
def test_read_squad_structure_errors(nlp, tmp_path, data, location, fragment):
    path = write(tmp_path / "squad.json", json.dumps(data))
    with pytest.raises(ConversionError) as err:
        list(read_squad(path, nlp))
    assert str(err.value).startswith(f"{path}{location}: ")
    assert fragment in str(err.value)


RESTAURANT8K = [
    # Protobuf JSON leaves out zeros: no "startIndex" means 0.
    {
        "userInput": {"text": "6 a.m."},
        "context": {"requestedSlots": ["time"]},
        "labels": [{"slot": "time", "valueSpan": {"endIndex": 6}}],
    },
    {
        "userInput": {"text": "table for 4 on Friday"},
        "labels": [
            {"slot": "people", "valueSpan": {"startIndex": 10, "endIndex": 11}},
            {"slot": "date", "valueSpan": {"startIndex": 15, "endIndex": 21}},
        ],
    },
    {"userInput": {"text": "Hi there"}},
    # A span with a space before it, as in the real data.
    {
        "userInput": {"text": "Please book for quarter after 12pm"},
        "labels": [{"slot": "time", "valueSpan": {"startIndex": 15, "endIndex": 34}}],
    },
]


def test_read_restaurant8k(nlp, tmp_path):
    path = write(tmp_path / "train.json", json.dumps(RESTAURANT8K))
    stats: dict = {}
    docs = list(read_restaurant8k(path, nlp, stats=stats))
    assert [doc.text for doc in docs] == [r["userInput"]["text"] for r in RESTAURANT8K]
    for doc in docs:
        assert doc._.questions == RESTAURANT8K_QUESTIONS
        assert list(doc._.gold_answers) == list(RESTAURANT8K_SLOTS)
    none: list = []
    assert gold(docs[0]) == {
        "people": none,
        "date": none,
        "time": [("6 a.m.", 0, 6)],
        "first_name": none,
        "last_name": none,
    }
    assert gold(docs[1])["people"] == [("4", 10, 11)]
    assert gold(docs[1])["date"] == [("Friday", 15, 21)]
    assert all(answers == [] for answers in docs[2]._.gold_answers.values())
    assert gold(docs[3])["time"] == [("quarter after 12pm", 16, 34)]
    assert stats == {"trimmed_answers": 1}


def test_read_restaurant8k_slots_and_questions(nlp, tmp_path):
    path = write(tmp_path / "train.json", json.dumps(RESTAURANT8K[:1]))
    questions = {"time": "When?"}
    (doc,) = read_restaurant8k(path, nlp, slots=["time", "people"], questions=questions)
    assert doc._.questions == {"time": "When?", "people": "How many people?"}
    assert gold(doc) == {"time": [("6 a.m.", 0, 6)], "people": []}
    with pytest.raises(ConversionError, match=r"train\.json:record 1: unknown slot 'time'"):
        list(read_restaurant8k(path, nlp, slots=["people"]))
    with pytest.raises(ValueError, match=r"questions for slots not in \['people'\]: \['time'\]"):
        read_restaurant8k(path, nlp, slots=["people"], questions=questions)
    with pytest.raises(ValueError, match=r"no question text for the slots \['price'\]"):
        read_restaurant8k(path, nlp, slots=["people", "price"])
    with pytest.raises(ValueError, match="without repeats"):
        read_restaurant8k(path, nlp, slots=["people", "people"])


def r8k_label(slot: str, start: int, end: int) -> dict:
    return {"slot": slot, "valueSpan": {"startIndex": start, "endIndex": end}}


@pytest.mark.parametrize(
    "record,fragment",
    [
        (
            {"userInput": {"text": "for 4"}, "labels": [r8k_label("peple", 4, 5)]},
            "unknown slot 'peple'; did you mean 'people'? (slots: people, date, time, ",
        ),
        (
            {"userInput": {"text": "for 4"}, "labels": [r8k_label("people", 4, 9)]},
            "slot 'people' span 4-9 is outside the text (0 to 5 characters)",
        ),
        (
            {"userInput": {"text": "for 4"}, "labels": [{"slot": "people", "valueSpan": {}}]},
            "slot 'people' span 0-0 is empty",
        ),
        (
            {"userInput": {"text": "for 4"}, "labels": [r8k_label("people", 3, 4)]},
            "slot 'people' span 3-4 is only whitespace",
        ),
        (
            {"userInput": {"text": "4 or 5"}, "labels": [r8k_label("people", 0, 1)] * 2},
            "slot 'people' is labelled twice",
        ),
        ({"userInput": {"text": "4"}, "labels": [{"slot": "people"}, 3]}, "span 0-0 is empty"),
        ({"userInput": {"text": "4"}, "labels": [3]}, 'expected a label {"slot": ...'),
        ({"text": "for 4"}, 'expected a "userInput" object, found null'),
    ],
)
def test_read_restaurant8k_errors(nlp, tmp_path, record, fragment):
    path = write(tmp_path / "train.json", json.dumps([{"userInput": {"text": "ok"}}, record]))
    with pytest.raises(ConversionError) as err:
        list(read_restaurant8k(path, nlp))
    assert str(err.value).startswith(f"{path}:record 2: ")
    assert fragment in str(err.value)


def test_read_restaurant8k_not_a_list(nlp, tmp_path):
    path = write(tmp_path / "train.json", json.dumps({"userInput": {"text": "x"}}))
    with pytest.raises(ConversionError, match=r"train\.json:1: expected a JSON list of records"):
        list(read_restaurant8k(path, nlp))


def test_qa_docbin_round_trip_keeps_questions_and_answers(tmp_path, nlp, squad_path):
    output = tmp_path / "qa.spacy"
    docs = list(read_squad(squad_path, nlp))
    assert write_docbin(docs, output, store_user_data=True) == 4
    loaded = list(DocBin().from_disk(output).get_docs(nlp.vocab))
    assert [doc.text for doc in loaded] == [doc.text for doc in docs]
    assert [doc._.questions for doc in loaded] == [doc._.questions for doc in docs]
    # spaCy reads user data back with msgpack's use_list=False: lists come
    # back as tuples, so readers of the file take any sequence.
    assert loaded[0]._.gold_answers["q1"] == (
        {"text": "The Broncos", "start": 0, "end": 11},
        {"text": "Broncos", "start": 4, "end": 11},
    )
    assert [gold(doc) for doc in loaded] == [gold(doc) for doc in docs]
    # Without user data (the default, as for textcat and NER) they are lost.
    write_docbin(docs, output)
    assert next(DocBin().from_disk(output).get_docs(nlp.vocab))._.questions is None


@pytest.mark.slow
def test_read_real_qa_datasets(nlp):
    squad, covidqa = (
        DATASETS / "squad" / "dev-v1.1.json",
        DATASETS / "covidqa" / "covidqa-200423.json",
    )
    if not squad.is_file() or not covidqa.is_file():
        pytest.skip(f"no SQuAD or COVID-QA data in {DATASETS}")
    # The article split of the README's baseline: 8,582 questions to train, 1,988 to test.
    keys = []
    for articles, n_questions in [((1, 38), 8582), ((39, 48), 1988)]:
        docs = list(read_squad(squad, nlp, articles=articles))
        split = [key for doc in docs for key in doc._.questions]
        assert len(split) == n_questions
        keys.extend(split)
    assert len(set(keys)) == len(keys) == 10570
    stats: dict = {}
    docs = list(read_squad(covidqa, nlp, stats=stats))
    assert len(docs) == 98
    assert sum(len(doc._.questions) for doc in docs) == 1380
    for doc in docs:
        for answers in doc._.gold_answers.values():
            assert [doc.text[a["start"] : a["end"]] for a in answers] == [
                a["text"] for a in answers
            ]
    # About 17% of COVID-QA's answer_start values are off (README).
    assert stats == {"corrected_offsets": 234, "trimmed_answers": 393}
