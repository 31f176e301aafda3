import json
from pathlib import Path
from typing import List, Tuple

import pytest
import spacy
import typer
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.cli.convert import parse_folds
from spacy_bert_pipes.cli.convert_qa import parse_articles

# Seen from the project root, the shared data sets are in ../shared/datasets.
DATASETS = Path(__file__).resolve().parents[3] / "shared" / "datasets"

runner = CliRunner()


def read_docs(path: Path) -> List[Doc]:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


@pytest.fixture
def nluplusplus_dir(tmp_path):
    ontology = {
        "intents": {
            "greet": {"domain": ["general"]},
            "pin": {"domain": ["banking"]},
            "wifi": {"domain": ["hotels"]},
        }
    }
    (tmp_path / "ontology.json").write_text(json.dumps(ontology))
    folder = tmp_path / "banking"
    folder.mkdir()
    folds = [
        [{"text": "hi", "intents": ["greet"]}, {"text": "hmm"}],
        [{"text": "my pin", "intents": ["pin"]}],
        [{"text": "wifi?", "intents": ["wifi"]}],
    ]
    for number, records in enumerate(folds):
        (folder / f"fold{number}.json").write_text(json.dumps(records))
    return folder


def test_textcat_csv(tmp_path):
    input_path = tmp_path / "train.csv"
    input_path.write_text('text,label\n"Hello, world",b\nbye,a\n')
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "textcat", str(input_path), str(output_path)])
    assert result.exit_code == 0, result.output
    assert f"Wrote 2 docs with 2 labels to {output_path}" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == ["Hello, world", "bye"]
    assert [doc.cats for doc in docs] == [{"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0}]


def test_textcat_jsonl_multilabel_with_labels_file(tmp_path):
    input_path = tmp_path / "train.jsonl"
    input_path.write_text('{"body": "x", "tags": ["b", "c"]}\n{"body": "y", "tags": []}\n')
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["c", "b", "a"]')
    output_path = tmp_path / "train.spacy"
    args = ["convert", "textcat", str(input_path), str(output_path), "--multilabel"]
    args += ["--text-column", "body", "--label-column", "tags", "--labels", str(labels_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 2 docs with 3 labels" in result.output
    docs = read_docs(output_path)
    assert [doc.cats for doc in docs] == [
        {"c": 1.0, "b": 1.0, "a": 0.0},
        {"c": 0.0, "b": 0.0, "a": 0.0},
    ]


@pytest.mark.parametrize(
    "extra,message",
    [
        ([], "train.jsonl:2: exclusive classes need exactly one label per row, found 'a', 'b'"),
        (["--multilabel", "--labels", "LABELS"], "train.jsonl:2: unknown label 'b'"),
        (["--multilabel", "--text-column", "body"], "train.jsonl:1: no text field 'body'"),
        (["--lang", "not-a-language"], "unknown language code 'not-a-language'"),
    ],
)
def test_textcat_errors_exit_1(tmp_path, extra, message):
    input_path = tmp_path / "train.jsonl"
    input_path.write_text('{"text": "x", "label": "a"}\n{"text": "y", "labels": ["a", "b"]}\n')
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["a"]')
    output_path = tmp_path / "train.spacy"
    extra = [str(labels_path) if arg == "LABELS" else arg for arg in extra]
    result = runner.invoke(app, ["convert", "textcat", str(input_path), str(output_path), *extra])
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert not output_path.exists()


def test_textcat_out_of_scope_rows(tmp_path):
    input_path = tmp_path / "dev.csv"
    input_path.write_text("text,label\nmy card,card\nsing a song,oos\nhum,\nmy pin,pin\n")
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["card", "pin"]')
    output_path = tmp_path / "dev.spacy"
    args = ["convert", "textcat", str(input_path), str(output_path), "--labels", str(labels_path)]
    # as a newcomer first tries: both kinds of out-of-scope row are refused,
    # and the messages name the option that writes them
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "dev.csv:4: empty label in column 'label': ''" in result.stderr
    assert "--empty-oos" in result.stderr
    result = runner.invoke(app, [*args, "--empty-oos"])
    assert result.exit_code == 1
    assert "dev.csv:3: unknown label 'oos'" in result.stderr
    assert "--oos-label 'oos'" in result.stderr
    result = runner.invoke(app, [*args, "--oos-label", "oos", "--empty-oos"])
    assert result.exit_code == 0, result.output
    assert f"Wrote 4 docs (2 out of scope: no positive label) with 2 labels to {output_path}" in (
        result.output
    )
    docs = read_docs(output_path)
    assert [doc.cats for doc in docs] == [
        {"card": 1.0, "pin": 0.0},
        {"card": 0.0, "pin": 0.0},
        {"card": 0.0, "pin": 0.0},
        {"card": 0.0, "pin": 1.0},
    ]
    # without a labels file, the labels are those found, the out-of-scope one aside
    result = runner.invoke(
        app,
        [
            "convert",
            "textcat",
            str(input_path),
            str(output_path),
            "--oos-label",
            "oos",
            "--empty-oos",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "with 2 labels" in result.output


def test_textcat_oos_label_among_the_labels(tmp_path):
    input_path = tmp_path / "dev.csv"
    input_path.write_text("text,label\nmy card,card\nsing a song,oos\n")
    labels_path = tmp_path / "labels.json"
    labels_path.write_text('["card", "oos"]')
    output_path = tmp_path / "dev.spacy"
    args = ["convert", "textcat", str(input_path), str(output_path), "--labels", str(labels_path)]
    result = runner.invoke(app, [*args, "--oos-label", "oos"])
    assert result.exit_code == 1
    assert "'oos' is one of the labels and the --oos-label" in result.stderr
    assert not output_path.exists()
    # without --oos-label, "oos" is a class of its own
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [doc.cats for doc in read_docs(output_path)][1] == {"card": 0.0, "oos": 1.0}


def test_nluplusplus(nluplusplus_dir, tmp_path):
    output_path = tmp_path / "train.spacy"
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(output_path), "--folds", "0-1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 3 docs with 2 labels" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == ["hi", "hmm", "my pin"]
    assert docs[1].cats == {"greet": 0.0, "pin": 0.0}


@pytest.mark.parametrize(
    "folds,message",
    [("2", "fold2.json:record 1: unknown label 'wifi'"), ("0,5", "fold5.json: no such fold file")],
)
def test_nluplusplus_errors_exit_1(nluplusplus_dir, tmp_path, folds, message):
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(tmp_path / "x.spacy")]
    result = runner.invoke(app, [*args, "--folds", folds])
    assert result.exit_code == 1
    assert message in result.stderr


def test_nluplusplus_bad_folds_is_a_usage_error(nluplusplus_dir, tmp_path):
    args = ["convert", "nluplusplus", str(nluplusplus_dir), str(tmp_path / "x.spacy")]
    result = runner.invoke(app, [*args, "--folds", "3-1"])
    assert result.exit_code == 2
    assert "expected a fold number or a range" in result.stderr


@pytest.mark.parametrize(
    "text,folds",
    [
        ("0-17", list(range(18))),
        ("18,19", [18, 19]),
        ("18-19", [18, 19]),
        (" 0-2, 7", [0, 1, 2, 7]),
    ],
)
def test_parse_folds(text, folds):
    assert parse_folds(text) == folds


@pytest.mark.parametrize("text", ["", "a", "1-", "-1", "3-1", "1,1", "0-2,2"])
def test_parse_folds_invalid(text):
    with pytest.raises(typer.BadParameter):
        parse_folds(text)


CONLL_TEXT = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
. . O O

-DOCSTART- -X- -X- O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""


def ents(doc: Doc) -> List[Tuple[str, str]]:
    return [(ent.text, ent.label_) for ent in doc.ents]


def test_ner_conll(tmp_path):
    input_path = tmp_path / "train.txt"
    input_path.write_text(CONLL_TEXT)
    output_path = tmp_path / "corpus" / "train.spacy"
    result = runner.invoke(app, ["convert", "ner", str(input_path), str(output_path)])
    assert result.exit_code == 0, result.output
    assert f"Wrote 2 docs with 4 entities to {output_path}" in result.output
    assert "Entities per label: LOC 1, MISC 1, ORG 1, PER 1" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == [
        "EU rejects German .",
        "Peter Blackburn BRUSSELS 1996-08-22",
    ]
    assert [ents(doc) for doc in docs] == [
        [("EU", "ORG"), ("German", "MISC")],
        [("Peter Blackburn", "PER"), ("BRUSSELS", "LOC")],
    ]
    assert [sent.text for sent in docs[1].sents] == ["Peter Blackburn", "BRUSSELS 1996-08-22"]


def test_ner_conll_n_sents(tmp_path):
    input_path = tmp_path / "train.iob"
    input_path.write_text(CONLL_TEXT)
    output_path = tmp_path / "train.spacy"
    args = ["convert", "ner", str(input_path), str(output_path), "--n-sents", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 3 docs with 4 entities" in result.output
    assert [doc.text for doc in read_docs(output_path)] == [
        "EU rejects German .",
        "Peter Blackburn",
        "BRUSSELS 1996-08-22",
    ]


def test_ner_jsonl(tmp_path):
    records = [
        {"text": "Ann met Bob.", "entities": [[0, 3, "PER"], [8, 11, "PER"]]},
        {"text": "No one.", "spans": []},
    ]
    input_path = tmp_path / "train.txt"
    input_path.write_text("\n".join(json.dumps(record) for record in records))
    output_path = tmp_path / "train.spacy"
    args = ["convert", "ner", str(input_path), str(output_path), "--format", "jsonl"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 2 docs with 2 entities" in result.output
    assert "Entities per label: PER 2" in result.output
    assert [ents(doc) for doc in read_docs(output_path)] == [[("Ann", "PER"), ("Bob", "PER")], []]


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("bad.txt", "a NN O\n\nb NN\n", "bad.txt:3: expected 3 columns as on line 1, found 2"),
        ("bad.conll", "a NN O\nb NN E-PER\n", "bad.conll:2: expected an NER tag 'O', 'B-TYPE'"),
        (
            "bad.jsonl",
            '{"text": "New York", "entities": [[0, 5, "LOC"]]}',
            "bad.jsonl:1: entity 'LOC' at characters 0-5 ('New Y') does not fall on token",
        ),
        ("bad.json", '{"paragraphs": []}', "bad.json:1: expected a JSON list of documents"),
    ],
)
def test_ner_errors_exit_1(tmp_path, name, text, message):
    input_path = tmp_path / name
    input_path.write_text(text)
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "ner", str(input_path), str(output_path)])
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert not output_path.exists()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--n-sents", "2"], "n_sents groups CoNLL sentences, but train.jsonl is read as jsonl"),
        (["--n-sents", "-1"], "--n-sents': Input should be greater than or equal to 0"),
        (["--format", "iob"], "'iob' is not one of"),
    ],
)
def test_ner_bad_options_are_usage_errors(tmp_path, extra, message):
    input_path = tmp_path / "train.jsonl"
    input_path.write_text('{"text": "x", "entities": []}\n')
    result = runner.invoke(
        app, ["convert", "ner", str(input_path), str(tmp_path / "x.spacy"), *extra]
    )
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.replace("│", " ").split())


