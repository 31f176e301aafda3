"""`report`: an evaluation report, in Markdown and HTML, with plots.

Reads the metrics JSONs that `spacy evaluate` and `bert-pipes evaluate` write
(one run per file, named by its stem: `metrics/textcat.json` is the run
"textcat"), the timing JSONs of the workflow (`<run>_train_time.json`, written
by scripts/timed.py; any other `*_time.json` is listed on its own),
optionally the per-doc predictions of `bert-pipes evaluate --predictions`
(`<run>_predictions.jsonl`, found beside the metrics or given explicitly) and
the outputs of `bert-pipes annotate` (an annotated collection: what was
predicted how often, its error rows and, from `<stem>_time.json`, its speed).

Writes into an output folder:
* `report.md`: tables per run and task (overall scores, per-label P/R/F,
  timings) and links to the pictures;
* `report.html`: the same, one self-contained page with the pictures embedded;
* the PNGs: per-label F1 bars (textcat, NER), the confusion matrix of an
  exclusive classifier (its most confused labels, and all labels), NER error
  types per label, QA exact match and F1 with and without an answer, per
  question and per answer length; for an annotated collection, bars of its
  most frequent categories, its entities per label and its answers per question.

What a run reports depends on the keys of its metrics: `cats_*` (text
classification), `ents_*` or `spans_<key>_*` (NER), `qa_*` (question
answering); a pipeline with several components has several sections.
"""

import base64
import html
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from .io.errors import ConversionError
from .io.output import errors_path_for, read_error_records, read_output_rows
from .scorers import normalize_answer

PLOTS_EXTRA = "pip install 'spacy-bert-pipes[plots]'  (or: pip install matplotlib)"
PREDICTIONS_SUFFIX = "_predictions.jsonl"
# Timing JSONs end in TIME_SUFFIX; `<run>_train_time.json` is a run's training time.
TIME_SUFFIX = "_time.json"
TRAIN_TIME = "_train_time"
# The confusion matrix of the most confused labels shows at most this many.
TOP_CONFUSED_LABELS = 20
# Error examples listed per section.
MAX_EXAMPLES = 12
# Answer length buckets (words of the first reference answer, normalized).
LENGTH_BUCKETS: Tuple[Tuple[str, int, int], ...] = (
    ("no answer", 0, 0),
    ("1 word", 1, 1),
    ("2 words", 2, 2),
    ("3 words", 3, 3),
    ("4-5 words", 4, 5),
    ("6+ words", 6, 10**9),
)
# An annotated doc counts for a category at this probability or more.
CATEGORY_THRESHOLD = 0.5
# Categories and entity labels of an annotated collection shown (the most frequent).
TOP_LABELS = 20
# Error rows of an annotated collection whose reasons are listed.
MAX_ERROR_REASONS = 5
NER_ERRORS = (
    "correct",
    "wrong label",
    "wrong boundary",
    "wrong label and boundary",
    "missed",
    "spurious",
)


class ReportError(ValueError):
    """A metrics, predictions or annotations file cannot be read."""


# --- inputs ----------------------------------------------------------------------


@dataclass
class Run:
    """One evaluated pipeline: a metrics JSON and what belongs to it.

    name (str): The metrics file's stem, e.g. "textcat_full".
    path (Path): The metrics JSON.
    scores (Dict[str, Any]): Its contents.
    timing (Optional[Dict[str, Any]]): `<name>_train_time.json`, if found.
    predictions (List[Dict[str, Any]]): The records of `<name>_predictions.jsonl`.
    predictions_path (Optional[Path]): That file, if found.
    """

    name: str
    path: Path
    scores: Dict[str, Any]
    timing: Optional[Dict[str, Any]] = None
    predictions: List[Dict[str, Any]] = field(default_factory=list)
    predictions_path: Optional[Path] = None

    @property
    def tasks(self) -> List[str]:
        """The tasks the scores cover: "textcat", "ner" (one per key prefix), "qa"."""
        tasks = ["textcat"] if "cats_score" in self.scores else []
        tasks += [f"ner:{prefix}" for prefix in ner_prefixes(self.scores)]
        if "qa_f1" in self.scores:
            tasks.append("qa")
        return tasks

    def components(self, task: str) -> Dict[str, List[Dict[str, Any]]]:
        """The predictions of each component of a task ("textcat", "ner", "qa"),
        as {component: [per-doc record, with "text" added]}."""
        out: Dict[str, List[Dict[str, Any]]] = {}
        for record in self.predictions:
            for name, data in record.get("components", {}).items():
                if data.get("task") == task:
                    out.setdefault(name, []).append({**data, "text": record.get("text", "")})
        return out


@dataclass
class Collection:
    """An annotated collection: counts over the rows of a `bert-pipes annotate`
    OUTPUT, gathered while streaming them (see `read_collection`).

    name (str): The output's stem, e.g. "banking77" for `banking77.jsonl`.
    path (Path): The output: a .jsonl, .csv or .parquet file, or a folder of shards.
    rows (int): Rows annotated.
    docs_with_cats (int): Rows with `cats` (not null).
    categories (Counter): Label -> docs with a probability >= CATEGORY_THRESHOLD.
    docs_without_category (int): Rows with `cats` but no such label.
    entities (Counter): Label -> entities.
    entity_docs (Counter): Label -> docs with an entity of the label.
    docs_with_entities (int): Rows with at least one entity.
    answered (Counter): Question key -> docs with a non-empty answer.
    answer_scores (Dict[str, float]): Question key -> the sum over those docs of
        the score of their best non-empty answer.
    null_answers (Counter): Question key -> docs whose answers are all empty.
    docs_with_answers (int): Rows with at least one non-empty answer.
    errors_path (Optional[Path]): `<OUTPUT>.errors.jsonl`, if it exists.
    error_rows (int): Its records (non-blank lines).
    first_errors (List[Dict[str, Any]]): Its first MAX_ERROR_REASONS records.
    timing (Optional[Dict[str, Any]]): `<name>_time.json`, if found.
    """

    name: str
    path: Path
    rows: int = 0
    docs_with_cats: int = 0
    categories: Counter = field(default_factory=Counter)
    docs_without_category: int = 0
    entities: Counter = field(default_factory=Counter)
    entity_docs: Counter = field(default_factory=Counter)
    docs_with_entities: int = 0
    answered: Counter = field(default_factory=Counter)
    answer_scores: Dict[str, float] = field(default_factory=dict)
    null_answers: Counter = field(default_factory=Counter)
    docs_with_answers: int = 0
    errors_path: Optional[Path] = None
    error_rows: int = 0
    first_errors: List[Dict[str, Any]] = field(default_factory=list)
    timing: Optional[Dict[str, Any]] = None

    def add(self, row: Dict[str, Any], where: str) -> None:
        """Count one output row; `where` ("file:line") names it in errors."""
        if row.get("id") is None:
            raise ReportError(f'{where}: a row without "id"')
        cats, entities, answers = row["cats"], row["entities"], row["answers"]
        if cats is not None and not (
            isinstance(cats, dict) and all(_is_number(v) for v in cats.values())
        ):
            raise ReportError(f"{where}: cats is not {{label: probability}} or null: {_show(cats)}")
        if not isinstance(entities, list) or not all(
            isinstance(e, dict) and isinstance(e.get("label"), str) for e in entities
        ):
            raise ReportError(
                f"{where}: entities is not a list of {{label, ...}}: {_show(entities)}"
            )
        if not isinstance(answers, list) or not all(
            isinstance(a, dict) and isinstance(a.get("key"), str) for a in answers
        ):
            raise ReportError(f"{where}: answers is not a list of {{key, ...}}: {_show(answers)}")
        self.rows += 1
        if cats is not None:
            self.docs_with_cats += 1
            labels = [label for label, p in cats.items() if p >= CATEGORY_THRESHOLD]
            self.categories.update(labels)
            self.docs_without_category += not labels
        labels = [e["label"] for e in entities]
        self.entities.update(labels)
        self.entity_docs.update(set(labels))
        self.docs_with_entities += bool(labels)
        # the best non-empty answer per key (top_k > 1 gives several per key)
        best: Dict[str, float] = {}
        for answer in answers:
            key, score = answer["key"], answer.get("score")
            if answer.get("text"):
                score = float(score) if _is_number(score) else 0.0
                best[key] = max(best.get(key, score), score)
        for key in best:
            self.answered[key] += 1
            self.answer_scores[key] = self.answer_scores.get(key, 0.0) + best[key]
        self.null_answers.update({a["key"] for a in answers} - set(best))
        self.docs_with_answers += bool(best)


