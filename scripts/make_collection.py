"""Write the collection that the workflow's `annotate` step annotates, as JSONL.

    python scripts/make_collection.py OUTPUT.jsonl --banking77 test.csv
        --squad dev-v1.1.json [--squad-articles 39-48]
        [--banking77-limit 0] [--squad-limit 0]

Rows: {"id", "source", "text"} for each Banking77 query (id `banking77-<row>`,
the CSV's 0-based data row), then one per paragraph of the chosen SQuAD
articles (id `squad-<article>-<paragraph>`, 1-based) with "questions": that
paragraph's own questions as {question id: question}, which `bert-pipes
annotate --questions-column questions` asks of it besides the pipeline's own.
A limit N keeps N rows of its source spread evenly over it, in order (0 keeps
all): the Banking77 test file is sorted by intent, so its first rows would all
share a few intents.
"""

import csv
import json
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import typer


def banking77_rows(path: Path) -> Iterator[Dict[str, Any]]:
    with path.open(encoding="utf8", newline="") as file_:
        reader = csv.DictReader(file_)
        if reader.fieldnames is None or "text" not in reader.fieldnames:
            raise ValueError(f"{path}: expected a header row with a 'text' column")
        for i, row in enumerate(reader):
            yield {"id": f"banking77-{i}", "source": "banking77", "text": row["text"]}


def squad_rows(path: Path, articles: Tuple[int, int]) -> Iterator[Dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf8"))["data"]
    first, last = articles
    for a, article in enumerate(data[first - 1 : last], start=first):
        for p, paragraph in enumerate(article["paragraphs"], start=1):
            yield {
                "id": f"squad-{a}-{p}",
                "source": "squad",
                "text": paragraph["context"],
                "questions": {qa["id"]: qa["question"] for qa in paragraph["qas"]},
            }


def spread(rows: List[Dict[str, Any]], n: int) -> List[Dict[str, Any]]:
    """n rows spread evenly over `rows`, in order; all of them when n <= 0 or n >= len(rows)."""
    if n <= 0 or n >= len(rows):
        return rows
    return [rows[i * len(rows) // n] for i in range(n)]


def parse_range(text: str) -> Tuple[int, int]:
    first, _, last = text.partition("-")
    try:
        span = (int(first), int(last or first))
    except ValueError:
        raise typer.BadParameter(f"expected FIRST-LAST, e.g. 39-48, not {text!r}") from None
    if not 1 <= span[0] <= span[1]:
        raise typer.BadParameter(f"expected 1 <= FIRST <= LAST, not {text!r}")
    return span


def main(
    output_path: Path = typer.Argument(..., dir_okay=False),
    banking77: Path = typer.Option(..., exists=True, dir_okay=False, help="Banking77 CSV"),
    squad: Path = typer.Option(..., exists=True, dir_okay=False, help="SQuAD v1.1 JSON"),
    squad_articles: str = typer.Option("39-48", help="The SQuAD articles, 1-based, FIRST-LAST"),
    banking77_limit: int = typer.Option(0, help="Banking77 queries kept; 0 keeps all"),
    squad_limit: int = typer.Option(0, help="SQuAD paragraphs kept; 0 keeps all"),
) -> None:
    sources = [
        spread(list(banking77_rows(banking77)), banking77_limit),
        spread(list(squad_rows(squad, parse_range(squad_articles))), squad_limit),
    ]
    output_path.parent.mkdir(parents=True, exist_ok=True)
    counts = []
    with output_path.open("w", encoding="utf8") as file_:
        for rows in sources:
            for row in rows:
                file_.write(json.dumps(row, ensure_ascii=False) + "\n")
            counts.append(len(rows))
    banking77_rows_written, squad_rows_written = counts
    typer.echo(
        f"Wrote {banking77_rows_written} Banking77 queries and {squad_rows_written} SQuAD "
        f"paragraphs to {output_path}"
    )


if __name__ == "__main__":
    typer.run(main)
