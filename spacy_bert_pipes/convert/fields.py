"""Field helpers every reader shares: files read as UTF-8 text or JSON (and the
records of a JSONL file or a JSON list, with their places), the
fields of a JSON record checked by type, values shown in an error message."""

import json
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

from ..io.errors import ConversionError


def read_text(path: Path) -> str:
    """The file as text (UTF-8, a BOM dropped); a bad byte is a ConversionError."""
    # Decode the whole file at once, so a bad byte is reported on its own line.
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        bad = data[err.start : err.end]
        raise ConversionError(f"{path}:{line}", f"not UTF-8: byte {bad!r} ({err.reason})") from None


def load_json(path: Path) -> Any:
    """The file as JSON; a syntax error is a ConversionError at its line."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise ConversionError(
            f"{path}:{err.lineno}", f"invalid JSON: {err.msg} (column {err.colno})"
        ) from None


def json_object(record: Any, where: str) -> Dict[str, Any]:
    """The record, checked to be a JSON object."""
    if not isinstance(record, dict):
        raise ConversionError(where, f"expected a JSON object, found {json_type(record)}")
    return record


def json_text(record: Dict[str, Any], field: str, where: str) -> str:
    """The string in `record[field]`, checked to be there and a string."""
    if field not in record:
        raise ConversionError(where, f"no text field {field!r}; fields: {', '.join(record)}")
    text = record[field]
    if not isinstance(text, str):
        raise ConversionError(where, f"{field!r} must be a string, found {show(text)}")
    return text


def json_type(value: Any) -> str:
    """A JSON value's type, for a message: "an object", "null" ..."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def show(value: Any, limit: int = 60) -> str:
    """A value as JSON, cut to `limit` characters, for a message."""
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def jsonl_records(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """The JSON objects of a JSONL file, each with its place ("path:line");
    blank lines are skipped."""
    # Split on "\n" only: str.splitlines also splits on characters that JSON
    # strings may hold unescaped (e.g. "\u2028"), which would shift line numbers.
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConversionError(where, f"invalid JSON: {err.msg} (column {err.colno})") from None
        yield where, json_object(record, where)


def json_list_records(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """The JSON objects of a file holding a JSON list, each with its place
    ("path:record n", from 1)."""
    records = load_json(path)
    if not isinstance(records, list):
        raise ConversionError(
            f"{path}:1", f"expected a JSON list of records, found {json_type(records)}"
        )
    for number, record in enumerate(records, start=1):
        where = f"{path}:record {number}"
        yield where, json_object(record, where)
