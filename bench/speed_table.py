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

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import typer

# The script's own folder is on sys.path: share speed.py's names.
from speed import RATIOS, SYSTEMS, WORKLOADS  # noqa: E402

Key = Tuple[str, str, int, int, str]  # workload, precision, threads, max_batch_tokens, system


@dataclass
class Row:
    """One system's measurement, with the run it came from."""

    result: Dict[str, Any]
    run: Dict[str, Any]
    path: Path

    @property
    def wps(self) -> float:
        return float(self.result["words_per_second"])


def load(results: Path) -> Dict[Key, Row]:
    """The latest measurement of each key, from runs on the same texts: per workload,
    the sample size with the most measurements (ties: the larger sample)."""
    runs = []
    for path in sorted(results.glob("speed_*.json")):
        run = json.loads(path.read_text(encoding="utf8"))
        if run.get("benchmark") == "speed":
            runs.append((path, run))
    counts: Counter = Counter()
    for _, run in runs:
        measured = sum("words_per_second" in r for r in run["systems"].values())
        counts[(run["settings"]["workload"], run["texts"])] += measured
    sample = {}
    for workload, n_texts in sorted(counts, key=lambda k: (counts[k], k[1])):
        sample[workload] = n_texts  # the last one wins: most measurements, then largest
    rows: Dict[Key, Row] = {}
    for path, run in runs:
        s = run["settings"]
        if run["texts"] != sample[s["workload"]]:
            continue
        for system, result in run["systems"].items():
            if "words_per_second" not in result:
                continue
            # trf and hf run fp32 in a bf16 run too: file them under what they ran.
            precision = result["settings"].get("precision", s["precision"])
            key = (s["workload"], precision, s["threads"], s["max_batch_tokens"], system)
            if key not in rows or run["finished_at"] > rows[key].run["finished_at"]:
                rows[key] = Row(result, run, path)
    return rows


