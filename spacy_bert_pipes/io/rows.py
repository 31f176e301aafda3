"""An input row, and the checks that turn a row's raw values into one.

Every reader (see `readers`) makes its rows with `make_row`: a row that cannot
be annotated (a null text, a bad id, invalid questions...) carries its reason
instead of being dropped, so it can go to the errors file.
"""

import datetime
import decimal
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional


@dataclass(frozen=True)
class InputRow:
    """One input row, as read.

    number (int): Its position among the input rows, from 0 (blank lines are
        not rows).
    id (Optional[str]): Its id; None when it could not be read.
    text (Optional[str]): The text to annotate; None for an error row.
    context (Dict[str, Any]): The `nlp.pipe(..., as_tuples=True)` context: the
        row's own questions as `{"questions": {key: question}}`, or `{}`.
    source (str): Where it was read, e.g. "input.csv:12" (the line where it
        starts), "input.parquet:row 7" (0-based) or "docs/a.txt".
    error (Optional[str]): Why the row cannot be annotated, or None.
    kept (Dict[str, Any]): The values of the columns `annotate --keep-columns`
        carries into its output row, {column: JSON value}, in the order asked.
    """

    number: int
    id: Optional[str]
    text: Optional[str]
    context: Dict[str, Any]
    source: str
    error: Optional[str] = None
    kept: Dict[str, Any] = field(default_factory=dict)


class RowError(Exception):
    """Why one row cannot be annotated (the readers make it an error row)."""


def make_row(
    number: int,
    source: str,
    id_value: Any,
    text_value: Any,
    questions_value: Any = None,
    kept_values: Optional[Dict[str, Any]] = None,
) -> InputRow:
    """A row from its raw values, or an error row saying what is wrong.

    number (int): The row's position among the input rows, from 0.
    source (str): Where it was read (see `InputRow.source`).
    id_value (Any): The raw id: a string or an integer.
    text_value (Any): The raw text: a string, or UTF-8 bytes.
    questions_value (Any): The raw questions: None, "", a JSON object as text
        or bytes, or a dict {key: question}.
    kept_values (Optional[Dict[str, Any]]): The raw values of the kept
        columns, {column: value} (see `as_kept`).
    RETURNS (InputRow): The row.
    """
    try:
        doc_id = as_id(id_value)
    except RowError as err:
        return InputRow(number, None, None, {}, source, str(err))
    try:
        text = as_text(text_value)
        questions = as_questions(questions_value)
        kept = {name: as_kept(value, name) for name, value in (kept_values or {}).items()}
    except RowError as err:
        return InputRow(number, doc_id, None, {}, source, str(err))
    context = {"questions": questions} if questions else {}
    return InputRow(number, doc_id, text, context, source, kept=kept)


def as_id(value: Any) -> str:
    """A raw id as a string; raises `RowError` if it is not one."""
    if value is None:
        raise RowError("id is null")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowError(f"id must be a string or an integer, found {show(value)}")
    doc_id = str(value)
    check_unicode(doc_id, "id")
    return doc_id


def as_optional_id(value: Any) -> Optional[str]:
    """A raw id as a string, or None if it is not one."""
    try:
        return as_id(value)
    except RowError:
        return None


def as_text(value: Any) -> str:
    """A raw text as a string; raises `RowError` if it is not one."""
    if value is None:
        raise RowError("text is null")
    if isinstance(value, bytes):  # a Parquet binary or string column, read as bytes
        try:
            return value.decode("utf8")
        except UnicodeDecodeError as err:
            raise RowError(
                f"invalid UTF-8 in the text at byte {err.start}: {value[err.start : err.end]!r}"
            ) from None
    if not isinstance(value, str):
        raise RowError(f"text must be a string, found {show(value)}")
    check_unicode(value, "text")
    return value


def as_questions(value: Any) -> Dict[str, str]:
    """Raw questions as {key: question} ({} for none); raises `RowError` if
    they are not a JSON object of non-empty strings."""
    if value is None or value == "":
        return {}
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RowError(f"questions are not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise RowError(f"questions must be a JSON object {{key: question}}, found {show(value)}")
    for key, question in value.items():
        if not isinstance(key, str) or not key:
            raise RowError(f"question keys must be non-empty strings, found {key!r}")
        if not isinstance(question, str) or not question.strip():
            raise RowError(f"the question for {key!r} is empty or not a string")
        check_unicode(question, f"the question for {key!r}")
    return dict(value)


def as_kept(value: Any, column: str) -> Any:
    """The raw value of a kept column as a JSON value: strings, numbers,
    booleans, null, lists and objects of them as they are; UTF-8 bytes as a
    string; dates and times as ISO 8601 strings; decimals as strings. Raises
    `RowError` for invalid UTF-8 or a lone surrogate (no output can hold them).
    """
    if isinstance(value, str):
        check_unicode(value, f"column {column!r}")
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf8")
        except UnicodeDecodeError as err:
            raise RowError(
                f"invalid UTF-8 in column {column!r} at byte {err.start}: "
                f"{value[err.start : err.end]!r}"
            ) from None
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, datetime.timedelta)):
        return str(value)
    if isinstance(value, dict):
        return {str(k): as_kept(v, column) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_kept(v, column) for v in value]
    raise RowError(f"column {column!r} holds a {type(value).__name__}, not a JSON value")


def check_unicode(text: str, what: str) -> None:
    """JSON escapes can make lone surrogates, which no output can encode."""
    try:
        text.encode("utf8")
    except UnicodeEncodeError as err:
        raise RowError(
            f"{what} is not valid Unicode: a lone surrogate {text[err.start]!r} "
            f"at character {err.start}"
        ) from None


def show(value: Any) -> str:
    """A value in a message: its type and the start of its JSON."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def names(values: Iterable[str]) -> str:
    """Column or field names in a message."""
    return ", ".join(repr(n) for n in values) or "none"
