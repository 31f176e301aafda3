"""The sentence vectors of a router: the exclusive `bert_textcat` with label
prototypes of a pipeline (`prototype_component`) and its own encoder's unit
sentence vectors of texts (`prototype_vectors`), the space its prototypes live
in. A router as configs/route.cfg trains has no `bert_vectors`, so these are
its docs' vectors wherever the package needs some: `bert-pipes annotate
--vectors` writes them, `bert-pipes discover` clusters and places them.
"""

from typing import TYPE_CHECKING, Optional, Sequence, cast

import numpy

if TYPE_CHECKING:
    from spacy.language import Language

    from .textcat_pipe import BertTextCategorizer


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
    prototypes = cast("BertTextCategorizer", nlp.get_pipe(component)).prototypes
    return prototypes.sentence_vectors([nlp.make_doc(text) for text in texts])
