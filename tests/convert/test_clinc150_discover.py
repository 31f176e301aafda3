"""CLINC150 with intents held out, from a tiny data_full.json written in
tmp_path, by `build_clinc150_discover` and `bert-pipes convert clinc150-discover`."""

import hashlib
import json
from pathlib import Path
from typing import List

import pytest
import spacy
from helpers import write
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.convert import (
    ConversionError,
    build_clinc150_discover,
    held_out_intents,
)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


INTENTS = [f"intent_{i}" for i in range(8)]
N_TRAIN, N_VAL, N_TEST = 5, 2, 3
N_OOS = {"oos_train": 2, "oos_val": 3, "oos_test": 4}
HELD_OUT = 3

runner = CliRunner()


def write_clinc150(path: Path) -> Path:
    """Each text names its split, number and intent ("train 3 of intent_5"),
    the intents interleaved."""
    data = {
        split: [[f"{split} {i} of {intent}", intent] for i in range(n) for intent in INTENTS]
        for split, n in (("train", N_TRAIN), ("val", N_VAL), ("test", N_TEST))
    }
    for split, n in N_OOS.items():
        data[split] = [[f"{split} {i}", "oos"] for i in range(n)]
    return write(path, json.dumps(data))


@pytest.fixture
def data_full(tmp_path: Path) -> Path:
    return write_clinc150(tmp_path / "data_full.json")


def split_of(text: str) -> str:
    return text.split()[0]


def intent_of(text: str) -> str:
    return text.rsplit(" of ", 1)[1] if " of " in text else "oos"


def test_splits(data_full: Path) -> None:
    corpus = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=0)
    held = set(corpus.held_out)
    assert len(held) == HELD_OUT and corpus.held_out == sorted(held)
    assert corpus.labels == [intent for intent in INTENTS if intent not in held]
    known = len(INTENTS) - HELD_OUT
    # train, val and test: the known intents' queries of their split, labelled
    for rows, split in ((corpus.train, "train"), (corpus.val, "val"), (corpus.test, "test")):
        in_scope = [row for row in rows if row.labels]
        assert all(split_of(row.text) == split for row in in_scope)
        assert all(row.labels == (intent_of(row.text),) for row in in_scope)
        assert not {row.labels[0] for row in in_scope} & held
    assert len(corpus.train) == known * N_TRAIN
    assert len(corpus.test) == known * N_TEST
    # val ends with oos_val, without a label
    assert len(corpus.val) == known * N_VAL + N_OOS["oos_val"]
    assert [row.text for row in corpus.val if not row.labels] == [
        f"oos_val {i}" for i in range(N_OOS["oos_val"])
    ]
    assert all(row.labels for row in corpus.val[: known * N_VAL])
    assert corpus.counts() == {
        "train": {"known": known * N_TRAIN, "held_out": 0, "oos": 0},
        "val": {"known": known * N_VAL, "held_out": 0, "oos": N_OOS["oos_val"]},
        "test": {"known": known * N_TEST, "held_out": 0, "oos": 0},
        "traffic": {
            "known": known * N_VAL,
            "held_out": HELD_OUT * N_TRAIN,
            "oos": N_OOS["oos_train"] + N_OOS["oos_val"],
        },
        "test_held_out": {"known": 0, "held_out": HELD_OUT * N_TEST, "oos": 0},
    }


def test_the_traffic_holds_no_test_query(data_full: Path) -> None:
    corpus = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=0)
    held = set(corpus.held_out)
    for query in corpus.traffic:
        assert query.intent == intent_of(query.text)
        kind = split_of(query.text)
        if query.intent in held:
            assert kind == "train"
        elif query.intent == "oos":
            assert kind in ("oos_train", "oos_val")
        else:
            assert kind == "val"
        assert query.source.startswith(f"{data_full}:")
    assert not any(split_of(q.text) in ("test", "oos_test") for q in corpus.traffic)
    # every held-out intent's training queries, shuffled among the rest
    assert sorted(q.text for q in corpus.traffic if q.intent in held) == sorted(
        f"train {i} of {intent}" for i in range(N_TRAIN) for intent in held
    )
    # shuffled: not in the order of the parts
    order = ["train", "val", "oos_train", "oos_val"]
    parts = [order.index(split_of(q.text)) for q in corpus.traffic]
    assert parts != sorted(parts)
    ids = [q.id for q in corpus.traffic]
    assert ids == [f"traffic-{n:02d}" for n in range(len(ids))]
    # the held-out intents' test queries are kept for the loop
    assert [q.id for q in corpus.test_held_out] == [f"test-{n}" for n in range(HELD_OUT * N_TEST)]
    for query in corpus.test_held_out:
        assert split_of(query.text) == "test" and query.intent == intent_of(query.text)
        assert query.intent in held


