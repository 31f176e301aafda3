"""The tables of bench/speed.py: the result record it writes (each system's
figures and the ratios of ours against the others), and the Markdown tables and
plot that bench/speed_table.py renders from the records under bench/results.

Rendering keeps, for each (workload, precision, threads, max_batch_tokens,
system), the latest successful measurement (by the file's `finished_at`), so
partial runs (e.g. `--systems bare,ours-textcat` at other budgets) add to full
ones: per workload, the words/s, docs/s, wall time and peak memory of each system
(fp32); the ratios of ours against bare, spacy-transformers and Hugging Face;
words/s against document length (fp32 and bf16); words/s against
max_batch_tokens, where several were run.
"""

import json
import shlex
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from speedlib.systems import SYSTEMS
from speedlib.workloads import RESULTS, WORKLOADS, Settings

# (ours, the system it is compared with): words/s of the first over the second.
RATIOS = [
    ("ours-textcat", "bare"),
    ("ours-ner", "bare"),
    ("ours-textcat-ner", "bare"),
    ("ours-textcat-ner", "bare-device"),
    ("ours-device", "bare-device"),
    ("ours-qa", "bare-qa"),
    ("ours-textcat-ner", "trf-textcat-ner"),
    ("ours-textcat", "hf-textcat"),
    ("ours-ner", "hf-ner"),
    ("ours-textcat-ner", "hf-textcat-ner"),
    ("ours-qa", "hf-qa"),
]


def ratios(systems: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    out = {}
    for ours, other in RATIOS:
        a, b = systems.get(ours, {}), systems.get(other, {})
        if a.get("words_per_second") and b.get("words_per_second"):
            out[f"{ours} / {other}"] = round(a["words_per_second"] / b["words_per_second"], 3)
    return out


def default_output(s: Settings, systems: List[str]) -> Path:
    name = f"speed_{s.workload}_{s.precision}_t{s.threads}_mbt{s.max_batch_tokens}"
    if s.gpu >= 0:
        name = f"gpu_{name}"
    if list(systems) != list(SYSTEMS):
        name += "_" + "-".join(systems)
    return RESULTS / f"{name}.json"


DEFINITIONS = {
    "words": "spaCy tokens of the input texts (spacy.blank('en'))",
    "seconds": "wall time over all texts after a warm-up on the first ~8,000 "
    "characters (the fastest of --repeats runs)",
    "peak_delta_mb": "VmHWM during warm-up and run minus VmRSS after the same imports "
    "in every system (torch, transformers, spacy, spacy-transformers, ours), before "
    "loading weights (weights + activations + pipeline); one fresh process per system",
    "run_delta_mb": "VmHWM during warm-up and run minus VmRSS after loading",
    "ratios": "words/s of the first system over the second (> 1: ours faster)",
}


def record(
    s: Settings,
    started: float,
    info: Dict[str, Any],
    n_texts: int,
    n_words: int,
    scores: Dict[str, Any],
    results: Dict[str, Dict[str, Any]],
) -> Dict[str, Any]:
    """What one bench/speed.py run writes: its command, machine, settings, each
    system's result and the ratios."""
    return {
        "benchmark": "speed",
        "command": "python bench/speed.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **info,
        "settings": asdict(s),
        "texts": n_texts,
        "words": n_words,
        "words_per_text": round(n_words / max(n_texts, 1), 1),
        "definitions": DEFINITIONS,
        "trained_test_scores": scores.get("test_scores_textcat_ner"),
        "systems": results,
        "ratios": ratios(results),
    }


def add_rates(result: Dict[str, Any], n_texts: int, n_words: int) -> None:
    """Words/s and docs/s of a system's result that has its seconds."""
    result["words_per_second"] = round(n_words / result["seconds"], 1)
    result["docs_per_second"] = round(n_texts / result["seconds"], 2)


def summary(name: str, result: Dict[str, Any]) -> str:
    """One line per system, as the run goes."""
    if "seconds" not in result:
        return f"  {name}: FAILED {result.get('error', '')[:300]}"
    return (
        f"  {name}: {result['words_per_second']:.0f} words/s, {result['seconds']:.1f} s, "
        f"peak +{result['peak_delta_mb']:.0f} MB, ok={result['checks'].get('ok')}"
    )


# --- the Markdown tables and the plot of bench/speed_table.py -------------------------
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


def render(rows: Dict[Key, Row], threads: int, budget: int) -> str:
    """The Markdown of bench/speed_table.py: every table above, in order."""
    parts = ["### Throughput and memory\n", *per_workload(rows, threads, budget)]
    ratio = ratio_table(rows, threads, budget)
    if ratio:
        parts += ["### Ours against the others (fp32)\n", ratio + "\n"]
    parts += ["### Words/s by document length\n", length_table(rows, threads, budget)]
    budgets = budget_tables(rows, threads)
    if budgets:
        parts += ["\n### Words/s by batch budget\n", *budgets]
    return "\n".join(parts).rstrip() + "\n"
