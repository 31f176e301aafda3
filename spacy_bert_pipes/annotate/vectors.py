"""`annotate --vectors`: every doc's `doc.vector` as the "vector" column.

Any pipeline whose docs have vectors will do: a component that sets
`doc.user_hooks["vector"]` (such as `bert_vectors`), static word vectors in
the vocab (a doc's vector is the mean of its tokens'), or a `doc.tensor`
(spaCy's default `doc.vector` is then its mean). The engine measures the
width once, on a probe text, before any chunk (`vector_width`, called by
`columns.with_columns`); a pipeline whose docs have no vector fails the run
there. Then, per doc (`doc_vector`):

- an empty or whitespace-only text gets zeros of that width, whatever the
  pipeline gives it (a mean over no tokens is NaN or nothing);
- a doc without a vector (`doc.has_vector` False, or a vector of width 0), a
  vector of another width, or one with NaN or infinite values (in float16:
  beyond +-65504) is an error row naming the reason; nothing is dropped.

A router as configs/route.cfg trains (a bert_textcat with label prototypes
on its own encoder, no bert_vectors) gives its docs no vector: its column is
then the router's own unit sentence vectors, the space of its prototypes, as
`bert-pipes discover` computes them without a column
(`pipeline.router_vectors`, the one place that owns them; `chunk_vectors`).
That is a second pass of the router's encoder over each chunk.
"""

from typing import List, Optional, Sequence, Tuple

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
    return vector_source(nlp)[0]


def vector_source(nlp: Language) -> Tuple[int, Optional[str]]:
    """The width of the pipeline's doc vectors, from a probe text, and where
    they come from: None, `doc.vector`; else the name of the bert_textcat
    with label prototypes whose sentence vectors stand in for a pipeline
    without doc vectors (a router). Raises an `AnnotateError` that says what
    to add if there is neither."""
    from ..pipeline.router_vectors import prototype_component, prototype_vectors

    with nlp.memory_zone():
        doc = nlp(PROBE_TEXT)
        width = int(to_numpy(doc.vector).size)
        component = prototype_component(nlp) if width == 0 else None
        if component is not None:
            width = int(prototype_vectors(nlp, component, [PROBE_TEXT]).shape[1])
    if component is not None:
        return width, component
    if width == 0:
        components = ", ".join(nlp.pipe_names) or "none"
        raise AnnotateError(
            f"--vectors: the pipeline gives no doc vectors (doc.vector of a text has "
            f"width 0; its components: {components}): {VECTOR_COMPONENT_HINT}"
        )
    return width, None


def chunk_vectors(
    nlp: Language, docs: Sequence[Doc], column: VectorColumn
) -> List[Optional[numpy.ndarray]]:
    """Per doc, the vector `doc_vector` writes in place of `doc.vector`: the
    router's sentence vectors when the column says so (one batch), else None."""
    if column.component is None or not docs:
        return [None] * len(docs)
    from ..pipeline.router_vectors import prototype_vectors

    vectors = prototype_vectors(nlp, column.component, [doc.text for doc in docs])
    return list(vectors)


def doc_vector(
    doc: Doc, column: VectorColumn, vector: Optional[numpy.ndarray] = None
) -> List[float]:
    """A doc's vector, its values rounded to `column.dtype`.

    doc (Doc): The annotated doc.
    column (VectorColumn): The run's width and dtype.
    vector (Optional[numpy.ndarray]): Its vector, given (`chunk_vectors`);
        None: `doc.vector`.
    RETURNS (List[float]): `column.width` finite values, zeros for an empty or
        whitespace-only text. Raises a `VectorError` (an error row) for a doc
        without a vector, or of another width, or with NaN or infinite values.
    """
    if not doc.text.strip():
        return [0.0] * column.width
    if vector is None and not doc.has_vector:
        raise VectorError(
            "--vectors: the pipeline gave this doc no vector (doc.has_vector is False; "
            f"with static word vectors, none of its words has one): {VECTOR_COMPONENT_HINT}"
        )
    vector = numpy.asarray(to_numpy(doc.vector) if vector is None else vector)
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
