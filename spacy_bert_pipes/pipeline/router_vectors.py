"""The sentence vectors of a router: the exclusive `bert_textcat` with label
prototypes of a pipeline (`prototype_component`) and its own encoder's unit
sentence vectors, the space its prototypes live in. A router as
configs/route.cfg trains has no `bert_vectors`, so these are its docs' vectors
wherever the package needs some.

When it predicts, the router computes each doc's sentence vector on the way
to its probabilities, and its `set_annotations` installs it as the doc's
`doc.vector` (`set_router_vectors`): `bert-pipes annotate --vectors` reads it
there, with no second encoder pass. It stands in only where the pipeline
gives the doc no vector of its own (a `doc.user_hooks["vector"]`, such as
`bert_vectors`', static word vectors in the vocab, or a `doc.tensor`), so a
router added to a pipeline with vectors leaves them as they were.

`prototype_vectors` computes the same vectors for texts, outside a pipeline
run (`bert-pipes discover` on a pool of texts).

The hooks hold the vector, so `pickle.dumps(doc)` keeps it. spaCy's
`Doc.to_bytes`, which `nlp.pipe(n_process>1)` and DocBin use, drops user
hooks: `doc.vector` is then no longer the router's.
"""

from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy
from spacy.tokens import Doc

if TYPE_CHECKING:
    from spacy.language import Language


def prototype_component(nlp: "Language") -> Optional[str]:
    """The pipeline's exclusive bert_textcat with label prototypes, or None.

    RAISES (ValueError): It has several.
    """
    names = [
        name
        for name, pipe in nlp.pipeline
        if getattr(pipe, "has_prototypes", False) and getattr(pipe, "exclusive", False)
    ]
    if len(names) > 1:
        raise ValueError(
            f"the pipeline has several bert_textcat with label prototypes ({names}): "
            "discover compares the clusters with one router's"
        )
    return names[0] if names else None


def prototype_vectors(nlp: "Language", component: str, texts: Sequence[str]) -> numpy.ndarray:
    """The unit sentence vectors of texts by the bert_textcat's own encoder,
    fine-tuned with it: the space of its prototypes. (n_texts, width)"""
    # a BertTextCategorizer (textcat_pipe.py, which imports this module)
    router: Any = nlp.get_pipe(component)
    return router.prototypes.sentence_vectors([nlp.make_doc(text) for text in texts])


def set_router_vectors(docs: Sequence[Doc], vectors: numpy.ndarray) -> None:
    """Install each doc's sentence vector as its `doc.vector`, unless the
    pipeline gives it a vector of its own (see the module's docstring).

    docs (Sequence[Doc]): The docs the router predicted for.
    vectors (numpy.ndarray): Their unit sentence vectors, on the host.
        (n_docs, width)
    """
    for doc, vector in zip(docs, vectors):
        if not has_own_vector(doc):
            RouterVector(vector).install(doc)


def has_own_vector(doc: Doc) -> bool:
    """Whether the doc has a vector that is not a router's: a vector hook set
    by another component, static word vectors in the vocab or a `doc.tensor`
    (spaCy's `doc.vector` is then their mean). Checked per pipeline, not per
    word: a doc whose words have no static vector still has no router vector,
    so one run never mixes two spaces."""
    hook = doc.user_hooks.get("vector")
    if hook is not None:
        return not isinstance(getattr(hook, "__self__", None), RouterVector)
    return bool(doc.vocab.vectors.size) or bool(doc.tensor.size)


class RouterVector:
    """A doc's router sentence vector as spaCy's doc hooks; picklable (plain
    data inside). Spans and tokens keep spaCy's own vectors."""

    __slots__ = ("vector",)

    def __init__(self, vector: numpy.ndarray) -> None:
        self.vector = vector  # (width,), unit length

    def install(self, doc: Doc) -> None:
        doc.user_hooks.update(
            vector=self.doc_vector,
            has_vector=self.has_vector,
            vector_norm=self.vector_norm,
            similarity=self.similarity,
        )

    def doc_vector(self, doc: Doc) -> numpy.ndarray:
        return self.vector

    def has_vector(self, doc: Doc) -> bool:
        return True

    def vector_norm(self, doc: Doc) -> float:
        return float(numpy.linalg.norm(self.vector))

    def similarity(self, doc: Doc, other: Any) -> float:
        """Cosine similarity with another doc's, span's or token's vector (0.0
        if either is zero)."""
        b: Any = other.vector
        if self.vector.shape != b.shape:
            raise ValueError(
                f"Cannot compare a router's doc vector of width {self.vector.shape} with a "
                f"{type(other).__name__} vector of width {b.shape}"
            )
        denominator = float(numpy.linalg.norm(self.vector) * numpy.linalg.norm(b))
        return float(numpy.dot(self.vector, b) / denominator) if denominator else 0.0
