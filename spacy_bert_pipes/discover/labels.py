"""The known labels, as vectors a cluster can be compared with (`LabelSpace`):
the label prototypes of the pipeline's `bert_textcat`, in its own space
(`prototype_space`, with `prototype_samples` for the clusters and
`pipeline.router_vectors.prototype_vectors` for docs), or else the
unit mean vector of the rows routed to each label (`routed_space`).
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, cast

import numpy

from ..pipeline.router_vectors import prototype_component as prototype_component
from ..pipeline.router_vectors import prototype_vectors
from ..similar import unit_rows
from .describe import centroid

if TYPE_CHECKING:
    from spacy.language import Language

    from ..pipeline.textcat_pipe import BertTextCategorizer

# Routed rows per label embedded for its mean when the OUTPUT has no vectors.
ROUTED_SAMPLE = 100
# A cluster's members encoded by the bert_textcat for its vector in the
# prototypes' space.
PROTOTYPE_SAMPLE = 100


@dataclass
class LabelSpace:
    """Unit vectors of the known labels.

    source (str): What they are, in words, for the summary.
    labels (List[str]): The labels.
    vectors (numpy.ndarray): One unit vector per label. (n_labels, width)
    component (Optional[str]): The bert_textcat whose prototypes they are
        (None: means of routed rows, in the space of the doc vectors).
    """

    source: str
    labels: List[str]
    vectors: numpy.ndarray
    component: Optional[str] = None


def prototype_space(nlp: "Language", component: str) -> LabelSpace:
    """The label prototypes of a bert_textcat (a PrototypeCatModel), unit length."""
    pipe = cast("BertTextCategorizer", nlp.get_pipe(component))
    output = pipe.model.get_ref("output")
    W = pipe.model.ops.to_numpy(output.get_param("W")).astype("float32")  # (n_labels, width)
    W = W / numpy.maximum(numpy.linalg.norm(W, axis=1, keepdims=True), 1e-12)
    source = f"the label prototypes of '{component}'"
    return LabelSpace(source, list(pipe.labels), W, component)


def prototype_samples(
    nlp: "Language", component: str, member_texts: Sequence[Sequence[str]]
) -> List[numpy.ndarray]:
    """Each cluster's members' unit sentence vectors by the bert_textcat (the
    space of its prototypes, where a label made of the cluster would live):
    per cluster (n_members, width)."""
    return [unit_rows(prototype_vectors(nlp, component, texts)) for texts in member_texts]


def routed_space(labels: Sequence[Optional[str]], unit: numpy.ndarray) -> LabelSpace:
    """Each label's unit mean of the unit vectors of the rows routed to it.

    labels (Sequence[Optional[str]]): The routed label of each row of `unit`
        (None: not routed, left out).
    unit (numpy.ndarray): The rows' unit vectors. (n_rows, width)
    """
    rows: Dict[str, List[int]] = {}
    for row, label in enumerate(labels):
        if label is not None:
            rows.setdefault(label, []).append(row)
    names = sorted(rows)
    width = unit.shape[1] if unit.ndim == 2 else 0
    vectors = (
        numpy.stack([centroid(unit[rows[name]]) for name in names])
        if names
        else numpy.zeros((0, width), dtype="float32")
    )
    return LabelSpace("the mean vector of the rows routed to each label", names, vectors)
