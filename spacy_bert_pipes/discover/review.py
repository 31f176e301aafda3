"""The files of `bert-pipes discover` (`write_discovery`) and the review read
back (`review_examples`): the clusters a person accepted, as new labels with
their representatives as examples, for `bert-pipes add-label --review`.

A review file has one row per cluster (JSONL, or a flat CSV to edit in a
spreadsheet: one cell per representative, the keywords and labels as plain
text) and an `action` the person fills in; `proposal` holds discover's
`merge:<cluster>` where it thinks two clusters are one intent:

| action | what `add-label --review` does |
| --- | --- |
| `accept` | a new label named as the cluster's `name`, its representatives the examples |
| `rename:<label>` | the same, the label named `<label>` |
| `merge:<cluster>` | its representatives join the examples of that (accepted) cluster |
| `reject`, or empty | nothing |
"""

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ..io.errors import ConversionError
from ..io.output_readers import read_jsonl_records
from .run import Discovery

REVIEW = "review.jsonl"
ASSIGNMENTS = "assignments.jsonl"
SUMMARY = "summary.json"
PICTURE = "clusters.png"
REVIEW_COLUMNS = (
    "cluster",
    "size",
    "name",
    "keywords",
    "nearest_label",
    "nearest_cosine",
    "verdict",
    "silhouette",
    "routed_share",
    "routed_to",
    "proposal",
    "merge_cosine",
    "representatives",
    "action",
)
# The flat CSV: the action beside the name, the representatives last, one a cell.
CSV_COLUMNS = ("cluster", "size", "name", "action", "proposal", *REVIEW_COLUMNS[3:11])
REPRESENTATIVE = "representative_{}"
ACTIONS = "accept, rename:<label>, merge:<cluster>, reject or empty"