def test_help():
    for command in ("textcat", "nluplusplus", "ner", "squad", "restaurant8k"):
        result = runner.invoke(app, ["convert", command, "--help"])
        assert result.exit_code == 0
        assert f"bert-pipes convert {command}" in result.output


@pytest.mark.slow
def test_convert_real_banking77_and_nluplusplus(tmp_path):
    if not DATASETS.is_dir():
        pytest.skip(f"no shared datasets at {DATASETS}")
    banking77, nluplusplus = DATASETS / "banking77", DATASETS / "nluplusplus" / "banking"
    args = ["convert", "textcat", str(banking77 / "train.csv"), str(tmp_path / "b77.spacy")]
    args += ["--label-column", "category", "--labels", str(banking77 / "categories.json")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Wrote 10003 docs with 77 labels" in result.output
    docs = read_docs(tmp_path / "b77.spacy")
    assert len(docs) == 10003
    assert all(len(doc.cats) == 77 and sum(doc.cats.values()) == 1.0 for doc in docs)

    n_docs = 0
    for folds in ("0-17", "18,19"):
        output_path = tmp_path / f"nlupp-{folds}.spacy"
        args = ["convert", "nluplusplus", str(nluplusplus), str(output_path), "--folds", folds]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "with 48 labels" in result.output
        docs = read_docs(output_path)
        assert all(len(doc.cats) == 48 for doc in docs)
        n_docs += len(docs)
    assert n_docs == 2071


@pytest.mark.slow
def test_convert_real_conll2003(tmp_path):
    folder = DATASETS / "conll2003"
    if not folder.is_dir():
        pytest.skip(f"no CoNLL 2003 data at {folder}")
    for split, n_docs, n_ents in [("train", 946, 23499), ("valid", 216, 5942), ("test", 231, 5648)]:
        output_path = tmp_path / f"{split}.spacy"
        result = runner.invoke(
            app, ["convert", "ner", str(folder / f"{split}.txt"), str(output_path)]
        )
        assert result.exit_code == 0, result.output
        assert f"Wrote {n_docs} docs with {n_ents} entities" in result.output
        docs = read_docs(output_path)
        assert sum(len(doc.ents) for doc in docs) == n_ents


def write_squad(path: Path) -> Path:
    # Three articles; "Panthers" is one character off in the second.
    articles = []
    for number, name in enumerate(["Broncos", "Panthers", "Patriots"], start=1):
        context = f"The {name} won in {1990 + number}."
        answer = {"text": name, "answer_start": 4 + (number == 2)}
        qas = [
            {"id": f"a{number}", "question": "Who won?", "answers": [answer]},
            {"id": f"b{number}", "question": "Who lost?", "answers": [], "is_impossible": True},
        ]
        articles.append({"title": name, "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    return path


def test_squad(tmp_path):
    input_path = write_squad(tmp_path / "squad.json")
    output_path = tmp_path / "test.spacy"
    args = ["convert", "squad", str(input_path), str(output_path), "--articles", "2-3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"Wrote 2 docs with 4 questions (2 answerable, 2 unanswerable) to {output_path}" in (
        " ".join(result.output.split())
    )
    assert "Answers found away from their answer_start: 1;" in result.output
    docs = read_docs(output_path)
    assert [doc.text for doc in docs] == ["The Panthers won in 1992.", "The Patriots won in 1993."]
    assert docs[0]._.questions == {"a2": "Who won?", "b2": "Who lost?"}
    assert docs[0]._.gold_answers == {
        "a2": ({"text": "Panthers", "start": 4, "end": 12},),
        "b2": (),
    }


def test_squad_errors(tmp_path):
    input_path = tmp_path / "squad.json"
    input_path.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "paragraphs": [
                            {
                                "context": "Hi.",
                                "qas": [
                                    {
                                        "id": "q1",
                                        "question": "Who?",
                                        "answers": [{"text": "Bye", "answer_start": 0}],
                                    }
                                ],
                            }
                        ]
                    }
                ]
            }
        )
    )
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "squad", str(input_path), str(output_path)])
    assert result.exit_code == 1
    message = f'{input_path}:article 1, paragraph 1, question q1: answer "Bye" (answer_start 0)'
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output
    assert not output_path.exists()

    result = runner.invoke(
        app, ["convert", "squad", str(input_path), str(output_path), "--articles", "2-1"]
    )
    assert result.exit_code == 2
    assert "expected an article number or a range like '1-38'" in " ".join(
        result.stderr.replace("│", " ").split()
    )