@dataclass
class Inputs:
    """Everything the report reads.

    runs (List[Run]): The metrics files, in name order.
    timings (Dict[str, Dict[str, Any]]): Every timing JSON, by file stem.
    notes (List[str]): Files skipped, and why.
    collections (List[Collection]): The annotated collections, in the order given.
    """

    runs: List[Run]
    timings: Dict[str, Dict[str, Any]]
    notes: List[str] = field(default_factory=list)
    collections: List[Collection] = field(default_factory=list)


def ner_prefixes(scores: Dict[str, Any]) -> List[str]:
    """The prefixes of entity scores: "ents", and "spans_<key>" for span groups."""
    prefixes = ["ents"] if "ents_f" in scores else []
    prefixes += sorted(
        key[: -len("_f")] for key in scores if key.startswith("spans_") and key.endswith("_f")
    )
    return prefixes


def read_inputs(
    paths: Sequence[Union[str, Path]],
    predictions: Sequence[Union[str, Path]] = (),
    annotations: Sequence[Union[str, Path]] = (),
) -> Inputs:
    """Gather the runs of metrics folders and files, and the annotated collections.

    paths (Sequence[Union[str, Path]]): Metrics JSONs and folders of them (a
        folder's `*.json`, `*_time.json` and `*_predictions.jsonl`).
    predictions (Sequence[Union[str, Path]]): More predictions files; each
        belongs to the run of its name (`<run>_predictions.jsonl`, or `<run>.jsonl`).
    annotations (Sequence[Union[str, Path]]): Outputs of `bert-pipes annotate`
        (see `read_collection`); each one's `<stem>_time.json` is looked for
        among the timings of `paths`, then beside it.
    RETURNS (Inputs): The runs with their timings and predictions, and the collections.
    """
    json_files: List[Path] = []
    prediction_files: List[Path] = [Path(p) for p in predictions]
    for path in map(Path, paths):
        if path.is_dir():
            json_files += sorted(path.glob("*.json"))
            prediction_files += sorted(path.glob(f"*{PREDICTIONS_SUFFIX}"))
        elif path.is_file():
            json_files.append(path)
        else:
            raise ReportError(f"{path}: no such file or folder")
    runs: Dict[str, Run] = {}
    timings: Dict[str, Dict[str, Any]] = {}
    notes: List[str] = []
    for path in dict.fromkeys(json_files):
        data = _read_json(path)
        if path.name.endswith(TIME_SUFFIX):
            timings[path.stem] = data
        elif isinstance(data, dict) and _is_metrics(data):
            if path.stem in runs:
                raise ReportError(f"{path}: a second run named '{path.stem}'")
            runs[path.stem] = Run(path.stem, path, data)
        else:
            notes.append(f"{path}: skipped (no cats_, ents_, spans_ or qa_ scores)")
    for stem, timing in timings.items():
        run = runs.get(stem[: -len(TRAIN_TIME)]) if stem.endswith(TRAIN_TIME) else None
        if run is not None and isinstance(timing, dict):
            run.timing = timing
    for path in dict.fromkeys(prediction_files):
        name = path.name
        name = name[: -len(PREDICTIONS_SUFFIX)] if name.endswith(PREDICTIONS_SUFFIX) else path.stem
        run = runs.get(name)
        if run is None:
            notes.append(f"{path}: skipped (no metrics JSON of a run '{name}')")
            continue
        run.predictions = read_predictions(path)
        run.predictions_path = path
    collections: Dict[str, Collection] = {}
    for path in dict.fromkeys(map(Path, annotations)):
        if path.stem in collections:
            raise ReportError(f"{path}: a second annotated collection named '{path.stem}'")
        collections[path.stem] = read_collection(path, timings)
    runs_in_order = sorted(runs.values(), key=lambda r: r.name)
    return Inputs(runs_in_order, timings, notes, list(collections.values()))


