"""`bert-pipes add-label PIPELINE OUTPUT`: new labels on a trained `bert_textcat`
(with label prototypes) from their descriptions and a few examples, or the
clusters accepted in a review of `bert-pipes discover`, no training;
`bert-pipes adapt PIPELINE TEXTS OUTPUT`: its prototypes adapted to unlabelled
texts of the domain."""

from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, cast

import srsly
import typer

from ..discover.review import review_examples
from ..io import ConversionError, read_input
from ..pipeline.label_descriptions import read_label_descriptions
from ..pipeline.new_labels import add_labels, label_settings, only_textcat
from .common import (
    app,
    fail,
    overwrite_option,
    refuse_to_overwrite,
    save_changed_pipeline,
    text_column_option,
)


@app.command("add-label")
def add_label_cli(
    pipeline: Path = typer.Argument(..., help="A trained pipeline folder", metavar="PIPELINE"),
    output: Path = typer.Argument(
        ...,
        help="The folder for the pipeline with the new labels: new or empty, unless --overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    descriptions: Optional[Path] = typer.Option(
        None, "--descriptions", help="JSON file: label -> description or list of descriptions"
    ),
    examples: Optional[Path] = typer.Option(
        None, "--examples", help="JSONL file of {'text': ..., 'label': ...} examples of new labels"
    ),
    review: Optional[Path] = typer.Option(
        None,
        "--review",
        help="A review file of `bert-pipes discover`: each cluster whose action is accept "
        "or rename:<label> becomes a label, its representatives the examples",
        exists=True,
        dir_okay=False,
    ),
    accept_all: bool = typer.Option(
        False,
        "--accept-all",
        help="With --review: every cluster becomes a label under its name, whatever its "
        "action (to measure discovery without a reviewer)",
    ),
    component: Optional[str] = typer.Option(
        None, "--component", help="The bert_textcat to extend (default: the only one)"
    ),
    nearest_examples: Optional[float] = typer.Option(
        None,
        "--nearest-examples",
        help="> 0: from now on, predict with each label's nearest remembered docs too, at "
        "this weight (a calibrated knn router's training docs, and the new labels' "
        "examples); 0: leave the component as it is. Default: 0, or with --review on a "
        "knn router the discover workflow's settings (1.0, --allowance 0.0005, "
        "--scope-correction) when none of the three is given",
        min=0.0,
        show_default=False,
    ),
    allowance: Optional[float] = typer.Option(
        None,
        "--allowance",
        help="The share of the docs a calibrated router remembers that a new label may "
        "take from their labels (default 0: none; see --nearest-examples)",
        min=0.0,
        max=0.5,
        show_default=False,
    ),
    scope_correction: Optional[bool] = typer.Option(
        None,
        "--scope-correction/--no-scope-correction",
        help="A knn router: divide the distances to each new label's examples by how much "
        "farther a trained label's docs lie from that many of them than from all, so a "
        "label of a few examples keeps about as many of its docs in scope (default off; "
        "see --nearest-examples)",
        show_default=False,
    ),
    overwrite: bool = overwrite_option(),
) -> None:
    """Add labels to a trained bert_textcat whose model is a PrototypeCatModel."""
    import spacy

    refuse_to_overwrite(output, overwrite)
    if accept_all and review is None:
        fail("--accept-all takes the clusters of a --review file: give one")
    try:
        described = read_label_descriptions(str(descriptions), "add-label") if descriptions else {}
        by_label: Dict[str, List[str]] = defaultdict(list)
        for i, row in enumerate(srsly.read_jsonl(examples) if examples else []):
            if not isinstance(row, dict) or not {"text", "label"} <= set(row):
                fail(f"{examples}:{i + 1}: expected an object with 'text' and 'label'")
            if not isinstance(row["label"], str) or not row["label"].strip():
                fail(
                    f"{examples}:{i + 1}: 'label' must be one label, a string, got {row['label']!r}"
                )
            by_label[row["label"]].append(str(row["text"]))
        if review is not None:
            accepted = review_examples(review, accept_all=accept_all)
            if not accepted:
                if accept_all:
                    fail(f"{review}: the review has no cluster")
                fail(f"{review}: no cluster is accepted (action accept or rename:<label>)")
            for label, texts in accepted.items():
                by_label[label].extend(texts)
        if not described and not by_label:
            fail("Give --descriptions, --examples and/or --review")
        nlp = spacy.load(pipeline)
        settings = label_settings(
            nlp,
            component,
            from_review=review is not None,
            nearest_examples=nearest_examples,
            allowance=allowance,
            scope_correction=scope_correction,
        )
        if settings.measured:
            typer.echo(
                "A knn router and a review: the discover workflow's settings, "
                f"--nearest-examples {settings.nearest_examples} --allowance "
                f"{settings.allowance} --scope-correction (give any of them to choose)"
            )
        added = add_labels(
            nlp,
            described,
            dict(by_label),
            component,
            allowance=settings.allowance,
            nearest_examples=settings.nearest_examples,
            scope_correction=settings.scope_correction,
        )
    except ValueError as error:
        fail(str(error))
    save_changed_pipeline(nlp, output)
    typer.echo(f"Added {len(added)} label(s) to {output}: {', '.join(added)}")
    pipe = cast(Any, nlp.get_pipe(component or only_textcat(nlp)))
    output_layer = pipe.model.get_ref("output")
    bias = output_layer.ops.to_numpy(output_layer.get_param("b"))
    taken, looked_at = pipe.new_labels.taken(added)
    labels = list(pipe.labels)
    for label in added:
        reach = (
            f"takes {taken[label]} of the {looked_at} docs the router remembers"
            if looked_at
            else "reach not measured (the router remembers no docs: calibrate it first)"
        )
        typer.echo(
            f"  {label}: {len(by_label.get(label, []))} example(s), "
            f"{len(described.get(label, []))} description(s), "
            f"bias {float(bias[labels.index(label)]):.3f}; {reach}"
        )


