"""Read labelled text classification data into spaCy Docs and `.spacy` files.

The readers yield `TextcatRow`s, `rows_to_docs` turns them into Docs with a
score in `doc.cats` for every label, and `write_docbin` saves them. Every
problem with the data raises a `ConversionError` whose message starts with
the place it was found, `"{path}:{line}: "` (`"{path}:record {n}: "` for a
JSON list), so no row is ever dropped or guessed at silently.
"""

import csv
import difflib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc, DocBin

# Label fields found without `label_column`: one label, or several.
AUTO_LABEL_COLUMNS = ("label", "labels")
# Separates several labels in one CSV cell.
CSV_LABEL_SEPARATOR = "|"
NLUPLUSPLUS_DOMAINS = ("banking", "general")


class ConversionError(ValueError):
    """A problem with the input data, located by file and line (or record)."""

    def __init__(self, location: str, message: str) -> None:
        """Initialize the error.

        location (str): Where the problem is, e.g. "train.csv:12" or
            "fold0.json:record 3"; a bare path for a whole-file problem.
        message (str): What is wrong, naming the offending value.
        """
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}")


@dataclass(frozen=True)
class TextcatRow:
    """One labelled text as read from a file.

    text (str): The document text; may be empty.
    labels (Tuple[str, ...]): The gold labels, in file order; empty means none.
    source (str): Where the row was read, e.g. "train.csv:12".
    """

    text: str
    labels: Tuple[str, ...]
    source: str


def read_textcat_rows(
    path: Path, *, text_column: str = "text", label_column: Optional[str] = None
) -> Iterator[TextcatRow]:
    """Read labelled texts from a `.csv` file (with a header row) or a `.jsonl`
    file (one JSON object per line). Blank lines are skipped; every other line
    is a row or an error.

    A CSV label cell holds one label or several separated by "|". A JSONL label
    field is a string (one label) or a list of strings (an empty list means no
    labels). An empty text is a valid document; a missing or null text, or a
    missing or empty label, is an error.

    path (Path): The file to read, UTF-8 encoded.
    text_column (str): The column or field holding the text.
    label_column (Optional[str]): The column or field holding the labels.
        Defaults to "label" or "labels", whichever the data has.
    YIELDS (TextcatRow): The rows, in file order.
    """
    path = Path(path)
    if path.suffix == ".csv":
        yield from _read_csv(path, text_column, label_column)
    elif path.suffix == ".jsonl":
        yield from _read_jsonl(path, text_column, label_column)
    else:
        raise ConversionError(
            str(path), f"unsupported file type {path.suffix!r}: expected .csv or .jsonl"
        )


def read_nluplusplus(folder: Path, folds: Sequence[int]) -> Iterator[TextcatRow]:
    """Read NLU++ fold files (`fold{N}.json`, each a JSON list of records with
    "text", an optional "intents" list and "slots"). A record without
    "intents" has no intent, which is valid multi-label data: its labels are
    an empty tuple. Slots are not read.

    folder (Path): The domain folder, e.g. "nluplusplus/banking".
    folds (Sequence[int]): The fold numbers to read, in order.
    YIELDS (TextcatRow): The rows, with sources like "fold3.json:record 7".
    """
    folder = Path(folder)
    for fold in folds:
        path = folder / f"fold{fold}.json"
        if not path.is_file():
            found = sorted(p.name for p in folder.glob("fold*.json"))
            raise ConversionError(
                str(path), f"no such fold file; {folder} has: {', '.join(found) or 'none'}"
            )
        records = _load_json(path)
        if not isinstance(records, list):
            raise ConversionError(
                f"{path}:1", f"expected a JSON list of records, found {_json_type(records)}"
            )
        for number, record in enumerate(records, start=1):
            where = f"{path}:record {number}"
            record = _json_object(record, where)
            text = _json_text(record, "text", where)
            if "intents" in record:
                labels = _json_labels(record["intents"], "intents", where)
            else:
                labels = ()
            yield TextcatRow(text=text, labels=labels, source=where)


