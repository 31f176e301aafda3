import json
import re
from typing import Any, List, Tuple

import pytest
from helpers import DATASETS, write, write_jsonl
from spacy.tokens import Doc, DocBin
from spacy.training import docs_to_json

from spacy_bert_pipes.convert import (
    ConversionError,
    read_conll_ner,
    read_entity_jsonl,
    read_ner_docs,
    read_spacy_json,
    write_docbin,
)

# Two documents of CoNLL 2003 columns (token POS chunk NER), the second of two
# sentences, and an empty document between them.
CONLL_TEXT = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

-DOCSTART- -X- -X- O

-DOCSTART- -X- -X- O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""


def ents(doc: Doc) -> List[Tuple[str, str]]:
    return [(ent.text, ent.label_) for ent in doc.ents]


def sents(doc: Doc) -> List[str]:
    return [sent.text for sent in doc.sents]


def test_read_conll_ner_one_doc_per_document(tmp_path, nlp):
    path = write(tmp_path / "train.txt", CONLL_TEXT)
    docs = list(read_conll_ner(path, nlp.vocab))
    assert [doc.text for doc in docs] == [
        "EU rejects German call .",
        "Peter Blackburn BRUSSELS 1996-08-22",
    ]
    assert all(doc.vocab is nlp.vocab for doc in docs)
    assert sents(docs[1]) == ["Peter Blackburn", "BRUSSELS 1996-08-22"]
    assert [token.is_sent_start for token in docs[1]] == [True, False, True, False]
    assert ents(docs[0]) == [("EU", "ORG"), ("German", "MISC")]
    assert ents(docs[1]) == [("Peter Blackburn", "PER"), ("BRUSSELS", "LOC")]
    # "O" is known to be outside an entity, not missing.
    assert [token.ent_iob_ for token in docs[0]] == ["B", "O", "B", "O", "O"]


@pytest.mark.parametrize(
    "n_sents,texts",
    [
        (1, ["EU rejects German call .", "Peter Blackburn", "BRUSSELS 1996-08-22"]),
        # Groups never cross a -DOCSTART- line.
        (2, ["EU rejects German call .", "Peter Blackburn BRUSSELS 1996-08-22"]),
        (3, ["EU rejects German call .", "Peter Blackburn BRUSSELS 1996-08-22"]),
    ],
)
def test_read_conll_ner_n_sents(tmp_path, nlp, n_sents, texts):
    path = write(tmp_path / "train.txt", CONLL_TEXT)
    docs = list(read_conll_ner(path, nlp.vocab, n_sents=n_sents))
    assert [doc.text for doc in docs] == texts
    assert sum(len(doc.ents) for doc in docs) == 4
    assert sum(len(sents(doc)) for doc in docs) == 3


def test_read_conll_ner_without_docstart_is_one_doc(tmp_path, nlp):
    # Tab-separated two columns, CRLF line ends, extra blank lines and no
    # final newline: nothing is lost.
    text = "\r\n\r\nJohn\tB-PER\r\nSmith\tI-PER\r\n\r\n\r\nin\tO\r\nNew\tB-LOC\r\nYork\tI-LOC"
    path = write(tmp_path / "data.conll", text)
    (doc,) = read_conll_ner(path, nlp.vocab)
    assert doc.text == "John Smith in New York"
    assert sents(doc) == ["John Smith", "in New York"]
    assert ents(doc) == [("John Smith", "PER"), ("New York", "LOC")]
    assert [doc.text for doc in read_conll_ner(path, nlp.vocab, n_sents=1)] == [
        "John Smith",
        "in New York",
    ]


def test_read_conll_ner_iob1(tmp_path, nlp):
    # IOB1: an entity starts with I- unless it follows one of the same type;
    # B- only separates two adjacent entities of one type. An I- opening a
    # sentence starts a new entity even after the same type.
    text = (
        "Peter I-PER\nBlackburn I-PER\nmet O\nAnna I-PER\nBob B-PER\nin O\n"
        "Paris I-LOC\nGoogle I-ORG\nstaff O\nRome I-LOC\n\nMilan I-LOC\nnow O\n"
    )
    path = write(tmp_path / "iob1.txt", text)
    (doc,) = read_conll_ner(path, nlp.vocab)
    assert ents(doc) == [
        ("Peter Blackburn", "PER"),
        ("Anna", "PER"),
        ("Bob", "PER"),
        ("Paris", "LOC"),
        ("Google", "ORG"),
        ("Rome", "LOC"),
        ("Milan", "LOC"),
    ]


