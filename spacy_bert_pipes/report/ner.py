"""The section of an NER run (entities or a span group): scores, F1 per label
and the entity error types of its predictions."""

from collections import Counter
from typing import Any, Dict, List

from .analysis import (
    NER_ERRORS,
    ner_errors,
)
from .document import MAX_EXAMPLES, Block, Heading, Paragraph, Table, pct, short
from .inputs import Run
from .plots import (
    Figures,
    draw_f1_bars,
    draw_ner_errors,
)


def ner_section(run: Run, prefix: str, figures: Figures) -> List[Block]:
    """The section of a run's entity scores ("ents" or "spans_<key>") and predictions."""
    s = run.scores
    per_type: Dict[str, Dict[str, float]] = s.get(f"{prefix}_per_type") or {}
    what = "entities" if prefix == "ents" else f"span group `{prefix[len('spans_') :]}`"
    blocks: List[Block] = [
        Heading(3, f"Named entities ({what}, {len(per_type)} labels)"),
        Table(
            ["Score", "Value"],
            [
                ["P", pct(s.get(f"{prefix}_p"))],
                ["R", pct(s.get(f"{prefix}_r"))],
                ["F", pct(s.get(f"{prefix}_f"))],
            ],
        ),
    ]
    if per_type:
        blocks += figures.image(
            f"{run.name}_{prefix}_f1",
            f"F1 per entity label, {run.name}",
            draw_f1_bars,
            per_type,
            f"{run.name}: F1 per entity label",
            s.get(f"{prefix}_f"),
        )
        rows = [
            [label, pct(prf.get("p")), pct(prf.get("r")), pct(prf.get("f"))]
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
            [label] + [str(counts[e]) for e in NER_ERRORS] for label, counts in per_label.items()
        ]
        total: Counter = Counter()
        for counts in per_label.values():
            total.update(counts)
        rows.append(["all"] + [str(total[e]) for e in NER_ERRORS])
        blocks.append(Table(["Label", *NER_ERRORS], rows))
        blocks += figures.image(
            f"{run.name}_{component}_errors",
            f"Entity errors per label, {run.name}",
            draw_ner_errors,
            per_label,
            f"{run.name}: entity errors per label ({component})",
        )
        if wrong:
            rows = [
                [
                    short(r["text"], 90),
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


def _entities(entities: List[Dict[str, Any]]) -> str:
    return "; ".join(f"{e['text']} ({e['label']})" for e in entities)
