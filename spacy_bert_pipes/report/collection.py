"""The section of an annotated collection (an output of `bert-pipes annotate`):
its counts, error rows, categories, entities and answers per question."""

from collections import Counter
from typing import Callable, List, Tuple

from .document import Block, Heading, Paragraph, Table, duration, pct, short
from .inputs import CATEGORY_THRESHOLD, TIME_SUFFIX, Collection
from .plots import (
    Figures,
    draw_count_bars,
    draw_grouped_bars,
)

# How the docs not routed are shown among the routed labels.
NOT_ROUTED = {"out_of_scope": "(none of these)", "ambiguous": "(ambiguous)"}
# Categories and entity labels of an annotated collection shown (the most frequent).
TOP_LABELS = 20


def collection_section(c: Collection, figures: Figures) -> List[Block]:
    """The section of an annotated collection: its counts, errors and answers."""
    timing = c.timing or {}
    seconds = timing.get("seconds")
    # annotate's own timing counts the docs it timed: a resumed run's own chunks only
    docs = timing.get("docs")
    timed_docs = docs if isinstance(docs, int) and not isinstance(docs, bool) else c.rows
    speed = timed_docs / seconds if isinstance(seconds, (int, float)) and seconds > 0 else None
    rows = [
        ["Rows annotated", str(c.rows)],
        ["Error rows", str(c.error_rows)],
        ["Wall time (h:mm:ss)", duration(seconds)],
        ["Docs/s (rows annotated / wall time)", f"{speed:.1f}" if speed else "-"],
        ["Docs with categories", str(c.docs_with_cats)],
        ["Docs with an entity", str(c.docs_with_entities)],
        ["Docs with an answer", str(c.docs_with_answers)],
    ]
    timed = f", timed by `{c.name}{TIME_SUFFIX}`" if c.timing is not None else ""
    if timing.get("resumed_chunks"):
        timed += f" ({timing.get('covers') or 'a resumed run: its own chunks only'})"
    blocks: List[Block] = [
        Heading(2, f"Annotated collection: {c.path.name}"),
        Paragraph(f"The output of `bert-pipes annotate` in `{c.path}`{timed}."),
        Table(["Annotation", "Value"], rows),
    ]
    if speed is None:
        blocks.append(
            Paragraph(
                f"No wall time: no `{c.name}{TIME_SUFFIX}` among the metrics or beside "
                f"`{c.path}`. `bert-pipes annotate` writes it beside OUTPUT when a run "
                "finishes; an output written by an earlier version has none."
            )
        )
    if c.error_rows:
        rows = [
            [str(e.get("source", "-")), str(e.get("id")), short(str(e["reason"]), 160)]
            for e in c.first_errors
        ]
        blocks += [
            Paragraph(
                f"{c.error_rows} input rows could not be annotated (`{c.errors_path}`); the first:"
            ),
            Table(["Source", "Id", "Reason"], rows, "lll"),
        ]
    if c.docs_with_route:
        decided = c.routed + Counter(
            {NOT_ROUTED[decision]: n for decision, n in c.not_routed.items()}
        )
        n_routed = sum(c.routed.values())
        blocks += _label_counts(
            c,
            figures,
            decided,
            "categories",
            summary=lambda shown: (
                f"Docs per routing decision (the `route` column; {shown} {len(decided)}): "
                f"{n_routed} of {c.docs_with_route} docs routed to a label, "
                f"{c.not_routed['out_of_scope']} to none of these, "
                f"{c.not_routed['ambiguous']} ambiguous."
            ),
            columns=["Routed to", "Docs", "% of docs"],
            row=lambda k, n: [k, str(n), pct(n / c.docs_with_route, 1)],
            plot=("Docs per routing decision", "docs per routing decision", "docs"),
        )
    elif c.docs_with_cats:
        blocks += _label_counts(
            c,
            figures,
            c.categories,
            "categories",
            summary=lambda shown: (
                f"Docs per category ({shown} {len(c.categories)} labels): a doc counts for "
                f"each label of probability {CATEGORY_THRESHOLD} or more; "
                f"{c.docs_without_category} of {c.docs_with_cats} docs have none."
            ),
            columns=["Category", "Docs", "% of docs"],
            row=lambda k, n: [k, str(n), pct(n / c.docs_with_cats, 1)],
            plot=(
                "Most frequent categories",
                f"docs per category (p >= {CATEGORY_THRESHOLD})",
                "docs",
            ),
        )
    if c.entities:
        blocks += _label_counts(
            c,
            figures,
            c.entities,
            "entities",
            summary=lambda shown: (
                f"{sum(c.entities.values())} entities in {c.docs_with_entities} docs; "
                f"per label ({shown} {len(c.entities)}):"
            ),
            columns=["Label", "Entities", "Docs"],
            row=lambda k, n: [k, str(n), str(c.entity_docs[k])],
            plot=("Entities per label", "entities per label", "entities"),
        )
    asked = {k: c.answered[k] + c.null_answers[k] for k in set(c.answered) | set(c.null_answers)}
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
                pct(n / c.rows, 1),
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
            Table(["Question", "Docs answered", "% of rows", "Mean score", "Null answer"], rows),
        ]
        blocks += figures.image(
            f"annotated_{c.name}_answers",
            f"Answers per question, {c.name}",
            draw_grouped_bars,
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


def _most_frequent(counts: Counter, k: int = TOP_LABELS) -> List[Tuple[str, int]]:
    """The k most frequent items, ties in alphabetical order."""
    return sorted(counts.items(), key=lambda i: (-i[1], i[0]))[:k]


def _label_counts(
    c: Collection,
    figures: Figures,
    counts: Counter,
    kind: str,
    *,
    summary: Callable[[str], str],
    columns: List[str],
    row: Callable[[str, int], List[str]],
    plot: Tuple[str, str, str],
) -> List[Block]:
    """The most frequent labels of one kind ("categories", "entities"): a heading,
    `summary(shown)`, a table of `row(label, count)` and a bar chart.

    plot (Tuple[str, str, str]): the picture's alt text, what its title counts and
        the bars' unit.
    """
    top = _most_frequent(counts)
    shown = f"the {len(top)} most frequent of" if len(top) < len(counts) else "all"
    alt, counted, unit = plot
    blocks: List[Block] = [
        Heading(3, f"{kind.capitalize()} of {c.path.name}"),
        Paragraph(summary(shown)),
        Table(columns, [row(k, n) for k, n in top]),
    ]
    blocks += figures.image(
        f"annotated_{c.name}_{kind}",
        f"{alt}, {c.name}",
        draw_count_bars,
        top,
        f"{c.path.name}: {counted}, {shown} {len(counts)}",
        unit,
    )
    return blocks
