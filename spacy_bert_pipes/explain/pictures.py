"""The PNGs of `explain`: a layer's attention heatmap, its heads side by side, and
the attention from [CLS] to every wordpiece (bars for the chosen layers, a strip per
layer). matplotlib is loaded only when a picture is drawn (`plots.figure_class`)."""

from pathlib import Path
from typing import Any, List, Tuple

import numpy

from ..plots import figure_class
from .types import ExplainResult


def matplotlib_figure() -> Any:
    """matplotlib's `Figure`, or an ImportError that says how to install it."""
    return figure_class("Drawing attention")


def _labels(result: ExplainResult) -> List[str]:
    # Question rows are marked, so the two segments of a pair read apart.
    return [
        f"{token} ·q" if flag else token
        for token, flag in zip(result.tokens, result.attention.is_question.tolist())
    ]


def _cell(n: int, largest: float = 0.32, total: float = 26.0) -> Tuple[float, float]:
    """Inches per wordpiece and a label font size: roomy for short texts, shrinking
    so a 512-wordpiece window stays a drawable picture."""
    cell = min(largest, total / max(n, 1))
    return cell, max(3.0, min(9.0, cell * 40))


def _heatmap(ax: Any, matrix: numpy.ndarray, labels: List[str], font: float, vmax: float) -> Any:
    n = len(labels)
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=font)
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=font)
    ax.tick_params(length=0)
    return image


def _layer_title(result: ExplainResult, layer: int) -> str:
    return f"Layer {layer} of 0-{result.attention.n_layers - 1}, {head_words(result)}"


def draw_layer(result: ExplainResult, layer: int, path: Path) -> Path:
    Figure = matplotlib_figure()
    labels = _labels(result)
    n = len(labels)
    cell, font = _cell(n)
    side = n * cell
    fig = Figure(figsize=(side + 2.6, side + 2.2), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    matrix = result.head_mean(layer)
    image = _heatmap(ax, matrix, labels, font, float(matrix.max()))
    _mark_segments(ax, result)
    ax.set_xlabel("attended wordpiece (key)")
    ax.set_ylabel("attending wordpiece (query)")
    ax.set_title(f"{_layer_title(result, layer)}\n{result.encoder_component}: rows sum to 1")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    fig.savefig(path)
    return path


def draw_heads(result: ExplainResult, layer: int, path: Path) -> Path:
    Figure = matplotlib_figure()
    labels = _labels(result)
    n = len(labels)
    heads = result.heads
    cols = min(4, len(heads))
    rows = -(-len(heads) // cols)
    cell, font = _cell(n, largest=0.24, total=14.0)
    side = n * cell
    # wordpiece labels on the outer panels only: the left column and the bottom row
    fig = Figure(figsize=(cols * (side + 0.3) + 2.8, rows * (side + 0.45) + 2.2), dpi=100)
    fig.set_layout_engine("constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    weights = result.attention.weights[layer]
    vmax = float(weights[heads].max())
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(heads):
            ax.axis("off")
            continue
        image = _heatmap(ax, weights[heads[i]], labels, font, vmax)
        _mark_segments(ax, result)
        ax.set_title(f"head {heads[i]}", fontsize=11)
        ax.tick_params(labelleft=i % cols == 0, labelbottom=i + cols >= len(heads))
    fig.suptitle(
        f"Layer {layer} of 0-{result.attention.n_layers - 1}, head by head "
        "(rows: attending wordpiece; columns: attended wordpiece)",
        fontsize=13,
    )
    fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight")
    fig.savefig(path)
    return path


def draw_cls(result: ExplainResult, path: Path) -> Path:
    Figure = matplotlib_figure()
    labels = _labels(result)
    n = len(labels)
    n_layers = result.attention.n_layers
    cell, font = _cell(n, largest=0.38, total=30.0)
    bar_height, strip_height = 1.7, 0.26 * n_layers
    height = bar_height * len(result.layers) + strip_height + 1.9
    fig = Figure(figsize=(max(6.0, n * cell + 2.0), height), dpi=110, layout="constrained")
    grid = fig.add_gridspec(
        len(result.layers) + 1, 1, height_ratios=[bar_height] * len(result.layers) + [strip_height]
    )
    special = result.attention.offsets[:, 0] < 0
    colors = numpy.where(special, "#9e9e9e", "#2a788e")
    # [CLS] often attends mostly to itself or [SEP] (up to 0.99 in middle layers):
    # the scales follow the text's wordpieces, and a taller special bar is cut and
    # labelled with its value.
    text_max = float(result.cls_attention[:, ~special].max())
    strip_ax = fig.add_subplot(grid[-1])
    for i, layer in enumerate(result.layers):
        ax = fig.add_subplot(grid[i], sharex=strip_ax)
        values = result.cls_attention[layer]
        top = float(values[~special].max()) * 1.25
        ax.bar(range(n), numpy.minimum(values, top), color=colors.tolist(), width=0.8)
        for j in numpy.nonzero(values > top)[0]:
            ax.text(
                j, top * 0.97, f"{values[j]:.2f}", ha="center", va="top", fontsize=7, rotation=90
            )
        ax.set_ylabel(f"layer {layer}", fontsize=9)
        ax.set_ylim(0, top)
        ax.tick_params(axis="x", labelbottom=False, length=0)
        ax.spines[["top", "right"]].set_visible(False)
        if i == 0:
            ax.set_title(
                "Attention from [CLS] to each wordpiece, "
                f"{head_words(result)} (grey: special tokens, cut bars show their value)"
            )
    image = strip_ax.imshow(
        result.cls_attention,
        aspect="auto",
        cmap="viridis",
        vmin=0.0,
        vmax=text_max,
        interpolation="nearest",
    )
    strip_ax.set_yticks(range(n_layers))
    strip_ax.set_yticklabels([f"layer {i}" for i in range(n_layers)], fontsize=7)
    strip_ax.set_xticks(range(n))
    strip_ax.set_xticklabels(labels, rotation=90, fontsize=font)
    strip_ax.tick_params(length=0)
    _mark_segments(strip_ax, result, rows=False)
    extend = "max" if float(result.cls_attention.max()) > text_max else "neither"
    fig.colorbar(image, ax=strip_ax, label="weight", aspect=8, pad=0.01, extend=extend)
    fig.savefig(path)
    return path


def _mark_segments(ax: Any, result: ExplainResult, rows: bool = True) -> None:
    """White lines between the question and the context of a pair."""
    flags = result.attention.is_question
    if not flags.any():
        return
    boundary = int(numpy.nonzero(flags)[0][-1]) + 1.5  # after the question's [SEP]
    ax.axvline(boundary, color="white", linewidth=1.2)
    if rows:
        ax.axhline(boundary, color="white", linewidth=1.2)


def head_words(result: ExplainResult) -> str:
    n_heads = result.attention.n_heads
    if len(result.heads) == 1:
        return f"head {result.heads[0]}"
    if len(result.heads) == n_heads:
        return f"mean of all {n_heads} heads"
    return "mean of heads " + ", ".join(map(str, result.heads))
