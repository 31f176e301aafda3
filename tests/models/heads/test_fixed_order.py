"""Sums whose bits do not depend on the order of their inputs
(models/heads/fixed_order.py)."""

import numpy

from spacy_bert_pipes.models.heads.fixed_order import fixed_order_dots, top_sums


def test_top_sums_add_each_groups_largest_first_in_any_order() -> None:
    rng = numpy.random.default_rng(0)
    groups = numpy.repeat(numpy.arange(5), [4, 1, 0, 3, 6])  # group 2 has none
    values = rng.normal(size=len(groups))
    values[-1] = values[-2]  # a tie
    sums, taken = top_sums(6, groups, values, 3)
    assert taken.tolist() == [3, 1, 0, 3, 3, 0]
    for g in range(6):
        largest = sorted(values[groups == g], reverse=True)[:3]
        assert sums[g] == sum(largest, 0.0)  # added largest first, exactly
    shuffled = rng.permutation(len(groups))
    again, _ = top_sums(6, groups[shuffled], values[shuffled], 3)
    assert again.tobytes() == sums.tobytes()
    empty, counted = top_sums(2, groups[:0], values[:0], 3)
    assert empty.tolist() == [0.0, 0.0] and counted.tolist() == [0, 0]


def test_fixed_order_dots_do_not_see_the_other_pairs() -> None:
    rng = numpy.random.default_rng(1)
    A = rng.normal(size=(5, 384)).astype("f")
    B = rng.normal(size=(300, 384)).astype("f")
    rows, cols = rng.integers(0, 5, 2000), rng.integers(0, 300, 2000)
    dots = fixed_order_dots(A, rows, B, cols)  # several blocks
    alone = [
        fixed_order_dots(A, rows[i : i + 1], B, cols[i : i + 1])[0] for i in range(0, 2000, 97)
    ]
    assert dots[::97].tolist() == alone
    exact = (A[rows].astype("float64") * B[cols].astype("float64")).sum(axis=1)
    assert numpy.allclose(dots, exact, rtol=0, atol=1e-12)
