import spacy
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

runner = CliRunner()


def test_train_steps_prints_the_spacy_train_options(tmp_path):
    nlp = spacy.blank("en")
    corpus = tmp_path / "train.spacy"
    DocBin(docs=[nlp(f"query {i}") for i in range(100)]).to_disk(corpus)
    result = runner.invoke(app, ["train-steps", str(corpus), "--epochs", "4"])
    assert result.exit_code == 0, result.output
    # stdout holds the options alone, for $(bert-pipes train-steps ...)
    assert result.stdout.strip() == (
        "--training.max_steps 16 --training.eval_frequency 4 "
        "--training.optimizer.learn_rate.warmup_steps 1"
    )
    # what they mean: a line each, short enough for a terminal, ended
    assert result.stderr.splitlines() == [
        f"{corpus}: 100 docs, 4 steps of 32 an epoch",
        "  4 epochs: 16 steps (max_steps)",
        "  the dev set scored every 4 steps, the last included (eval_frequency)",
        "  1 warm-up steps (warmup_steps)",
    ]
    assert result.stderr.endswith("\n") and result.stdout.endswith("\n")
    result = runner.invoke(app, ["train-steps", str(corpus), "--epochs", "1", "--batch-size", "8"])
    assert result.stdout.split()[1::2] == ["13", "13", "1"]


def test_train_steps_errors(tmp_path):
    bad = tmp_path / "train.spacy"
    bad.write_text("not a DocBin")
    result = runner.invoke(app, ["train-steps", str(bad), "--epochs", "4"])
    assert result.exit_code == 1
    assert "train.spacy: not a readable .spacy file" in result.stderr
    result = runner.invoke(app, ["train-steps", str(bad), "--epochs", "0"])
    assert result.exit_code == 2
