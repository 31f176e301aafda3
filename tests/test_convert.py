import json
import re
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import docs_to_json

from spacy_bert_pipes.convert import (
    RESTAURANT8K_QUESTIONS,
    RESTAURANT8K_SLOTS,
    ConversionError,
    TextcatRow,
    nluplusplus_labels,
    read_conll_ner,
    read_entity_jsonl,
    read_labels_file,
    read_ner_docs,
    read_nluplusplus,
    read_restaurant8k,
    read_spacy_json,
    read_squad,
    read_textcat_rows,
    rows_to_docs,
    write_docbin,
)

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"

# A quoted field may hold commas, doubled quotes and newlines: the record
# after it starts two physical lines later.
CSV_TEXT = (
    'text,label\nplain text,a\n"with, comma and ""quotes""\nand a newline",b\n,a\n\nlast one,c\n'
)


@pytest.fixture(scope="module")
def nlp():
    # Shared: the tests only tokenize and add strings to the vocab.
    return spacy.blank("en")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: List[Any]) -> Path:
    return write(path, "\n".join(json.dumps(record) for record in records) + "\n")


def test_read_csv_quoted_fields_and_line_numbers(tmp_path):
    path = write(tmp_path / "train.csv", CSV_TEXT)
    rows = list(read_textcat_rows(path))
    assert rows == [
        TextcatRow("plain text", ("a",), f"{path}:2"),
        TextcatRow('with, comma and "quotes"\nand a newline', ("b",), f"{path}:3"),
        TextcatRow("", ("a",), f"{path}:5"),
        TextcatRow("last one", ("c",), f"{path}:7"),
    ]


def test_read_csv_labels_column_and_explicit_columns(tmp_path):
    path = write(tmp_path / "multi.csv", "id,labels,body\n1,a|b,x\n2, c ,y\n")
    rows = list(read_textcat_rows(path, text_column="body"))
    assert [(row.text, row.labels) for row in rows] == [("x", ("a", "b")), ("y", ("c",))]
    rows = list(read_textcat_rows(path, text_column="body", label_column="id"))
    assert [row.labels for row in rows] == [("1",), ("2",)]


def test_read_jsonl(tmp_path):
    records = [
        {"text": "one", "label": "a"},
        {"text": "two", "labels": ["a", "b"]},
        {"text": "", "labels": []},
    ]
    path = write_jsonl(tmp_path / "train.jsonl", records)
    path.write_text(path.read_text() + "\n  \n" + json.dumps({"text": "four", "label": "c"}))
    rows = list(read_textcat_rows(path))
    assert rows == [
        TextcatRow("one", ("a",), f"{path}:1"),
        TextcatRow("two", ("a", "b"), f"{path}:2"),
        TextcatRow("", (), f"{path}:3"),
        TextcatRow("four", ("c",), f"{path}:6"),
    ]


@pytest.mark.parametrize(
    "name,content,line,fragment",
    [
        ("data.csv", "", 1, "empty file"),
        ("data.csv", "body,label\nx,a\n", 1, "no text column 'text'; columns: body, label"),
        ("data.csv", "text,category\nx,a\n", 1, "no 'label' column"),
        ("data.csv", "text,label,labels\nx,a,a\n", 1, "both a 'label' and a 'labels'"),
        ("data.csv", "text,label\nx,a\ny,\n", 3, "empty label in column 'label'"),
        ("data.csv", "text,labels\nx,a||b\n", 2, "empty label in column 'labels': 'a||b'"),
        ("data.csv", "text,label\nx,a\n\ny,a,extra\n", 4, "expected 2 fields"),
        ("data.csv", 'text,label\nx,a\n"never closed,a\n', 3, "malformed CSV"),
        ("data.jsonl", '{"text": "x", "label": "a"}\n{"text": "y",\n', 2, "invalid JSON"),
        ("data.jsonl", '{"text": null, "label": "a"}\n', 1, "'text' must be a string, found null"),
        ("data.jsonl", '{"text": 3, "label": "a"}\n', 1, "found 3"),
        ("data.jsonl", '{"body": "x", "label": "a"}\n', 1, "no text field 'text'; fields: body"),
        ("data.jsonl", '\n\n{"text": "x"}\n', 3, "no 'label' field"),
        ("data.jsonl", '{"text": "x", "label": ""}\n', 1, "empty label in 'label'"),
        ("data.jsonl", '{"text": "x", "labels": 7}\n', 1, "'labels' must be a string or a list"),
        ("data.jsonl", '{"text": "x", "labels": ["a", 1]}\n', 1, 'found ["a", 1]'),
        ("data.jsonl", '["x", "a"]\n', 1, "expected a JSON object, found a list"),
    ],
)
def test_read_textcat_rows_errors(tmp_path, name, content, line, fragment):
    path = write(tmp_path / name, content)
    with pytest.raises(ConversionError) as err:
        list(read_textcat_rows(path))
    assert str(err.value).startswith(f"{path}:{line}: ")
    assert fragment in str(err.value)


