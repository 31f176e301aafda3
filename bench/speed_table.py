"""Render bench/speed.py results as Markdown tables (and optionally a PNG plot).

    python bench/speed_table.py [--results bench/results] [--threads 2]
        [--max-batch-tokens 4096] [--output speed.md] [--png bench/results/speed.png]

Reads every `speed_*.json` under --results and keeps, for each (workload, precision,
threads, max_batch_tokens, system), the latest successful measurement (by the
file's `finished_at`), so partial runs (e.g. `--systems bare,ours-textcat` at other
budgets) add to full ones. Prints:
  1. per workload: words/s, docs/s, wall time and peak memory of each system (fp32);
  2. the ratios of ours against bare, spacy-transformers and Hugging Face;
  3. words/s against document length (the three workloads), fp32 and bf16;
  4. words/s against max_batch_tokens (bare and ours), where several were run.
"""

from pathlib import Path
from typing import Optional

import typer

# The script's own folder is on sys.path: the tables are bench/speedlib/table.py's.
from speedlib.table import load, plot, render


def main(
    results: Path = typer.Option(Path("bench/results"), help="Folder with speed_*.json"),
    threads: int = typer.Option(2, help="Show runs with this --threads"),
    max_batch_tokens: int = typer.Option(4096, help="Budget of the main tables"),
    output: Optional[Path] = typer.Option(None, help="Write the Markdown here too"),
    png: Optional[Path] = typer.Option(None, help="Also draw a PNG (matplotlib)"),
) -> None:
    rows = load(results)
    if not rows:
        raise typer.BadParameter(f"No speed_*.json results with measurements in {results}")
    markdown = render(rows, threads, max_batch_tokens)
    typer.echo(markdown)
    if output:
        output.write_text(markdown, encoding="utf8")
    if png:
        plot(rows, threads, max_batch_tokens, png)
        typer.echo(f"wrote {png}", err=True)


if __name__ == "__main__":
    typer.run(main)
