"""The section of a text classification run: scores, F1 per label, confusions
of an exclusive classifier or the label errors of a multi-label one."""

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from .analysis import (
    TOP_CONFUSED_LABELS,
    confusion_counts,
    f_of,
    most_confused,
)
from .document import MAX_EXAMPLES, Block, Heading, Paragraph, Table, pct, short
from .inputs import Run
from .plots import (
    Figures,
    draw_confusion,
    draw_f1_bars,
    draw_reliability,
    draw_risk_coverage,
)

# The routing scores of an exclusive bert_textcat (docs/routing.md), as shown.
ROUTING_SCORES = (
    ("Accuracy of the routed docs over all in-scope docs", "routed_accuracy"),
    ("In-scope docs routed (coverage)", "coverage"),
    ("Out-of-scope recall", "oos_r"),
    ("Out-of-scope precision", "oos_p"),
    ("Out-of-scope F1", "oos_f"),
    ("Out-of-scope F2", "oos_f2"),
    ("Out-of-scope AUROC", "oos_auroc"),
    ("Out-of-scope docs kept at 95% in-scope recall (FPR95)", "oos_fpr95"),
)


def textcat_section(run: Run, prefix: str, figures: Figures) -> List[Block]:
    """The section of a run's text classification scores under `prefix` ("cats",
    or a bert_textcat's score_prefix) and the predictions of its components."""
    s = run.scores
    exclusive = s.get(f"{prefix}_accuracy") is not None
    per_label: Dict[str, Dict[str, float]] = s.get(f"{prefix}_f_per_type") or {}
    kind = "exclusive classes" if exclusive else "multi-label"
    scores_of = "" if prefix == "cats" else f", scores `{prefix}_`"
    blocks: List[Block] = [
        Heading(3, f"Text classification ({kind}, {len(per_label)} labels{scores_of})"),
    ]
    overall = [
        ("Accuracy (top label)", "accuracy"),
        ("Macro P", "macro_p"),
        ("Macro R", "macro_r"),
        ("Macro F", "macro_f"),
        ("Micro F", "micro_f"),
        ("Macro ROC AUC", "macro_auc"),
    ]
    rows = [
        [name, pct(s[f"{prefix}_{key}"])]
        for name, key in overall
        if s.get(f"{prefix}_{key}") is not None
    ]
    blocks.append(Table(["Score", "Value"], rows))
    stem = run.name if prefix == "cats" else f"{run.name}_{prefix}"
    if exclusive:
        blocks += _routing(s, prefix, stem, figures)
    if per_label:
        blocks += figures.image(
            f"{stem}_textcat_f1",
            f"F1 per label, {stem}",
            draw_f1_bars,
            per_label,
            f"{stem}: F1 per label ({len(per_label)} labels, worst first)",
            s.get(f"{prefix}_macro_f"),
        )
    support: Counter = Counter()
    for name, records in run.components("textcat").items():
        if records[0].get("score_prefix", "cats") != prefix:
            continue  # another classifier of the pipeline, scored under its own prefix
        for record in records:
            support.update(record["gold"])
        if records[0].get("exclusive"):
            blocks += _confusion(run, name, records, prefix, figures)
        else:
            blocks += _multilabel_errors(name, records)
    if per_label:
        rows = [
            [label, pct(prf.get("p")), pct(prf.get("r")), pct(prf.get("f"))]
            + ([str(support[label])] if support else [])
            for label, prf in sorted(per_label.items(), key=lambda i: (f_of(i[1]), i[0]))
        ]
        header = ["Label", "P", "R", "F"] + (["Gold docs"] if support else [])
        blocks += [Paragraph("Per label, worst F first:"), Table(header, rows)]
    return blocks


