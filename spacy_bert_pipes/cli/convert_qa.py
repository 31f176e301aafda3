"""`bert-pipes convert squad` and `convert restaurant8k`: question answering
data to `.spacy` files, a Doc per context with its questions and reference
answers, thin over `spacy_bert_pipes.convert.read_squad` and
`read_restaurant8k`."""

import re
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, Iterator, Optional, Tuple

import typer
from spacy.tokens import Doc

from ..convert import read_restaurant8k, read_squad, write_docbin
from ..io.errors import ConversionError
from .common import fail, lang_option
from .convert import blank, convert_app


@convert_app.command("squad")
def convert_squad_cli(
    input_path: Path = typer.Argument(
        ...,
        help="A JSON file in SQuAD's format (v1.1 or v2.0), e.g. dev-v1.1.json",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_path: Path = typer.Argument(
        ..., help="The .spacy file to write", dir_okay=False, metavar="OUTPUT"
    ),
    articles: Optional[str] = typer.Option(
        None,
        "--articles",
        help="The articles to read by position in the file, 1-based and inclusive, "
        "e.g. '1-38' or '39-48' (default: all)",
    ),
    lang: str = lang_option(),
) -> None:
    """Convert SQuAD-format data for extractive question answering.

    Each paragraph becomes a Doc of its context, with its questions in
    doc._.questions and their reference answers in doc._.gold_answers, keyed
    by question id. An answer whose answer_start is off is found by its text
    nearest to it (the count is printed); a v2.0 question marked is_impossible
    has no answer.
    """
    article_range = parse_articles(articles) if articles is not None else None
    nlp = blank(lang)
    stats: Dict[str, int] = {}
    counts: Counter[str] = Counter()
    try:
        docs = read_squad(input_path, nlp, articles=article_range, stats=stats)
        n_docs = write_docbin(_count_answers(docs, counts), output_path, store_user_data=True)
    except ConversionError as err:
        fail(str(err))
    _report_questions(n_docs, counts, output_path)
    typer.echo(
        f"Answers found away from their answer_start: {stats['corrected_offsets']}; "
        f"trimmed of surrounding whitespace: {stats['trimmed_answers']}"
    )


@convert_app.command("restaurant8k")
def convert_restaurant8k_cli(
    input_path: Path = typer.Argument(
        ...,
        help="A Restaurant-8k JSON file, e.g. train_0.json or test.json",
        metavar="INPUT",
        exists=True,
        dir_okay=False,
    ),
    output_path: Path = typer.Argument(
        ..., help="The .spacy file to write", dir_okay=False, metavar="OUTPUT"
    ),
    lang: str = lang_option(),
) -> None:
    """Convert Restaurant-8k span extraction data for question answering.

    Each request becomes a Doc asked one question per slot (people, date,
    time, first_name, last_name), keyed by the slot name: a labelled slot has
    its span as the answer, an unlabelled one has no answer.
    """
    nlp = blank(lang)
    stats: Dict[str, int] = {}
    counts: Counter[str] = Counter()
    per_slot: Counter[str] = Counter()
    try:
        docs = read_restaurant8k(input_path, nlp, stats=stats)
        n_docs = write_docbin(
            _count_answers(docs, counts, per_slot), output_path, store_user_data=True
        )
    except ConversionError as err:
        fail(str(err))
    _report_questions(n_docs, counts, output_path)
    typer.echo(
        "Answers per slot: " + ", ".join(f"{slot} {n}" for slot, n in sorted(per_slot.items()))
    )
    typer.echo(f"Spans trimmed of surrounding whitespace: {stats['trimmed_answers']}")


def parse_articles(text: str) -> Tuple[int, int]:
    """Parse an article selection such as "1-38" or "39-48" (or "7" for one).

    text (str): An article number or an inclusive range, 1-based.
    RETURNS (Tuple[int, int]): The first and last article.
    """
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if match is not None:
        first, last = int(match[1]), int(match[2] or match[1])
        if 1 <= first <= last:
            return first, last
    raise typer.BadParameter(
        f"{text!r}: expected an article number or a range like '1-38', counting from 1",
        param_hint="--articles",
    )


def _count_answers(
    docs: Iterable[Doc], counts: Counter[str], per_key: Optional[Counter[str]] = None
) -> Iterator[Doc]:
    for doc in docs:
        for key, answers in doc._.gold_answers.items():
            counts["answerable" if answers else "unanswerable"] += 1
            if per_key is not None and answers:
                per_key[key] += 1
        yield doc


def _report_questions(n_docs: int, counts: Counter[str], output_path: Path) -> None:
    n_questions = counts["answerable"] + counts["unanswerable"]
    typer.secho(
        f"Wrote {n_docs} docs with {n_questions} questions ({counts['answerable']} "
        f"answerable, {counts['unanswerable']} unanswerable) to {output_path}",
        fg="green",
    )
