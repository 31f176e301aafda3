"""What the review file shows of a cluster: its bulk and its spread, the
merges it proposes, what the router did with its docs, a name, and a flat CSV
to edit in a spreadsheet."""

import csv
import json
from pathlib import Path

import numpy
import pytest

from spacy_bert_pipes.discover import discover, review_examples, write_discovery
from spacy_bert_pipes.discover.describe import (
    centroid,
    keywords,
    merge_proposals,
    representatives,
    routed_to,
    suggested_name,
)


def unit(rows: numpy.ndarray) -> numpy.ndarray:
    return (rows / numpy.linalg.norm(rows, axis=1, keepdims=True)).astype("f")


def test_representatives_show_the_bulk_of_a_mixed_cluster() -> None:
    # 20 paraphrases of one intent (cosines about 0.9 with each other) and 5
    # foreign requests scattered around them: most of the five shown are the 20
    rng = numpy.random.default_rng(0)
    width = 64
    intent = rng.normal(size=width)
    bulk = unit(intent + 0.3 * numpy.linalg.norm(intent) / 8 * rng.normal(size=(20, width)))
    foreign = unit(intent + 1.2 * numpy.linalg.norm(intent) / 8 * rng.normal(size=(5, width)))
    members = numpy.concatenate([bulk, foreign])
    pairs = bulk @ bulk.T
    assert 0.85 < pairs[numpy.triu_indices(20, 1)].mean() < 0.95
    shown = representatives(members, centroid(members), 5)
    assert len(shown) == 5 and len(set(shown)) == 5
    assert sum(i < 20 for i in shown) >= 3  # spreading every pick showed 1
    assert any(i >= 20 for i in shown)  # and its spread


def test_merge_proposals_point_at_a_larger_cluster_never_merged() -> None:
    a, b, c = numpy.eye(3, dtype="f")
    near_a = unit(numpy.asarray([a + 0.2 * b]))[0]
    near_that = unit(numpy.asarray([a + 0.45 * b]))[0]
    centers = numpy.stack([a, b, near_a, c, near_that])
    proposed = merge_proposals(centers, threshold=0.9)
    assert [target for target, _ in proposed] == [None, None, 0, None, 0]
    assert proposed[2][1] == pytest.approx(float(near_a @ a))
    assert merge_proposals(centers, threshold=0.999)[2] == (None, None)


def test_routed_share_and_labels() -> None:
    share, labels = routed_to([None, "card", "pin", "card", None, "atm", "pin", "card"])
    assert share == pytest.approx(6 / 8)
    assert labels == [("card", 3), ("pin", 2), ("atm", 1)]
    assert routed_to([None, None]) == (0.0, [])


def test_a_cluster_of_varied_words_still_gets_a_name() -> None:
    texts = ["play jazz", "put on some rock", "music please", "weather", "weather today"]
    words = keywords(texts, numpy.asarray([0, 0, 0, 0, 1]))
    assert words[0] and suggested_name(words[0], 0) != "cluster_0"


def test_the_csv_is_flat_and_reads_back(tmp_path: Path) -> None:
    rows = []
    rng = numpy.random.default_rng(1)
    texts = ["top up my account", "top up the account please", "what is the weather like"]
    for i in range(30):
        route = {"label": None, "top": "card", "confidence": 0.05, "decision": "out_of_scope"}
        if i % 5 == 0:
            route = {"label": "card", "top": "card", "confidence": 0.05, "decision": "routed"}
        vector = numpy.eye(8)[i % 3 // 2 * 3] + 0.05 * rng.normal(size=8)
        rows.append(
            {"id": f"d{i}", "route": route, "empty_text": False, "text": texts[i % 3]}
            | {"vector": vector.tolist()}
        )
    routed = {"label": "card", "top": "card", "confidence": 0.9, "decision": "routed"}
    rows.append({"id": "r", "route": routed, "empty_text": False, "text": "my card"})
    rows[-1]["vector"] = numpy.eye(8)[5].tolist()
    path = tmp_path / "routed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = discover(path, clusters=2, below=0.1, n_representatives=3)
    record = found.clusters[0].review_record()
    assert record["routed_share"] == pytest.approx(0.2, abs=0.05)
    assert record["routed_to"] == [{"label": "card", "docs": round(record["routed_share"] * 20)}]
    write_discovery(found, tmp_path / "out", review_name="review.csv", picture=False)
    review = tmp_path / "out" / "review.csv"
    with review.open(newline="") as file_:
        table = list(csv.DictReader(file_))
    assert "representative_1" in table[0] and "representatives" not in table[0]
    assert not table[0]["keywords"].startswith("[")  # words, not JSON
    assert table[0]["routed_to"].startswith("card (")
    # edited in a spreadsheet: an action, and a representative cleared
    table[0]["action"] = "rename:top_up"
    table[0]["representative_2"] = ""
    with review.open("w", newline="") as file_:
        writer = csv.DictWriter(file_, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    examples = review_examples(review)
    assert list(examples) == ["top_up"]
    kept = [table[0][f"representative_{n}"] for n in (1, 3)]
    assert examples["top_up"] == list(dict.fromkeys(t for t in kept if t))
