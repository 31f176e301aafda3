"""The report's pictures: one function a kind of plot, each writing a PNG, and
`Figures`, which draws them into the output folder (or not, without plots).

One concept: matplotlib drawing code, kept apart from the sections' text.
"""

import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import plots as shared_plots
from .analysis import NER_ERRORS, TOP_CONFUSED_LABELS, f_of
from .document import Block, Image


class Figures:
    """Draws the report's PNGs into a folder and remembers them, in order."""

    def __init__(self, output_dir: Path, plots: bool) -> None:
        """Initialize.

        output_dir (Path): Where the PNGs go.
        plots (bool): Whether to draw at all (without, `image` adds nothing).
        """
        self.output_dir = output_dir
        self.plots = plots
        self.images: List[Path] = []

    def image(self, name: str, alt: str, draw: Callable[..., None], *args: Any) -> List[Block]:
        """Draw `name`.png with `draw(path, *args)`: its Image block, or none."""
        if not self.plots:
            return []
        path = self.output_dir / f"{file_name(name)}.png"
        draw(path, *args)
        self.images.append(path)
        return [Image(path, alt)]


def figure_class() -> Any:
    """matplotlib's Figure, or an ImportError saying how to install it."""
    return shared_plots.figure_class("Drawing the report's plots")


def file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def draw_f1_bars(
    path: Path, per_label: Dict[str, Dict[str, Any]], title: str, average: Optional[float]
) -> None:
    """Horizontal F1 bars (percent), one per label, the worst at the top."""
    Figure = figure_class()
    from matplotlib.patches import Patch

    items = sorted(per_label.items(), key=lambda i: (f_of(i[1]), i[0]))
    labels = [label for label, _ in items]
    values = [max(f_of(prf), 0.0) * 100 for _, prf in items]
    n = len(labels)
    font = 9 if n <= 30 else 7.5
    fig = Figure(figsize=(8.5, 0.19 * n + 1.6 if n > 12 else 0.35 * n + 1.8), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    # colour by value: the weak labels stand out
    ax.barh(range(n), values, color=[_f1_color(v) for v in values], height=0.75)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.set_ylim(n - 0.5, -0.5)  # the first (worst) label at the top
    low = min(values) if values else 0.0
    # a zoomed axis when every label is good, so the differences show
    left = 0.0 if low < 50 else max(0.0, 10 * (low // 10) - 10)
    ax.set_xlim(left, 100.0)
    for i, v in enumerate(values):
        # the value inside the bar's end, or after it when the bar is too short
        inside = v - left > 0.08 * (100.0 - left)
        ax.text(
            v - 0.3 if inside else max(v, left) + 0.3,
            i,
            f"{v:.1f}",
            va="center",
            ha="right" if inside else "left",
            fontsize=font - 1.5,
            color="white" if inside else "#222",
        )
    if isinstance(average, (int, float)):
        ax.axvline(average * 100, color="#333", linewidth=1, linestyle="--")
        title += f"; dashed line: overall {average * 100:.1f}"
    ax.set_xlabel("F1 (%)" + (f", the axis starts at {left:.0f}" if left > 0 else ""))
    ax.xaxis.set_ticks_position("both")
    ax.tick_params(axis="x", labeltop=n > 30)
    ax.spines[["right"]].set_visible(False)
    ax.set_title(title, fontsize=11, pad=8)
    handles = [Patch(color=_f1_color(v), label=name) for v, name in _F1_BANDS]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.savefig(path)


def draw_count_bars(path: Path, counts: List[Tuple[str, int]], title: str, unit: str) -> None:
    """Horizontal bars of counts, one per label, the largest at the top."""
    Figure = figure_class()
    labels = [label for label, _ in counts]
    values = [n for _, n in counts]
    n = len(labels)
    font = 9 if n <= 30 else 7.5
    fig = Figure(figsize=(8.5, 0.19 * n + 1.6 if n > 12 else 0.35 * n + 1.8), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    ax.barh(range(n), values, color="#2a788e", height=0.75)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.set_ylim(n - 0.5, -0.5)  # the first (largest) label at the top
    top = max(values, default=0)
    ax.set_xlim(0, top * 1.12 or 1)  # room for the numbers after the bars
    for i, v in enumerate(values):
        ax.text(v + 0.01 * (top or 1), i, str(v), va="center", fontsize=font - 1.5)
    ax.set_xlabel(unit)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11, pad=8)
    fig.savefig(path)


# F1 colour bands: a value in each, and its name
_F1_BANDS = ((95.0, "90 or more"), (85.0, "80 to 90"), (70.0, "60 to 80"), (0.0, "under 60"))


def _f1_color(value: float) -> str:
    if value >= 90:
        return "#2a788e"
    if value >= 80:
        return "#7ab8c4"
    if value >= 60:
        return "#f2a65a"
    return "#d1495b"


def draw_confusion(
    path: Path, counts: Counter, labels: List[str], title: str, annotate: bool
) -> None:
    """A row-normalized confusion matrix of the given labels: each row's share of
    the gold label's docs (all its docs, also those predicted as labels not shown)."""
    import numpy

    Figure = figure_class()
    n = len(labels)
    index = {label: i for i, label in enumerate(labels)}
    matrix = numpy.zeros((n, n))
    totals: Counter = Counter()
    for (gold, pred), v in counts.items():
        totals[gold] += v
        if gold in index and pred in index:
            matrix[index[gold], index[pred]] += v
    shares = matrix / numpy.maximum([[totals[label]] for label in labels], 1)
    cell = 0.42 if n <= TOP_CONFUSED_LABELS else max(0.13, min(0.42, 11.0 / n))
    font = 8 if n <= TOP_CONFUSED_LABELS else max(4.5, min(8.0, cell * 40))
    side = n * cell
    fig = Figure(figsize=(side + 4.2, side + 3.6), dpi=110 if n <= 40 else 130)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    # Errors in red; the diagonal (recall) in grey so the mistakes stand out.
    off = numpy.where(numpy.eye(n, dtype=bool) | (matrix == 0), numpy.nan, shares)
    vmax = float(numpy.nanmax(off)) if not numpy.isnan(off).all() else 1.0
    from matplotlib.colors import PowerNorm

    image = ax.imshow(
        off, cmap="Reds", norm=PowerNorm(0.5, vmin=0.0, vmax=vmax), interpolation="nearest"
    )
    diag = numpy.where(numpy.eye(n, dtype=bool), shares, numpy.nan)
    ax.imshow(diag, cmap="Greys", vmin=0.0, vmax=1.6, interpolation="nearest")
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=font)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.tick_params(length=0)
    ax.set_xticks(numpy.arange(-0.5, n), minor=True)
    ax.set_yticks(numpy.arange(-0.5, n), minor=True)
    ax.grid(which="minor", color="#eeeeee", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    if annotate:
        for i in range(n):
            for j in range(n):
                if matrix[i, j] or (i == j and totals[labels[i]]):
                    dark = i != j and shares[i, j] > 0.6 * vmax
                    ax.text(
                        j,
                        i,
                        f"{int(matrix[i, j])}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if dark else "#222",
                    )
    ax.set_xlabel("predicted label")
    ax.set_ylabel("gold label")
    ax.set_title(
        title + "\ngrey: correct (the row's recall); red: share of the row's docs", fontsize=10
    )
    fig.colorbar(image, ax=ax, shrink=0.6, label="share of the gold label's docs (errors)")
    fig.savefig(path)


def draw_ner_errors(path: Path, per_label: Dict[str, Counter], title: str) -> None:
    """Stacked horizontal bars of each label's mistakes by kind (NER_ERRORS but
    "correct", which the label's name shows)."""
    import numpy

    Figure = figure_class()
    labels = list(per_label)
    n = len(labels)
    colors = ["#f2a65a", "#ffd166", "#ef8354", "#d1495b", "#8d6a9f"]
    fig = Figure(figsize=(9.0, 0.5 * n + 1.9), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    left = numpy.zeros(n)
    for category, color in zip(NER_ERRORS[1:], colors):
        values = numpy.array([per_label[label][category] for label in labels], dtype=float)
        ax.barh(range(n), values, left=left, color=color, label=category, height=0.7)
        for i, v in enumerate(values):
            if v >= 0.04 * max(left.max() + values.max(), 1):
                ax.text(left[i] + v / 2, i, f"{int(v)}", ha="center", va="center", fontsize=7.5)
        left += values
    ax.set_yticks(range(n))
    ax.set_yticklabels(
        [f"{label}\n{per_label[label]['correct']} correct" for label in labels], fontsize=9
    )
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("mistakes (a spurious entity counts for its own label, others for the gold one)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11)
    fig.legend(loc="outside lower center", ncol=5, fontsize=8, frameon=False)
    fig.savefig(path)


def draw_grouped_bars(
    path: Path,
    groups: List[Tuple[str, Dict[str, Any], Any]],
    title: str,
) -> None:
    """Side-by-side bars of scores in percent (e.g. EM and F1) per group, with each
    group's n; a score of None (no questions) has no bar."""
    import numpy

    Figure = figure_class()
    series = list(groups[0][1]) if groups else []
    n = len(groups)
    width = 0.8 / max(len(series), 1)
    fig = Figure(figsize=(max(5.5, (0.5 + 0.35 * len(series)) * n + 2.2), 4.3), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    colors = ["#2a788e", "#7ab8c4", "#f2a65a", "#d1495b"]
    x = numpy.arange(n)
    for k, (key, color) in enumerate(zip(series, colors)):
        values = [g[1].get(key) for g in groups]
        heights = [float(v) * 100 if isinstance(v, (int, float)) else 0.0 for v in values]
        offset = (k - (len(series) - 1) / 2) * width
        bars = ax.bar(x + offset, heights, width * 0.92, color=color, label=key)
        for bar, v in zip(bars, values):
            if isinstance(v, (int, float)):
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_height() + 1,
                    f"{v * 100:.1f}",
                    ha="center",
                    va="bottom",
                    fontsize=7.5,
                )
    ax.set_xticks(x)
    ax.set_xticklabels([f"{g[0]}\n(n={g[2]})" for g in groups], fontsize=8.5)
    ax.set_ylim(0, 108)
    ax.set_ylabel("%")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11)
    fig.legend(loc="outside lower center", ncol=len(series), fontsize=8, frameon=False)
    fig.savefig(path)


def draw_collection_map(
    path: Path,
    points: Any,
    groups: List[str],
    order: List[str],
    title: str,
    shares: List[float],
) -> None:
    """A scatter plot of a collection's 2-D map, a colour per group (`order`:
    the groups in legend order, "other" in grey under the rest)."""
    import numpy

    from .analysis import OTHER

    Figure = figure_class()
    fig = Figure(figsize=(10.0, 7.0), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    palette = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
        "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#393b79",
    ]  # fmt: skip
    labels = numpy.asarray(groups, dtype=object)
    size = 14.0 if len(groups) <= 2000 else max(1.0, 14.0 * (2000 / len(groups)) ** 0.5)
    colors = iter(palette)
    for group in [OTHER, *[g for g in order if g != OTHER]]:
        mask = labels == group
        if not mask.any():
            continue
        n = int(mask.sum())
        ax.scatter(
            points[mask, 0],
            points[mask, 1],
            s=size,
            alpha=0.45 if group == OTHER else 0.8,
            color="#c8c8c8" if group == OTHER else next(colors, "#555555"),
            label=f"{group} ({n})",
            linewidths=0,
            rasterized=True,
        )
    ax.set_xlabel(f"first principal component ({shares[0] * 100:.1f}% of the variance)")
    ax.set_ylabel(f"second principal component ({shares[1] * 100:.1f}% of the variance)")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=11)
    handles, names = ax.get_legend_handles_labels()
    # "other" last in the legend, though drawn first (under the rest)
    if names and names[0].startswith(f"{OTHER} ("):
        handles, names = handles[1:] + handles[:1], names[1:] + names[:1]
    fig.legend(
        handles, names, loc="outside right upper", fontsize=8, frameon=False, markerscale=1.5
    )
    fig.savefig(path)


def draw_risk_coverage(
    path: Path,
    curves: List[Tuple[str, List[Dict[str, float]], Optional[Tuple[float, float]]]],
    title: str,
) -> None:
    """Accuracy of the routed docs against the share routed, the most confident
    first: one line per (name, curve, operating point), each with its
    threshold's point (share routed, accuracy) marked."""
    Figure = figure_class()
    fig = Figure(figsize=(5.6, 4.2), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    colours = ("#2a788e", "#7a5195", "#ef5675")
    lowest = 80.0
    for (name, curve, operating), colour in zip(curves, colours):
        xs = [p["coverage"] * 100 for p in curve]
        ys = [p["accuracy"] * 100 for p in curve]
        lowest = min(ys + [lowest])
        ax.plot(xs, ys, color=colour, linewidth=2, label=name)
        if operating is not None:
            ax.scatter(
                [operating[0] * 100],
                [operating[1] * 100],
                color=colour,
                edgecolor="black",
                zorder=3,
                label=f"threshold: {operating[0] * 100:.1f}% routed, "
                f"{operating[1] * 100:.1f}% right",
            )
    ax.set_xlabel("docs routed, most confident first (%)")
    ax.set_ylabel("accuracy of the routed docs (%)")
    ax.set_xlim(0, 101)
    ax.set_ylim(lowest - 2, 100.5)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, fontsize=10.5)
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    fig.savefig(path)


def draw_reliability(
    path: Path,
    bins: List[Dict[str, float]],
    title: str,
    ece: Optional[float],
    confidence: str = "top probability",
) -> None:
    """Reliability diagram: each bin's accuracy against its mean `confidence`
    (the diagonal is perfect calibration), the bins' doc counts below."""
    Figure = figure_class()
    fig = Figure(figsize=(5.2, 5.2), dpi=110)
    fig.set_layout_engine("constrained")
    ax, counts = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    width = (bins[0]["high"] - bins[0]["low"]) * 100 if bins else 6.67
    centres = [(b["low"] + b["high"]) / 2 * 100 for b in bins]
    ax.bar(
        centres,
        [b["accuracy"] * 100 for b in bins],
        width * 0.9,
        color="#7ab8c4",
        edgecolor="#2a788e",
        label="accuracy in the bin",
    )
    ax.scatter(
        centres,
        [b["confidence"] * 100 for b in bins],
        color="#d1495b",
        s=14,
        zorder=3,
        label=f"mean {confidence}",
    )
    ax.plot([0, 100], [0, 100], color="grey", linestyle="--", linewidth=1)
    ax.set_ylabel("%")
    ax.set_ylim(0, 102)
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    shown = f" (ECE {ece:.3f})" if ece is not None else ""
    ax.set_title(title + shown, fontsize=10.5)
    counts.bar(centres, [b["docs"] for b in bins], width * 0.9, color="#bbbbbb")
    counts.set_yscale("log")
    counts.set_ylabel("docs")
    counts.set_xlabel(f"{confidence} (%)")
    counts.set_xlim(0, 100)
    for axis in (ax, counts):
        axis.spines[["top", "right"]].set_visible(False)
    fig.savefig(path)
