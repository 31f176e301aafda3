"""Text classification: CSV and JSONL labelled texts, and NLU++ folds, read
into `TextcatRow`s; `rows_to_docs` turns them into Docs with a score in
`doc.cats` for every label."""

import csv
import difflib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from ..io.errors import ConversionError
from .fields import (
    json_list_records,
    json_text,
    jsonl_records,
    load_json,
    read_text,
    show,
)

# Label fields found without `label_column`: one label, or several.
AUTO_LABEL_COLUMNS = ("label", "labels")


# Separates several labels in one CSV cell.
CSV_LABEL_SEPARATOR = "|"

# What to do with a row that has no label, for the errors that meet one.
OOS_HINT = (
    "if the row fits none of the labels (out of scope), convert with --empty-oos "
    "(bert-pipes convert textcat): it becomes a doc with no positive label"
)


NLUPLUSPLUS_DOMAINS = ("banking", "general")


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
    path: Path,
    *,
    text_column: str = "text",
    label_column: Optional[str] = None,
    oos_label: Optional[str] = None,
    empty_oos: bool = False,
) -> Iterator[TextcatRow]:
    """Read labelled texts from a `.csv` file (with a header row) or a `.jsonl`
    file (one JSON object per line). Blank lines are skipped; every other line
    is a row or an error.

    A CSV label cell holds one label or several separated by "|". A JSONL label
    field is a string (one label) or a list of strings (an empty list means no
    labels). An empty text is a valid document; a missing or null text, or a
    missing or empty label, is an error (unless `empty_oos`).

    An out-of-scope row, a text that fits none of the labels, has no labels
    (`labels == ()`), as `read_clinc150` writes CLINC150's out-of-scope queries.

    path (Path): The file to read, UTF-8 encoded.
    text_column (str): The column or field holding the text.
    label_column (Optional[str]): The column or field holding the labels.
        Defaults to "label" or "labels", whichever the data has.
    oos_label (Optional[str]): A label that marks out-of-scope rows: a row
        labelled with it has no labels. It cannot go with another label.
    empty_oos (bool): A row with an empty label (a CSV cell "", a JSONL "",
        [] or null) is out of scope, with no labels, instead of an error.
    YIELDS (TextcatRow): The rows, in file order.
    """
    path = Path(path)
    if path.suffix == ".csv":
        rows = _read_csv(path, text_column, label_column, empty_oos)
    elif path.suffix == ".jsonl":
        rows = _read_jsonl(path, text_column, label_column, empty_oos)
    else:
        raise ConversionError(
            str(path), f"unsupported file type {path.suffix!r}: expected .csv or .jsonl"
        )
    for row in rows:
        if oos_label is not None and oos_label in row.labels:
            if len(set(row.labels)) > 1:
                others = ", ".join(repr(label) for label in row.labels if label != oos_label)
                raise ConversionError(
                    row.source,
                    f"the out-of-scope label {oos_label!r} beside {others}: an out-of-scope "
                    "row has no other label",
                )
            row = TextcatRow(row.text, (), row.source)
        yield row


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
        for where, record in json_list_records(path):
            text = json_text(record, "text", where)
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
    ontology = load_json(path)
    intents = ontology.get("intents") if isinstance(ontology, dict) else None
    if not isinstance(intents, dict):
        raise ConversionError(str(path), 'expected an object with an "intents" object')
    labels = []
    for intent, info in intents.items():
        intent_domains = info.get("domain") if isinstance(info, dict) else None
        if not isinstance(intent_domains, list):
            raise ConversionError(
                str(path), f'intent {intent!r}: expected a "domain" list, found {show(info)}'
            )
        if set(intent_domains) & set(domains):
            labels.append(intent)
    if not labels:
        raise ConversionError(str(path), f"no intents in the domains {list(domains)}")
    return sorted(labels)


# CLINC150's splits (Larson et al. 2019): in-scope and out-of-scope queries.
CLINC150_SPLITS = ("train", "val", "test")
CLINC150_OOS_INTENT = "oos"


def read_clinc150(path: Path, split: str, *, oos_label: Optional[str] = None) -> List[TextcatRow]:
    """Read one split of CLINC150's `data_full.json`: its in-scope queries and
    its out-of-scope ones (`oos_<split>`).

    path (Path): The `data_full.json` file ({split: [[text, intent], ...]}).
    split (str): "train", "val" or "test".
    oos_label (Optional[str]): None: an out-of-scope query has no label (the
        component never learns it; evaluation counts a doc without a positive
        label as out of scope). A name: out-of-scope queries get that label, a
        class of its own (`oos_label` of bert_textcat names it).
    RETURNS (List[TextcatRow]): The in-scope queries, then the out-of-scope ones.
    """
    if split not in CLINC150_SPLITS:
        raise ValueError(f"CLINC150 has the splits {CLINC150_SPLITS}, not {split!r}")
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, dict):
        raise ConversionError(f"{path}:1", f"expected a JSON object of splits, found {show(data)}")
    rows: List[TextcatRow] = []
    for key in (split, f"oos_{split}"):
        pairs = data.get(key)
        if not isinstance(pairs, list):
            raise ConversionError(f"{path}:1", f"no list of [text, intent] pairs under {key!r}")
        for number, pair in enumerate(pairs, start=1):
            where = f"{path}:{key}[{number}]"
            if (
                not isinstance(pair, list)
                or len(pair) != 2
                or not all(isinstance(item, str) for item in pair)
                or not pair[1].strip()
            ):
                raise ConversionError(where, f"expected [text, intent], found {show(pair)}")
            text, intent = pair
            out_of_scope = key.startswith("oos_")
            if out_of_scope != (intent == CLINC150_OOS_INTENT):
                raise ConversionError(where, f"intent {intent!r} in the split {key!r}")
            labels: Tuple[str, ...] = (intent,)
            if out_of_scope:
                labels = () if oos_label is None else (oos_label,)
            rows.append(TextcatRow(text, labels, where))
    return rows


