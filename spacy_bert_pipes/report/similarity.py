"""The section of an annotated collection's doc vectors: a 2-D map of its rows
coloured by predicted intent, and the near-duplicates that `bert-pipes
similar-collection` found."""

from collections import Counter
from typing import List

import numpy

from ..similar import SUMMARY_SUFFIX
from .analysis import OTHER, intent_groups, pca_2d
from .document import Block, Heading, Paragraph, Table, pct, short
from .inputs import Collection
from .plots import Figures, draw_collection_map

# Intents with a colour of their own on the map (the most frequent); the rest are "other".
MAP_INTENTS = 10


def similarity_section(c: Collection, figures: Figures) -> List[Block]:
    """The map and the near-duplicates of an annotated collection, or a note
    saying why there are none."""
    blocks: List[Block] = [Heading(3, f"Map and near-duplicates of {c.path.name}")]
    if c.vectors is None:
        blocks.append(
            Paragraph(
                f"`{c.path}` has no vector column: annotate with `--vectors` (a pipeline "
                "with a `bert_vectors` component, e.g. `bert-pipes assemble --vectors`) "
                "for a map of the collection and its near-duplicates."
            )
        )
        return blocks
    return blocks + _map(c, figures) + _duplicates(c)


def _map(c: Collection, figures: Figures) -> List[Block]:
    vectors = numpy.asarray(c.vectors)
    present = numpy.linalg.norm(vectors, axis=1) > 0
    if int(present.sum()) < 3 or vectors.shape[1] < 2:
        return [Paragraph(f"Too few rows with a vector ({int(present.sum())}) for a map.")]
    points, shares = pca_2d(vectors[present])
    intents = [i for i, keep in zip(c.intents, present.tolist()) if keep]
    groups = intent_groups(intents, MAP_INTENTS)
    counts = Counter(groups)
    order = sorted((g for g in counts if g != OTHER), key=lambda g: (-counts[g], g)) + [OTHER]
    missing = int((~present).sum())
    text = (
        f"The {int(present.sum())} rows with a vector, projected on the first two "
        "principal components of their unit-length doc vectors (PCA), so that close "
        "points have similar vectors; "
        f"together the two explain {(shares[0] + shares[1]) * 100:.1f}% of the variance, "
        "so neighbours on the map need not be neighbours in the full space. Colour: "
        f"the predicted intent (the most probable category), for the {MAP_INTENTS} most "
        "frequent; the others are grey."
    )
    if missing:
        text += f" {missing} rows have a zero vector (an empty text) and are not shown."
    return [Paragraph(text)] + figures.image(
        f"annotated_{c.name}_map",
        f"Map of {c.name}, coloured by predicted intent",
        draw_collection_map,
        points,
        groups,
        order,
        f"{c.path.name}: doc vectors (PCA), coloured by predicted intent",
        shares,
    )


def _duplicates(c: Collection) -> List[Block]:
    s = c.similar
    if s is None:
        return [
            Paragraph(
                f"No `{c.name}{SUMMARY_SUFFIX}` beside `{c.path}`: run `bert-pipes "
                f"similar-collection {c.path}` for its near-duplicates and most similar rows."
            )
        ]
    nearest = s.get("nearest_same_intent")
    rows = [
        ["Rows searched", f"{s.get('rows', 0) - s.get('rows_without_vector', 0)}"],
        ["Near-duplicate threshold (cosine)", str(s.get("threshold"))],
        ["Near-duplicate pairs", str(s["pairs"])],
        ["Rows in a pair", str(s.get("rows_in_pairs", "-"))],
        ["Pairs with the same predicted intent", str(s.get("pairs_same_intent", "-"))],
        ["Rows whose nearest row has the same predicted intent", pct(nearest, 1) + " %"],
    ]
    blocks: List[Block] = [
        Paragraph(
            f"From `{c.name}{SUMMARY_SUFFIX}` (`bert-pipes similar-collection`, an exact "
            f"search): each row's {s.get('k')} most similar rows are in "
            f"`{s.get('neighbours')}`, the pairs in `{s.get('duplicates')}`."
        ),
        Table(["Near-duplicates", "Value"], rows),
    ]
    if c.duplicate_examples:
        blocks += [
            Paragraph(f"The {len(c.duplicate_examples)} most similar pairs:"),
            Table(
                ["Cosine", "Id", "Text", "Intent", "Id", "Text", "Intent"],
                [
                    [
                        f"{float(r['cosine']):.4f}",
                        str(r.get("id_a")),
                        short(str(r.get("text_a", "-")), 80),
                        str(r.get("intent_a")),
                        str(r.get("id_b")),
                        short(str(r.get("text_b", "-")), 80),
                        str(r.get("intent_b")),
                    ]
                    for r in c.duplicate_examples
                ],
                "rllllll",
            ),
        ]
    return blocks