def _confusion(
    run: Run, component: str, records: List[Dict[str, Any]], prefix: str, figures: Figures
) -> List[Block]:
    counts = confusion_counts(records)
    n = sum(counts.values())
    n_wrong = sum(v for (g, p), v in counts.items() if g != p)
    blocks: List[Block] = [
        Heading(4, f"Confusions of `{component}`"),
        Paragraph(
            f"{n_wrong} of {n} docs ({pct(n_wrong / n if n else None)}%) have a top label "
            "other than their gold label. Rows are gold labels, columns predicted "
            "labels; a cell is the share of the row's docs, its number the count."
        ),
    ]
    top = most_confused(counts)
    labels = sorted(
        {label for pair in counts for label in pair}
        | set(run.scores.get(f"{prefix}_f_per_type") or {}),
        key=str.lower,
    )
    if top:
        blocks += figures.image(
            f"{run.name}_{component}_confusion_top",
            f"Most confused labels, {run.name}",
            draw_confusion,
            counts,
            top,
            f"{run.name}: the {len(top)} most confused of {len(labels)} labels",
            True,
        )
    if len(labels) > len(top) or not top:
        blocks += figures.image(
            f"{run.name}_{component}_confusion_all",
            f"Confusion matrix, all labels, {run.name}",
            draw_confusion,
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
            [gold, pred, str(v), short(examples.get((gold, pred), ""))]
            for v, gold, pred in pairs[:MAX_EXAMPLES]
        ]
        blocks += [
            Paragraph("The most frequent confusions, with one example each:"),
            Table(["Gold", "Predicted", "Docs", "Example"], rows, "llrl"),
        ]
    return blocks


def _multilabel_errors(component: str, records: List[Dict[str, Any]]) -> List[Block]:
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
            f"{n - len(wrong)} of {n} docs ({pct((n - len(wrong)) / n if n else None)}%) "
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
                short(r["text"]),
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


def _routing(s: Dict[str, Any], prefix: str, stem: str, figures: Figures) -> List[Block]:
    """Routing scores, the risk-coverage curve and the reliability diagram of an
    exclusive classifier (nothing for a run without routes)."""
    curve = s.get(f"{prefix}_risk_coverage")
    bins = s.get(f"{prefix}_reliability")
    if not curve and not bins:
        return []
    rows = [
        [name, pct(s[f"{prefix}_{key}"])]
        for name, key in ROUTING_SCORES
        if s.get(f"{prefix}_{key}") is not None
    ]
    ece = s.get(f"{prefix}_ece")
    if ece is not None:
        rows.append(["Expected calibration error, in-scope docs (15 bins)", f"{ece:.4f}"])
    blocks: List[Block] = [Heading(4, "Routing"), Table(["Score", "Value"], rows)]
    share, precision = s.get(f"{prefix}_routed_share"), s.get(f"{prefix}_routed_precision")
    coverage, right = s.get(f"{prefix}_coverage"), s.get(f"{prefix}_routed_accuracy")
    in_scope = s.get(f"{prefix}_risk_coverage_in_scope")
    if curve:
        # (name, curve, the configured threshold's point on it)
        curves: List[Tuple[str, List[Dict[str, float]], Optional[Tuple[float, float]]]] = []
        if in_scope:
            point = None
            if coverage and right is not None:  # routed right over the in-scope docs routed
                point = (float(coverage), float(right) / float(coverage))
            curves.append(("in-scope docs", in_scope, point))
        point = None
        if share is not None and precision is not None:
            point = (float(share), float(precision))
        curves.append(("all docs", curve, point))
        blocks += figures.image(
            f"{stem}_risk_coverage",
            f"Risk-coverage curves, {stem}",
            draw_risk_coverage,
            curves,
            f"{stem}: accuracy against docs routed",
        )
        blocks.append(
            Paragraph(
                "Each curve routes the most confident docs first. Over the in-scope docs, "
                "the share routed is the coverage and a doc is right when its top label "
                "is its gold label; over all docs, an out-of-scope doc routed counts as "
                "wrong, so with much foreign traffic that curve falls early. The dots "
                "are the configured threshold."
            )
        )
    route_bins = s.get(f"{prefix}_route_reliability")
    if route_bins:
        blocks += figures.image(
            f"{stem}_route_reliability",
            f"Reliability of the routing confidence, {stem}",
            draw_reliability,
            route_bins,
            f"{stem}: routing confidence, all docs",
            None,
            "routing confidence",
        )
        blocks.append(
            Paragraph(
                "Per bin of the routing confidence (`doc._.route`), all docs: the share "
                "whose top label is their gold label (an out-of-scope doc is wrong). The "
                "threshold routes the bins at or above it."
            )
        )
    if bins:
        blocks += figures.image(
            f"{stem}_reliability",
            f"Reliability diagram, {stem}",
            draw_reliability,
            bins,
            f"{stem}: reliability of the top probability, in-scope docs",
            ece,
        )
    return blocks