def test_read_textcat_rows_explicit_label_column_missing(tmp_path):
    path = write(tmp_path / "data.jsonl", '{"text": "x", "label": "a"}\n{"text": "y"}\n')
    with pytest.raises(ConversionError, match=r"data\.jsonl:1: no 'intent' field"):
        list(read_textcat_rows(path, label_column="intent"))


def test_read_textcat_rows_not_utf8(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes("text,label\nok,a\ncaf\xe9,a\n".encode("latin-1"))
    with pytest.raises(
        ConversionError, match=rf"^{re.escape(str(path))}:3: not UTF-8: byte b'\\xe9'"
    ):
        list(read_textcat_rows(path))


def test_read_textcat_rows_unknown_suffix(tmp_path):
    path = write(tmp_path / "data.tsv", "text\tlabel\n")
    with pytest.raises(ConversionError, match=r"data\.tsv: unsupported file type '\.tsv'"):
        list(read_textcat_rows(path))


@pytest.fixture
def nluplusplus_dir(tmp_path):
    ontology = {
        "intents": {
            "greet": {"description": "", "domain": ["general"]},
            "pin": {"description": "", "domain": ["banking"]},
            "card": {"description": "", "domain": ["banking", "hotels"]},
            "wifi": {"description": "", "domain": ["hotels"]},
        },
        "slots": {},
    }
    write(tmp_path / "ontology.json", json.dumps(ontology))
    folder = tmp_path / "banking"
    folder.mkdir()
    fold0 = [{"text": "hi, my pin", "intents": ["greet", "pin"], "slots": {}}, {"text": "hmm"}]
    write(folder / "fold0.json", json.dumps(fold0, indent=2))
    write(folder / "fold1.json", json.dumps([{"text": "card", "intents": ["card"]}]))
    return folder


def test_nluplusplus_labels(nluplusplus_dir):
    ontology = nluplusplus_dir.parent / "ontology.json"
    assert nluplusplus_labels(nluplusplus_dir) == ["card", "greet", "pin"]
    assert nluplusplus_labels(nluplusplus_dir.parent) == ["card", "greet", "pin"]
    assert nluplusplus_labels(ontology, domains=["hotels"]) == ["card", "wifi"]


def test_nluplusplus_labels_errors(tmp_path):
    with pytest.raises(ConversionError, match="no ontology.json"):
        nluplusplus_labels(tmp_path)
    path = write(tmp_path / "ontology.json", json.dumps({"intents": {"pin": {"domain": "x"}}}))
    with pytest.raises(
        ConversionError, match=rf"^{re.escape(str(path))}: intent 'pin': expected a \"domain\""
    ):
        nluplusplus_labels(path)


def test_read_nluplusplus(nluplusplus_dir):
    rows = list(read_nluplusplus(nluplusplus_dir, [1, 0]))
    fold0, fold1 = nluplusplus_dir / "fold0.json", nluplusplus_dir / "fold1.json"
    assert rows == [
        TextcatRow("card", ("card",), f"{fold1}:record 1"),
        TextcatRow("hi, my pin", ("greet", "pin"), f"{fold0}:record 1"),
        TextcatRow("hmm", (), f"{fold0}:record 2"),
    ]


@pytest.mark.parametrize(
    "content,location,fragment",
    [
        ('[{"text": "a"}, {"text": null}]', "record 2", "'text' must be a string, found null"),
        ('[{"text": "a", "intents": "pin"}, {"text": "b", "intents": 3}]', "record 2", "found 3"),
        ('[{"text": "a"}, 5]', "record 2", "expected a JSON object, found a number"),
        ('{"text": "a"}', "1", "expected a JSON list of records, found an object"),
        ('[\n{"text": "a"},\n{"text" "b"}\n]', "3", "invalid JSON"),
    ],
)
def test_read_nluplusplus_errors(nluplusplus_dir, content, location, fragment):
    path = write(nluplusplus_dir / "fold2.json", content)
    with pytest.raises(ConversionError) as err:
        list(read_nluplusplus(nluplusplus_dir, [2]))
    assert str(err.value).startswith(f"{path}:{location}: ")
    assert fragment in str(err.value)


def test_read_nluplusplus_missing_fold(nluplusplus_dir):
    with pytest.raises(ConversionError, match=r"fold7\.json: no such fold file.*fold0.json"):
        list(read_nluplusplus(nluplusplus_dir, [0, 7]))


def test_read_labels_file(tmp_path):
    assert read_labels_file(write(tmp_path / "l.json", '["b", "a"]')) == ["b", "a"]


@pytest.mark.parametrize(
    "content,location,fragment",
    [
        ('["a", "b", "a"]', "item 3", "label 'a' repeats item 1"),
        ('["a", 2]', "item 2", "expected a non-empty string, found 2"),
        ('["a", ""]', "item 2", 'found ""'),
        ('{"a": 1}', "1", "expected a non-empty JSON list of labels"),
        ("[]", "1", "expected a non-empty JSON list of labels"),
        ('[\n"a",\n"b"\n"c"]', "4", "invalid JSON"),
    ],
)
def test_read_labels_file_errors(tmp_path, content, location, fragment):
    path = write(tmp_path / "labels.json", content)
    with pytest.raises(ConversionError) as err:
        read_labels_file(path)
    assert str(err.value).startswith(f"{path}:{location}: ")
    assert fragment in str(err.value)


def test_rows_to_docs_scores_every_label(nlp):
    rows = [TextcatRow("Hello world", ("b",), "x.csv:2"), TextcatRow("", ("a", "c"), "x.csv:3")]
    docs = list(rows_to_docs(nlp, rows, ["a", "b", "c"], exclusive=False))
    assert [doc.text for doc in docs] == ["Hello world", ""]
    assert [len(doc) for doc in docs] == [2, 0]
    assert docs[0].cats == {"a": 0.0, "b": 1.0, "c": 0.0}
    assert docs[1].cats == {"a": 1.0, "b": 0.0, "c": 1.0}


def test_rows_to_docs_unknown_label(nlp):
    rows = [
        TextcatRow("x", ("card_arrival",), "x.csv:2"),
        TextcatRow("y", ("card_arival",), "x.csv:3"),
    ]
    labels = ["card_arrival", "card_linking", "pin_blocked"]
    with pytest.raises(ConversionError) as err:
        list(rows_to_docs(nlp, rows, labels, exclusive=True))
    message = str(err.value)
    assert message.startswith("x.csv:3: unknown label 'card_arival'")
    assert "did you mean 'card_arrival'" in message
    assert "(3 known labels: 'card_arrival', 'card_linking', 'pin_blocked')" in message
    with pytest.raises(ConversionError, match="unknown label 'zzz'; \\(3 known labels"):
        list(rows_to_docs(nlp, [TextcatRow("z", ("zzz",), "x.csv:4")], labels, exclusive=True))


@pytest.mark.parametrize("labels,fragment", [(("a", "b"), "found 'a', 'b'"), ((), "found none")])
def test_rows_to_docs_exclusive_needs_one_label(nlp, labels, fragment):
    rows = [TextcatRow("ok", ("a", "a"), "d.jsonl:1"), TextcatRow("x", labels, "d.jsonl:2")]
    docs = rows_to_docs(nlp, rows, ["a", "b"], exclusive=True)
    assert next(docs).cats == {"a": 1.0, "b": 0.0}
    with pytest.raises(ConversionError) as err:
        next(docs)
    assert str(err.value).startswith("d.jsonl:2: exclusive classes need exactly one label")
    assert fragment in str(err.value)


def test_docbin_round_trip(tmp_path, nlp):
    path = write(tmp_path / "train.csv", CSV_TEXT)
    rows = list(read_textcat_rows(path))
    output = tmp_path / "corpus" / "train.spacy"
    assert write_docbin(rows_to_docs(nlp, rows, ["a", "b", "c"], exclusive=True), output) == 4
    docs = list(DocBin().from_disk(output).get_docs(nlp.vocab))
    assert [doc.text for doc in docs] == [row.text for row in rows]
    assert [doc.cats for doc in docs] == [
        {"a": 1.0, "b": 0.0, "c": 0.0},
        {"a": 0.0, "b": 1.0, "c": 0.0},
        {"a": 1.0, "b": 0.0, "c": 0.0},
        {"a": 0.0, "b": 0.0, "c": 1.0},
    ]


def test_write_docbin_error_leaves_no_file(tmp_path, nlp):
    rows = [TextcatRow("x", ("a",), "x.csv:2"), TextcatRow("y", ("z",), "x.csv:3")]
    output = tmp_path / "train.spacy"
    with pytest.raises(ConversionError, match="x.csv:3"):
        write_docbin(rows_to_docs(nlp, rows, ["a"], exclusive=True), output)
    assert not output.exists()


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
