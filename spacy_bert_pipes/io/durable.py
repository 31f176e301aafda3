"""Durable writes: a file or folder is either its old version or its new one.

The one policy every command that writes results follows (annotate's parts
and outputs, pretrain's checkpoints, encoder and settings): write under a
temporary name beside the target (`NAME.tmp`), fsync what was written, rename
it over the target, and fsync the folder so that the rename survives a power
loss. A process killed at any moment leaves at most a `NAME.tmp` (and, for a
folder, a `NAME.old`) behind, which the next write of the same target
removes.
"""

import os
import shutil
from pathlib import Path
from typing import Any, Callable

TMP_SUFFIX = ".tmp"
OLD_SUFFIX = ".old"


def write_file(path: Path, write: Callable[[Path], Any]) -> None:
    """Write a file atomically: `write` fills a temporary file in the same
    folder, which is fsynced and renamed over `path` (then the folder is
    fsynced, so the rename is durable).

    path (Path): The file to write or replace.
    write (Callable[[Path], Any]): Writes the file's contents to the path it is given.
    """
    tmp = sibling(path, TMP_SUFFIX)
    write(tmp)
    with tmp.open("rb") as file_:
        os.fsync(file_.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """Write a UTF-8 text file atomically (see `write_file`)."""
    write_file(path, lambda tmp: tmp.write_text(text, encoding="utf8"))


def replace_dir(path: Path, write: Callable[[Path], Any]) -> None:
    """Replace a folder atomically: `write` creates and fills `PATH.tmp`
    (a leftover one is removed first); its files and folders are fsynced; the
    old folder is renamed to `PATH.old`, the new one renamed in, and the old
    one deleted. A kill in between leaves `PATH.tmp` and maybe `PATH.old`,
    which the next call removes.

    path (Path): The folder to write or replace.
    write (Callable[[Path], Any]): Creates the folder at the path it is given.
    """
    tmp, old = sibling(path, TMP_SUFFIX), sibling(path, OLD_SUFFIX)
    remove_path(tmp)
    write(tmp)
    fsync_tree(tmp)
    remove_path(old)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    remove_path(old)


def rename(source: Path, target: Path) -> None:
    """Rename a file or folder over `target`, durably (the folder is fsynced)."""
    os.replace(source, target)
    fsync_dir(target.parent)


def fsync_tree(path: Path) -> None:
    """fsync every file below a folder, then each folder (deepest first)."""
    folders = [path]
    for found in sorted(path.rglob("*")):
        if found.is_dir():
            folders.append(found)
        elif found.is_file():
            with found.open("rb") as file_:
                os.fsync(file_.fileno())
    for folder in reversed(folders):
        fsync_dir(folder)


def fsync_dir(path: Path) -> None:
    """fsync a folder, making the renames and new names in it durable."""
    if not hasattr(os, "O_DIRECTORY"):  # Windows cannot open a folder
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_path(path: Path) -> None:
    """Remove a file or a folder, if there is one."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def sibling(path: Path, suffix: str) -> Path:
    """`path` with `suffix` appended to its name: `out.jsonl` -> `out.jsonl.tmp`."""
    return path.with_name(path.name + suffix)