@app.command("adapt")
def adapt_cli(
    pipeline: Path = typer.Argument(
        ..., help="A pipeline whose bert_textcat has label prototypes", metavar="PIPELINE"
    ),
    texts: Path = typer.Argument(
        ...,
        help="Unlabelled texts of the domain: CSV, JSONL, Parquet or a folder of .txt files",
        metavar="TEXTS",
        exists=True,
    ),
    output: Path = typer.Argument(
        ...,
        help="The folder for the adapted pipeline: new or empty, unless --overwrite",
        metavar="OUTPUT",
        file_okay=False,
    ),
    text_column: str = text_column_option(),
    min_confidence: Optional[float] = typer.Option(
        None,
        "--min-confidence",
        help="Use only texts routed with at least this confidence (default: the "
        "component's oos_threshold when set, else 0.8); 0 uses every text",
    ),
    rounds: int = typer.Option(10, "--rounds", help="Rounds of self-training"),
    weight: float = typer.Option(4.0, "--weight", help="Weight of the texts' mean per round"),
    component: Optional[str] = typer.Option(
        None, "--component", help="The bert_textcat to adapt (default: the only one)"
    ),
    overwrite: bool = overwrite_option(),
) -> None:
    """Adapt a bert_textcat's label prototypes to unlabelled texts of its domain
    (docs/few_shot.md), using only the texts it would route (docs/routing.md)."""
    import spacy

    refuse_to_overwrite(output, overwrite)
    if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
        fail(f"--min-confidence must be in [0, 1], got {min_confidence}")
    try:
        rows = list(read_input(texts, text_column=text_column))
    except ConversionError as error:
        fail(str(error))
    bad = [row for row in rows if row.error is not None]
    if bad:
        fail(f"{bad[0].source}: {bad[0].error} ({len(bad)} row(s) cannot be read)")
    try:
        nlp = spacy.load(pipeline)
        names = [name for name, pipe in nlp.pipeline if hasattr(pipe, "adapt_to_texts")]
        if component is None:
            if len(names) != 1:
                fail(f"Name the bert_textcat to adapt with --component; found {names}")
            component = names[0]
        if component not in names:
            fail(f"'{component}' is not a bert_textcat of {pipeline}; found {names}")
        pipe = nlp.get_pipe(component)
        docs = [nlp.make_doc(row.text or "") for row in rows]
        counts = pipe.adapt_to_texts(docs, rounds, weight, min_confidence)  # type: ignore[attr-defined]
    except ValueError as error:
        fail(str(error))
    save_changed_pipeline(nlp, output)
    used = sum(counts.values())
    typer.echo(f"Adapted '{component}' to {used} of {len(docs)} texts (the others not routed)")
    for label, n in sorted(counts.items(), key=lambda item: -item[1]):
        typer.echo(f"  {label}: {n}")
    typer.echo(f"Saved to {output}")
