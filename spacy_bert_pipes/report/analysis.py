"""Analyses of per-doc predictions, no plotting: confusions of a classifier,
entity error types, questions grouped by key and by answer length."""

from collections import Counter, defaultdict
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..scorers import normalize_answer

# The confusion matrix of the most confused labels shows at most this many.
TOP_CONFUSED_LABELS = 20
# Answer length buckets (words of the first reference answer, normalized).
LENGTH_BUCKETS: Tuple[Tuple[str, int, int], ...] = (
    ("no answer", 0, 0),
    ("1 word", 1, 1),
    ("2 words", 2, 2),
    ("3 words", 3, 3),
    ("4-5 words", 4, 5),
    ("6+ words", 6, 10**9),
)
NER_ERRORS = (
    "correct",
    "wrong label",
    "wrong boundary",
    "wrong label and boundary",
    "missed",
    "spurious",
)


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


def f_of(prf: Dict[str, Any]) -> float:
    """The F-score of a {"p", "r", "f"} dict; -1 when it has none (sorts first)."""
    value = prf.get("f")
    return float(value) if isinstance(value, (int, float)) else -1.0


def pca_2d(vectors: Any) -> Tuple[Any, List[float]]:
    """The rows' first two principal components (of their unit vectors, so
    that distances follow cosine), and the share of variance each explains.

    vectors (array): (rows, width), no zero rows.
    RETURNS (Tuple[array, List[float]]): Points (rows, 2), and two shares.
    """
    import numpy

    unit = numpy.asarray(vectors, dtype="float64")
    unit = unit / numpy.linalg.norm(unit, axis=1, keepdims=True)
    centred = unit - unit.mean(axis=0)
    # the eigenvectors of the (width, width) covariance: cheap for any number of rows
    values, axes = numpy.linalg.eigh(centred.T @ centred)
    order = numpy.argsort(values)[::-1][:2]
    axes = axes[:, order]
    # a sign that does not depend on the solver: the largest loading positive
    columns = numpy.arange(axes.shape[1])
    axes = axes * numpy.sign(axes[numpy.abs(axes).argmax(axis=0), columns])
    points = centred @ axes
    total = float(values.sum())
    shares = [float(values[i]) / total if total > 0 else 0.0 for i in order]
    return points, shares


def intent_groups(intents: List[Optional[str]], k: int) -> List[str]:
    """Each row's group on the map: its intent if among the k most frequent
    (ties in alphabetical order), else "other" (also for rows without one)."""
    counts = Counter(i for i in intents if i is not None)
    top = {label for label, _ in sorted(counts.items(), key=lambda i: (-i[1], i[0]))[:k]}
    return [i if i in top else OTHER for i in intents]


# The group of the rows whose intent is not among the most frequent.
OTHER = "other"
