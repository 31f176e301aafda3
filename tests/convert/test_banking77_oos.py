"""BANKING77-OOS rebuilt from a tiny Banking77 and CLINC150 written in tmp_path,
by `build_banking77_oos` and by `bert-pipes convert banking77-oos`."""

import hashlib
import json
from pathlib import Path
from typing import List, Optional

import pytest
import spacy
from helpers import DATASETS, write
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.convert import (
    ConversionError,
    build_banking77_oos,
    read_intent_list,
    rows_to_docs,
)
from spacy_bert_pipes.convert.banking77_oos import KINDS, SPLITS


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


INTENTS = ["card_arrival", "card_linking", "exchange_rate", "pin_blocked", "top_up_limits"]
HELD_OUT = ["pin_blocked", "exchange_rate"]
IN_SCOPE = ["card_arrival", "card_linking", "top_up_limits"]
N_TRAIN, N_TEST = 6, 2

runner = CliRunner()


def write_banking77(folder: Path, held_out: Optional[List[str]] = None) -> Path:
    """N_TRAIN training and N_TEST test queries per intent, each text naming its
    intent and split, and the held-out intents in id_oos_intents.txt."""
    folder.mkdir(exist_ok=True)
    write(folder / "categories.json", json.dumps(INTENTS))
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        lines = ["text,category"]
        # intents interleaved, as a real file need not group them
        lines += [f"{split} {i} of {intent},{intent}" for i in range(n) for intent in INTENTS]
        write(folder / f"{split}.csv", "\n".join(lines) + "\n")
    write(folder / "id_oos_intents.txt", "\n".join(held_out or HELD_OUT) + "\n")
    return folder


def write_clinc150(path: Path) -> Path:
    data = {
        "train": [["set an alarm", "alarm"]],
        "val": [["wake me at 7", "alarm"]],
        "test": [["alarm at 9", "alarm"]],
        "oos_train": [["how tall is a giraffe", "oos"]],
        "oos_val": [[f"oos val {i}", "oos"] for i in range(3)],
        "oos_test": [[f"oos test {i}", "oos"] for i in range(4)],
    }
    return write(path, json.dumps(data))


@pytest.fixture
def sources(tmp_path):
    return write_banking77(tmp_path / "banking77"), write_clinc150(tmp_path / "data_full.json")


def intent_of(text: str) -> str:
    return text.rsplit(" of ", 1)[1]


def test_splits_and_counts(sources):
    corpus = build_banking77_oos(*sources, val_per_intent=2, seed=0)
    assert corpus.labels == IN_SCOPE  # categories.json order
    assert corpus.id_oos_intents == HELD_OUT  # file order
    assert corpus.counts() == {
        "train": {"in_scope": 3 * (N_TRAIN - 2), "id_oos": 0, "ood_oos": 0},
        "val": {"in_scope": 3 * 2, "id_oos": 2 * 2, "ood_oos": 3},
        "test_id": {"in_scope": 3 * N_TEST, "id_oos": 2 * N_TEST, "ood_oos": 0},
        "test_ood": {"in_scope": 3 * N_TEST, "id_oos": 0, "ood_oos": 4},
        "test": {"in_scope": 3 * N_TEST, "id_oos": 2 * N_TEST, "ood_oos": 4},
    }
    assert corpus.unused_id_oos == 2 * (N_TRAIN - 2)
    # a split is its kinds in order: in scope, ID-OOS, OOD-OOS
    test = corpus.rows("test")
    assert [row.text for row in test] == [
        row.text for kind in KINDS for row in corpus.splits["test"][kind]
    ]
    assert test[-1].text == "oos test 3"


def test_no_held_out_query_in_train_and_none_labelled_out_of_scope(sources):
    corpus = build_banking77_oos(*sources, val_per_intent=2, seed=0)
    train = corpus.rows("train")
    assert {intent_of(row.text) for row in train} == set(IN_SCOPE)
    assert all(row.labels == (intent_of(row.text),) for row in train)
    for split in SPLITS:
        for row in corpus.splits[split]["in_scope"]:
            assert row.labels == (intent_of(row.text),) and row.labels[0] in IN_SCOPE
        for row in corpus.splits[split]["id_oos"]:
            assert intent_of(row.text) in HELD_OUT and row.labels == ()
        for row in corpus.splits[split]["ood_oos"]:
            assert row.text.startswith("oos ") and row.labels == ()
    # val is drawn from the training split, test from the test split
    val = corpus.rows("val")
    assert all(row.text.startswith("train ") for row in val[:-3])
    assert all(row.text.startswith("test ") for row in corpus.rows("test_id"))
    assert not {row.text for row in train} & {row.text for row in val}


