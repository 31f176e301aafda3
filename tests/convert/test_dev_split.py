"""`split_dev` (spacy_bert_pipes.convert.dev_split): a seeded dev split,
stratified by label, out-of-scope rows included, nothing lost or repeated."""

from collections import Counter
from typing import List, Sequence

import pytest

from spacy_bert_pipes.convert import TextcatRow
from spacy_bert_pipes.convert.dev_split import split_dev


def make_rows(counts: Sequence[tuple]) -> List[TextcatRow]:
    """(labels, n) pairs -> n rows of those labels each, interleaved as a
    file would hold them; every text differs."""
    rows = []
    left = [[labels, n] for labels, n in counts]
    while any(n for _, n in left):
        for item in left:
            if item[1]:
                labels, n = item
                rows.append(TextcatRow(f"{'+'.join(labels) or 'oos'} {n}", labels, f"f:{n}"))
                item[1] -= 1
    return rows


def test_each_label_and_the_out_of_scope_rows_give_their_share() -> None:
    rows = make_rows([(("a",), 50), (("b",), 20), (("c",), 5), ((), 30)])
    split = split_dev(rows, 0.2, seed=0)
    assert split.label_counts() == {"a": (40, 10), "b": (16, 4), "c": (4, 1)}
    assert split.n_oos() == (24, 6)
    assert len(split.dev) == 21 and len(split.train) == 84
    assert split.warnings() == []


def test_no_row_is_lost_or_repeated_and_file_order_is_kept() -> None:
    rows = make_rows([(("a",), 13), (("b",), 7), ((), 9)])
    split = split_dev(rows, 0.3, seed=4)
    assert sorted(split.train + split.dev, key=rows.index) == rows
    assert not set(split.train) & set(split.dev)
    assert split.train == sorted(split.train, key=rows.index)
    assert split.dev == sorted(split.dev, key=rows.index)
    docs = [f"doc of {row.text}" for row in rows]  # anything parallel to the rows
    assert split.part(docs, dev=True) == [f"doc of {row.text}" for row in split.dev]
    with pytest.raises(ValueError, match="3 items for 29 rows"):
        split.part(docs[:3], dev=False)


def test_the_seed_decides_the_draw() -> None:
    rows = make_rows([(("a",), 40), (("b",), 40), ((), 10)])
    first = split_dev(rows, 0.25, seed=1)
    assert split_dev(rows, 0.25, seed=1) == first
    other = split_dev(rows, 0.25, seed=2)
    assert other.dev != first.dev
    assert other.label_counts() == first.label_counts()  # the sizes do not depend on it
    # a label's draw does not move when another label is added
    more = split_dev(rows + make_rows([(("z",), 10)]), 0.25, seed=1)
    assert [r for r in more.dev if r.labels == ("a",)] == [
        r for r in first.dev if r.labels == ("a",)
    ]


def test_every_label_keeps_a_training_row_and_too_few_warn() -> None:
    rows = make_rows([(("a",), 20), (("rare",), 1), (("pair",), 2), ((), 1)])
    split = split_dev(rows, 0.9, seed=0)
    assert split.label_counts() == {"a": (2, 18), "pair": (1, 1), "rare": (1, 0)}
    assert split.n_oos() == (1, 0)
    split = split_dev(rows, 0.2, seed=0)
    assert split.label_counts()["pair"] == (2, 0)  # round(0.4): none to spare
    warnings = split.warnings()
    assert warnings[0].startswith(
        "2 of 3 labels have too few docs to spare one for dev at the share 0.2 "
        "(all kept for training): 'pair', 'rare'; "
    )
    assert warnings[1].startswith("the dev split has no out-of-scope docs")
    assert split.warnings(routing=False) == warnings[:1]


def test_multi_label_rows_go_by_their_rarest_label() -> None:
    rows = make_rows(
        [(("a",), 30), (("a", "b"), 10), (("b", "c"), 1), (("c",), 1), (("a", "d"), 3)]
    )
    split = split_dev(rows, 0.5, seed=0)
    counts = split.label_counts()
    assert all(train >= 1 for train, _ in counts.values())
    # strata: a (30 rows), b (10: a+b), c (b+c and c), d (3: a+d)
    dev = Counter(row.labels for row in split.dev)
    assert dev == {("a",): 15, ("a", "b"): 5, ("a", "d"): 2, ("c",): 1}
    # "d": round(1.5) of 3 rows to dev; "b" (11 rows) gave its 5 as the a+b stratum
    assert counts["d"] == (1, 2) and counts["b"] == (6, 5) and counts["c"] == (1, 1)


def test_a_label_emptied_by_other_strata_gets_a_row_back() -> None:
    """Label "x" is no row's rarest label: its three rows follow the draws of "w",
    "y" and "z" (a row of two each, one to dev), which take all three in about
    one seed in eight; then one comes back to train."""
    rows = [TextcatRow(f"x{p}", ("x", p), f"f:{p}") for p in "wyz"]
    rows += [TextcatRow(p, (p,), f"g:{p}") for p in "wyz"]
    repaired = 0
    for seed in range(40):
        split = split_dev(rows, 0.5, seed=seed)
        counts = split.label_counts()
        assert all(train >= 1 for train, _ in counts.values())
        assert sorted(split.train + split.dev, key=rows.index) == rows
        repaired += counts["x"] == (1, 2) and len(split.dev) == 2
    assert repaired >= 1


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, 1.5])
def test_a_share_outside_0_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match=r"between 0 and 1 .* got"):
        split_dev(make_rows([(("a",), 3)]), share)
