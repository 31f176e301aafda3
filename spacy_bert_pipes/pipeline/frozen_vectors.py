"""The sentence vectors `vector_anchor` pulls a `bert_textcat` towards: those of a
frozen copy of its body (encoder and sentence vectors) as training started,
computed once per text.

The copy never changes and predicts without dropout, so a training doc's vector
is the same at every epoch. Computing it once instead of at every step takes the
anchor's cost from one more forward pass per step to one per distinct text (a
quarter of them over route.cfg's 4 epochs; docs/benchmarks/routing.md).
"""

from typing import Dict, List, Sequence, cast

import numpy
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d

# Texts whose vectors are kept (about 1.5 KB each at the default encoder's 384
# dimensions); past it, vectors of new texts are computed and not kept.
MAX_TEXTS = 500_000


class FrozenVectors:
    """A frozen body's sentence vectors, remembered by doc text.

    body (Model[List[Doc], Floats2d]): The frozen copy (not trained, not saved).
    max_texts (int): At most this many texts' vectors are kept.
    """

    def __init__(self, body: Model, max_texts: int = MAX_TEXTS) -> None:
        self.body = body
        self.max_texts = max_texts
        self._vectors: Dict[str, numpy.ndarray] = {}

    def __len__(self) -> int:
        return len(self._vectors)

    def predict(self, docs: Sequence[Doc]) -> Floats2d:
        """The (n_docs, width) sentence vectors of the docs, in their order."""
        ops = self.body.ops
        missing: Dict[str, Doc] = {}
        for doc in docs:
            if doc.text not in self._vectors:
                missing.setdefault(doc.text, doc)
        computed: Dict[str, numpy.ndarray] = {}
        if missing:
            rows = ops.to_numpy(self.body.predict(list(missing.values())))
            computed = dict(zip(missing, rows))
            for text, row in computed.items():
                if len(self._vectors) >= self.max_texts:
                    break
                self._vectors[text] = row
        stacked: List[numpy.ndarray] = [
            self._vectors[doc.text] if doc.text in self._vectors else computed[doc.text]
            for doc in docs
        ]
        if not stacked:
            return self.body.predict([])
        return ops.asarray2f(cast(Floats2d, numpy.stack(stacked).astype("float32")))
