"""Losses on a batch's sentence vectors that a prototype head's training adds
to its classifier's: the supervised pair loss of few-shot training
(`contrastive_loss`), which pulls the vectors of a batch's docs of the same label
together and pushes the others apart, and the anchor to a frozen copy of the
encoder (`anchor_to_teacher`). Plain numpy (or cupy), no torch.
"""

from typing import Any, Sequence, Tuple

from thinc.api import get_array_module

# A numpy (or cupy) array of any shape.
Array = Any


def contrastive_loss(
    vectors: Array, label_ids: Sequence[int], temperature: float
) -> Tuple[float, Array]:
    """Supervised contrastive loss over a batch's unit vectors (Khosla et al.,
    2020): for each doc with another doc of its label in the batch, the mean over
    those positives of -log softmax(cos / temperature) against every other doc
    of the batch. Docs without a label (-1) or a positive only act as negatives.

    RETURNS: the mean loss over the docs with a positive, and its gradient with
        respect to the vectors. (n_docs, width)
    """
    xp = get_array_module(vectors)
    n = len(label_ids)
    ids = xp.asarray(list(label_ids))
    others = ~xp.eye(n, dtype=bool)
    positive = (ids[:, None] == ids[None, :]) & others & (ids[:, None] >= 0)
    n_pos = positive.sum(axis=1)  # (n_docs,)
    anchors = n_pos > 0
    if n < 2 or not bool(anchors.any()):
        return 0.0, xp.zeros_like(vectors)
    z = vectors @ vectors.T / temperature  # (n_docs, n_docs)
    z = xp.where(others, z, -1e9)
    z = z - z.max(axis=1, keepdims=True)
    p = xp.exp(z) * others
    p /= p.sum(axis=1, keepdims=True)
    log_p = xp.log(xp.maximum(p, 1e-30))
    q = positive / xp.maximum(n_pos, 1)[:, None]  # target distribution per anchor
    n_anchors = float(anchors.sum())
    loss = float(-((q * log_p).sum(axis=1) * anchors).sum() / n_anchors)
    d_z = (p - q) * anchors[:, None] / n_anchors  # (n_docs, n_docs)
    d_vectors = (d_z + d_z.T) @ vectors / temperature
    return loss, d_vectors.astype("f")


def anchor_to_teacher(vectors: Array, teacher: Array, weight: float) -> Tuple[float, Array]:
    """weight * mean over the docs of (1 - cos(s, t)) between each doc's unit
    sentence vector s from the encoder in training and t from a frozen copy of
    it as training started (both unit: cos = s . t): the fine-tuned geometry
    kept near the pretrained one, where queries of intents never trained on
    stay apart from the known ones.

    RETURNS: the loss, and its gradient with respect to s. (n_docs, width)
    """
    xp = get_array_module(vectors)
    n = max(len(vectors), 1)
    loss = float(weight * (1.0 - (vectors * teacher).sum(axis=1)).sum() / n)
    return loss, xp.asarray(-weight * teacher / n, dtype="f")