def write_discovery(
    discovery: Discovery,
    output_dir: Union[str, Path],
    *,
    review_name: str = REVIEW,
    picture: bool = True,
) -> List[Path]:
    """Write the review file (`review_name`: .jsonl, or .csv), the doc ->
    cluster assignments (JSONL), the summary (JSON) and, with `picture`, the
    PNG of the clusters among the labels, into `output_dir`; each file is
    replaced atomically.

    RETURNS (List[Path]): The files written.
    """
    from ..io.durable import write_text

    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    review = folder / review_name
    if review.suffix.lower() not in (".jsonl", ".csv"):
        raise ValueError(f"the review file must be .jsonl or .csv, not {review.name!r}")
    records = [cluster.review_record() for cluster in discovery.clusters]
    if review.suffix.lower() == ".csv":
        write_text(review, _csv(records))
    else:
        write_text(review, _jsonl(records))
    assignments = folder / ASSIGNMENTS
    write_text(assignments, _jsonl(discovery.assignments))
    written = [review, assignments]
    if picture:
        from .picture import draw_discovery

        written.append(draw_discovery(discovery, folder / PICTURE))
    summary = folder / SUMMARY
    files = {"review": review.name, "assignments": assignments.name}
    if picture:
        files["picture"] = PICTURE
    data = {**discovery.summary, "files": files}
    write_text(summary, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return [*written, summary]


@dataclass
class DiscoveryFiles:
    """A folder `bert-pipes discover` wrote, read back (for `bert-pipes report`).

    folder (Path): The folder.
    summary (Dict[str, Any]): summary.json: counts and settings.
    clusters (List[Dict[str, Any]]): The review file's rows, as written or
        as a person edited them (with their actions).
    picture (Optional[Path]): The PNG of the clusters, if it was drawn.
    """

    folder: Path
    summary: Dict[str, Any]
    clusters: List[Dict[str, Any]]
    picture: Optional[Path]


def read_discovery(folder: Union[str, Path]) -> DiscoveryFiles:
    """The summary, the review rows and the picture of a discover folder.

    RAISES (ConversionError): No summary.json, or a review file that is not
        one of discover's (named by file and line).
    """
    folder = Path(folder)
    summary_path = folder / SUMMARY
    if not summary_path.is_file():
        raise ConversionError(
            str(folder), f"no {SUMMARY}: not a folder `bert-pipes discover` wrote"
        )
    try:
        summary = json.loads(summary_path.read_text(encoding="utf8"))
    except ValueError as error:
        raise ConversionError(str(summary_path), f"not JSON ({error})") from error
    files = summary.get("files") if isinstance(summary, dict) else None
    if not isinstance(files, dict) or not isinstance(files.get("review"), str):
        raise ConversionError(str(summary_path), "no files.review (a summary of discover?)")
    review = folder / files["review"]
    if not review.is_file():
        raise ConversionError(str(review), "no such file (named in summary.json)")
    records = (
        _csv_records(review) if review.suffix.lower() == ".csv" else read_jsonl_records(review)
    )
    clusters = []
    for where, record in records:
        if not isinstance(record, dict) or "cluster" not in record or "size" not in record:
            raise ConversionError(where, "not a row of a discover review (cluster, size, ...)")
        clusters.append(record)
    picture = folder / files["picture"] if isinstance(files.get("picture"), str) else None
    return DiscoveryFiles(
        folder, summary, clusters, picture if picture and picture.is_file() else None
    )


@dataclass
class ReviewRow:
    """A row of a review file: where it is, its cluster, name, action and the
    texts of its representatives."""

    where: str
    cluster: int
    name: str
    action: str
    texts: List[str]


def read_review(path: Union[str, Path]) -> List[ReviewRow]:
    """The rows of a review file (.jsonl or .csv).

    RAISES (ConversionError): A row without a column of REVIEW_COLUMNS' cluster,
        name, representatives or action, or with a bad value; named by line.
    """
    path = Path(path)
    if not path.exists():
        raise ConversionError(str(path), "no such file")
    records = _csv_records(path) if path.suffix.lower() == ".csv" else read_jsonl_records(path)
    rows = []
    for where, record in records:
        if not isinstance(record, dict):
            raise ConversionError(where, "not a JSON object")
        missing = [c for c in ("cluster", "name", "representatives", "action") if c not in record]
        if missing:
            raise ConversionError(
                where, f"no {', '.join(missing)} (a review of bert-pipes discover?)"
            )
        try:
            cluster = int(record["cluster"])
        except (TypeError, ValueError) as error:
            raise ConversionError(
                where, f"cluster {record['cluster']!r} is not a number"
            ) from error
        shown = record["representatives"]
        if not isinstance(shown, list) or not all(
            isinstance(r, dict) and isinstance(r.get("text"), str) for r in shown
        ):
            raise ConversionError(where, "representatives must be a list of {id, text}")
        action = "" if record["action"] is None else str(record["action"]).strip()
        texts = [r["text"] for r in shown]
        rows.append(ReviewRow(where, cluster, str(record["name"]), action, texts))
    return rows


def review_examples(path: Union[str, Path], *, accept_all: bool = False) -> Dict[str, List[str]]:
    """The new labels of a review (accept, rename:<label>) with their examples:
    their representatives and those of the clusters merged into them. Two
    clusters given one name make one label.

    accept_all (bool): Take every cluster as accepted under its `name`,
        whatever its action (discovery measured without a reviewer).
    RAISES (ConversionError): An unknown action, a rename without a name, a
        merge into a cluster that is not in the file or not accepted.
    """
    rows = read_review(path)
    label_of: Dict[int, str] = {}
    merges: List[Tuple[ReviewRow, int]] = []
    examples: Dict[str, List[str]] = {}
    for row in rows:
        action = "accept" if accept_all else row.action
        if action in ("", "reject"):
            continue
        if action == "accept" or action.startswith("rename:"):
            label = row.name if action == "accept" else action[len("rename:") :].strip()
            if not label.strip():
                raise ConversionError(row.where, f"action {action!r} gives no label name")
            label_of[row.cluster] = label
            examples.setdefault(label, []).extend(row.texts)
        elif action.startswith("merge:"):
            try:
                merges.append((row, int(action[len("merge:") :])))
            except ValueError as error:
                raise ConversionError(
                    row.where, f"action {action!r}: merge:<cluster> takes a cluster number"
                ) from error
        else:
            raise ConversionError(row.where, f"action {action!r}: expected {ACTIONS}")
    for row, target in merges:
        if target not in label_of:
            raise ConversionError(
                row.where,
                f"merge:{target}, but cluster {target} is not accepted (accept or rename it)",
            )
        examples[label_of[target]].extend(row.texts)
    return {label: list(dict.fromkeys(texts)) for label, texts in examples.items()}


def _csv_records(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """CSV rows: a flat one's representative_<n> cells (non-empty) gathered
    into `representatives` and its keywords split; an older file's list cells
    parsed from JSON text."""
    with path.open(encoding="utf8", newline="") as file_:
        reader = csv.DictReader(file_)
        for record in reader:
            where = f"{path}:{reader.line_num}"
            cells = sorted(
                (int(key.rsplit("_", 1)[1]), key)
                for key in record
                if key and key.startswith("representative_") and key.rsplit("_", 1)[1].isdigit()
            )
            if cells and "representatives" not in record:
                record["representatives"] = [
                    {"text": record.pop(key)} for _, key in cells if (record[key] or "").strip()
                ]
            for column in ("keywords", "representatives"):
                value = record.get(column)
                if isinstance(value, str) and value.startswith("["):
                    try:
                        record[column] = json.loads(value)
                    except ValueError as error:
                        raise ConversionError(where, f"{column} is not JSON ({error})") from error
                elif isinstance(value, str) and column == "keywords":
                    record[column] = [word.strip() for word in value.split(",") if word.strip()]
            yield where, record


def _csv(records: List[Dict[str, Any]]) -> str:
    """The flat CSV: plain text cells, a representative per cell."""
    import io

    most = max((len(r["representatives"]) for r in records), default=0)
    shown = [REPRESENTATIVE.format(n + 1) for n in range(most)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*CSV_COLUMNS, *shown], lineterminator="\n")
    writer.writeheader()
    for record in records:
        cells = {column: record[column] for column in CSV_COLUMNS}
        cells["keywords"] = ", ".join(record["keywords"])
        cells["routed_to"] = "; ".join(f"{r['label']} ({r['docs']})" for r in record["routed_to"])
        cells.update(zip(shown, (r["text"] for r in record["representatives"])))
        writer.writerow(cells)
    return out.getvalue()


def _jsonl(records: List[Dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