def test_read_conll_ner_iob2_adjacent_and_long_entities(tmp_path, nlp):
    text = "a B-X\nb I-X\nc I-X\nd B-X\ne B-Y\nf I-Y-Z\ng B-Y-Z\nh I-Y-Z\n"
    path = write(tmp_path / "iob2.txt", text)
    (doc,) = read_conll_ner(path, nlp.vocab)
    # "f" is I- of another type than "e": a new entity, as IOB1 would have it.
    assert ents(doc) == [("a b c", "X"), ("d", "X"), ("e", "Y"), ("f", "Y-Z"), ("g h", "Y-Z")]


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("a NN O\nb NN\n", 2, "expected 3 columns as on line 1, found 2: 'b NN'"),
        ("-DOCSTART- O\n\na NN O\n\nb NN B-PER x\n", 5, "expected 3 columns as on line 3"),
        ("a\nb O\n", 1, "expected a token and an NER tag in the last column, found 'a'"),
        ("a O\nb PER\n", 2, "expected an NER tag 'O', 'B-TYPE' or 'I-TYPE', found 'PER'"),
        ("a O\nb o\n", 2, "found 'o'"),
        ("a O\nb X-PER\n", 2, "found 'X-PER'"),
        ("a U-PER\n", 1, "found 'U-PER'; BILUO and BIOES tags are not read"),
        ("a O\n\nb B-\n", 3, "NER tag 'B-' has no entity type"),
        ("a O\n\nb I-\n", 3, "NER tag 'I-' has no entity type"),
    ],
)
def test_read_conll_ner_errors(tmp_path, nlp, text, line, fragment):
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(ConversionError) as err:
        list(read_conll_ner(path, nlp.vocab))
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)


def test_read_conll_ner_not_utf8(tmp_path, nlp):
    path = tmp_path / "bad.txt"
    path.write_bytes("a O\n\ncaf\xe9 B-LOC\n".encode("latin-1"))
    with pytest.raises(ConversionError, match=rf"^{re.escape(str(path))}:3: not UTF-8"):
        list(read_conll_ner(path, nlp.vocab))


def test_read_conll_ner_utf8_with_bom(tmp_path, nlp):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffCafé B-ORG\nLötschberg I-ORG\n".encode())
    (doc,) = read_conll_ner(path, nlp.vocab)
    assert ents(doc) == [("Café Lötschberg", "ORG")]


def test_read_conll_ner_empty_file_and_negative_n_sents(tmp_path, nlp):
    path = write(tmp_path / "empty.txt", "-DOCSTART- -X- O\n\n\n-DOCSTART- -X- O\n")
    assert list(read_conll_ner(path, nlp.vocab)) == []
    with pytest.raises(ValueError, match="n_sents must be 0"):
        read_conll_ner(path, nlp.vocab, n_sents=-1)


def test_read_conll_ner_real_conll2003_sample(tmp_path, nlp):
    source = DATASETS / "conll2003" / "valid.txt"
    if not source.is_file():
        pytest.skip(f"no CoNLL 2003 data at {source}")
    lines = source.read_text(encoding="utf-8").split("\n")[:200]
    path = write(tmp_path / "valid-head.txt", "\n".join(lines) + "\n")
    rows = [line.split() for line in lines if line.strip()]
    tokens = [row for row in rows if row[0] != "-DOCSTART-"]
    n_begin = sum(1 for row in tokens if row[-1].startswith("B-"))
    docs = list(read_conll_ner(path, nlp.vocab))
    assert len(docs) == sum(1 for row in rows if row[0] == "-DOCSTART-")
    assert [token.text for doc in docs for token in doc] == [row[0] for row in tokens]
    assert sum(len(doc.ents) for doc in docs) == n_begin > 0
    labels = {ent.label_ for doc in docs for ent in doc.ents}
    assert labels <= {"PER", "LOC", "ORG", "MISC"}


def test_read_entity_jsonl_both_styles(tmp_path, nlp):
    records = [
        {"text": "Peter lives in New York.", "entities": [[15, 23, "LOC"], [0, 5, "PER"]]},
        {"text": "Apple hired Tim.", "spans": [{"start": 0, "end": 5, "label": "ORG"}]},
        {"text": "Nothing here.", "entities": []},
    ]
    path = write_jsonl(tmp_path / "train.jsonl", records)
    path.write_text(path.read_text() + "\n\n" + json.dumps({"text": "", "spans": []}) + "\n")
    docs = list(read_entity_jsonl(path, nlp))
    assert [doc.text for doc in docs] == [record["text"] for record in records] + [""]
    assert [ents(doc) for doc in docs] == [
        [("Peter", "PER"), ("New York", "LOC")],
        [("Apple", "ORG")],
        [],
        [],
    ]
    assert [token.ent_iob_ for token in docs[2]] == ["O", "O", "O"]