@pytest.mark.parametrize("text,articles", [("1-38", (1, 38)), (" 39-48 ", (39, 48)), ("7", (7, 7))])
def test_parse_articles(text, articles):
    assert parse_articles(text) == articles


@pytest.mark.parametrize("text", ["0-3", "5-4", "1,2", "", "x"])
def test_parse_articles_invalid(text):
    with pytest.raises(typer.BadParameter):
        parse_articles(text)


def test_restaurant8k(tmp_path):
    records = [
        {
            "userInput": {"text": "6 a.m."},
            "labels": [{"slot": "time", "valueSpan": {"endIndex": 6}}],
        },
        {"userInput": {"text": "Hi"}},
    ]
    input_path = tmp_path / "train_0.json"
    input_path.write_text(json.dumps(records))
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "restaurant8k", str(input_path), str(output_path)])
    assert result.exit_code == 0, result.output
    assert "Wrote 2 docs with 10 questions (1 answerable, 9 unanswerable)" in result.output
    assert "Answers per slot: time 1" in result.output
    docs = read_docs(output_path)
    assert docs[0]._.questions["time"] == "What time?"
    assert docs[0]._.gold_answers["time"] == ({"text": "6 a.m.", "start": 0, "end": 6},)
    assert docs[1]._.gold_answers["time"] == ()


