"""The guard: the bias of a label added to a trained exclusive head
(`guard_bias`), so that the docs the head was fit on keep their labels; with
the nearest-examples term, the remembered examples' logits as prediction gives
them (`remembered_logits`), carried from one new label to the next
(`RememberedBest`). Plain numpy (or cupy), no torch.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy
from thinc.api import Model, get_array_module

from .prototypes import nearest_examples, unit_with_norms

# A numpy (or cupy) array of any shape.
Array = Any
# How far below a reference doc's best logit `guard_bias` puts a new label's.
GUARD_EPSILON = 1e-3


def guard_bias(logits: Array, new_cosines: Array, scale: float, allowance: float = 0.0) -> float:
    """The bias of a label added to a trained exclusive head that keeps each
    reference doc's top label: the largest b <= 0 with `scale * cos + b` below
    the doc's best logit, for every reference doc. A prototype made from a few
    examples is their mean, nearer the docs around it than trained prototypes
    are to their own docs, so with a zero bias it takes a similar known label's
    docs wholesale.

    logits (Floats2d): The reference docs' logits over the labels there were
        (`scale * cos + b`, with the nearest-examples term when the head has
        it). (n_docs, n_labels)
    new_cosines (Floats1d): Their cosines with the new prototype (plus the
        term's, likewise). (n_docs,)
    scale (float): The head's scale (1 / temperature).
    allowance (float): The share of reference docs that may change their top
        label to the new one (0: none; the bias sits below that quantile of the
        margins): one odd training doc near the new label's examples would
        otherwise hold its bias down for every doc.
    RETURNS (float): The bias, <= 0; 0 without reference docs.
    """
    if not len(new_cosines):
        return 0.0
    if not 0.0 <= allowance < 1.0:
        raise ValueError(f"the guard's allowance is a share in [0, 1): {allowance}")
    xp = get_array_module(logits)
    margins = logits.max(axis=1) - scale * new_cosines  # (n_docs,)
    tightest = float(xp.min(margins))
    if allowance > 0:
        margins = margins.get() if hasattr(margins, "get") else margins
        tightest = float(numpy.quantile(numpy.asarray(margins, dtype="float64"), allowance))
    # a hair below the tightest margin: a tie would go to the new label's logit
    return min(0.0, tightest - GUARD_EPSILON)


def remembered_logits(output: Model, start: int = 0, batch: int = 512) -> Array:
    """The logits a cosine output layer gives its remembered examples (E) from
    row `start` on as it predicts, the nearest-examples term included, each
    example not counted among its own nearest (as a training doc at prediction
    time would not find itself). (n_examples - start, nO)"""
    xp = output.ops.xp
    E, E_label = output.get_param("E"), output.get_param("E_label")
    Wn, _ = unit_with_norms(output.get_param("W"))
    s = xp.exp(output.get_param("log_scale"))
    b = output.get_param("b")
    weight, top = float(output.attrs["example_weight"]), int(output.attrs["example_top"])
    rows = []
    for first in range(start, len(E), batch):
        En = E[first : first + batch]  # unit rows already
        cos = En @ Wn.T
        own = numpy.arange(first, first + len(En))
        near = nearest_examples(En, E, E_label, cos, top, leave_out=own)
        rows.append((cos + weight * near) * s + b)
    return xp.concatenate(rows) if rows else xp.zeros((0, len(b)), dtype="f")


@dataclass
class RememberedBest:
    """Each remembered example's best logit (`remembered_logits`, max over the
    labels), kept up to date while labels are added one after another: a new
    label's examples only enter its own term, so the rows there were keep
    their logits over the labels there were, and gain the new label's column.
    `add_described_label` guards with it, one pass over the examples for many
    labels instead of one per label.

    best (numpy.ndarray): Per row of E. (n_examples,)
    labels (numpy.ndarray): E_label when `best` was computed: a row replaced
        since (its key remembered again) makes it stale. (n_examples,)
    """

    best: numpy.ndarray = field(default_factory=lambda: numpy.zeros(0, dtype="f"))
    labels: numpy.ndarray = field(default_factory=lambda: numpy.zeros(0, dtype="f"))

    def current(self, output: Model) -> numpy.ndarray:
        """The best logits of the output layer's remembered examples, computed
        again unless they are the ones held. (n_examples,)"""
        labels = output.ops.to_numpy(output.get_param("E_label"))
        if len(labels) != len(self.labels) or not numpy.array_equal(labels, self.labels):
            self.best = output.ops.to_numpy(remembered_logits(output)).max(axis=1)
            self.labels = labels.copy()
        return self.best

    def added(self, output: Model, new_logits: numpy.ndarray) -> None:
        """After a label was added to `output` (the grown layer): the rows there
        were take `new_logits`, their logit for it (n_rows,), and the rows
        remembered since are computed."""
        labels = output.ops.to_numpy(output.get_param("E_label"))
        n = len(self.best)
        if len(new_logits) != n or not numpy.array_equal(labels[:n], self.labels):
            self.labels = numpy.zeros(0, dtype="f")  # stale: computed again when used
            return
        fresh = output.ops.to_numpy(remembered_logits(output, start=n))
        self.best = numpy.concatenate(
            [numpy.maximum(self.best, new_logits), fresh.max(axis=1)]
        ).astype("f")
        self.labels = labels.copy()