def test_read_entity_jsonl_explicit_fields(tmp_path, nlp):
    record = {"body": "Hi Ann", "gold": [{"start": 3, "end": 6, "label": "PER"}], "spans": 1}
    path = write_jsonl(tmp_path / "data.jsonl", [record])
    (doc,) = read_entity_jsonl(path, nlp, text_field="body", spans_field="gold")
    assert ents(doc) == [("Ann", "PER")]


@pytest.mark.parametrize(
    "record,fragment",
    [
        (
            {"text": "New York City", "entities": [[0, 6, "LOC"]]},
            "entity 'LOC' at characters 0-6 ('New Yo') does not fall on token boundaries; "
            "the tokens there are ['New', 'York']",
        ),
        (
            {"text": "in New York", "entities": [[2, 11, "LOC"]]},
            "at characters 2-11 (' New York')",
        ),
        (
            {"text": "New York City", "entities": [[0, 8, "LOC"], [4, 13, "LOC"]]},
            "entities overlap: 'LOC' at characters 0-8 ('New York') and 'LOC' at 4-13",
        ),
        ({"text": "a b", "entities": [[0, 1, "X"], [0, 1, "X"]]}, "entities overlap"),
        ({"text": "a b", "entities": [[0, 1, ""]]}, "entity label must be a non-empty string"),
        ({"text": "a b", "entities": [[0, 1, None]]}, "found [0, 1, null]"),
        ({"text": "a b", "entities": [[2, 2, "X"]]}, '[2, 2, "X"] ends at or before its start'),
        ({"text": "a b", "entities": [[2, 9, "X"]]}, "outside the text (0 to 3 characters)"),
        ({"text": "a b", "entities": [[-1, 1, "X"]]}, "outside the text"),
        ({"text": "a b", "entities": [["0", 1, "X"]]}, "entity offsets must be integers"),
        ({"text": "a b", "entities": [[0, 1]]}, "expected an entity as [start, end, label]"),
        ({"text": "a b", "spans": [{"start": 0, "label": "X"}]}, "in 'spans', found {"),
        ({"text": "a b", "entities": "a"}, "'entities' must be a list of entities"),
        ({"text": "a b"}, "no 'entities' or 'spans' field; name the entity field"),
        ({"text": "a b", "entities": [], "spans": []}, "both an 'entities' and a 'spans'"),
        ({"entities": []}, "no text field 'text'"),
    ],
)
def test_read_entity_jsonl_errors(tmp_path, nlp, record, fragment):
    path = write_jsonl(tmp_path / "data.jsonl", [{"text": "ok", "entities": []}, record])
    with pytest.raises(ConversionError) as err:
        list(read_entity_jsonl(path, nlp))
    assert str(err.value).startswith(f"{path}:2: ")
    assert fragment in str(err.value)


def test_read_entity_jsonl_invalid_json(tmp_path, nlp):
    path = write(tmp_path / "data.jsonl", '\n{"text": "a", "entities": [}\n')
    with pytest.raises(ConversionError, match=r"data\.jsonl:2: invalid JSON"):
        list(read_entity_jsonl(path, nlp))


@pytest.fixture
def spacy_json_docs(nlp):
    first = nlp.make_doc("Peter lives in New York. He is happy.")
    first.ents = [first.char_span(0, 5, "PER"), first.char_span(15, 23, "LOC")]
    for token in first:
        token.is_sent_start = token.i in (0, 6)
    second = nlp.make_doc("No entities here")
    for token in second:
        token.is_sent_start = token.i == 0
    return [first, second]


def test_read_spacy_json_round_trip(tmp_path, nlp, spacy_json_docs):
    data = [docs_to_json(spacy_json_docs, doc_id=0), docs_to_json(spacy_json_docs[1:], doc_id=1)]
    path = write(tmp_path / "train.json", json.dumps(data))
    docs = list(read_spacy_json(path, nlp))
    expected = spacy_json_docs + spacy_json_docs[1:]
    assert [doc.text for doc in docs] == [doc.text for doc in expected]
    assert [ents(doc) for doc in docs] == [ents(doc) for doc in expected]
    assert [sents(doc) for doc in docs] == [sents(doc) for doc in expected]
    assert all(doc.vocab is nlp.vocab for doc in docs)


def v2_json(*tokens: Any) -> List[Any]:
    return [{"id": 0, "paragraphs": [{"sentences": [{"tokens": list(tokens)}]}]}]