def test_restaurant8k_errors_exit_1(tmp_path):
    records = [{"userInput": {"text": "Hi"}, "labels": [{"slot": "peple"}]}]
    input_path = tmp_path / "train_0.json"
    input_path.write_text(json.dumps(records))
    output_path = tmp_path / "train.spacy"
    result = runner.invoke(app, ["convert", "restaurant8k", str(input_path), str(output_path)])
    assert result.exit_code == 1
    assert f"{input_path}:record 1: unknown slot 'peple'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not output_path.exists()


@pytest.mark.slow
def test_convert_real_restaurant8k(tmp_path):
    folder = DATASETS / "restaurant8k"
    if not folder.is_dir():
        pytest.skip(f"no Restaurant-8k data at {folder}")
    for split, n_docs, n_answers in [("train_0", 8198, 7635), ("test", 3731, 3477)]:
        output_path = tmp_path / f"{split}.spacy"
        result = runner.invoke(
            app, ["convert", "restaurant8k", str(folder / f"{split}.json"), str(output_path)]
        )
        assert result.exit_code == 0, result.output
        n_null = 5 * n_docs - n_answers
        assert f"Wrote {n_docs} docs with {5 * n_docs} questions ({n_answers} answerable, " in (
            result.output
        )
        assert f"{n_null} unanswerable)" in result.output
