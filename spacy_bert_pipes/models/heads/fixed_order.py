"""Dot products and quadratic forms whose bits depend on their own rows alone.

A BLAS matrix product rounds each of its sums in an order of its own choosing:
the blocks it tiles the matrices into (which depend on the number of rows in
the call) and the threads it splits them between (OpenBLAS's AVX2 kernels,
Haswell and Zen, give other last bits on 1 thread than on 2). So a doc's score
computed with the others of its batch depends on that batch and on the
process's BLAS threads: a Ray actor (OMP_NUM_THREADS=1) gave another last bit
than the local engine (all cores), enough to cross a reference score.

The out-of-scope scores (`scope.py`) and the nearest-examples term of label
prototypes (`prototypes.nearest_examples`) therefore use the fast product only
to screen: it finds, per doc, the few candidates within its rounding bound of
the best (`ROUNDING_SLACK`), and these are computed again here in float64, the
products of each pair summed in one fixed order (numpy's pairwise sum along a
contiguous row). Plain numpy; `fixed_order_dots` and `top_sums` take cupy too.
"""

from typing import Tuple

import numpy
from thinc.api import get_array_module

# A product of width w of rows of length at most 1 (any order of its sums) is
# within w * eps / 2 of the exact value; this many times w * eps is the bound
# the screens use, with room for the other roundings around it.
ROUNDING_SLACK = 2.0
# float64 values in one block of products (bounds the memory, not the result)
_BLOCK_VALUES = 1 << 20
# the same for the pairs' dot products: a block that stays in the cache
# (512 KiB) computes them ~1.5x faster than one of 8 MiB
_DOT_BLOCK_VALUES = 1 << 16


def fixed_order_dots(
    A: numpy.ndarray, rows: numpy.ndarray, B: numpy.ndarray, cols: numpy.ndarray
) -> numpy.ndarray:
    """The dot product of A[rows[i]] and B[cols[i]] for each pair i, in float64,
    summed in one fixed order: a pair's value does not depend on the other pairs.

    A (numpy.ndarray): (n_a, width)
    rows (numpy.ndarray): Row indices into A. (n_pairs,)
    B (numpy.ndarray): (n_b, width)
    cols (numpy.ndarray): Row indices into B. (n_pairs,)
    RETURNS (numpy.ndarray): (n_pairs,)
    """
    out = get_array_module(A).empty(len(rows))
    step = max(1, _DOT_BLOCK_VALUES // max(A.shape[1], 1))
    for start in range(0, len(rows), step):
        a = A[rows[start : start + step]].astype("float64")  # (step, width)
        b = B[cols[start : start + step]].astype("float64")
        out[start : start + step] = (a * b).sum(axis=1)
    return out


def fixed_order_quadratic(Z: numpy.ndarray, P: numpy.ndarray) -> numpy.ndarray:
    """z P z for each row z of Z, in float64, summed in one fixed order: a row's
    value does not depend on the other rows.

    Z (numpy.ndarray): (n, width)
    P (numpy.ndarray): A symmetric matrix. (width, width)
    RETURNS (numpy.ndarray): (n,)
    """
    Z = numpy.asarray(Z, dtype="float64")
    P = numpy.asarray(P, dtype="float64")
    out = numpy.empty(len(Z))
    step = max(1, _BLOCK_VALUES // max(P.size, 1))
    for start in range(0, len(Z), step):
        z = Z[start : start + step]  # (step, width)
        Pz = (z[:, None, :] * P[None, :, :]).sum(axis=2)  # (step, width)
        out[start : start + step] = (Pz * z).sum(axis=1)
    return out


def kth_smallest(n_rows: int, rows: numpy.ndarray, values: numpy.ndarray, k: int) -> numpy.ndarray:
    """Per row, the k-th smallest of the values given for it; NaN for a row
    with fewer than k (a NaN doc vector screens no candidates).

    n_rows (int): The number of rows.
    rows (numpy.ndarray): The row of each value, ascending. (n_values,)
    values (numpy.ndarray): (n_values,)
    k (int): 1 for the smallest.
    RETURNS (numpy.ndarray): (n_rows,)
    """
    counts = numpy.bincount(rows, minlength=n_rows)
    ordered = values[numpy.lexsort((values, rows))]  # by row, then value
    starts = numpy.cumsum(counts) - counts
    out = numpy.full(n_rows, numpy.nan)
    found = counts >= k
    out[found] = ordered[starts[found] + k - 1]
    return out


def top_sums(
    n_groups: int, groups: numpy.ndarray, values: numpy.ndarray, k: int
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Per group, the sum of its k largest values, added largest first (one
    fixed order, whatever the order of the values given), and how many it
    summed: k, or all of a group's values if it has fewer.

    n_groups (int): The number of groups.
    groups (numpy.ndarray): The group of each value. (n_values,)
    values (numpy.ndarray): (n_values,)
    k (int): How many of a group's values are summed.
    RETURNS (Tuple[numpy.ndarray, numpy.ndarray]): The sums (float64) and the
        counts. (n_groups,), (n_groups,)
    """
    xp = get_array_module(values)
    values = values.astype("float64")
    # by group, then largest first (equal values are equal bits: either order)
    order = xp.lexsort(xp.stack([-values, groups.astype("float64")]))
    ordered = values[order]
    counts = xp.bincount(groups, minlength=n_groups)
    starts = xp.cumsum(counts) - counts
    taken = xp.minimum(counts, k)
    sums = xp.zeros(n_groups)
    for rank in range(k):  # one elementwise add per rank, no reduction
        has = xp.flatnonzero(taken > rank)
        sums[has] += ordered[starts[has] + rank]
    return sums, taken
