"""Field helpers every reader shares: files read as UTF-8 text or JSON (and the
records of a JSONL file or a JSON list, with their places), the
fields of a JSON record checked by type, values shown in an error message."""

import json
import re
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

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
    """The file as JSON; a syntax error or a lone surrogate is a ConversionError
    at its line."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConversionError(
            f"{path}:{err.lineno}", f"invalid JSON: {err.msg} (column {err.colno})"
        ) from None
    if lone_surrogate(data) is not None:
        found = [m.start() for m in LONE_SURROGATE_ESCAPES.finditer(text)]
        line = text.count("\n", 0, min(found)) + 1 if found else 1
        check_surrogates(data, f"{path}:{line}")
    return data


# JSON escapes of a surrogate without its pair: a high one not followed by a low
# one, a low one not preceded by a high one.
LONE_SURROGATE_ESCAPES = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def lone_surrogate(value: Any) -> Optional[str]:
    """The first lone surrogate in the strings (keys included) of parsed JSON."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as err:
                return item[err.start]
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def check_surrogates(value: Any, where: str) -> None:
    """Refuse parsed JSON holding a lone surrogate, naming its place."""
    # JSON may escape half of a UTF-16 pair ("\ud800") on its own; Python reads it
    # as a lone surrogate, which is no character: spaCy's tokenizer and .spacy files
    # cannot hold it (a UnicodeEncodeError deep inside spaCy otherwise).
    char = lone_surrogate(value)
    if char is not None:
        raise ConversionError(
            where,
            f"a string holds a lone surrogate \\u{ord(char):04x} (half of a UTF-16 pair "
            "without the other half), which is not a character; fix or drop it",
        )


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
        check_surrogates(record, where)
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