@pytest.mark.parametrize(
    "data,location,fragment",
    [
        ({"paragraphs": []}, "1", "expected a JSON list of documents, found an object"),
        ([{"paragraphs": []}, 3], "record 2", "expected a JSON object, found a number"),
        ([{"paragraphs": []}, {"id": 1}], "record 2", 'expected a "paragraphs" list, found null'),
        (v2_json({"orth": "a"}, {"ner": "O"}), "record 1", "paragraph 1: missing key 'orth'"),
        (v2_json({"orth": "a", "ner": "Q-X"}), "record 1", "paragraph 1: [E068] Invalid BILUO"),
        (v2_json({"orth": "a", "ner": "I-X"}), "record 1", "[E067] Invalid BILUO tag sequence"),
        # IOB instead of BILUO: spaCy reads no entity from "B-X I-X".
        (
            v2_json({"orth": "a", "ner": "B-X"}, {"orth": "b", "ner": "I-X"}),
            "record 1",
            "paragraph 1: 1 entities are tagged (B- or U-) but spaCy reads 0",
        ),
    ],
)
def test_read_spacy_json_errors(tmp_path, nlp, data, location, fragment):
    path = write(tmp_path / "train.json", json.dumps(data))
    with pytest.raises(ConversionError) as err:
        list(read_spacy_json(path, nlp))
    assert str(err.value).startswith(f"{path}:{location}: ")
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_read_spacy_json_error_names_later_record(tmp_path, nlp, spacy_json_docs):
    data = [docs_to_json(spacy_json_docs)] + v2_json({"orth": "a", "ner": "Q-X"})
    path = write(tmp_path / "train.json", json.dumps(data, indent=2))
    with pytest.raises(ConversionError, match=r"train\.json:record 2: paragraph 1: \[E068\]"):
        list(read_spacy_json(path, nlp))


def test_read_ner_docs_dispatch(tmp_path, nlp, spacy_json_docs):
    conll = "Ann B-PER\nsmiled O\n\nBob B-PER\n"
    jsonl = json.dumps({"text": "Ann smiled", "entities": [[0, 3, "PER"]]})
    json_data = json.dumps([docs_to_json(spacy_json_docs[:1])])
    for name, text in [("a.txt", conll), ("a.iob", conll), ("a", conll), ("a.jsonl", jsonl)]:
        docs = list(read_ner_docs(write(tmp_path / name, text), nlp))
        assert ents(docs[0])[0] == ("Ann", "PER"), name
    assert len(list(read_ner_docs(tmp_path / "a.txt", nlp, n_sents=1))) == 2
    docs = list(read_ner_docs(write(tmp_path / "a.json", json_data), nlp))
    assert ents(docs[0]) == [("Peter", "PER"), ("New York", "LOC")]
    # An explicit format wins over the suffix.
    docs = list(read_ner_docs(write(tmp_path / "b.txt", jsonl), nlp, file_format="jsonl"))
    assert ents(docs[0]) == [("Ann", "PER")]
    docs = list(read_ner_docs(write(tmp_path / "b.data", conll), nlp, file_format="conll"))
    assert len(docs) == 1


def test_read_ner_docs_unknown_suffix_error_says_why_conll(tmp_path, nlp):
    path = write(tmp_path / "data.csv", "text,label\nx,a\n")
    with pytest.raises(ConversionError) as err:
        list(read_ner_docs(path, nlp))
    message = str(err.value)
    assert message.startswith(f"{path}:1: expected a token and an NER tag")
    assert "(read as CoNLL: '.csv' is not a known suffix (.jsonl, .json, .txt" in message
    # A known suffix needs no such note.
    path = write(tmp_path / "data.txt", "x\n")
    with pytest.raises(ConversionError) as err:
        list(read_ner_docs(path, nlp))
    assert "read as CoNLL" not in str(err.value)


def test_read_ner_docs_bad_arguments(tmp_path, nlp):
    path = write(tmp_path / "a.jsonl", "")
    with pytest.raises(ValueError, match="n_sents groups CoNLL sentences, but a.jsonl is read"):
        read_ner_docs(path, nlp, n_sents=2)
    with pytest.raises(ValueError, match="unknown file_format 'iob'"):
        read_ner_docs(path, nlp, file_format="iob")  # type: ignore[arg-type]


def test_ner_docbin_round_trip(tmp_path, nlp):
    path = write(tmp_path / "train.txt", CONLL_TEXT)
    output = tmp_path / "train.spacy"
    assert write_docbin(read_conll_ner(path, nlp.vocab), output) == 2
    docs = list(DocBin().from_disk(output).get_docs(nlp.vocab))
    assert [ents(doc) for doc in docs] == [
        [("EU", "ORG"), ("German", "MISC")],
        [("Peter Blackburn", "PER"), ("BRUSSELS", "LOC")],
    ]
    assert sents(docs[1]) == ["Peter Blackburn", "BRUSSELS 1996-08-22"]


# Question answering: SQuAD JSON and Restaurant-8k.
