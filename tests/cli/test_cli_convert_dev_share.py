"""`bert-pipes convert textcat --dev-share`: a seeded, stratified dev file
beside OUTPUT, its report and warnings, and the errors of bad values."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

runner = CliRunner()


def read_docs(path: Path) -> List[Doc]:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


def write_tickets(path: Path, n_per_label: int = 30) -> Path:
    """Three labels of `n_per_label` rows, a label of one row and 10 rows
    with an empty label (out of scope with --empty-oos), interleaved."""
    rows: List[Dict[str, Any]] = []
    for i in range(n_per_label):
        rows += [{"text": f"{label} ticket {i}", "label": label} for label in ("bill", "hw", "sw")]
        if i < 10:
            rows.append({"text": f"weather {i}", "label": ""})
    rows.append({"text": "the only rare one", "label": "rare"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def convert(*args: Any) -> Any:
    return runner.invoke(app, ["convert", "textcat", *map(str, args)])


def test_dev_share_writes_a_stratified_dev_file_beside_output(tmp_path: Path) -> None:
    input_path = write_tickets(tmp_path / "tickets.jsonl")
    output = tmp_path / "corpus" / "tickets.spacy"
    result = convert(input_path, output, "--empty-oos", "--dev-share", "0.2")
    assert result.exit_code == 0, result.output
    dev_path = tmp_path / "corpus" / "tickets_dev.spacy"
    assert f"Wrote 81 docs (8 out of scope: no positive label) with 4 labels to {output}" in (
        result.output
    )
    assert f"Wrote 20 docs (2 out of scope: no positive label) with 4 labels to {dev_path}" in (
        result.output
    )
    assert "Dev split: 20 of 101 docs (share 0.2 of each label, seed 0)" in result.output
    assert "1 of 4 labels has too few docs to spare one for dev" in result.output
    assert "'rare'" in result.output
    train, dev = read_docs(output), read_docs(dev_path)
    # every doc in one file or the other, none twice; both know every label
    texts = [json.loads(line)["text"] for line in input_path.read_text().splitlines()]
    assert sorted(doc.text for doc in train + dev) == sorted(texts)
    assert all(set(doc.cats) == {"bill", "hw", "rare", "sw"} for doc in train + dev)
    for label in ("bill", "hw", "sw"):
        assert sum(doc.cats[label] for doc in dev) == 6
    assert sum(doc.cats["rare"] for doc in train) == 1
    assert sum(1 for doc in dev if not any(doc.cats.values())) == 2
    # file order is kept in each
    assert [d.text for d in train] == [t for t in texts if t in {d.text for d in train}]


def test_the_seed_decides_and_dev_output_names_the_file(tmp_path: Path) -> None:
    input_path = write_tickets(tmp_path / "tickets.csv.jsonl")
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        dev_path = tmp_path / f"dev_{name}.spacy"
        result = convert(
            input_path,
            tmp_path / f"{name}.spacy",
            "--empty-oos",
            "--dev-share",
            "0.1",
            "--seed",
            seed,
            "--dev-output",
            dev_path,
        )
        assert result.exit_code == 0, result.output
        runs[name] = [doc.text for doc in read_docs(dev_path)]
    assert runs["a"] == runs["b"] != runs["c"]
    assert len(runs["a"]) == len(runs["c"]) == 3 * 3 + 1


def test_without_out_of_scope_rows_a_note_says_what_threshold_lacks(tmp_path: Path) -> None:
    input_path = tmp_path / "train.csv"
    input_path.write_text("text,label\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(20)))
    result = convert(input_path, tmp_path / "train.spacy", "--dev-share", "0.2")
    assert result.exit_code == 0, result.output
    assert "the dev split has no out-of-scope docs" in result.output
    result = convert(input_path, tmp_path / "multi.spacy", "--dev-share", "0.2", "--multilabel")
    assert "out-of-scope" not in result.output  # no routing, no threshold


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--dev-share", "0"], "--dev-share: the dev share must be between 0 and 1"),
        (["--dev-share", "1"], "--dev-share: the dev share must be between 0 and 1"),
        (["--dev-share", "-0.2"], "got -0.2"),
        (["--dev-output", "dev.spacy"], "--dev-output names the dev file of --dev-share"),
        (["--dev-share", "0.2", "--dev-output", "{output}"], "is OUTPUT: name another file"),
        (["--dev-share", "0.01"], "puts no row in dev: each label has too few rows"),
    ],
)
def test_bad_dev_values_exit_1_writing_nothing(
    tmp_path: Path, extra: List[str], message: str
) -> None:
    input_path = write_tickets(tmp_path / "tickets.jsonl", n_per_label=5)
    output = tmp_path / "out" / "train.spacy"
    extra = [value.format(output=output) for value in extra]
    result = convert(input_path, output, "--empty-oos", *extra)
    assert result.exit_code == 1
    assert message in result.output
    assert not output.parent.exists()