def nluplusplus_labels(
    folder_or_ontology: Path, *, domains: Sequence[str] = NLUPLUSPLUS_DOMAINS
) -> List[str]:
    """Read the NLU++ intent labels of some domains from `ontology.json`.

    In the ontology, "intents" maps each intent to a record whose "domain"
    lists the domains it belongs to: "general" intents (affirm, greet, ...)
    belong to every domain's label set.

    folder_or_ontology (Path): The `ontology.json` file, or a folder holding
        it, or a fold folder whose parent holds it.
    domains (Sequence[str]): Keep the intents of any of these domains.
    RETURNS (List[str]): The intents, sorted.
    """
    path = _find_ontology(Path(folder_or_ontology))
    ontology = _load_json(path)
    intents = ontology.get("intents") if isinstance(ontology, dict) else None
    if not isinstance(intents, dict):
        raise ConversionError(str(path), 'expected an object with an "intents" object')
    labels = []
    for intent, info in intents.items():
        intent_domains = info.get("domain") if isinstance(info, dict) else None
        if not isinstance(intent_domains, list):
            raise ConversionError(
                str(path), f'intent {intent!r}: expected a "domain" list, found {_show(info)}'
            )
        if set(intent_domains) & set(domains):
            labels.append(intent)
    if not labels:
        raise ConversionError(str(path), f"no intents in the domains {list(domains)}")
    return sorted(labels)


def read_labels_file(path: Path) -> List[str]:
    """Read a label set from a JSON list of unique, non-empty strings.

    path (Path): The JSON file, e.g. Banking77's `categories.json`.
    RETURNS (List[str]): The labels, in file order.
    """
    path = Path(path)
    labels = _load_json(path)
    if not isinstance(labels, list) or not labels:
        raise ConversionError(
            f"{path}:1", f"expected a non-empty JSON list of labels, found {_show(labels)}"
        )
    first_seen: Dict[str, int] = {}
    for number, label in enumerate(labels, start=1):
        where = f"{path}:item {number}"
        if not isinstance(label, str) or not label.strip():
            raise ConversionError(where, f"expected a non-empty string, found {_show(label)}")
        if label in first_seen:
            raise ConversionError(where, f"label {label!r} repeats item {first_seen[label]}")
        first_seen[label] = number
    return labels


def rows_to_docs(
    nlp: Language, rows: Iterable[TextcatRow], labels: Sequence[str], *, exclusive: bool
) -> Iterator[Doc]:
    """Make a Doc per row with `doc.cats` scoring every label: 1.0 for the
    row's gold labels, 0.0 for the others.

    nlp (Language): Its tokenizer makes the Docs (`nlp.make_doc`).
    rows (Iterable[TextcatRow]): The labelled texts.
    labels (Sequence[str]): The full label set; a row's label outside it is
        an error.
    exclusive (bool): Whether the classes are mutually exclusive (textcat):
        then each row needs exactly one label. Otherwise (textcat_multilabel)
        a row has any number of labels, none included.
    YIELDS (Doc): The Docs, in row order.
    """
    known = set(labels)
    for row in rows:
        gold = set(row.labels)
        for label in row.labels:
            if label not in known:
                raise ConversionError(row.source, _unknown_label_message(label, labels))
        if exclusive and len(gold) != 1:
            found = ", ".join(repr(label) for label in sorted(gold)) or "none"
            raise ConversionError(
                row.source, f"exclusive classes need exactly one label per row, found {found}"
            )
        doc = nlp.make_doc(row.text)
        doc.cats = {label: 1.0 if label in gold else 0.0 for label in labels}
        yield doc


def write_docbin(docs: Iterable[Doc], output: Path) -> int:
    """Save Docs to a `.spacy` file. The file is written once all Docs are
    made, so an error while making them leaves no partial file.

    docs (Iterable[Doc]): The Docs to save.
    output (Path): The `.spacy` file; missing parent folders are made.
    RETURNS (int): The number of Docs written.
    """
    output = Path(output)
    doc_bin = DocBin(store_user_data=False)
    n_docs = 0
    for doc in docs:
        doc_bin.add(doc)
        n_docs += 1
    output.parent.mkdir(parents=True, exist_ok=True)
    doc_bin.to_disk(output)
    return n_docs


