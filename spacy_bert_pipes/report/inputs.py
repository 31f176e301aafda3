"""The report's inputs: metrics JSONs and their runs, `bert-pipes evaluate`
predictions, timing JSONs and annotated collections, read into `Inputs`."""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union
from typing import Collection as Labels

from ..io.errors import ConversionError
from ..io.output import errors_path_for, timing_path_for
from ..io.output_readers import (
    output_id_column,
    read_error_records,
    read_jsonl_records,
    read_output_rows,
)
from ..similar import has_vectors, read_vectors, similar_paths, top_intent
from .document import short

PREDICTIONS_SUFFIX = "_predictions.jsonl"
# Timing JSONs end in TIME_SUFFIX; `<run>_train_time.json` is a run's training time.
TIME_SUFFIX = "_time.json"
TRAIN_TIME = "_train_time"
# An annotated doc counts for a category at this probability or more.
CATEGORY_THRESHOLD = 0.5
# The decisions of a row's route (docs/routing.md).
ROUTE_DECISIONS = ("routed", "out_of_scope", "ambiguous")
# Error rows of an annotated collection whose reasons are listed.
MAX_ERROR_REASONS = 5
# Near-duplicate pairs of an annotated collection shown as examples.
MAX_DUPLICATE_EXAMPLES = 5


