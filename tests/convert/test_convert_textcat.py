import json
import re

import pytest
from helpers import write, write_jsonl
from spacy.tokens import DocBin

from spacy_bert_pipes.convert import (
    ConversionError,
    TextcatRow,
    nluplusplus_labels,
    read_labels_file,
    read_nluplusplus,
    read_textcat_rows,
    rows_to_docs,
    write_docbin,
)

# A quoted field may hold commas, doubled quotes and newlines: the record
# after it starts two physical lines later.
CSV_TEXT = (
    'text,label\nplain text,a\n"with, comma and ""quotes""\nand a newline",b\n,a\n\nlast one,c\n'
)


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


def test_empty_label_error_names_empty_oos(tmp_path):
    # A CSV whose out-of-scope rows have an empty label cell.
    path = write(tmp_path / "dev.csv", "text,label\nmy card,card\nsing a song,\n")
    with pytest.raises(ConversionError) as err:
        list(read_textcat_rows(path))
    message = str(err.value)
    assert message.startswith(f"{path}:3: empty label in column 'label': ''")
    assert "--empty-oos" in message
    # a label cell with one empty part among others is a typo, not out of scope
    path = write(tmp_path / "typo.csv", "text,labels\nx,a||b\n")
    with pytest.raises(ConversionError) as err:
        list(read_textcat_rows(path, empty_oos=True))
    assert "--empty-oos" not in str(err.value)


@pytest.mark.parametrize(
    "name,content",
    [
        ("dev.csv", "text,label\nmy card,card\nsing a song,\nhum,  \n"),
        (
            "dev.jsonl",
            '{"text": "my card", "label": "card"}\n{"text": "sing a song", "label": ""}\n'
            '{"text": "hum", "label": null}\n',
        ),
        (
            "dev.jsonl",
            '{"text": "my card", "labels": ["card"]}\n{"text": "sing a song", "labels": []}\n'
            '{"text": "hum", "labels": "  "}\n',
        ),
    ],
)
def test_empty_oos_reads_empty_labels_as_out_of_scope(tmp_path, nlp, name, content):
    path = write(tmp_path / name, content)
    rows = list(read_textcat_rows(path, empty_oos=True))
    assert [row.labels for row in rows] == [("card",), (), ()]
    docs = list(rows_to_docs(nlp, rows, ["card", "pin"], exclusive=True, unlabelled=True))
    assert [doc.cats for doc in docs] == [
        {"card": 1.0, "pin": 0.0},
        {"card": 0.0, "pin": 0.0},
        {"card": 0.0, "pin": 0.0},
    ]


def test_oos_label_rows_have_no_label(tmp_path, nlp):
    path = write(tmp_path / "dev.csv", "text,label\nmy card,card\nsing a song,oos\n")
    rows = list(read_textcat_rows(path, oos_label="oos"))
    assert rows == [
        TextcatRow("my card", ("card",), f"{path}:2"),
        TextcatRow("sing a song", (), f"{path}:3"),
    ]
    # without it, "oos" is an unknown label, and the error says how to convert it
    with pytest.raises(ConversionError) as err:
        list(rows_to_docs(nlp, read_textcat_rows(path), ["card", "pin"], exclusive=True))
    message = str(err.value)
    assert message.startswith(f"{path}:3: unknown label 'oos'; (2 known labels")
    assert "convert with --oos-label 'oos'" in message
    # the out-of-scope label with another one is a contradiction
    path = write(tmp_path / "multi.csv", "text,labels\nx,oos|card\n")
    with pytest.raises(ConversionError, match="out-of-scope label 'oos' beside 'card'"):
        list(read_textcat_rows(path, oos_label="oos"))


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
    # a row with no label may be out of scope: the message says how to write it so
    assert ("--empty-oos" in str(err.value)) == (not labels)


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