def test_out_of_scope_docs_have_no_positive_label(sources, nlp):
    corpus = build_banking77_oos(*sources, val_per_intent=2, seed=0)
    for split in ("val", "test"):
        docs = list(
            rows_to_docs(nlp, corpus.rows(split), corpus.labels, exclusive=True, unlabelled=True)
        )
        for doc in docs:
            assert list(doc.cats) == IN_SCOPE
            in_scope = " of " in doc.text and intent_of(doc.text) in IN_SCOPE
            assert sum(doc.cats.values()) == (1.0 if in_scope else 0.0), doc.text


def test_the_same_seed_draws_the_same_val(sources):
    def val(seed: int) -> List[str]:
        corpus = build_banking77_oos(*sources, val_per_intent=2, seed=seed)
        return [row.text for row in corpus.rows("val")]

    assert val(0) == val(0)
    assert val(0) != val(1)


def test_an_intents_val_sample_does_not_depend_on_the_others(tmp_path):
    clinc150 = write_clinc150(tmp_path / "data_full.json")
    # each intent draws from its own generator: holding out one more intent
    # leaves the others' samples as they were
    first = build_banking77_oos(write_banking77(tmp_path / "a"), clinc150, val_per_intent=3)
    second = build_banking77_oos(
        write_banking77(tmp_path / "b", HELD_OUT + ["card_linking"]), clinc150, val_per_intent=3
    )
    for corpus in (first, second):
        assert len(corpus.rows("val")) == 5 * 3 + 3

    def sample(corpus, intent):
        return [
            row.text
            for row in corpus.rows("val")
            if " of " in row.text and intent_of(row.text) == intent
        ]

    for intent in INTENTS:
        assert sample(first, intent) == sample(second, intent), intent


def test_the_intents_file_is_an_option(sources, tmp_path):
    banking77, clinc150 = sources
    other = write(tmp_path / "held_out.txt", "top_up_limits\n")
    corpus = build_banking77_oos(banking77, clinc150, id_oos_intents=other, val_per_intent=1)
    assert corpus.id_oos_intents == ["top_up_limits"]
    assert len(corpus.labels) == 4
    assert corpus.sources["id_oos_intents"] == other


def test_manifest(sources):
    corpus = build_banking77_oos(*sources, val_per_intent=2, seed=7)
    manifest = json.loads(json.dumps(corpus.manifest()))
    assert manifest["seed"] == 7 and manifest["val_per_intent"] == 2
    assert manifest["counts"] == corpus.counts()
    assert manifest["in_scope_intents"] == IN_SCOPE
    assert manifest["id_oos_intents"] == HELD_OUT
    banking77, clinc150 = sources
    assert manifest["sources"]["clinc150"] == {"path": str(clinc150), "sha256": sha256(clinc150)}
    held_out = banking77 / "id_oos_intents.txt"
    assert manifest["sources"]["id_oos_intents"]["sha256"] == sha256(held_out)
    assert set(manifest["sources"]) == {
        "banking77_train",
        "banking77_test",
        "banking77_categories",
        "id_oos_intents",
        "clinc150",
    }


def test_read_intent_list(tmp_path):
    path = write(tmp_path / "ids.txt", "\n pin_blocked \n\nexchange_rate")
    assert read_intent_list(path, INTENTS) == ["pin_blocked", "exchange_rate"]


@pytest.mark.parametrize(
    "text,line,message",
    [
        (
            "pin_blocked\n\nexchange_rates\n",
            3,
            "unknown intent 'exchange_rates': not one of the 5 known intents; "
            "did you mean 'exchange_rate'?",
        ),
        ("pin_blocked\nwifi\n", 2, "unknown intent 'wifi': not one of the 5 known intents"),
        ("pin_blocked\nexchange_rate\npin_blocked\n", 3, "intent 'pin_blocked' repeats line 1"),
    ],
)
def test_a_bad_intent_is_named_with_its_line(tmp_path, text, line, message):
    path = write(tmp_path / "ids.txt", text)
    with pytest.raises(ConversionError) as err:
        read_intent_list(path, INTENTS)
    assert str(err.value) == f"{path}:{line}: {message}"


def test_an_unknown_held_out_intent_stops_the_build(sources):
    banking77, clinc150 = sources
    write(banking77 / "id_oos_intents.txt", "pin_blocked\ncard_arival\n")
    with pytest.raises(
        ConversionError, match=r"id_oos_intents.txt:2: unknown intent 'card_arival'"
    ):
        build_banking77_oos(banking77, clinc150)