def fmt(value: Optional[float], digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def table(header: List[str], body: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines)


def padding(checks: Dict[str, Any]) -> str:
    if checks.get("padded_wordpieces") and checks.get("wordpieces"):
        return f"{checks['padded_wordpieces'] / checks['wordpieces']:.2f}"
    return "–"


def per_workload(rows: Dict[Key, Row], threads: int, budget: int) -> List[str]:
    out = []
    for workload in WORKLOADS:
        found = [(s, rows.get((workload, "fp32", threads, budget, s))) for s in SYSTEMS]
        present = [(s, r) for s, r in found if r is not None]
        if not present:
            continue
        run = present[0][1].run
        out.append(
            f"**{workload}**: {run['texts']:,} texts, {run['words']:,} words "
            f"({run['words_per_text']:,.0f} per text), fp32, {threads} threads, "
            f"max_batch_tokens {budget}\n"
        )
        body = []
        for system, row in present:
            r = row.result
            body.append(
                [
                    f"`{system}`",
                    fmt(r["words_per_second"]),
                    fmt(r["docs_per_second"], 1),
                    fmt(r["seconds"], 1),
                    fmt(r["peak_delta_mb"]),
                    fmt(r["run_delta_mb"]),
                    fmt(r["checks"].get("windows")),
                    padding(r["checks"]),
                    "yes" if r["checks"].get("ok") else "**no**",
                ]
            )
        header = ["system", "words/s", "docs/s", "wall s", "peak RSS Δ MB", "run Δ MB"]
        header += ["windows", "padded / real wordpieces", "ok"]
        out.append(table(header, body) + "\n")
        commands = sorted({f"`{row.run['command']}`" for _, row in present})
        out.append("From " + "; ".join(commands) + ".\n")
    return out


def ratio_table(rows: Dict[Key, Row], threads: int, budget: int) -> Optional[str]:
    body = []
    for ours, other in RATIOS:
        cells = []
        for workload in WORKLOADS:
            a = rows.get((workload, "fp32", threads, budget, ours))
            b = rows.get((workload, "fp32", threads, budget, other))
            cells.append(f"{a.wps / b.wps:.2f}×" if a and b else "–")
        if any(c != "–" for c in cells):
            body.append([f"`{ours}` / `{other}`", *cells])
    if not body:
        return None
    return table(["words/s ratio (> 1: ours faster)", *WORKLOADS], body)


def length_table(rows: Dict[Key, Row], threads: int, budget: int) -> str:
    words = {}
    for (workload, _, t, b, _), row in rows.items():
        if t == threads and b == budget:
            words[workload] = row.run["words_per_text"]
    header = ["system", "precision"] + [f"{w} ({fmt(words.get(w))} words/text)" for w in WORKLOADS]
    body = []
    for system in SYSTEMS:
        for precision in ("fp32", "bf16"):
            found = [rows.get((w, precision, threads, budget, system)) for w in WORKLOADS]
            if not any(found):
                continue
            body.append([f"`{system}`", precision] + [fmt(r.wps if r else None) for r in found])
    return table(header, body)


def budget_tables(rows: Dict[Key, Row], threads: int) -> List[str]:
    out = []
    for workload in WORKLOADS:
        for precision in ("fp32", "bf16"):
            budgets = sorted(
                {b for (w, p, t, b, _) in rows if (w, p, t) == (workload, precision, threads)}
            )
            if len(budgets) < 2:
                continue
            systems = [
                s
                for s in SYSTEMS
                if (s.startswith("ours") or s.startswith("bare"))
                and sum((workload, precision, threads, b, s) in rows for b in budgets) > 1
            ]
            body = [
                [str(b)]
                + [fmt(_wps(rows.get((workload, precision, threads, b, s)))) for s in systems]
                for b in budgets
            ]
            out.append(f"**{workload}**, {precision}: words/s by max_batch_tokens\n")
            out.append(table(["max_batch_tokens", *[f"`{s}`" for s in systems]], body) + "\n")
    return out


def _wps(row: Optional[Row]) -> Optional[float]:
    return row.wps if row else None


def plot(rows: Dict[Key, Row], threads: int, budget: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    systems = [
        s for s in SYSTEMS if any((w, "fp32", threads, budget, s) in rows for w in WORKLOADS)
    ]
    width = 0.8 / max(len(systems), 1)
    for i, system in enumerate(systems):
        values = [_wps(rows.get((w, "fp32", threads, budget, system))) or 0 for w in WORKLOADS]
        xs = [x + i * width for x in range(len(WORKLOADS))]
        left.bar(xs, values, width, label=system, color=plt.get_cmap("tab20")(i))
    left.set_xticks([x + 0.4 - width / 2 for x in range(len(WORKLOADS))], list(WORKLOADS))
    left.set_yscale("log")
    left.set_ylabel("words / second (log)")
    left.set_title(f"fp32, {threads} threads, max_batch_tokens {budget}")
    if systems:
        left.legend(fontsize=7)
    for workload in WORKLOADS:
        for system in ("bare", "ours-textcat", "ours-textcat-ner"):
            points = sorted(
                (b, row.wps)
                for (w, p, t, b, s), row in rows.items()
                if (w, p, t, s) == (workload, "fp32", threads, system)
            )
            if len(points) > 1:
                right.plot(*zip(*points), marker="o", label=f"{system}, {workload}")
    right.set_xscale("log", base=2)
    right.set_xlabel("max_batch_tokens")
    right.set_ylabel("words / second")
    right.set_title("batch budget (fp32)")
    if right.lines:
        right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
    parts = ["### Throughput and memory\n", *per_workload(rows, threads, max_batch_tokens)]
    ratio = ratio_table(rows, threads, max_batch_tokens)
    if ratio:
        parts += ["### Ours against the others (fp32)\n", ratio + "\n"]
    parts += ["### Words/s by document length\n", length_table(rows, threads, max_batch_tokens)]
    budgets = budget_tables(rows, threads)
    if budgets:
        parts += ["\n### Words/s by batch budget\n", *budgets]
    markdown = "\n".join(parts).rstrip() + "\n"
    typer.echo(markdown)
    if output:
        output.write_text(markdown, encoding="utf8")
    if png:
        plot(rows, threads, max_batch_tokens, png)
        typer.echo(f"wrote {png}", err=True)


if __name__ == "__main__":
    typer.run(main)
