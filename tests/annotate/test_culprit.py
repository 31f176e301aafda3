"""`bert-pipes annotate` names the culprit of a misplaced OUTPUT or a bad
option in one line, exit 1, before the pipeline loads: these runs name a
pipeline that does not exist, so a message about the output proves the
pipeline was never loaded."""

import os
from pathlib import Path
from typing import List

import pytest
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

runner = CliRunner()


def fails_with(tmp_path: Path, args: List[str], *expected: str) -> None:
    pipeline = str(tmp_path / "no_such_pipeline")
    result = runner.invoke(app, ["annotate", pipeline, *args])
    assert result.exit_code == 1, result.output
    message = result.output.strip()
    assert "\n" not in message and "Traceback" not in message, message
    assert "no_such_pipeline" not in message, message
    for text in expected:
        assert text in message, message
    assert not list(tmp_path.glob("**/*.parts")) and not list(tmp_path.glob("**/*.lock"))


@pytest.fixture
def input_path(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "hello"}\n', encoding="utf8")
    return path


def test_output_under_a_regular_file(tmp_path: Path, input_path: Path) -> None:
    (tmp_path / "file.txt").write_text("not a folder")
    output = tmp_path / "file.txt" / "sub" / "out.jsonl"
    fails_with(
        tmp_path,
        [str(input_path), str(output)],
        f"{output}: cannot create the output's folder: {tmp_path / 'file.txt'} is a file",
    )


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: a read-only one, or for root
    (who writes anywhere) sysfs."""
    if os.geteuid() != 0:
        folder = tmp_path / "read_only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    if not os.access("/sys", os.F_OK) or os.path.ismount("/sys") is False:
        pytest.skip("running as root without sysfs: no unwritable folder")
    return Path("/sys")


def test_output_in_a_folder_that_cannot_be_written(tmp_path: Path, input_path: Path) -> None:
    folder = unwritable_folder(tmp_path)
    output = folder / "out.jsonl"
    try:
        fails_with(tmp_path, [str(input_path), str(output)], f"{output}: cannot write in {folder}")
    finally:
        if folder.parent == tmp_path:
            folder.chmod(0o755)


def test_output_equal_to_the_input(tmp_path: Path, input_path: Path) -> None:
    fails_with(
        tmp_path,
        [str(input_path), str(input_path)],
        f"{input_path}: the output would overwrite the input",
    )


def test_output_inside_the_input_folder_and_input_inside_the_output(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("hello")
    fails_with(
        tmp_path,
        [str(docs), str(docs / "out.jsonl")],
        "the output would be written inside the input folder",
    )
    fails_with(
        tmp_path,
        [str(docs / "a.txt"), str(docs), "--input-format", "txt"],
        f"{docs}: the output folder would replace the input",
    )


def test_errors_file_lock_and_parts_in_the_way(tmp_path: Path, input_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    errors = tmp_path / "out.jsonl.errors.jsonl"
    errors.mkdir()
    fails_with(
        tmp_path,
        [str(input_path), str(output)],
        f"{errors}: is a folder, where the run writes its errors file",
    )
    errors.rmdir()
    timing = tmp_path / "out_time.json"
    timing.mkdir()
    fails_with(
        tmp_path,
        [str(input_path), str(output)],
        f"{timing}: is a folder, where the run writes its timing file",
    )
    timing.rmdir()
    (tmp_path / "out.jsonl.parts").write_text("a file")
    result = runner.invoke(app, ["annotate", "x", str(input_path), str(output)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"{tmp_path / 'out.jsonl.parts'}: is a file, where the run keeps its parts folder"
    )


def test_output_of_the_wrong_kind(tmp_path: Path, input_path: Path) -> None:
    (tmp_path / "shards").write_text("a file")
    fails_with(
        tmp_path,
        [str(input_path), str(tmp_path / "shards")],
        f"{tmp_path / 'shards'}: is a file; a path without a suffix is a folder",
    )


def test_bad_option_combinations(tmp_path: Path, input_path: Path) -> None:
    output = str(tmp_path / "out.jsonl")
    fails_with(
        tmp_path,
        [str(input_path), output, "--ray-workers", "3", "--ray-address", "auto"],
        "--ray-address, --ray-workers: for --engine ray only",
    )
    fails_with(
        tmp_path,
        [str(input_path), output, "--engine", "ray", "--gpu-id", "0"],
        "--gpu-id, --n-process and --workers are for the local engine",
    )
