"""Durable writes (spacy_bert_pipes.io.durable): the target is either its old
version or its new one, and what a kill leaves behind is cleaned up."""

from pathlib import Path

import pytest

from spacy_bert_pipes.io import durable


class Killed(Exception):
    pass


def test_write_file_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    durable.write_text(path, "old\n")
    durable.write_file(path, lambda tmp: tmp.write_bytes(b"new\n"))
    assert path.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    durable.write_text(path, "old\n")

    def half_write(tmp: Path) -> None:
        tmp.write_text("ha")
        raise Killed

    with pytest.raises(Killed):
        durable.write_file(path, half_write)
    assert path.read_text() == "old\n"


def test_replace_dir_swaps_the_folder_and_clears_leftovers(tmp_path: Path) -> None:
    path = tmp_path / "encoder"
    (tmp_path / "encoder.tmp").mkdir()  # a kill while writing
    (tmp_path / "encoder.tmp" / "half").write_text("x")
    (tmp_path / "encoder.old").mkdir()  # a kill while swapping

    def write(version: str) -> None:
        def fill(tmp: Path) -> None:
            (tmp / "sub").mkdir(parents=True)
            (tmp / "sub" / "weights").write_text(version)

        durable.replace_dir(path, fill)

    write("1")
    write("2")
    assert (path / "sub" / "weights").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder"]
    assert sorted(p.name for p in path.rglob("*")) == ["sub", "weights"]
