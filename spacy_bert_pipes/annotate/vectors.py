"""`annotate --vectors`: every doc's `doc.vector` as the "vector" column.

Any pipeline whose docs have vectors will do: a component that sets
`doc.user_hooks["vector"]` (such as `bert_vectors`, or a router as
configs/route.cfg trains: its bert_textcat's sentence vectors, from the pass
that routed the doc), static word vectors in the vocab (a doc's vector is the
mean of its tokens'), or a `doc.tensor` (spaCy's default `doc.vector` is then
its mean). The engine measures the width once, on a probe text, before any
chunk (`vector_width`, called by `columns.with_columns`); a pipeline whose
docs have no vector fails the run there. Then, per doc (`doc_vector`):

- an empty or whitespace-only text gets zeros of that width, whatever the
  pipeline gives it (a mean over no tokens is NaN or nothing);
- a doc without a vector (`doc.has_vector` False, or a vector of width 0), a
  vector of another width, or one with NaN or infinite values (in float16:
  beyond +-65504) is an error row naming the reason; nothing is dropped.

The column is read in the process that ran the pipeline (the local engine's,
a worker's, a Ray actor's): user hooks do not survive `Doc.to_bytes`.
"""

from typing import List

import numpy
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import to_numpy

from ..io.output import VectorColumn
from .types import AnnotateError

# Words any vocabulary knows: with static vectors, the probe has a vector.
PROBE_TEXT = "This is a short text, to find the width of the pipeline's doc vectors."
VECTOR_COMPONENT_HINT = (
    "add a component that sets them, such as bert_vectors (nlp.add_pipe('bert_vectors') "
    "after the bert_encoder), or use a pipeline with static word vectors"
)
FLOAT16_MAX = 65504.0


class VectorError(ValueError):
    """A doc whose vector cannot be written: the reason, for its error row."""


def vector_width(nlp: Language) -> int:
    """The width of the pipeline's doc vectors, from a probe text; raises an
    `AnnotateError` that says what to add if its docs have none."""
    with nlp.memory_zone():
        width = int(to_numpy(nlp(PROBE_TEXT).vector).size)
    if width == 0:
        components = ", ".join(nlp.pipe_names) or "none"
        raise AnnotateError(
            f"--vectors: the pipeline gives no doc vectors (doc.vector of a text has "
            f"width 0; its components: {components}): {VECTOR_COMPONENT_HINT}"
        )
    return width


def doc_vector(doc: Doc, column: VectorColumn) -> List[float]:
    """A doc's vector, its values rounded to `column.dtype`.

    doc (Doc): The annotated doc.
    column (VectorColumn): The run's width and dtype.
    RETURNS (List[float]): `column.width` finite values, zeros for an empty or
        whitespace-only text. Raises a `VectorError` (an error row) for a doc
        without a vector, or of another width, or with NaN or infinite values.
    """
    if not doc.text.strip():
        return [0.0] * column.width
    if not doc.has_vector:
        raise VectorError(
            "--vectors: the pipeline gave this doc no vector (doc.has_vector is False; "
            f"with static word vectors, none of its words has one): {VECTOR_COMPONENT_HINT}"
        )
    vector = numpy.asarray(to_numpy(doc.vector))
    if vector.ndim != 1 or vector.size != column.width:
        raise VectorError(
            f"--vectors: this doc's vector has shape {list(vector.shape)}, not "
            f"[{column.width}] as the pipeline's other doc vectors: the width changed "
            "between docs"
        )
    with numpy.errstate(over="ignore"):  # beyond float16: inf, an error row below
        values = vector.astype(column.dtype)
    bad = numpy.flatnonzero(~numpy.isfinite(values))
    if bad.size:
        first = ", ".join(str(i) for i in bad[:5]) + (", ..." if bad.size > 5 else "")
        if numpy.isfinite(vector[bad]).all():
            raise VectorError(
                f"--vectors: this doc's vector has values beyond float16's range "
                f"(+-{FLOAT16_MAX:g}) at {bad.size} of {column.width} dimensions ({first}): "
                "use --vectors-dtype float32"
            )
        raise VectorError(
            f"--vectors: this doc's vector has NaN or infinite values at {bad.size} of "
            f"{column.width} dimensions ({first})"
        )
    values_list: List[float] = values.tolist()
    return values_list
