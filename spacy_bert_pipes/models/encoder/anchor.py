"""Keep a fine-tuned encoder's doc vectors where the pretrained checkpoint had them.

When heads fine-tune a shared encoder, the mean-pooled doc vector drifts away from
the checkpoint's sentence embedding that `bert_vectors` serves. `bert_encoder`'s
`vector_anchor` adds, in training, weight * mean over docs of (1 - cos(s, t)), where
s is the mean of the doc's [CLS] and wordpiece vectors from the encoder being
trained and t the same mean from a frozen copy of the encoder as it was loaded (the
teacher). Only s carries a gradient; it flows back to the [CLS] and wordpiece
vectors as the mean's share of each.
"""

from typing import List, Tuple

from thinc.api import get_array_module
from thinc.types import Floats1d

from ..types import DocEncoding, DocEncodingGrad


def mean_vector(encoding: DocEncoding) -> Floats1d:
    """The mean of a doc's [CLS] vector and wordpiece vectors. (width,)"""
    xp = get_array_module(encoding.cls)
    total = encoding.cls + encoding.wordpieces.sum(axis=0)
    return xp.asarray(total / (1 + len(encoding.wordpieces)), dtype="f")


def anchor_loss(
    student: List[DocEncoding], teacher: List[DocEncoding], weight: float
) -> Tuple[float, List[DocEncodingGrad]]:
    """weight * mean(1 - cos(s, t)) over the docs, and its gradient per doc.

    RETURNS: the loss, and each doc's gradient for its [CLS] and wordpiece vectors.
    """
    n = max(len(student), 1)
    loss = 0.0
    grads = []
    for enc, ref in zip(student, teacher):
        xp = get_array_module(enc.cls)
        s, t = mean_vector(enc), mean_vector(ref)
        s_norm = float(xp.linalg.norm(s)) or 1.0
        t_norm = float(xp.linalg.norm(t)) or 1.0
        cos = float(xp.dot(s, t)) / (s_norm * t_norm)
        loss += weight * (1.0 - cos) / n
        # d(1 - cos)/ds = -(t / (|s||t|) - cos * s / |s|^2)
        d_s = -(t / (s_norm * t_norm) - cos * s / (s_norm * s_norm)) * (weight / n)
        share = d_s / (1 + len(enc.wordpieces))  # each position's share of the mean
        d_pieces = xp.broadcast_to(share, enc.wordpieces.shape).astype("f")
        grads.append(DocEncodingGrad(d_cls=share.astype("f"), d_wordpieces=d_pieces))
    return loss, grads