class ReportError(ValueError):
    """A metrics, predictions or annotations file cannot be read."""


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
        """The tasks the scores cover: "textcat:<prefix>" (one per score prefix
        of a text classifier, "cats" unless its `score_prefix` says otherwise),
        "ner:<prefix>" (one per key prefix), "qa". A task counts only where its
        main score is a number: a pipeline with several heads, evaluated on one
        head's test set, writes None for the others."""
        tasks = [f"textcat:{prefix}" for prefix in textcat_prefixes(self.scores)]
        tasks += [f"ner:{prefix}" for prefix in ner_prefixes(self.scores)]
        if self.scores.get("qa_f1") is not None:
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
    routed (Counter): Label -> rows routed to it (the `route` column of an
        exclusive bert_textcat, docs/routing.md).
    not_routed (Counter): "out_of_scope" or "ambiguous" -> rows not routed.
    docs_with_route (int): Rows with a route.
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
    ids (List[str]): Each row's id.
    intents (List[Optional[str]]): Each row's predicted intent: its most
        probable category (among the report's intent labels, if given).
    vectors (Optional[Any]): The rows' doc vectors (`annotate --vectors`), a
        float32 array (rows, width); None without a vector column.
    similar (Optional[Dict[str, Any]]): `<name>_similar.json` of `bert-pipes
        similar-collection`, if found beside the output.
    duplicate_examples (List[Dict[str, Any]]): The first MAX_DUPLICATE_EXAMPLES
        records of its near-duplicate pairs (the most similar).
    """

    name: str
    path: Path
    rows: int = 0
    docs_with_cats: int = 0
    categories: Counter = field(default_factory=Counter)
    docs_without_category: int = 0
    routed: Counter = field(default_factory=Counter)
    not_routed: Counter = field(default_factory=Counter)
    docs_with_route: int = 0
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
    ids: List[str] = field(default_factory=list)
    intents: List[Optional[str]] = field(default_factory=list)
    vectors: Optional[Any] = None
    similar: Optional[Dict[str, Any]] = None
    duplicate_examples: List[Dict[str, Any]] = field(default_factory=list)

    def add(self, row: Dict[str, Any], where: str, labels: Optional[Labels[str]] = None) -> None:
        """Count one output row; `where` ("file:line") names it in errors;
        `labels`: the categories its intent is chosen from (None: all)."""
        if row.get("id") is None:
            raise ReportError(f'{where}: a row without "id"')
        cats, entities, answers = row.get("cats"), row.get("entities", []), row.get("answers", [])
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
        route = row.get("route")
        if route is not None and not (
            isinstance(route, dict) and route.get("decision") in ROUTE_DECISIONS
        ):
            raise ReportError(
                f"{where}: route is not {{label, top, confidence, decision}} or null: "
                f"{_show(route)}"
            )
        self.rows += 1
        self.ids.append(str(row["id"]))
        if route is not None:
            self.docs_with_route += 1
            if route["decision"] == "routed":
                self.routed[str(route["label"])] += 1
            else:
                self.not_routed[route["decision"]] += 1
        self.intents.append(top_intent(cats, labels))
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


def textcat_prefixes(scores: Dict[str, Any]) -> List[str]:
    """The prefixes of text classification scores with a number: "cats" first,
    then any other `score_prefix` (each has <prefix>_macro_f and
    <prefix>_f_per_type), sorted."""
    prefixes = {
        key[: -len("_f_per_type")]
        for key in scores
        if key.endswith("_f_per_type") and not key.startswith(("ents", "spans_"))
    }
    scored = [p for p in prefixes if scores.get(f"{p}_macro_f") is not None]
    return sorted(scored, key=lambda p: (p != "cats", p))


def ner_prefixes(scores: Dict[str, Any]) -> List[str]:
    """The prefixes of entity scores with a number: "ents", and "spans_<key>"
    for span groups."""
    prefixes = ["ents"] if scores.get("ents_f") is not None else []
    prefixes += sorted(
        key[: -len("_f")]
        for key in scores
        if key.startswith("spans_") and key.endswith("_f") and scores[key] is not None
    )
    return prefixes


def read_inputs(
    paths: Sequence[Union[str, Path]],
    predictions: Sequence[Union[str, Path]] = (),
    annotations: Sequence[Union[str, Path]] = (),
    intents: Optional[Sequence[str]] = None,
) -> Inputs:
    """Gather the runs of metrics folders and files, and the annotated collections.

    paths (Sequence[Union[str, Path]]): Metrics JSONs and folders of them (a
        folder's `*.json`, `*_time.json` and `*_predictions.jsonl`).
    predictions (Sequence[Union[str, Path]]): More predictions files; each
        belongs to the run of its name (`<run>_predictions.jsonl`, or `<run>.jsonl`).
    annotations (Sequence[Union[str, Path]]): Outputs of `bert-pipes annotate`
        (see `read_collection`); each one's `<stem>_time.json` is looked for
        among the timings of `paths`, then beside it.
    intents (Optional[Sequence[str]]): The categories a row's predicted intent
        is chosen from (None: all).
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
    for name, scored in runs.items():
        # its own training time, else that of the pipeline it scores on one of
        # several test sets (`multitask_banking77`: `multitask_train_time`), a
        # prefix of its name that is no run itself
        parts = name.split("_")
        for end in range(len(parts), 0, -1):
            prefix = "_".join(parts[:end])
            timing = timings.get(prefix + TRAIN_TIME)
            if isinstance(timing, dict) and (prefix == name or prefix not in runs):
                scored.timing = timing
                break
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
        collections[path.stem] = read_collection(path, timings, intents)
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
    path: Union[str, Path],
    timings: Optional[Dict[str, Dict[str, Any]]] = None,
    intents: Optional[Sequence[str]] = None,
) -> Collection:
    """Count the rows of a `bert-pipes annotate` OUTPUT, streaming them.

    path (Union[str, Path]): A .jsonl, .csv or .parquet file, or a folder of
        Parquet shards. Each row has "id", "cats" ({label: probability} or null),
        "entities" and "answers" (in CSV and Parquet the last three as JSON text).
        Its error rows are read from `<OUTPUT>.errors.jsonl`, if it exists.
    timings (Optional[Dict[str, Dict[str, Any]]]): Timing JSONs by file stem;
        `<stem>_time` is the annotation's wall time, else `<stem>_time.json`
        beside the output (which `bert-pipes annotate` writes).
    intents (Optional[Sequence[str]]): The categories a row's intent is chosen
        from (None: all).
    RETURNS (Collection): The counts, with the doc vectors if the output has a
        "vector" column and the summary of `bert-pipes similar-collection`
        (`<stem>_similar.json` beside it) if there is one.
    """
    path = Path(path)
    if not path.exists():
        raise ReportError(f"{path}: no such file or folder")
    collection = Collection(path.stem, path)
    errors_path = errors_path_for(path)
    labels = set(intents) if intents is not None else None
    try:
        for where, row in read_output_rows(path):
            collection.add(row, where, labels)
        if errors_path.is_file():
            collection.errors_path = errors_path
            for _, record in read_error_records(errors_path):
                collection.error_rows += 1
                if len(collection.first_errors) < MAX_ERROR_REASONS:
                    collection.first_errors.append(record)
        if has_vectors(path):
            vectors = read_vectors(path, id_column=output_id_column(path))
            if vectors.ids != collection.ids:
                raise ReportError(f"{path}: its vectors' ids are not its rows' ids")
            collection.vectors = vectors.vectors
        _read_similar(collection)
    except ConversionError as err:  # not an output of annotate: the file and line say where
        raise ReportError(str(err)) from err
    timing_path = timing_path_for(path)
    timing = (timings or {}).get(timing_path.stem)
    if timing is None and timing_path.is_file():
        timing = _read_json(timing_path)
    if isinstance(timing, dict):
        collection.timing = timing
    return collection


def _read_similar(collection: Collection) -> None:
    """`<stem>_similar.json` beside the output and the first pairs of its
    duplicates file, if they exist."""
    _, _, summary_path = similar_paths(collection.path)
    if not summary_path.is_file():
        return
    summary = _read_json(summary_path)
    if not isinstance(summary, dict) or not isinstance(summary.get("pairs"), int):
        raise ReportError(f"{summary_path}: not a summary of bert-pipes similar-collection")
    collection.similar = summary
    duplicates = summary_path.parent / str(summary.get("duplicates", ""))
    if summary["pairs"] and duplicates.is_file():
        for where, record in read_jsonl_records(duplicates):
            if len(collection.duplicate_examples) >= MAX_DUPLICATE_EXAMPLES:
                break
            if not isinstance(record, dict) or "cosine" not in record:
                raise ReportError(f"{where}: not a pair of bert-pipes similar-collection")
            collection.duplicate_examples.append(record)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _show(value: Any, n: int = 80) -> str:
    return short(json.dumps(value, ensure_ascii=False, default=str), n)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: {err}") from err


def _is_metrics(data: Dict[str, Any]) -> bool:
    return any(key.startswith(("cats_", "ents_", "spans_", "qa_")) for key in data)
