"""A file's sha256: what a record names a source or a dev file by."""

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """The file's sha256, in hex, read in blocks of 1 MiB."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