@pytest.mark.parametrize(
    "held_out,message",
    [
        ("", "no intent names: expected one a line"),
        ("\n".join(INTENTS), "every intent is held out: none is left in scope"),
    ],
)
def test_an_empty_or_full_intents_file(sources, held_out, message):
    banking77, clinc150 = sources
    write(banking77 / "id_oos_intents.txt", held_out)
    with pytest.raises(ConversionError, match=message):
        build_banking77_oos(banking77, clinc150)


def test_too_few_training_queries_for_val(sources):
    # an in-scope intent keeps one query to train on; a held-out one needs none
    build_banking77_oos(*sources, val_per_intent=N_TRAIN - 1)
    with pytest.raises(ConversionError) as err:
        build_banking77_oos(*sources, val_per_intent=N_TRAIN)
    assert "train.csv: the in-scope intent 'card_arrival' has 6 training queries" in str(err.value)
    assert "lower --val-per-intent" in str(err.value)


def test_a_category_outside_categories_json(sources):
    banking77, clinc150 = sources
    train = banking77 / "train.csv"
    write(train, train.read_text() + "one more,card_arival\n")
    with pytest.raises(ConversionError) as err:
        build_banking77_oos(banking77, clinc150)
    line = 1 + 5 * N_TRAIN + 1
    assert str(err.value).startswith(f"{train}:{line}: category 'card_arival' is not one of the 5")
    assert "did you mean 'card_arrival'?" in str(err.value)


def read_docs(path: Path) -> List[Doc]:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


def test_the_command_writes_each_split_and_the_manifest(sources, tmp_path):
    banking77, clinc150 = sources
    output = tmp_path / "corpus"
    args = ["convert", "banking77-oos", str(banking77), str(clinc150), str(output)]
    result = runner.invoke(app, [*args, "--val-per-intent", "2", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert (
        f"Wrote 13 docs (7 out of scope: no positive label) with 3 labels to {output / 'val.spacy'}"
        in result.output
    )
    assert "6 in scope, 4 ID-OOS, 3 OOD-OOS" in result.output
    manifest = json.loads((output / "banking77_oos.json").read_text())
    assert manifest["seed"] == 3 and manifest["val_per_intent"] == 2
    for split in SPLITS:
        docs = read_docs(output / f"{split}.spacy")
        counts = manifest["counts"][split]
        assert len(docs) == sum(counts.values())
        assert all(list(doc.cats) == IN_SCOPE for doc in docs)
        positive = [doc for doc in docs if sum(doc.cats.values()) == 1.0]
        assert len(positive) == counts["in_scope"]
        assert all(doc.cats[intent_of(doc.text)] == 1.0 for doc in positive)
    # the same seed writes the same files
    again = tmp_path / "again"
    result = runner.invoke(app, [*args[:-1], str(again), "--val-per-intent", "2", "--seed", "3"])
    assert result.exit_code == 0, result.output
    for split in SPLITS:
        assert (again / f"{split}.spacy").read_bytes() == (output / f"{split}.spacy").read_bytes()


def test_the_command_names_a_bad_intent_and_its_line(sources, tmp_path):
    banking77, clinc150 = sources
    other = write(tmp_path / "held_out.txt", "pin_blocked\ntop_up_limit\n")
    args = ["convert", "banking77-oos", str(banking77), str(clinc150), str(tmp_path / "out")]
    result = runner.invoke(app, [*args, "--id-oos-intents", str(other)])
    assert result.exit_code == 1
    assert f"{other}:2: unknown intent 'top_up_limit'" in result.output
    assert "did you mean 'top_up_limits'?" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_real_corpus_has_the_papers_sizes(tmp_path):
    if not DATASETS.is_dir():
        pytest.skip(f"no shared datasets at {DATASETS}")
    args = ["convert", "banking77-oos", str(DATASETS / "banking77")]
    args += [str(DATASETS / "clinc150" / "data_full.json"), str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    counts = json.loads((tmp_path / "banking77_oos.json").read_text())["counts"]
    # Zhang et al.: train 5,905, val 1,506 in scope; test 2,000, 1,080 ID-OOS, 1,000 OOD-OOS
    assert counts["train"]["in_scope"] == 5911
    assert counts["val"] == {"in_scope": 1500, "id_oos": 810, "ood_oos": 100}
    assert counts["test"] == {"in_scope": 2000, "id_oos": 1080, "ood_oos": 1000}
    assert len(read_docs(tmp_path / "test.spacy")) == 4080