def read_predictions(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """The records of a predictions JSONL file (see `evaluate`)."""
    path = Path(path)
    records = []
    try:
        with path.open(encoding="utf8") as file_:
            for number, line in enumerate(file_, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise ReportError(f"{path}:{number}: not JSON ({err})") from err
                if not isinstance(record, dict) or not isinstance(record.get("components"), dict):
                    raise ReportError(f"{path}:{number}: not a record of bert-pipes evaluate")
                records.append(record)
    except OSError as err:
        raise ReportError(f"{path}: {err}") from err
    return records


def read_collection(
    path: Union[str, Path], timings: Optional[Dict[str, Dict[str, Any]]] = None
) -> Collection:
    """Count the rows of a `bert-pipes annotate` OUTPUT, streaming them.

    path (Union[str, Path]): A .jsonl, .csv or .parquet file, or a folder of
        Parquet shards. Each row has "id", "cats" ({label: probability} or null),
        "entities" and "answers" (in CSV and Parquet the last three as JSON text).
        Its error rows are read from `<OUTPUT>.errors.jsonl`, if it exists.
    timings (Optional[Dict[str, Dict[str, Any]]]): Timing JSONs by file stem;
        `<stem>_time` is the annotation's wall time, else `<stem>_time.json`
        beside the output.
    RETURNS (Collection): The counts.
    """
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    collection = Collection(path.stem, path)
    errors_path = errors_path_for(path)
    try:
        for where, row in read_output_rows(path):
            collection.add(row, where)
        if errors_path.is_file():
            collection.errors_path = errors_path
            for _, record in read_error_records(errors_path):
                collection.error_rows += 1
                if len(collection.first_errors) < MAX_ERROR_REASONS:
                    collection.first_errors.append(record)
    except ConversionError as err:  # not an output of annotate: the file and line say where
        raise ReportError(str(err)) from err
    timing_path = path.with_name(f"{path.stem}{TIME_SUFFIX}")
    timing = (timings or {}).get(timing_path.stem)
    if timing is None and timing_path.is_file():
        timing = _read_json(timing_path)
    if isinstance(timing, dict):
        collection.timing = timing
    return collection


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any, n: int = 80) -> str:
    return _short(json.dumps(value, ensure_ascii=False, default=str), n)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: {err}") from err


def _is_metrics(data: Dict[str, Any]) -> bool:
    return any(key.startswith(("cats_", "ents_", "spans_", "qa_")) for key in data)


# --- analyses of predictions (no plotting) --------------------------------------------


def confusion_counts(records: Iterable[Dict[str, Any]]) -> Counter:
    """(gold label, predicted label) -> docs, for an exclusive classifier's records
    (docs without a gold label or a prediction are left out)."""
    counts: Counter = Counter()
    for record in records:
        if record["gold"] and record["predicted"]:
            counts[record["gold"][0], record["predicted"][0]] += 1
    return counts


def most_confused(counts: Counter, k: int = TOP_CONFUSED_LABELS) -> List[str]:
    """Up to k labels of the most frequent confusions, each confused pair side by
    side where it can be (the labels are taken in order of their pairs' counts)."""
    errors = sorted(
        ((n, gold, pred) for (gold, pred), n in counts.items() if gold != pred),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    order: List[str] = []
    for _, gold, pred in errors:
        for label in (gold, pred):
            if label not in order and len(order) < k:
                order.append(label)
        if len(order) >= k:
            break
    return order


def ner_errors(
    records: Iterable[Dict[str, Any]],
) -> Tuple[Dict[str, Counter], List[Dict[str, Any]]]:
    """Each gold and predicted entity sorted into NER_ERRORS, counted per label:
    "correct" (same span and label), "wrong label" (same span), "wrong boundary"
    (overlaps a gold entity of its label), "wrong label and boundary", "missed"
    (a gold entity no prediction overlaps), "spurious" (overlaps no gold entity).
    A mistake counts for the gold entity's label, a spurious one for its own.

    RETURNS (Tuple[Dict[str, Counter], List[Dict[str, Any]]]): label -> counts,
        and the records with at least one mistake.
    """
    per_label: Dict[str, Counter] = defaultdict(Counter)
    wrong: List[Dict[str, Any]] = []
    for record in records:
        gold = [(e["start"], e["end"], e["label"]) for e in record["gold"]]
        predicted = [(e["start"], e["end"], e["label"]) for e in record["predicted"]]
        touched = set()
        mistakes = 0
        for start, end, label in predicted:
            if (start, end, label) in gold:
                per_label[label]["correct"] += 1
                touched.add((start, end, label))
                continue
            mistakes += 1
            overlapping = [g for g in gold if g[0] < end and start < g[1]]
            if not overlapping:
                per_label[label]["spurious"] += 1
                continue
            g = overlapping[0]
            touched.update(overlapping)
            if (g[0], g[1]) == (start, end):
                per_label[g[2]]["wrong label"] += 1
            elif g[2] == label:
                per_label[g[2]]["wrong boundary"] += 1
            else:
                per_label[g[2]]["wrong label and boundary"] += 1
        for g in gold:
            if g not in touched:
                per_label[g[2]]["missed"] += 1
                mistakes += 1
        if mistakes:
            wrong.append(record)
    return dict(sorted(per_label.items())), wrong


def qa_questions(records: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The questions of a QA component's records, each with the doc's text."""
    return [{**q, "text": record["text"]} for record in records for q in record["questions"]]


def answer_length(question: Dict[str, Any]) -> int:
    """Words in the first reference answer that normalizes to something (0: no answer)."""
    for text in question["gold"]:
        words = normalize_answer(text).split()
        if words:
            return len(words)
    return 0


def qa_groups(questions: Iterable[Dict[str, Any]], by: str) -> List[Dict[str, Any]]:
    """Exact match and F1 of questions grouped by "key" (the question) or "length"
    (of the reference answer, LENGTH_BUCKETS): over all the group's questions
    ("n", "exact", "f1"), over those with a reference answer ("n_has",
    "exact_has", "f1_has"), and over those without ("n_no", "exact_no"), with the
    answerable ones left unanswered ("missed") and the unanswerable ones answered
    ("false answers"). A mean over no questions is None."""
    groups: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for q in questions:
        if by == "key":
            groups[q["key"]].append(q)
        else:
            n = answer_length(q)
            bucket = next(name for name, low, high in LENGTH_BUCKETS if low <= n <= high)
            groups[bucket].append(q)
    order = list(groups) if by == "key" else [b[0] for b in LENGTH_BUCKETS if b[0] in groups]
    rows = []
    for name in order:
        qs = groups[name]
        # as the scorer splits them: a question has an answer when it has references
        has = [q for q in qs if q["gold"]]
        no = [q for q in qs if not q["gold"]]
        rows.append(
            {
                "group": name,
                "n": len(qs),
                "exact": _mean([q["exact"] for q in qs]),
                "f1": _mean([q["f1"] for q in qs]),
                "n_has": len(has),
                "exact_has": _mean([q["exact"] for q in has]),
                "f1_has": _mean([q["f1"] for q in has]),
                "n_no": len(no),
                "exact_no": _mean([q["exact"] for q in no]),
                "missed": sum(not normalize_answer(q["predicted"]) for q in has),
                "false answers": sum(bool(normalize_answer(q["predicted"])) for q in no),
            }
        )
    return rows


def _mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


# --- the document: blocks rendered as Markdown and as HTML --------------------------


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str  # `code` spans are kept in both renderings


@dataclass
class Table:
    header: List[str]
    rows: List[List[str]]
    align: str = ""  # "l" or "r" per column; default: first left, others right


@dataclass
class Image:
    path: Path
    alt: str


Block = Union[Heading, Paragraph, Table, Image]


@dataclass
class Report:
    """What `write_report` wrote.

    markdown (Path): report.md.
    html (Path): report.html.
    images (List[Path]): The PNGs.
    notes (List[str]): Inputs skipped, and why.
    """

    markdown: Path
    html: Path
    images: List[Path]
    notes: List[str]


def write_report(
    paths: Sequence[Union[str, Path]],
    output_dir: Union[str, Path],
    *,
    predictions: Sequence[Union[str, Path]] = (),
    annotations: Sequence[Union[str, Path]] = (),
    title: str = "Evaluation report",
    plots: bool = True,
) -> Report:
    """Write report.md, report.html and the PNGs of the metrics in `paths`.

    paths (Sequence[Union[str, Path]]): Metrics JSONs and folders of them.
    output_dir (Union[str, Path]): The folder to write (created if missing).
    predictions (Sequence[Union[str, Path]]): More `bert-pipes evaluate` predictions
        files, besides the `*_predictions.jsonl` of the folders.
    annotations (Sequence[Union[str, Path]]): Outputs of `bert-pipes annotate`
        (.jsonl, .csv, .parquet or a folder of Parquet shards), each described
        in a section "Annotated collection" (see `read_collection`).
    title (str): The report's title.
    plots (bool): Whether to draw the PNGs (needs matplotlib).
    RETURNS (Report): The files written.
    """
    if plots:
        _figure_class()  # fail before anything is written when matplotlib is missing
    if not paths and not annotations:
        raise ReportError("Nothing to report: give metrics JSONs or folders, or annotate outputs")
    inputs = read_inputs(paths, predictions, annotations)
    if not inputs.runs and not inputs.timings and not inputs.collections:
        raise ReportError(
            f"No metrics in {', '.join(map(str, paths))}: expected JSONs with cats_, "
            "ents_, spans_ or qa_ scores, or *_time.json timings"
        )
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    builder = _Builder(output_dir, plots)
    blocks = builder.document(inputs, title)
    markdown_path = output_dir / "report.md"
    markdown_path.write_text(to_markdown(blocks), encoding="utf8")
    html_path = output_dir / "report.html"
    html_path.write_text(to_html(blocks, title), encoding="utf8")
    return Report(markdown_path, html_path, builder.images, inputs.notes)


def _pct(value: Any, digits: int = 2) -> str:
    return f"{value * 100:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


class _Builder:
    """Builds the blocks of the report, drawing the plots as it goes."""

    def __init__(self, output_dir: Path, plots: bool) -> None:
        self.output_dir = output_dir
        self.plots = plots
        self.images: List[Path] = []

    def image(self, name: str, alt: str, draw: Callable[..., None], *args: Any) -> List[Block]:
        if not self.plots:
            return []
        path = self.output_dir / f"{_file_name(name)}.png"
        draw(path, *args)
        self.images.append(path)
        return [Image(path, alt)]

    def document(self, inputs: Inputs, title: str) -> List[Block]:
        blocks: List[Block] = [Heading(1, title)]
        sources = [f"`{run.path}`" for run in inputs.runs]
        sources += [f"`{run.predictions_path}`" for run in inputs.runs if run.predictions_path]
        sources += [f"`{c.path}`" for c in inputs.collections]
        if sources:
            blocks.append(Paragraph("Made from " + ", ".join(sources) + "."))
        if inputs.runs or not inputs.collections:
            blocks.append(
                Paragraph(
                    "Scores are percentages. P, R and F are precision, recall and F-score; "
                    "EM is exact match."
                )
            )
        if inputs.runs:
            blocks += self.summary(inputs.runs)
        for run in inputs.runs:
            blocks.append(Heading(2, f"Run `{run.name}`"))
            for task in run.tasks:
                if task == "textcat":
                    blocks += self.textcat(run)
                elif task.startswith("ner:"):
                    blocks += self.ner(run, task[len("ner:") :])
                elif task == "qa":
                    blocks += self.qa(run)
        for collection in inputs.collections:
            blocks += self.collection(collection)
        if inputs.timings:
            blocks += self.timings(inputs.timings)
        if inputs.notes:
            blocks.append(Heading(2, "Skipped inputs"))
            blocks += [Paragraph(note) for note in inputs.notes]
        return blocks

    def summary(self, runs: List[Run]) -> List[Block]:
        rows = []
        for run in runs:
            s = run.scores
            for task in run.tasks:
                name, main = _main_scores(s, task)
                speed = s.get("speed")
                rows.append(
                    [
                        f"`{run.name}`",
                        name,
                        main,
                        f"{speed:.0f}" if isinstance(speed, (int, float)) else "-",
                        _duration((run.timing or {}).get("seconds")),
                    ]
                )
        return [
            Heading(2, "Summary"),
            Table(["Run", "Task", "Main scores", "Words/s", "Training (h:mm:ss)"], rows, "lllrr"),
        ]

    # -- text classification --
    def textcat(self, run: Run) -> List[Block]:
        s = run.scores
        exclusive = s.get("cats_accuracy") is not None
        per_label: Dict[str, Dict[str, float]] = s.get("cats_f_per_type") or {}
        kind = "exclusive classes" if exclusive else "multi-label"
        blocks: List[Block] = [
            Heading(3, f"Text classification ({kind}, {len(per_label)} labels)"),
        ]
        overall = [
            ("Accuracy (top label)", "cats_accuracy"),
            ("Macro P", "cats_macro_p"),
            ("Macro R", "cats_macro_r"),
            ("Macro F", "cats_macro_f"),
            ("Micro F", "cats_micro_f"),
            ("Macro ROC AUC", "cats_macro_auc"),
        ]
        rows = [[name, _pct(s[key])] for name, key in overall if s.get(key) is not None]
        blocks.append(Table(["Score", "Value"], rows))
        if per_label:
            blocks += self.image(
                f"{run.name}_textcat_f1",
                f"F1 per label, {run.name}",
                _draw_f1_bars,
                per_label,
                f"{run.name}: F1 per label ({len(per_label)} labels, worst first)",
                s.get("cats_macro_f"),
            )
        support: Counter = Counter()
        for name, records in run.components("textcat").items():
            for record in records:
                support.update(record["gold"])
            if records and records[0].get("exclusive"):
                blocks += self.confusion(run, name, records)
            else:
                blocks += self.multilabel_errors(name, records)
        if per_label:
            rows = [
                [label, _pct(prf.get("p")), _pct(prf.get("r")), _pct(prf.get("f"))]
                + ([str(support[label])] if support else [])
                for label, prf in sorted(per_label.items(), key=lambda i: (_f(i[1]), i[0]))
            ]
            header = ["Label", "P", "R", "F"] + (["Gold docs"] if support else [])
            blocks += [Paragraph("Per label, worst F first:"), Table(header, rows)]
        return blocks

    def confusion(self, run: Run, component: str, records: List[Dict[str, Any]]) -> List[Block]:
        counts = confusion_counts(records)
        n = sum(counts.values())
        n_wrong = sum(v for (g, p), v in counts.items() if g != p)
        blocks: List[Block] = [
            Heading(4, f"Confusions of `{component}`"),
            Paragraph(
                f"{n_wrong} of {n} docs ({_pct(n_wrong / n if n else None)}%) have a top label "
                "other than their gold label. Rows are gold labels, columns predicted "
                "labels; a cell is the share of the row's docs, its number the count."
            ),
        ]
        top = most_confused(counts)
        labels = sorted(
            {label for pair in counts for label in pair}
            | set(run.scores.get("cats_f_per_type") or {}),
            key=str.lower,
        )
        if top:
            blocks += self.image(
                f"{run.name}_{component}_confusion_top",
                f"Most confused labels, {run.name}",
                _draw_confusion,
                counts,
                top,
                f"{run.name}: the {len(top)} most confused of {len(labels)} labels",
                True,
            )
        if len(labels) > len(top) or not top:
            blocks += self.image(
                f"{run.name}_{component}_confusion_all",
                f"Confusion matrix, all labels, {run.name}",
                _draw_confusion,
                counts,
                labels,
                f"{run.name}: all {len(labels)} labels (rows normalized; alphabetical)",
                len(labels) <= TOP_CONFUSED_LABELS,
            )
        examples: Dict[Tuple[str, str], str] = {}
        for record in records:
            if record["gold"] and record["predicted"] and record["gold"] != record["predicted"]:
                examples.setdefault((record["gold"][0], record["predicted"][0]), record["text"])
        pairs = sorted(
            ((v, g, p) for (g, p), v in counts.items() if g != p), key=lambda t: (-t[0], t[1], t[2])
        )
        if pairs:
            rows = [
                [gold, pred, str(v), _short(examples.get((gold, pred), ""))]
                for v, gold, pred in pairs[:MAX_EXAMPLES]
            ]
            blocks += [
                Paragraph("The most frequent confusions, with one example each:"),
                Table(["Gold", "Predicted", "Docs", "Example"], rows, "llrl"),
            ]
        return blocks

    def multilabel_errors(self, component: str, records: List[Dict[str, Any]]) -> List[Block]:
        missed: Counter = Counter()
        added: Counter = Counter()
        wrong = []
        for record in records:
            gold, pred = set(record["gold"]), set(record["predicted"])
            missed.update(gold - pred)
            added.update(pred - gold)
            if gold != pred:
                wrong.append(record)
        n = len(records)
        blocks: List[Block] = [
            Heading(4, f"Errors of `{component}`"),
            Paragraph(
                f"{n - len(wrong)} of {n} docs ({_pct((n - len(wrong)) / n if n else None)}%) "
                "get exactly their gold labels."
            ),
        ]
        labels = sorted(set(missed) | set(added), key=lambda k: (-(missed[k] + added[k]), k))
        if labels:
            rows = [[k, str(missed[k]), str(added[k])] for k in labels[:MAX_EXAMPLES]]
            blocks.append(Table(["Label", "Missed (FN)", "Added (FP)"], rows))
        if wrong:
            rows = [
                [
                    _short(r["text"]),
                    ", ".join(sorted(r["gold"])) or "-",
                    ", ".join(sorted(r["predicted"])) or "-",
                ]
                for r in wrong[:MAX_EXAMPLES]
            ]
            blocks += [
                Paragraph("Docs with wrong labels:"),
                Table(["Text", "Gold", "Predicted"], rows, "lll"),
            ]
        return blocks

    # -- NER --
    def ner(self, run: Run, prefix: str) -> List[Block]:
        s = run.scores
        per_type: Dict[str, Dict[str, float]] = s.get(f"{prefix}_per_type") or {}
        what = "entities" if prefix == "ents" else f"span group `{prefix[len('spans_') :]}`"
        blocks: List[Block] = [
            Heading(3, f"Named entities ({what}, {len(per_type)} labels)"),
            Table(
                ["Score", "Value"],
                [
                    ["P", _pct(s.get(f"{prefix}_p"))],
                    ["R", _pct(s.get(f"{prefix}_r"))],
                    ["F", _pct(s.get(f"{prefix}_f"))],
                ],
            ),
        ]
        if per_type:
            blocks += self.image(
                f"{run.name}_{prefix}_f1",
                f"F1 per entity label, {run.name}",
                _draw_f1_bars,
                per_type,
                f"{run.name}: F1 per entity label",
                s.get(f"{prefix}_f"),
            )
            rows = [
                [label, _pct(prf.get("p")), _pct(prf.get("r")), _pct(prf.get("f"))]
                for label, prf in sorted(per_type.items())
            ]
            blocks.append(Table(["Label", "P", "R", "F"], rows))
        components = run.components("ner")
        for component, records in components.items():
            per_label, wrong = ner_errors(records)
            if not per_label:
                continue
            blocks.append(Heading(4, f"Entity errors of `{component}`"))
            blocks.append(
                Paragraph(
                    "Each predicted and gold entity, by its (gold) label: correct, wrong "
                    "label (same span), wrong boundary (overlaps a gold entity of its "
                    "label), wrong label and boundary, missed (no prediction overlaps "
                    "it), spurious (overlaps no gold entity)."
                )
            )
            rows = [
                [label] + [str(counts[e]) for e in NER_ERRORS]
                for label, counts in per_label.items()
            ]
            total: Counter = Counter()
            for counts in per_label.values():
                total.update(counts)
            rows.append(["all"] + [str(total[e]) for e in NER_ERRORS])
            blocks.append(Table(["Label", *NER_ERRORS], rows))
            blocks += self.image(
                f"{run.name}_{component}_errors",
                f"Entity errors per label, {run.name}",
                _draw_ner_errors,
                per_label,
                f"{run.name}: entity errors per label ({component})",
            )
            if wrong:
                rows = [
                    [
                        _short(r["text"], 90),
                        _entities(r["gold"]) or "-",
                        _entities(r["predicted"]) or "-",
                    ]
                    for r in wrong[:MAX_EXAMPLES]
                ]
                blocks += [
                    Paragraph(f"{len(wrong)} of {len(records)} docs have a mistake; the first:"),
                    Table(["Text", "Gold", "Predicted"], rows, "lll"),
                ]
        return blocks

    # -- QA --
    def qa(self, run: Run) -> List[Block]:
        s = run.scores
        rows = [
            [
                "All questions",
                str(s.get("qa_n", "-")),
                _pct(s.get("qa_exact")),
                _pct(s.get("qa_f1")),
            ],
            [
                "Has an answer",
                str(s.get("qa_has_ans_n", "-")),
                _pct(s.get("qa_has_ans_exact")),
                _pct(s.get("qa_has_ans_f1")),
            ],
            [
                "No answer",
                str(s.get("qa_no_ans_n", "-")),
                _pct(s.get("qa_no_ans_exact")),
                _pct(s.get("qa_no_ans_f1")),
            ],
        ]
        blocks: List[Block] = [
            Heading(3, "Question answering"),
            Table(["Questions", "N", "EM", "F1"], rows),
        ]
        if s.get("qa_span_f") is not None:
            blocks += [
                Paragraph(
                    "Span scores as for slot filling: a non-empty answer is right when it "
                    "matches a reference exactly."
                ),
                Table(
                    ["Score", "Value"],
                    [
                        ["Span P", _pct(s.get("qa_span_p"))],
                        ["Span R", _pct(s.get("qa_span_r"))],
                        ["Span F", _pct(s.get("qa_span_f"))],
                    ],
                ),
            ]
        groups = [
            (
                row[0],
                {"EM": s.get(f"qa_{key}_exact"), "F1": s.get(f"qa_{key}_f1")},
                s.get(f"qa_{key}_n"),
            )
            for row, key in zip(rows[1:], ("has_ans", "no_ans"))
            if s.get(f"qa_{key}_n")
        ]
        if groups:
            blocks += self.image(
                f"{run.name}_qa_answerable",
                f"EM and F1 with and without an answer, {run.name}",
                _draw_grouped_bars,
                groups,
                f"{run.name}: questions with and without an answer",
            )
        for component, records in run.components("qa").items():
            questions = qa_questions(records)
            if not questions:
                continue
            blocks.append(Heading(4, f"Answers of `{component}`"))
            by_key = qa_groups(questions, "key")
            blocks.append(Paragraph("By question:"))
            header = ["Question", "N", "EM", "F1", "N with answer", "EM with answer"]
            header += ["F1 with answer", "EM no answer", "Missed", "False answers"]
            rows = [
                [
                    f"`{r['group']}`",
                    str(r["n"]),
                    _pct(r["exact"]),
                    _pct(r["f1"]),
                    str(r["n_has"]),
                    _pct(r["exact_has"]),
                    _pct(r["f1_has"]),
                    _pct(r["exact_no"]),
                    str(r["missed"]),
                    str(r["false answers"]),
                ]
                for r in by_key
            ]
            blocks.append(Table(header, rows))
            blocks += self.image(
                f"{run.name}_{component}_by_key",
                f"EM and F1 by question, {run.name}",
                _draw_grouped_bars,
                [
                    (
                        r["group"],
                        {
                            "EM, with answer": r["exact_has"],
                            "F1, with answer": r["f1_has"],
                            "EM, no answer": r["exact_no"],
                        },
                        f"{r['n_has']} / {r['n_no']}",
                    )
                    for r in by_key
                ],
                f"{run.name}: by question (n: with / without an answer)",
            )
            by_length = qa_groups(questions, "length")
            blocks.append(Paragraph("By the length of the reference answer (words):"))
            rows = [
                [
                    r["group"],
                    str(r["n"]),
                    _pct(r["exact"]),
                    _pct(r["f1"]),
                    str(r["missed"]),
                    str(r["false answers"]),
                ]
                for r in by_length
            ]
            header = ["Answer length", "N", "EM", "F1", "Missed", "False answers"]
            blocks.append(Table(header, rows))
            blocks += self.image(
                f"{run.name}_{component}_by_length",
                f"EM and F1 by answer length, {run.name}",
                _draw_grouped_bars,
                [(r["group"], {"EM": r["exact"], "F1": r["f1"]}, r["n"]) for r in by_length],
                f"{run.name}: by the length of the reference answer",
            )
            wrong = [q for q in questions if q["exact"] < 1.0]
            if wrong:
                rows = [
                    [
                        f"`{q['key']}`",
                        _short(q["text"], 80),
                        q["predicted"] or "(none)",
                        " / ".join(q["gold"]) or "(none)",
                        _pct(q["f1"], 0),
                    ]
                    for q in wrong[:MAX_EXAMPLES]
                ]
                blocks += [
                    Paragraph(
                        f"{len(wrong)} of {len(questions)} answers are not exact; the first:"
                    ),
                    Table(["Question", "Text", "Predicted", "Gold", "F1"], rows, "llllr"),
                ]
        return blocks

    # -- annotated collections --
    def collection(self, c: Collection) -> List[Block]:
        seconds = (c.timing or {}).get("seconds")
        speed = c.rows / seconds if isinstance(seconds, (int, float)) and seconds > 0 else None
        rows = [
            ["Rows annotated", str(c.rows)],
            ["Error rows", str(c.error_rows)],
            ["Wall time (h:mm:ss)", _duration(seconds)],
            ["Docs/s (rows annotated / wall time)", f"{speed:.1f}" if speed else "-"],
            ["Docs with categories", str(c.docs_with_cats)],
            ["Docs with an entity", str(c.docs_with_entities)],
            ["Docs with an answer", str(c.docs_with_answers)],
        ]
        timed = f", timed by `{c.name}{TIME_SUFFIX}`" if c.timing is not None else ""
        blocks: List[Block] = [
            Heading(2, f"Annotated collection: {c.path.name}"),
            Paragraph(f"The output of `bert-pipes annotate` in `{c.path}`{timed}."),
            Table(["Annotation", "Value"], rows),
        ]
        if c.error_rows:
            rows = [
                [str(e.get("source", "-")), str(e.get("id")), _short(str(e["reason"]), 160)]
                for e in c.first_errors
            ]
            blocks += [
                Paragraph(
                    f"{c.error_rows} input rows could not be annotated (`{c.errors_path}`); "
                    "the first:"
                ),
                Table(["Source", "Id", "Reason"], rows, "lll"),
            ]
        if c.docs_with_cats:
            top = _most_frequent(c.categories)
            shown = f"the {len(top)} most frequent of" if len(top) < len(c.categories) else "all"
            blocks += [
                Heading(3, f"Categories of {c.path.name}"),
                Paragraph(
                    f"Docs per category ({shown} {len(c.categories)} labels): a doc counts for "
                    f"each label of probability {CATEGORY_THRESHOLD} or more; "
                    f"{c.docs_without_category} of {c.docs_with_cats} docs have none."
                ),
                Table(
                    ["Category", "Docs", "% of docs"],
                    [[k, str(n), _pct(n / c.docs_with_cats, 1)] for k, n in top],
                ),
            ]
            blocks += self.image(
                f"annotated_{c.name}_categories",
                f"Most frequent categories, {c.name}",
                _draw_count_bars,
                top,
                f"{c.path.name}: docs per category (p >= {CATEGORY_THRESHOLD}), "
                f"{shown} {len(c.categories)}",
                "docs",
            )
        if c.entities:
            top = _most_frequent(c.entities)
            shown = f"the {len(top)} most frequent of" if len(top) < len(c.entities) else "all"
            blocks += [
                Heading(3, f"Entities of {c.path.name}"),
                Paragraph(
                    f"{sum(c.entities.values())} entities in {c.docs_with_entities} docs; "
                    f"per label ({shown} {len(c.entities)}):"
                ),
                Table(
                    ["Label", "Entities", "Docs"],
                    [[k, str(n), str(c.entity_docs[k])] for k, n in top],
                ),
            ]
            blocks += self.image(
                f"annotated_{c.name}_entities",
                f"Entities per label, {c.name}",
                _draw_count_bars,
                top,
                f"{c.path.name}: entities per label, {shown} {len(c.entities)}",
                "entities",
            )
        asked = {
            k: c.answered[k] + c.null_answers[k] for k in set(c.answered) | set(c.null_answers)
        }
        # A doc's own questions (e.g. SQuAD's, by question id) are asked once each:
        # one row for all of them, not one per question.
        keys = sorted(k for k, n in asked.items() if n > 1)
        own = [k for k, n in asked.items() if n == 1]
        groups: List[Tuple[str, int, float, int]] = [
            (f"`{k}`", c.answered[k], c.answer_scores.get(k, 0.0), c.null_answers[k]) for k in keys
        ]
        if own:
            groups.append(
                (
                    f"each doc's own ({len(own)} questions asked of one doc each)",
                    sum(c.answered[k] for k in own),
                    sum(c.answer_scores.get(k, 0.0) for k in own),
                    sum(c.null_answers[k] for k in own),
                )
            )
        if groups:
            means = {name: total / n if n else None for name, n, total, _ in groups}
            rows = [
                [
                    name,
                    str(n),
                    _pct(n / c.rows, 1),
                    f"{means[name]:.3f}" if means[name] is not None else "-",
                    str(null),
                ]
                for name, n, _, null in groups
            ]
            blocks += [
                Heading(3, f"Answers of {c.path.name}"),
                Paragraph(
                    "Per question: the docs with a non-empty answer, and the mean score of "
                    "their best one; the docs whose answers to it are all empty (the null "
                    "answer) are counted apart. Questions asked of a single doc are "
                    "counted together (answers, not docs)."
                ),
                Table(
                    ["Question", "Docs answered", "% of rows", "Mean score", "Null answer"], rows
                ),
            ]
            blocks += self.image(
                f"annotated_{c.name}_answers",
                f"Answers per question, {c.name}",
                _draw_grouped_bars,
                [
                    (
                        name.strip("`") if name.startswith("`") else "own questions",
                        {"rows answered": n / c.rows, "mean score (x100)": means[name]},
                        n,
                    )
                    for name, n, _, _ in groups
                ],
                f"{c.path.name}: answers per question (n: docs answered)",
            )
        return blocks

    def timings(self, timings: Dict[str, Dict[str, Any]]) -> List[Block]:
        rows = []
        for stem, data in sorted(timings.items()):
            data = data if isinstance(data, dict) else {}
            command = str(data.get("command", ""))
            # The interpreter's absolute path says nothing about the run.
            command = re.sub(r"^\S*python\S*", "python", command)
            rows.append(
                [
                    f"`{stem}`",
                    _duration(data.get("seconds")),
                    str(data.get("machine") or "-"),
                    f"`{_short(command, 160)}`" if command else "-",
                ]
            )
        return [
            Heading(2, "Timings"),
            Table(["File", "h:mm:ss", "Machine", "Command"], rows, "lrll"),
        ]


def _main_scores(s: Dict[str, Any], task: str) -> Tuple[str, str]:
    """A task's name and main scores, for the summary table."""
    if task == "textcat":
        if s.get("cats_accuracy") is not None:
            return "text classification", (
                f"accuracy {_pct(s['cats_accuracy'])}, macro F {_pct(s.get('cats_macro_f'))}"
            )
        return "text classification (multi-label)", (
            f"macro F {_pct(s.get('cats_macro_f'))}, micro F {_pct(s.get('cats_micro_f'))}"
        )
    if task.startswith("ner:"):
        prefix = task[len("ner:") :]
        p, r, f = (_pct(s.get(f"{prefix}_{k}")) for k in "prf")
        return ("NER" if prefix == "ents" else f"NER ({prefix})"), f"F {f} (P {p}, R {r})"
    main = f"EM {_pct(s.get('qa_exact'))}, F1 {_pct(s.get('qa_f1'))}"
    if s.get("qa_span_f") is not None:
        main += f", span F {_pct(s['qa_span_f'])}"
    return "question answering", main


def _most_frequent(counts: Counter, k: int = TOP_LABELS) -> List[Tuple[str, int]]:
    """The k most frequent items, ties in alphabetical order."""
    return sorted(counts.items(), key=lambda i: (-i[1], i[0]))[:k]


def _f(prf: Dict[str, Any]) -> float:
    value = prf.get("f")
    return float(value) if isinstance(value, (int, float)) else -1.0


def _entities(entities: List[Dict[str, Any]]) -> str:
    return "; ".join(f"{e['text']} ({e['label']})" for e in entities)


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


# --- rendering ------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: List[Block]) -> str:
    """The blocks as GitHub-flavoured Markdown; images are linked by file name."""
    out: List[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Table):
            align = _align(block)
            out.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
            out.append("|" + "|".join("---:" if a == "r" else ":---" for a in align) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
        elif isinstance(block, Image):
            out.append(f"![{block.alt}]({block.path.name})")
        out.append("")
    return "\n".join(out)


def _align(table: Table) -> str:
    n = len(table.header)
    return (table.align or "l" + "r" * (n - 1)).ljust(n, "r")


def _inline_html(text: str) -> str:
    escaped = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def to_html(blocks: List[Block], title: str) -> str:
    """The blocks as one self-contained HTML page, the PNGs embedded."""
    body: List[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline_html(block.text)}</p>")
        elif isinstance(block, Table):
            align = _align(block)
            head = "".join(
                f'<th class="{a}">{_inline_html(h)}</th>' for h, a in zip(block.header, align)
            )
            rows = "".join(
                "<tr>"
                + "".join(f'<td class="{a}">{_inline_html(c)}</td>' for c, a in zip(row, align))
                + "</tr>"
                for row in block.rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Image):
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            body.append(
                f'<figure><img alt="{html.escape(block.alt)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(block.path.name)}</figcaption></figure>"
            )
    joined = "\n".join(body)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222;
  padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; vertical-align: top; }}
th {{ background: #f4f4f4; }}
.r {{ text-align: right; font-variant-numeric: tabular-nums; }} .l {{ text-align: left; }}
code {{ background: #f4f4f4; padding: 0 0.2em; border-radius: 3px; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; height: auto; }}
figcaption {{ color: #666; font-size: 0.85em; }}
</style>
</head>
<body>
{joined}
</body>
</html>
"""


# --- drawing ----------------------------------------------------------------------------


def _figure_class() -> Any:
    # The object-oriented API without pyplot: no global state and no change of the
    # user's backend (a Figure saves itself with the Agg canvas).
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(f"Drawing the report's plots needs matplotlib: {PLOTS_EXTRA}") from err
    return Figure


def _draw_f1_bars(
    path: Path, per_label: Dict[str, Dict[str, Any]], title: str, average: Optional[float]
) -> None:
    """Horizontal F1 bars (percent), one per label, the worst at the top."""
    Figure = _figure_class()
    from matplotlib.patches import Patch

    items = sorted(per_label.items(), key=lambda i: (_f(i[1]), i[0]))
    labels = [label for label, _ in items]
    values = [max(_f(prf), 0.0) * 100 for _, prf in items]
    n = len(labels)
    font = 9 if n <= 30 else 7.5
    fig = Figure(figsize=(8.5, 0.19 * n + 1.6 if n > 12 else 0.35 * n + 1.8), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    # colour by value: the weak labels stand out
    ax.barh(range(n), values, color=[_f1_color(v) for v in values], height=0.75)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.set_ylim(n - 0.5, -0.5)  # the first (worst) label at the top
    low = min(values) if values else 0.0
    # a zoomed axis when every label is good, so the differences show
    left = 0.0 if low < 50 else max(0.0, 10 * (low // 10) - 10)
    ax.set_xlim(left, 100.0)
    for i, v in enumerate(values):
        # the value inside the bar's end, or after it when the bar is too short
        inside = v - left > 0.08 * (100.0 - left)
        ax.text(
            v - 0.3 if inside else max(v, left) + 0.3,
            i,
            f"{v:.1f}",
            va="center",
            ha="right" if inside else "left",
            fontsize=font - 1.5,
            color="white" if inside else "#222",
        )
    if isinstance(average, (int, float)):
        ax.axvline(average * 100, color="#333", linewidth=1, linestyle="--")
        title += f"; dashed line: overall {average * 100:.1f}"
    ax.set_xlabel("F1 (%)" + (f", the axis starts at {left:.0f}" if left > 0 else ""))
    ax.xaxis.set_ticks_position("both")
    ax.tick_params(axis="x", labeltop=n > 30)
    ax.spines[["right"]].set_visible(False)
    ax.set_title(title, fontsize=11, pad=8)
    handles = [Patch(color=_f1_color(v), label=name) for v, name in _F1_BANDS]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.savefig(path)


def _draw_count_bars(path: Path, counts: List[Tuple[str, int]], title: str, unit: str) -> None:
    """Horizontal bars of counts, one per label, the largest at the top."""
    Figure = _figure_class()
    labels = [label for label, _ in counts]
    values = [n for _, n in counts]
    n = len(labels)
    font = 9 if n <= 30 else 7.5
    fig = Figure(figsize=(8.5, 0.19 * n + 1.6 if n > 12 else 0.35 * n + 1.8), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    ax.barh(range(n), values, color="#2a788e", height=0.75)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.set_ylim(n - 0.5, -0.5)  # the first (largest) label at the top
    top = max(values, default=0)
    ax.set_xlim(0, top * 1.12 or 1)  # room for the numbers after the bars
    for i, v in enumerate(values):
        ax.text(v + 0.01 * (top or 1), i, str(v), va="center", fontsize=font - 1.5)
    ax.set_xlabel(unit)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11, pad=8)
    fig.savefig(path)


# F1 colour bands: a value in each, and its name
_F1_BANDS = ((95.0, "90 or more"), (85.0, "80 to 90"), (70.0, "60 to 80"), (0.0, "under 60"))


def _f1_color(value: float) -> str:
    if value >= 90:
        return "#2a788e"
    if value >= 80:
        return "#7ab8c4"
    if value >= 60:
        return "#f2a65a"
    return "#d1495b"


def _draw_confusion(
    path: Path, counts: Counter, labels: List[str], title: str, annotate: bool
) -> None:
    """A row-normalized confusion matrix of the given labels: each row's share of
    the gold label's docs (all its docs, also those predicted as labels not shown)."""
    import numpy

    Figure = _figure_class()
    n = len(labels)
    index = {label: i for i, label in enumerate(labels)}
    matrix = numpy.zeros((n, n))
    totals: Counter = Counter()
    for (gold, pred), v in counts.items():
        totals[gold] += v
        if gold in index and pred in index:
            matrix[index[gold], index[pred]] += v
    shares = matrix / numpy.maximum([[totals[label]] for label in labels], 1)
    cell = 0.42 if n <= TOP_CONFUSED_LABELS else max(0.13, min(0.42, 11.0 / n))
    font = 8 if n <= TOP_CONFUSED_LABELS else max(4.5, min(8.0, cell * 40))
    side = n * cell
    fig = Figure(figsize=(side + 4.2, side + 3.6), dpi=110 if n <= 40 else 130)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    # Errors in red; the diagonal (recall) in grey so the mistakes stand out.
    off = numpy.where(numpy.eye(n, dtype=bool) | (matrix == 0), numpy.nan, shares)
    vmax = float(numpy.nanmax(off)) if not numpy.isnan(off).all() else 1.0
    from matplotlib.colors import PowerNorm

    image = ax.imshow(
        off, cmap="Reds", norm=PowerNorm(0.5, vmin=0.0, vmax=vmax), interpolation="nearest"
    )
    diag = numpy.where(numpy.eye(n, dtype=bool), shares, numpy.nan)
    ax.imshow(diag, cmap="Greys", vmin=0.0, vmax=1.6, interpolation="nearest")
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=font)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.tick_params(length=0)
    ax.set_xticks(numpy.arange(-0.5, n), minor=True)
    ax.set_yticks(numpy.arange(-0.5, n), minor=True)
    ax.grid(which="minor", color="#eeeeee", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    if annotate:
        for i in range(n):
            for j in range(n):
                if matrix[i, j] or (i == j and totals[labels[i]]):
                    dark = i != j and shares[i, j] > 0.6 * vmax
                    ax.text(
                        j,
                        i,
                        f"{int(matrix[i, j])}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "#222",
                    )
    ax.set_xlabel("predicted label")
    ax.set_ylabel("gold label")
    ax.set_title(
        title + "\ngrey: correct (the row's recall); red: share of the row's docs", fontsize=10
    )
    fig.colorbar(image, ax=ax, shrink=0.6, label="share of the gold label's docs (errors)")
    fig.savefig(path)


def _draw_ner_errors(path: Path, per_label: Dict[str, Counter], title: str) -> None:
    """Stacked horizontal bars of each label's mistakes by kind (NER_ERRORS but
    "correct", which the label's name shows)."""
    import numpy

    Figure = _figure_class()
    labels = list(per_label)
    n = len(labels)
    colors = ["#f2a65a", "#ffd166", "#ef8354", "#d1495b", "#8d6a9f"]
    fig = Figure(figsize=(9.0, 0.5 * n + 1.9), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    left = numpy.zeros(n)
    for category, color in zip(NER_ERRORS[1:], colors):
        values = numpy.array([per_label[label][category] for label in labels], dtype=float)
        ax.barh(range(n), values, left=left, color=color, label=category, height=0.7)
        for i, v in enumerate(values):
            if v >= 0.04 * max(left.max() + values.max(), 1):
                ax.text(left[i] + v / 2, i, f"{int(v)}", ha="center", va="center", fontsize=7.5)
        left += values
    ax.set_yticks(range(n))
    ax.set_yticklabels(
        [f"{label}\n{per_label[label]['correct']} correct" for label in labels], fontsize=9
    )
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("mistakes (a spurious entity counts for its own label, others for the gold one)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11)
    fig.legend(loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    fig.savefig(path)


def _draw_grouped_bars(
    path: Path,
    groups: List[Tuple[str, Dict[str, Any], Any]],
    title: str,
) -> None:
    """Side-by-side bars of scores in percent (e.g. EM and F1) per group, with each
    group's n; a score of None (no questions) has no bar."""
    import numpy

    Figure = _figure_class()
    series = list(groups[0][1]) if groups else []
    n = len(groups)
    width = 0.8 / max(len(series), 1)
    fig = Figure(figsize=(max(5.5, (0.5 + 0.35 * len(series)) * n + 2.2), 4.3), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    colors = ["#2a788e", "#7ab8c4", "#f2a65a", "#d1495b"]
    x = numpy.arange(n)
    for k, (key, color) in enumerate(zip(series, colors)):
        values = [g[1].get(key) for g in groups]
        heights = [float(v) * 100 if isinstance(v, (int, float)) else 0.0 for v in values]
        offset = (k - (len(series) - 1) / 2) * width
        bars = ax.bar(x + offset, heights, width * 0.92, color=color, label=key)
        for bar, v in zip(bars, values):
            if isinstance(v, (int, float)):
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_height() + 1,
                    f"{v * 100:.1f}",
                    ha="center",
                    va="bottom",
                    fontsize=7.5,
                )
    ax.set_xticks(x)
    ax.set_xticklabels([f"{g[0]}\n(n={g[2]})" for g in groups], fontsize=8.5)
    ax.set_ylim(0, 108)
    ax.set_ylabel("%")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11)
    fig.legend(loc="outside lower center", ncol=len(series), fontsize=8, frameon=False)
    fig.savefig(path)
