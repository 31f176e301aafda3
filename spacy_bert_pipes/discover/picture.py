"""The picture of `bert-pipes discover`: the clusters among the known labels,
in two dimensions (the first two principal components of the label and
cluster vectors together), a cluster's area its size. matplotlib is the
`plots` extra (`plots.figure_class`)."""

from pathlib import Path

import numpy

from ..plots import figure_class
from .run import Discovery

# The colours of the report's plots: new intents stand out, the labels recede.
NEW_COLOR = "#d1495b"
NEAR_COLOR = "#2a788e"
LOOSE_COLOR = "#e0c068"
LABEL_COLOR = "#9a9a9a"
# Labels named on the picture beside their cross: beyond this many, the nearest
# labels of the clusters only.
NAMED_LABELS = 40
# Clusters named on the picture, the largest first: 100,000 docs can give
# thousands of clusters, whose names would cover the picture (and take minutes
# to place); the review file names every one.
NAMED_CLUSTERS = 30


def project_2d(points: numpy.ndarray) -> numpy.ndarray:
    """The first two principal components of the rows (PCA by SVD); zeros for
    a dimension the rows do not span. (n, 2)"""
    out = numpy.zeros((len(points), 2), dtype="float64")
    if len(points) < 2:
        return out
    centred = points - points.mean(axis=0)
    _, _, vt = numpy.linalg.svd(centred.astype("float64"), full_matrices=False)
    width = min(2, vt.shape[0])
    out[:, :width] = centred @ vt[:width].T
    return out


def draw_discovery(discovery: Discovery, path: Path) -> Path:
    """Draw the clusters (circles, area by size, red for a new intent, yellow loose) and the
    labels (grey crosses) on one PCA plane; write it as a PNG atomically.
    RETURNS (Path): The file."""
    from ..io.durable import write_file

    Figure = figure_class("Drawing the clusters (bert-pipes discover)")
    space, clusters = discovery.label_space, discovery.clusters
    n_labels = len(space.labels)
    points = numpy.concatenate([space.vectors, discovery.centers]) if clusters else space.vectors
    plane = project_2d(points) if len(points) else numpy.zeros((0, 2))
    labels_xy, clusters_xy = plane[:n_labels], plane[n_labels:]
    fig = Figure(figsize=(9, 7), dpi=110)
    fig.set_layout_engine("constrained")
    ax = fig.add_subplot()
    if n_labels:
        ax.scatter(labels_xy[:, 0], labels_xy[:, 1], marker="x", color=LABEL_COLOR, s=30)
        named = set(space.labels) if n_labels <= NAMED_LABELS else set()
        named |= {c.nearest_label for c in clusters[:NAMED_CLUSTERS] if c.nearest_label}
        for label, (x, y) in zip(space.labels, labels_xy.tolist()):
            if label in named:
                ax.annotate(
                    label,
                    (x, y),
                    fontsize=7,
                    color="#555555",
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    if clusters:
        sizes = numpy.asarray([c.size for c in clusters], dtype="float64")
        area = 40 + 400 * sizes / sizes.max()
        colors = [
            NEW_COLOR
            if c.verdict == "new intent"
            else LOOSE_COLOR
            if c.verdict == "loose"
            else NEAR_COLOR
            for c in clusters
        ]
        ax.scatter(
            clusters_xy[:, 0], clusters_xy[:, 1], s=area, c=colors, alpha=0.6, edgecolors="white"
        )
        # clusters come the largest first
        for cluster, (x, y) in zip(clusters[:NAMED_CLUSTERS], clusters_xy.tolist()):
            ax.annotate(
                f"{cluster.cluster}: {cluster.name}",
                (x, y),
                fontsize=7.5,
                xytext=(4, -9),
                textcoords="offset points",
            )
    ax.set_xlabel("first principal component")
    ax.set_ylabel("second principal component")
    ax.spines[["top", "right"]].set_visible(False)
    summary = discovery.summary
    ax.set_title(
        _title(summary["clusters"], summary["new_intents"], summary["clustered"]),
        fontsize=11,
        pad=8,
    )
    ax.text(
        0.0,
        -0.08,
        _legend(space.source, len(clusters)),
        transform=ax.transAxes,
        fontsize=7.5,
        color="#555555",
        va="top",
    )
    write_file(path, lambda tmp: fig.savefig(tmp, format="png"))
    return path


def _title(n_clusters: int, new: int, clustered: int) -> str:
    return f"{n_clusters} clusters of {clustered} docs not routed ({new} new intents)"


def _legend(source: str, n_clusters: int) -> str:
    named = f"; the {NAMED_CLUSTERS} largest clusters named" if n_clusters > NAMED_CLUSTERS else ""
    return f"red: new intent; blue: near a label; yellow: loose; grey x: {source}{named}"
