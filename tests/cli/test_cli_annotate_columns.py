"""`bert-pipes annotate --keep-columns` and the columns the help lists."""

import re
from pathlib import Path

import pytest
import torch
from annotate_helpers import read_output, save_tiny_pipeline
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

torch.set_num_threads(1)
runner = CliRunner()


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    return str(save_tiny_pipeline(path, tiny_bert, qa=False))


def write_tickets(path: Path) -> Path:
    path.write_text(
        "ticket_id,customer,text\nt1,ann,my card not working\nt2,bob,\nt3,cy,hello world\n",
        encoding="utf8",
    )
    return path


def test_help_lists_every_output_column() -> None:
    result = runner.invoke(app, ["annotate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for column in ("cats", "entities", "answers", "route", "empty_text", "vector"):
        assert re.search(rf'"{column}"', text), column
    assert "--keep-columns" in text and "--id-column" in text


def test_keep_columns_and_the_id_column_name(pipeline: str, tmp_path: Path) -> None:
    input_path = write_tickets(tmp_path / "tickets.csv")
    output = tmp_path / "out.csv"
    args = ["annotate", pipeline, str(input_path), str(output), "--workers", "1"]
    result = runner.invoke(
        app, [*args, "--id-column", "ticket_id", "--keep-columns", "text, customer"]
    )
    assert result.exit_code == 0, result.output
    header = output.read_text(encoding="utf8").splitlines()[0]
    assert header == "ticket_id,text,customer,cats,entities,route,empty_text"
    rows = read_output(output)
    assert [(r["ticket_id"], r["customer"], r["empty_text"]) for r in rows] == [
        ("t1", "ann", False),
        ("t2", "bob", True),
        ("t3", "cy", False),
    ]


def test_a_missing_kept_column_exits_1_naming_file_and_column(
    pipeline: str, tmp_path: Path
) -> None:
    input_path = write_tickets(tmp_path / "tickets.csv")
    output = tmp_path / "out.jsonl"
    args = ["annotate", pipeline, str(input_path), str(output), "--keep-columns", "text,cust"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert "tickets.csv: no column 'cust' to keep (--keep-columns)" in result.output
    assert "'ticket_id', 'customer', 'text'" in result.output
    assert not output.exists() and not (tmp_path / "out.jsonl.parts").exists()


def test_a_resumed_run_with_other_kept_columns_exits_1(pipeline: str, tmp_path: Path) -> None:
    input_path = write_tickets(tmp_path / "tickets.csv")
    output = tmp_path / "out.jsonl"
    # an unfinished run that kept "text": its parts folder, with its manifest
    from spacy_bert_pipes.annotate import AnnotateOptions, annotate

    class Stop(Exception):
        pass

    def stop(rows: int) -> None:
        raise Stop

    first = AnnotateOptions(chunk_size=1, id_column="ticket_id", keep_columns=("text",))
    with pytest.raises(Stop):
        annotate(pipeline, input_path, output, first, on_chunk=stop)
    args = ["annotate", pipeline, str(input_path), str(output), "--chunk-size", "1"]
    args += ["--id-column", "ticket_id", "--workers", "1"]
    result = runner.invoke(app, [*args, "--keep-columns", "text,customer"])
    assert result.exit_code == 1
    assert 'options.keep_columns: was ["text"], now ["text", "customer"]' in result.output
    result = runner.invoke(app, [*args, "--keep-columns", "text"])
    assert result.exit_code == 0, result.output
    assert "Resuming the unfinished run" in result.output
    assert [list(row)[:2] for row in read_output(output)] == [["ticket_id", "text"]] * 3
