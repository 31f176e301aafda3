"""`bert-pipes convert ...`: labelled data files to spaCy `.spacy` files.

The `convert` command group, a subcommand per data source, each thin over
`spacy_bert_pipes.convert` (which reads the data and makes the splits). Here:
the group and the text classification sources (textcat, nluplusplus, clinc150,
banking77-oos, clinc150-discover). The entity source is `convert_ner.py`, the
question answering ones (squad, restaurant8k) `convert_qa.py`; each registers
its subcommands on `convert_app` when imported.
"""

import re
from pathlib import Path
from typing import List, Optional

import spacy
import srsly
import typer
from spacy.language import Language

from ..convert import (
    CLINC150_SPLITS,
    build_banking77_oos,
    build_clinc150_discover,
    nluplusplus_labels,
    read_clinc150,
    read_labels_file,
    read_nluplusplus,
    read_textcat_rows,
    rows_to_docs,
    write_docbin,
)
from ..convert.banking77_oos import DEFAULT_VAL_PER_INTENT, ID_OOS_INTENTS_FILE, SPLITS
from ..convert.clinc150_discover import (
    DEFAULT_HELD_OUT,
    MANIFEST,
    TEST_HELD_OUT,
    TRAFFIC,
    TRAFFIC_GOLD,
)
from ..convert.dev_split import check_dev_share, split_dev
from ..io.errors import ConversionError
from .common import app, fail, lang_option

# --dev-share's file, beside OUTPUT: corpus/tickets.spacy -> corpus/tickets_dev.spacy
DEV_SUFFIX = "_dev.spacy"

convert_app = typer.Typer(
    help="Convert labelled data into spaCy .spacy files (DocBin) for training and evaluation.",
    no_args_is_help=True,
)
app.add_typer(convert_app, name="convert")