def read_labels_file(path: Path) -> List[str]:
    """Read a label set from a JSON list of unique, non-empty strings.

    path (Path): The JSON file, e.g. Banking77's `categories.json`.
    RETURNS (List[str]): The labels, in file order.
    """
    path = Path(path)
    labels = load_json(path)
    if not isinstance(labels, list) or not labels:
        raise ConversionError(
            f"{path}:1", f"expected a non-empty JSON list of labels, found {show(labels)}"
        )
    first_seen: Dict[str, int] = {}
    for number, label in enumerate(labels, start=1):
        where = f"{path}:item {number}"
        if not isinstance(label, str) or not label.strip():
            raise ConversionError(where, f"expected a non-empty string, found {show(label)}")
        if label in first_seen:
            raise ConversionError(where, f"label {label!r} repeats item {first_seen[label]}")
        first_seen[label] = number
    return labels


def rows_to_docs(
    nlp: Language,
    rows: Iterable[TextcatRow],
    labels: Sequence[str],
    *,
    exclusive: bool,
    unlabelled: bool = False,
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
    unlabelled (bool): Exclusive classes: a row may also have no label (an
        out-of-scope text, which fits none of the labels): its Doc scores 0.0
        for every label.
    YIELDS (Doc): The Docs, in row order.
    """
    known = set(labels)
    for row in rows:
        gold = set(row.labels)
        for label in row.labels:
            if label not in known:
                raise ConversionError(row.source, _unknown_label_message(label, labels))
        if exclusive and len(gold) != 1 and not (unlabelled and not gold):
            found = ", ".join(repr(label) for label in sorted(gold)) or "none"
            hint = "" if gold else f"; {OOS_HINT}"
            raise ConversionError(
                row.source,
                f"exclusive classes need exactly one label per row, found {found}{hint}",
            )
        doc = nlp.make_doc(row.text)
        doc.cats = {label: 1.0 if label in gold else 0.0 for label in labels}
        yield doc


def _read_csv(
    path: Path, text_column: str, label_column: Optional[str], empty_oos: bool
) -> Iterator[TextcatRow]:
    reader = csv.reader(io.StringIO(read_text(path), newline=""), strict=True)
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
            cell = fields[label_index]
            if empty_oos and not cell.strip():
                labels: Tuple[str, ...] = ()
            else:
                labels = _split_labels(cell, label_column, where)
            yield TextcatRow(text=fields[text_index], labels=labels, source=where)
    except csv.Error as err:
        raise ConversionError(f"{path}:{line}", f"malformed CSV: {err}") from None


def _read_jsonl(
    path: Path, text_column: str, label_column: Optional[str], empty_oos: bool
) -> Iterator[TextcatRow]:
    for where, record in jsonl_records(path):
        text = json_text(record, text_column, where)
        field = label_column or _auto_label_column(list(record), where, "field")
        if field not in record:
            raise ConversionError(where, f"no {field!r} field; fields: {', '.join(record)}")
        value = record[field]
        if empty_oos and (value is None or (isinstance(value, str) and not value.strip())):
            labels: Tuple[str, ...] = ()
        else:
            labels = _json_labels(value, field, where)
        yield TextcatRow(text=text, labels=labels, source=where)


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
        hint = f"; {OOS_HINT}" if not cell.strip() else ""
        raise ConversionError(where, f"empty label in column {column!r}: {cell!r}{hint}")
    return labels


def _json_labels(value: Any, field: str, where: str) -> Tuple[str, ...]:
    labels: List[Any] = [value] if isinstance(value, str) else value
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ConversionError(
            where, f"{field!r} must be a string or a list of strings, found {show(value)}"
        )
    if not all(label.strip() for label in labels):
        hint = f"; {OOS_HINT}" if isinstance(value, str) else ""
        raise ConversionError(where, f"empty label in {field!r}: {show(value)}{hint}")
    return tuple(labels)


def _unknown_label_message(label: str, labels: Sequence[str]) -> str:
    close = difflib.get_close_matches(label, labels, n=3)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    few = ", ".join(repr(known) for known in list(labels)[:5])
    more = ", ..." if len(labels) > 5 else ""
    return (
        f"unknown label {label!r}; {hint}({len(labels)} known labels: {few}{more}); add it "
        f"to the labels (--labels), or, if it marks texts that fit none of them (out of "
        f"scope), convert with --oos-label {label!r}: they become docs with no positive label"
    )


def _find_ontology(path: Path) -> Path:
    if path.is_file():
        return path
    for folder in (path, path.parent):
        if (folder / "ontology.json").is_file():
            return folder / "ontology.json"
    raise ConversionError(str(path), "no ontology.json here or in the parent folder")
