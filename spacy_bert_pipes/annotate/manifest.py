"""The manifest of a run: what its output depends on.

`OUTPUT.parts/manifest.json` records the input's path, size and mtime, the
pipeline (a folder's digest, or a package's version) and the settings that
change results (not batch_size or n_process, nor the engine). A rerun resumes
the committed chunks of an unfinished run only if its manifest is the same;
`check_manifest` says what differs otherwise.
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List

import spacy

from ..io.readers import input_files
from .types import AnnotateError, AnnotateOptions

MANIFEST_NAME = "manifest.json"
# 2: the id column keeps the input's name, "empty_text" is written, the
# columns a pipeline cannot fill are not, and kept columns are: the parts of
# a version 1 run do not join with them.
MANIFEST_VERSION = 2


def make_manifest(
    pipeline: str,
    input_path: Path,
    input_format: str,
    output_format: str,
    options: AnnotateOptions,
) -> Dict[str, Any]:
    """What the output depends on: the input's identity and the settings that
    change results (not batch_size or n_process).

    pipeline (str): The pipeline's folder or package name.
    input_path (Path): The input file or folder.
    input_format (str): Its format.
    output_format (str): The output's format.
    options (AnnotateOptions): The settings.
    RETURNS (Dict[str, Any]): The manifest, as JSON data.
    """
    if input_path.is_dir():
        stats = [path.stat() for path in input_files(input_path, input_format)]
        input_id: Dict[str, Any] = {
            "files": len(stats),
            "size": sum(s.st_size for s in stats),
            "mtime_ns": max(s.st_mtime_ns for s in stats),
        }
    else:
        stat = input_path.stat()
        input_id = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {
        "version": MANIFEST_VERSION,
        "input": {"path": str(input_path.resolve()), "format": input_format, **input_id},
        "pipeline": pipeline_id(pipeline),
        "options": {
            "text_column": options.text_column,
            "id_column": options.id_column,
            "questions": options.questions,
            "questions_column": options.questions_column,
            "keep_columns": list(options.keep_columns),
            "chunk_size": options.chunk_size,
            "max_length": options.max_length,
            "precision": options.precision,
            # only when set: manifests of runs without it stay the same
            **({"reproducible": True} if options.reproducible else {}),
            "output_format": output_format,
            # None without --vectors: the same as a manifest written before vectors.
            "vectors": options.vectors_dtype if options.vectors else None,
        },
    }


def pipeline_id(pipeline: str) -> Dict[str, Any]:
    """A folder's path and a digest of its files' sizes and mtimes (a retrained
    pipeline differs), or a package's name and version."""
    path = Path(pipeline)
    if not path.exists():
        return {"package": pipeline, "version": spacy.util.get_package_version(pipeline)}
    files = sorted(p for p in path.rglob("*") if p.is_file())
    listing = [
        (p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    ]
    digest = hashlib.sha256(json.dumps(listing).encode("utf8")).hexdigest()
    return {"path": str(path.resolve()), "files_digest": digest}


def manifest_text(manifest: Dict[str, Any]) -> str:
    """The manifest file's contents."""
    return json.dumps(manifest, indent=2) + "\n"


def check_manifest(parts_dir: Path, expected: Dict[str, Any]) -> None:
    """Raise an `AnnotateError` unless `parts_dir`'s manifest is `expected`,
    listing what differs.

    parts_dir (Path): `OUTPUT.parts`, holding a manifest.
    expected (Dict[str, Any]): The manifest of this run.
    """
    manifest_path = parts_dir / MANIFEST_NAME
    try:
        found = json.loads(manifest_path.read_text(encoding="utf8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AnnotateError(f"{manifest_path}: unreadable ({err}); pass --overwrite") from None
    found_differences = differences(found, expected)
    if found_differences:
        raise AnnotateError(
            f"{parts_dir} holds an unfinished run with other settings or input:\n  "
            + "\n  ".join(found_differences)
            + "\nRerun with the same input and settings to resume it, or pass "
            "--overwrite to discard it and start over."
        )


def differences(found: Any, expected: Any, prefix: str = "") -> List[str]:
    """The differences between two JSON values, one "key.path: was X, now Y" each."""
    if isinstance(found, dict) and isinstance(expected, dict):
        out = []
        for key in sorted(set(found) | set(expected), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            out.extend(differences(found.get(key), expected.get(key), name))
        return out
    if found != expected:
        return [f"{prefix}: was {json.dumps(found)}, now {json.dumps(expected)}"]
    return []