def test_the_seed_chooses_the_held_out_intents(data_full: Path) -> None:
    def build(seed: int) -> List[str]:
        corpus = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=seed)
        assert corpus.held_out == held_out_intents(INTENTS, HELD_OUT, seed)
        return corpus.held_out

    assert build(0) == build(0)
    assert any(build(seed) != build(0) for seed in (1, 2, 3))
    first = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=0)
    again = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=0)
    assert first.traffic == again.traffic


def test_held_out_intents() -> None:
    # the order the intents come in does not matter, nor repeats
    assert held_out_intents(INTENTS[::-1] + INTENTS, 2, 5) == held_out_intents(INTENTS, 2, 5)
    for n in (0, len(INTENTS)):
        with pytest.raises(ValueError, match=f"hold out between 1 and 7 of the 8 intents, not {n}"):
            held_out_intents(INTENTS, n, 0)


def test_holding_out_every_intent_is_an_error(data_full: Path) -> None:
    with pytest.raises(ConversionError) as err:
        build_clinc150_discover(data_full, held_out=len(INTENTS))
    assert str(err.value) == (
        f"{data_full}: hold out between 1 and 7 of the 8 intents, not 8 (--held-out)"
    )


def test_the_command_writes_the_parts_and_the_manifest(data_full: Path, tmp_path: Path) -> None:
    output = tmp_path / "corpus"
    args = ["convert", "clinc150-discover", str(data_full), str(output)]
    result = runner.invoke(app, [*args, "--held-out", str(HELD_OUT), "--seed", "4"])
    assert result.exit_code == 0, result.output
    known = len(INTENTS) - HELD_OUT
    assert (
        f"Wrote {known * N_VAL + 3} docs (3 out of scope: no positive label) with {known} labels"
        in result.output
    )
    corpus = build_clinc150_discover(data_full, held_out=HELD_OUT, seed=4)
    vocab = spacy.blank("en").vocab
    for split, rows in (("train", corpus.train), ("val", corpus.val), ("test", corpus.test)):
        docs = list(DocBin().from_disk(output / f"{split}.spacy").get_docs(vocab))
        assert [doc.text for doc in docs] == [row.text for row in rows]
        for doc, row in zip(docs, rows):
            assert list(doc.cats) == corpus.labels
            assert [label for label, value in doc.cats.items() if value] == list(row.labels)

    def read(name: str) -> list:
        lines = (output / name).read_text(encoding="utf8").splitlines()
        return [json.loads(line) for line in lines]

    traffic = read("traffic.jsonl")
    assert traffic == [{"id": q.id, "text": q.text} for q in corpus.traffic]
    gold = read("traffic_gold.jsonl")
    assert [(row["id"], row["intent"]) for row in gold] == [
        (q.id, q.intent) for q in corpus.traffic
    ]
    assert read("test_held_out.jsonl") == [
        {"id": q.id, "text": q.text, "intent": q.intent} for q in corpus.test_held_out
    ]
    manifest = json.loads((output / "clinc150_discover.json").read_text())
    assert manifest["seed"] == 4 and manifest["counts"] == corpus.counts()
    assert manifest["held_out_intents"] == corpus.held_out
    assert manifest["known_intents"] == corpus.labels
    assert manifest["source"] == {"path": str(data_full), "sha256": sha256(data_full)}
    assert f"{known} intents known, {HELD_OUT} held out (seed 4)" in result.output


def test_the_command_names_a_bad_row(data_full: Path, tmp_path: Path) -> None:
    data = json.loads(data_full.read_text())
    data["val"][2] = ["no intent"]
    write(data_full, json.dumps(data))
    result = runner.invoke(
        app, ["convert", "clinc150-discover", str(data_full), str(tmp_path / "out")]
    )
    assert result.exit_code == 1
    assert f"{data_full}:val[3]: expected [text, intent]" in result.output
