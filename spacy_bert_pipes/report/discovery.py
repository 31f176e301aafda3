"""The section of a `bert-pipes discover` folder: what the router did not
route, the clusters found in it with their suggested names, nearest known
labels and the reviewer's actions, and the picture of the clusters among the
labels."""

import shutil
from pathlib import Path
from typing import Any, List

from ..discover import DiscoveryFiles
from .document import Block, Heading, Paragraph, Table, short
from .plots import Figures

# Clusters listed in the table (the largest first); the review file has them all.
SHOWN_CLUSTERS = 30


def discovery_section(d: DiscoveryFiles, figures: Figures) -> List[Block]:
    """The clusters of a discover folder, with its picture."""
    s = d.summary
    decisions = s.get("decisions") or {}
    pooled = ", ".join(str(x) for x in s.get("pooled_decisions", []))
    blocks: List[Block] = [
        Heading(
            2,
            "New intents among the docs not routed"
            + (f" or routed below confidence {s.get('below')}" if s.get("below") else "")
            + f" (`{d.folder}`)",
        ),
        Paragraph(
            f"`bert-pipes discover` over `{s.get('annotations')}`: of its {s.get('rows')} rows, "
            f"{decisions.get('routed', 0)} were routed, {decisions.get('out_of_scope', 0)} "
            f"out of scope and {decisions.get('ambiguous', 0)} ambiguous; the {s.get('pooled')} "
            f"docs with the decision {pooled}"
            + (
                f" or a confidence below {s.get('below')} ({s.get('pooled_routed')} of them routed)"
                if s.get("below")
                else ""
            )
            + f" were clustered ({s.get('method')}, clusters of "
            f"at least {s.get('min_cluster_size')} docs): {s.get('clustered')} docs in "
            f"{s.get('clusters')} clusters, {s.get('noise')} left unclustered"
            + (f", {s.get('empty_text')} empty texts left out" if s.get("empty_text") else "")
            + f'. {s.get("new_intents")} clusters are a "new intent", {s.get("loose", 0)} '
            f'"loose" (their docs\' silhouette below {s.get("loose_silhouette", 0.1)}: '
            "scattered requests, or intents together); the others sit near a known label "
            "(the router routed most of their docs to it, or their centroid is within cosine "
            f"{s.get('near_cosine')} of it: a blind spot of it, or a neighbour). The review "
            f"file is `{d.folder / str((s.get('files') or {}).get('review'))}`."
            + (f" Warning: {s.get('warning')}." if s.get("warning") else "")
        ),
    ]
    clusters = sorted(d.clusters, key=lambda c: -_int(c.get("size")))
    rows = [
        [
            str(c.get("cluster")),
            str(c.get("size")),
            short(str(c.get("name", "")), 40),
            str(c.get("verdict", "")),
            str(c.get("nearest_label") or "-"),
            _cosine(c.get("nearest_cosine")),
            short(_first_text(c), 70),
            str(c.get("action") or "-"),
        ]
        for c in clusters[:SHOWN_CLUSTERS]
    ]
    if rows:
        blocks.append(
            Table(
                [
                    "Cluster",
                    "Docs",
                    "Name",
                    "Verdict",
                    "Nearest label",
                    "Cosine",
                    "Example",
                    "Action",
                ],
                rows,
                "rrlllrll",
            )
        )
        if len(clusters) > SHOWN_CLUSTERS:
            blocks.append(Paragraph(f"The {SHOWN_CLUSTERS} largest of {len(clusters)} clusters."))
    else:
        blocks.append(Paragraph("No cluster: the docs not routed are scattered."))
    if d.picture is not None:
        blocks += figures.image(
            f"discovery_{d.folder.name}",
            "The clusters among the known labels",
            _copy_picture,
            d.picture,
        )
    return blocks


def _copy_picture(path: Path, source: Path) -> None:
    shutil.copyfile(source, path)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _cosine(value: Any) -> str:
    try:
        return f"{float(value):.3f}"
    except (TypeError, ValueError):
        return "-"


def _first_text(cluster: Any) -> str:
    shown = cluster.get("representatives") or []
    if shown and isinstance(shown[0], dict):
        return str(shown[0].get("text", ""))
    return ""
