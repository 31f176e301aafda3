"""The section of a question answering run: EM and F1 with and without an
answer, by question and by answer length, and the answers that are not exact."""

from typing import List

from .analysis import (
    qa_groups,
    qa_questions,
)
from .document import MAX_EXAMPLES, Block, Heading, Paragraph, Table, pct, short
from .inputs import Run
from .plots import (
    Figures,
    draw_grouped_bars,
)


def qa_section(run: Run, figures: Figures) -> List[Block]:
    """The section of a run's question answering scores and predictions."""
    s = run.scores
    rows = [
        [
            "All questions",
            str(s.get("qa_n", "-")),
            pct(s.get("qa_exact")),
            pct(s.get("qa_f1")),
        ],
        [
            "Has an answer",
            str(s.get("qa_has_ans_n", "-")),
            pct(s.get("qa_has_ans_exact")),
            pct(s.get("qa_has_ans_f1")),
        ],
        [
            "No answer",
            str(s.get("qa_no_ans_n", "-")),
            pct(s.get("qa_no_ans_exact")),
            pct(s.get("qa_no_ans_f1")),
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
                    ["Span P", pct(s.get("qa_span_p"))],
                    ["Span R", pct(s.get("qa_span_r"))],
                    ["Span F", pct(s.get("qa_span_f"))],
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
        blocks += figures.image(
            f"{run.name}_qa_answerable",
            f"EM and F1 with and without an answer, {run.name}",
            draw_grouped_bars,
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
                pct(r["exact"]),
                pct(r["f1"]),
                str(r["n_has"]),
                pct(r["exact_has"]),
                pct(r["f1_has"]),
                pct(r["exact_no"]),
                str(r["missed"]),
                str(r["false answers"]),
            ]
            for r in by_key
        ]
        blocks.append(Table(header, rows))
        blocks += figures.image(
            f"{run.name}_{component}_by_key",
            f"EM and F1 by question, {run.name}",
            draw_grouped_bars,
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
                pct(r["exact"]),
                pct(r["f1"]),
                str(r["missed"]),
                str(r["false answers"]),
            ]
            for r in by_length
        ]
        header = ["Answer length", "N", "EM", "F1", "Missed", "False answers"]
        blocks.append(Table(header, rows))
        blocks += figures.image(
            f"{run.name}_{component}_by_length",
            f"EM and F1 by answer length, {run.name}",
            draw_grouped_bars,
            [(r["group"], {"EM": r["exact"], "F1": r["f1"]}, r["n"]) for r in by_length],
            f"{run.name}: by the length of the reference answer",
        )
        wrong = [q for q in questions if q["exact"] < 1.0]
        if wrong:
            rows = [
                [
                    f"`{q['key']}`",
                    short(q["text"], 80),
                    q["predicted"] or "(none)",
                    " / ".join(q["gold"]) or "(none)",
                    pct(q["f1"], 0),
                ]
                for q in wrong[:MAX_EXAMPLES]
            ]
            blocks += [
                Paragraph(f"{len(wrong)} of {len(questions)} answers are not exact; the first:"),
                Table(["Question", "Text", "Predicted", "Gold", "F1"], rows, "llllr"),
            ]
    return blocks