@convert_app.command("textcat")
def convert_textcat_cli(
    input_path: Path = typer.Argument(
        ...,
        help="A .csv file with a header row, or a .jsonl file of JSON objects",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_path: Path = typer.Argument(
        ..., help="The .spacy file to write", dir_okay=False, metavar="OUTPUT"
    ),
    text_column: str = typer.Option(
        "text", "--text-column", help="The column (CSV) or field (JSONL) holding the text"
    ),
    label_column: Optional[str] = typer.Option(
        None,
        "--label-column",
        help="The column or field holding the labels (default: 'label' or 'labels')",
    ),
    labels_path: Optional[Path] = typer.Option(
        None,
        "--labels",
        help="A JSON list of all labels (default: the sorted labels found in the input)",
        exists=True,
        dir_okay=False,
    ),
    multilabel: bool = typer.Option(
        False, "--multilabel", help="Allow any number of labels per row, not exactly one"
    ),
    oos_label: Optional[str] = typer.Option(
        None,
        "--oos-label",
        help="A label that marks out-of-scope rows (texts that fit none of the labels): "
        "they become docs with no positive label, and it is not one of the labels",
    ),
    empty_oos: bool = typer.Option(
        False,
        "--empty-oos",
        help="A row with an empty label is out of scope: a doc with no positive label "
        "(default: an error)",
    ),
    dev_share: Optional[float] = typer.Option(
        None,
        "--dev-share",
        help="Also write a dev split: this share of each label's rows (and of the "
        "out-of-scope rows), e.g. 0.2, drawn with --seed; OUTPUT gets the rest "
        "(default: no split, every row in OUTPUT)",
        show_default=False,
    ),
    dev_output: Optional[Path] = typer.Option(
        None,
        "--dev-output",
        help="With --dev-share: the dev .spacy file (default: OUTPUT's name with "
        f"{DEV_SUFFIX!r}, beside it)",
        dir_okay=False,
        show_default=False,
    ),
    seed: int = typer.Option(0, "--seed", help="With --dev-share: seeds the draw"),
    lang: str = lang_option(),
) -> None:
    """Convert labelled texts (CSV or JSONL) for text classification.

    Each Doc gets a score in doc.cats for every label: 1.0 for its gold labels,
    0.0 for the others. A CSV label cell holds one label or several separated
    by "|"; a JSONL label field is a string or a list of strings. An
    out-of-scope row (--oos-label, --empty-oos) scores 0.0 for every label, as
    `convert clinc150` writes CLINC150's out-of-scope queries: bert_textcat's
    scorer counts such docs as out of scope.

    With --dev-share, a seeded share of each label's rows (multi-label: of its
    rarest label's) and of the out-of-scope rows goes to a dev file for
    `bert-pipes calibrate` and `threshold`; every label keeps a training row.
    """
    dev_path = _dev_path(output_path, dev_share, dev_output)
    nlp = blank(lang)
    try:
        # Without a labels file the label set is known only after reading all
        # rows, so they are held in memory: fine for datasets of this size.
        rows = list(
            read_textcat_rows(
                input_path,
                text_column=text_column,
                label_column=label_column,
                oos_label=oos_label,
                empty_oos=empty_oos,
            )
        )
        if labels_path is not None:
            labels = read_labels_file(labels_path)
            if oos_label in labels:
                fail(
                    f"{labels_path}: {oos_label!r} is one of the labels and the --oos-label; "
                    "drop it from the labels file to write its rows out of scope (no label), "
                    "or leave out --oos-label to train it as a class of its own "
                    "(bert_textcat's oos_label setting)"
                )
        else:
            labels = sorted({label for row in rows for label in row.labels})
        unlabelled = oos_label is not None or empty_oos
        # every row is checked before either file is written
        docs = list(
            rows_to_docs(nlp, rows, labels, exclusive=not multilabel, unlabelled=unlabelled)
        )
        if dev_path is None:
            n_docs = write_docbin(docs, output_path)
        else:
            assert dev_share is not None
            split = split_dev(rows, dev_share, seed=seed)
            if not split.dev:
                fail(
                    f"{input_path}: --dev-share {dev_share:g} puts no row in dev: each "
                    f"label has too few rows ({len(rows)} rows, {len(labels)} labels); "
                    "give a larger share, or convert a dev file of its own"
                )
            n_docs = write_docbin(split.part(docs, dev=False), output_path)
    except ConversionError as err:
        fail(str(err))
    if dev_path is None:
        n_oos = sum(1 for row in rows if not row.labels)
        _report(n_docs, len(labels), output_path, n_oos if unlabelled else None)
        return
    n_dev = write_docbin(split.part(docs, dev=True), dev_path)
    train_oos, dev_oos = split.n_oos()
    _report(n_docs, len(labels), output_path, train_oos if unlabelled else None)
    _report(n_dev, len(labels), dev_path, dev_oos if unlabelled else None)
    typer.echo(split.summary())
    for warning in split.warnings(routing=not multilabel):
        typer.secho(f"Warning: {warning}", fg="yellow", err=True)


@convert_app.command("nluplusplus")
def convert_nluplusplus_cli(
    folder: Path = typer.Argument(
        ...,
        help="An NLU++ domain folder of fold<N>.json files, e.g. nluplusplus/banking",
        metavar="FOLDER",
        exists=True,
        file_okay=False,
    ),
    output_path: Path = typer.Argument(
        ..., help="The .spacy file to write", dir_okay=False, metavar="OUTPUT"
    ),
    folds: str = typer.Option(
        ..., "--folds", help="The folds to read, e.g. '0-17', '18,19' or '0-3,7'"
    ),
    lang: str = lang_option(),
) -> None:
    """Convert NLU++ folds for multi-label intent classification.

    The labels are the intents in ontology.json (looked up in FOLDER, then its
    parent) whose domain is FOLDER's name (e.g. "banking") or "general"; a
    query without intents gets 0.0 for every label.
    """
    fold_numbers = parse_folds(folds)
    nlp = blank(lang)
    try:
        labels = nluplusplus_labels(folder, domains=(folder.resolve().name, "general"))
        rows = read_nluplusplus(folder, fold_numbers)
        n_docs = write_docbin(rows_to_docs(nlp, rows, labels, exclusive=False), output_path)
    except ConversionError as err:
        fail(str(err))
    _report(n_docs, len(labels), output_path)


@convert_app.command("clinc150")
def convert_clinc150_cli(
    input_path: Path = typer.Argument(
        ...,
        help="CLINC150's data_full.json",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_dir: Path = typer.Argument(
        ...,
        help="The folder to write train.spacy, val.spacy and test.spacy to",
        metavar="OUTPUT_DIR",
        file_okay=False,
    ),
    oos_label: Optional[str] = typer.Option(
        None,
        "--oos-label",
        help="Give the out-of-scope queries this label, a class of its own, and keep "
        "oos_train in train.spacy (default: they have no label, and train.spacy "
        "holds the in-scope queries only)",
    ),
    lang: str = lang_option(),
) -> None:
    """Convert CLINC150 (Larson et al. 2019) for intent routing with out-of-scope
    detection: one .spacy file per split. val and test hold their out-of-scope
    queries after the in-scope ones, without a positive label (or with
    --oos-label); bert_textcat's scorer counts those as out of scope.
    """
    nlp = blank(lang)
    try:
        splits = {
            split: read_clinc150(input_path, split, oos_label=oos_label)
            for split in CLINC150_SPLITS
        }
        if oos_label is None:
            splits["train"] = [row for row in splits["train"] if row.labels]
        labels = sorted({label for rows in splits.values() for row in rows for label in row.labels})
        for split, rows in splits.items():
            docs = rows_to_docs(nlp, rows, labels, exclusive=True, unlabelled=True)
            n_docs = write_docbin(docs, output_dir / f"{split}.spacy")
            n_oos = sum(1 for row in rows if not row.labels) if oos_label is None else None
            _report(n_docs, len(labels), output_dir / f"{split}.spacy", n_oos)
    except ConversionError as err:
        fail(str(err))


@convert_app.command("banking77-oos")
def convert_banking77_oos_cli(
    banking77_dir: Path = typer.Argument(
        ...,
        help="Banking77's folder: train.csv, test.csv (columns text, category), categories.json",
        metavar="BANKING77_DIR",
        exists=True,
        file_okay=False,
    ),
    clinc150_path: Path = typer.Argument(
        ...,
        help="CLINC150's data_full.json (its out-of-scope queries are the OOD-OOS ones)",
        metavar="CLINC150_JSON",
        exists=True,
        dir_okay=False,
    ),
    output_dir: Path = typer.Argument(
        ...,
        help="The folder to write train, val, test_id, test_ood and test .spacy files "
        "and banking77_oos.json to",
        metavar="OUTPUT_DIR",
        file_okay=False,
    ),
    id_oos_intents: Optional[Path] = typer.Option(
        None,
        "--id-oos-intents",
        help=f"The held-out intents, one a line (default: BANKING77_DIR/{ID_OOS_INTENTS_FILE})",
        exists=True,
        dir_okay=False,
    ),
    val_per_intent: int = typer.Option(
        DEFAULT_VAL_PER_INTENT,
        "--val-per-intent",
        min=1,
        help="Training queries of each intent (in scope and held out) drawn into val",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the val sample"),
    lang: str = lang_option(),
) -> None:
    """Rebuild BANKING77-OOS (Zhang et al., NLP4ConvAI 2022) for intent
    routing with in-domain and out-of-domain out-of-scope queries.

    The intents named in the --id-oos-intents file are held out: their queries
    are in-domain out-of-scope (ID-OOS); the others are in scope, and the
    labels. CLINC150's out-of-scope queries are out-of-domain (OOD-OOS). train
    holds the in-scope training queries less val; val holds --val-per-intent
    training queries of every intent and oos_val; test_id the in-scope and
    ID-OOS test queries, test_ood the in-scope ones and oos_test, test all
    three. Out-of-scope docs have no positive label, as `convert clinc150`
    writes them; banking77_oos.json records the counts, the intents, the seed
    and the sources' sha256.
    """
    nlp = blank(lang)
    try:
        corpus = build_banking77_oos(
            banking77_dir,
            clinc150_path,
            id_oos_intents=id_oos_intents,
            val_per_intent=val_per_intent,
            seed=seed,
        )
        for split in SPLITS:
            rows = corpus.rows(split)
            path = output_dir / f"{split}.spacy"
            docs = rows_to_docs(nlp, rows, corpus.labels, exclusive=True, unlabelled=True)
            n_docs = write_docbin(docs, path)
            _report(n_docs, len(corpus.labels), path, sum(1 for row in rows if not row.labels))
            counts = corpus.counts()[split]
            typer.echo(
                f"  {counts['in_scope']} in scope, {counts['id_oos']} ID-OOS, "
                f"{counts['ood_oos']} OOD-OOS"
            )
        manifest = corpus.manifest()
    except ConversionError as err:
        fail(str(err))
    srsly.write_json(output_dir / "banking77_oos.json", manifest)
    typer.echo(
        f"{len(corpus.labels)} intents in scope, {len(corpus.id_oos_intents)} held out "
        f"(seed {seed}); wrote {output_dir / 'banking77_oos.json'}"
    )


@convert_app.command("clinc150-discover")
def convert_clinc150_discover_cli(
    input_path: Path = typer.Argument(
        ...,
        help="CLINC150's data_full.json",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_dir: Path = typer.Argument(
        ...,
        help=f"The folder to write train, val and test .spacy files, {TRAFFIC}, "
        f"{TRAFFIC_GOLD}, {TEST_HELD_OUT} and {MANIFEST} to",
        metavar="OUTPUT_DIR",
        file_okay=False,
    ),
    held_out: int = typer.Option(
        DEFAULT_HELD_OUT, "--held-out", min=1, help="How many of the intents to hold out"
    ),
    seed: int = typer.Option(
        0, "--seed", help="Chooses the held-out intents and shuffles the traffic"
    ),
    lang: str = lang_option(),
) -> None:
    """Split CLINC150 (Larson et al. 2019) for new intent discovery: --held-out
    intents, chosen with --seed, are left out of training, and turn up in the
    traffic the router routes.

    train, val and test .spacy hold the known intents' queries (val also
    oos_val, without a positive label). traffic.jsonl ({id, text}) holds the
    held-out intents' training queries, the known intents' val queries,
    oos_train and oos_val, shuffled; traffic_gold.jsonl their true intents
    ("oos": out of scope), for scoring only. test_held_out.jsonl ({id, text,
    intent}) holds the held-out intents' test queries: the test split is never
    traffic. clinc150_discover.json records the counts, the intents, the seed
    and the source's sha256.
    """
    nlp = blank(lang)
    try:
        corpus = build_clinc150_discover(input_path, held_out=held_out, seed=seed)
        for split, rows in (("train", corpus.train), ("val", corpus.val), ("test", corpus.test)):
            path = output_dir / f"{split}.spacy"
            docs = rows_to_docs(nlp, rows, corpus.labels, exclusive=True, unlabelled=True)
            n_docs = write_docbin(docs, path)
            _report(n_docs, len(corpus.labels), path, sum(1 for row in rows if not row.labels))
        manifest = corpus.manifest()
    except ConversionError as err:
        fail(str(err))
    files = {
        TRAFFIC: [{"id": q.id, "text": q.text} for q in corpus.traffic],
        TRAFFIC_GOLD: [
            {"id": q.id, "intent": q.intent, "source": q.source} for q in corpus.traffic
        ],
        TEST_HELD_OUT: [
            {"id": q.id, "text": q.text, "intent": q.intent} for q in corpus.test_held_out
        ],
    }
    for name, records in files.items():
        srsly.write_jsonl(output_dir / name, records)
        typer.secho(f"Wrote {len(records)} rows to {output_dir / name}", fg="green")
    srsly.write_json(output_dir / MANIFEST, manifest)
    counts = manifest["counts"]["traffic"]
    typer.echo(
        f"{len(corpus.labels)} intents known, {len(corpus.held_out)} held out (seed {seed}); "
        f"traffic: {counts['held_out']} held-out, {counts['known']} known, "
        f"{counts['oos']} out-of-scope queries; wrote {output_dir / MANIFEST}"
    )


def parse_folds(text: str) -> List[int]:
    """Parse a fold selection such as "0-17", "18,19" or "0-3,7".

    text (str): Comma-separated fold numbers and inclusive ranges.
    RETURNS (List[int]): The fold numbers, in the order given.
    """
    folds: List[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None or int(match[2] or match[1]) < int(match[1]):
            raise typer.BadParameter(
                f"{part.strip()!r} in {text!r}: expected a fold number or a range like '0-17'",
                param_hint="--folds",
            )
        folds.extend(range(int(match[1]), int(match[2] or match[1]) + 1))
    if len(set(folds)) != len(folds):
        raise typer.BadParameter(f"{text!r} names a fold twice", param_hint="--folds")
    return folds


def blank(lang: str) -> Language:
    """The blank pipeline of --lang that a converter tokenizes with."""
    try:
        return spacy.blank(lang)
    except ImportError:
        fail(f"unknown language code {lang!r} (--lang)")


def _dev_path(output: Path, share: Optional[float], dev_output: Optional[Path]) -> Optional[Path]:
    """Where --dev-share writes the dev split (None: no split); fails on bad values."""
    if share is None:
        if dev_output is not None:
            fail("--dev-output names the dev file of --dev-share: give --dev-share too")
        return None
    try:
        check_dev_share(share)
    except ValueError as err:
        fail(f"--dev-share: {err}")
    path = dev_output or output.with_name(output.stem + DEV_SUFFIX)
    if path.resolve() == output.resolve():
        fail(f"--dev-output {path} is OUTPUT: name another file for the dev split")
    return path


def _report(n_docs: int, n_labels: int, output_path: Path, n_oos: Optional[int] = None) -> None:
    oos = "" if n_oos is None else f" ({n_oos} out of scope: no positive label)"
    typer.secho(f"Wrote {n_docs} docs{oos} with {n_labels} labels to {output_path}", fg="green")