def _read_csv(path: Path, text_column: str, label_column: Optional[str]) -> Iterator[TextcatRow]:
    reader = csv.reader(io.StringIO(_read_text(path), newline=""), strict=True)
    # A record's first line: csv's `line_num` counts the lines read so far,
    # and a quoted field can span several lines.
    line = 1
    try:
        header = next(reader, None)
        if header is None:
            raise ConversionError(f"{path}:1", "empty file: expected a header row")
        text_index = _column_index(header, text_column, path, "text")
        label_column = label_column or _auto_label_column(header, f"{path}:1", "column")
        label_index = _column_index(header, label_column, path, "label")
        line = reader.line_num + 1
        for fields in reader:
            where = f"{path}:{line}"
            line = reader.line_num + 1
            if not fields:  # a blank line, not a record
                continue
            if len(fields) != len(header):
                raise ConversionError(
                    where, f"expected {len(header)} fields as in the header, found {len(fields)}"
                )
            labels = _split_labels(fields[label_index], label_column, where)
            yield TextcatRow(text=fields[text_index], labels=labels, source=where)
    except csv.Error as err:
        raise ConversionError(f"{path}:{line}", f"malformed CSV: {err}") from None


def _read_jsonl(path: Path, text_column: str, label_column: Optional[str]) -> Iterator[TextcatRow]:
    # Split on "\n" only: str.splitlines also splits on characters that JSON
    # strings may hold unescaped (e.g. "\u2028"), which would shift line numbers.
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConversionError(where, f"invalid JSON: {err.msg} (column {err.colno})") from None
        record = _json_object(record, where)
        text = _json_text(record, text_column, where)
        field = label_column or _auto_label_column(list(record), where, "field")
        if field not in record:
            raise ConversionError(where, f"no {field!r} field; fields: {', '.join(record)}")
        labels = _json_labels(record[field], field, where)
        yield TextcatRow(text=text, labels=labels, source=where)


def _read_text(path: Path) -> str:
    # Decode the whole file at once, so a bad byte is reported on its own line.
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        bad = data[err.start : err.end]
        raise ConversionError(f"{path}:{line}", f"not UTF-8: byte {bad!r} ({err.reason})") from None


def _load_json(path: Path) -> Any:
    try:
        return json.loads(_read_text(path))
    except json.JSONDecodeError as err:
        raise ConversionError(
            f"{path}:{err.lineno}", f"invalid JSON: {err.msg} (column {err.colno})"
        ) from None


def _column_index(header: List[str], column: str, path: Path, kind: str) -> int:
    if column not in header:
        raise ConversionError(
            f"{path}:1", f"no {kind} column {column!r}; columns: {', '.join(header)}"
        )
    return header.index(column)


def _auto_label_column(names: List[str], where: str, kind: str) -> str:
    found = [name for name in AUTO_LABEL_COLUMNS if name in names]
    if len(found) != 1:
        problem = f"both a 'label' and a 'labels' {kind}" if found else f"no 'label' {kind}"
        raise ConversionError(
            where, f"{problem}; name the label {kind} explicitly; {kind}s: {', '.join(names)}"
        )
    return found[0]


def _split_labels(cell: str, column: str, where: str) -> Tuple[str, ...]:
    labels = tuple(part.strip() for part in cell.split(CSV_LABEL_SEPARATOR))
    if not all(labels):
        raise ConversionError(where, f"empty label in column {column!r}: {cell!r}")
    return labels


def _json_object(record: Any, where: str) -> Dict[str, Any]:
    if not isinstance(record, dict):
        raise ConversionError(where, f"expected a JSON object, found {_json_type(record)}")
    return record


def _json_text(record: Dict[str, Any], field: str, where: str) -> str:
    if field not in record:
        raise ConversionError(where, f"no text field {field!r}; fields: {', '.join(record)}")
    text = record[field]
    if not isinstance(text, str):
        raise ConversionError(where, f"{field!r} must be a string, found {_show(text)}")
    return text


def _json_labels(value: Any, field: str, where: str) -> Tuple[str, ...]:
    labels: List[Any] = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ConversionError(
            where, f"{field!r} must be a string or a list of strings, found {_show(value)}"
        )
    if not all(label.strip() for label in labels):
        raise ConversionError(where, f"empty label in {field!r}: {_show(value)}")
    return tuple(labels)


def _unknown_label_message(label: str, labels: Sequence[str]) -> str:
    close = difflib.get_close_matches(label, labels, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    few = ", ".join(repr(known) for known in list(labels)[:5])
    more = ", ..." if len(labels) > 5 else ""
    return f"unknown label {label!r}; {hint}({len(labels)} known labels: {few}{more})"


def _find_ontology(path: Path) -> Path:
    if path.is_file():
        return path
    for folder in (path, path.parent):
        if (folder / "ontology.json").is_file():
            return folder / "ontology.json"
    raise ConversionError(str(path), "no ontology.json here or in the parent folder")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else names.get(type(value), "a number")


def _show(value: Any, limit: int = 60) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
