"""Bring the project's assets into place, checked by sha256.

For each asset declared in project.yml: keep it if it is already there with the
right sha256; else copy it from the shared datasets folder (offline machines
have one at ../shared/datasets); else download it from its upstream URL (an
asset without one is only in the shared folder).
A checksum mismatch is an error naming the file.

    python scripts/fetch_assets.py [--shared ../shared/datasets] [--only banking77]
"""

import hashlib
import shutil
import urllib.request
from pathlib import Path
from typing import List, Optional

import srsly
import typer


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file_:
        for block in iter(lambda: file_.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(
    project: Path = typer.Option(Path("project.yml"), help="The project file"),
    shared: Path = typer.Option(Path("../shared/datasets"), help="Offline copy of the datasets"),
    only: Optional[List[str]] = typer.Option(None, help="Only assets whose dest contains this"),
) -> None:
    assets = srsly.read_yaml(project)["assets"]
    for asset in assets:
        dest = Path(asset["dest"])
        if only and not any(o in str(dest) for o in only):
            continue
        expected = asset["sha256"]
        if dest.exists() and sha256(dest) == expected:
            typer.echo(f"ok      {dest}")
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        local = shared / asset["shared"]
        if local.exists():
            shutil.copyfile(local, dest)
            how = f"copied from {local}"
        elif "url" not in asset:  # no upstream file of its own (id_oos_intents.txt)
            raise SystemExit(f"{dest}: no upstream URL in {project}; copy it from {local}")
        else:
            typer.echo(f"fetch   {asset['url']}")
            with urllib.request.urlopen(asset["url"], timeout=60) as response:
                dest.write_bytes(response.read())
            how = "downloaded"
        actual = sha256(dest)
        if actual != expected:
            dest.unlink()
            raise SystemExit(
                f"{dest}: sha256 {actual} does not match {expected} declared in {project}"
            )
        typer.echo(f"{how:8s}{dest}" if how == "downloaded" else f"copied  {dest}")


if __name__ == "__main__":
    typer.run(main)
