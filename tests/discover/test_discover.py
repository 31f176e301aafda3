"""`discover` on synthetic annotate OUTPUTs: the pool, the clusters' names,
labels and representatives, the files, and errors that name the row."""

import csv
import json
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pyarrow
import pyarrow.parquet as pq
import pytest

from spacy_bert_pipes.discover import (
    ASSIGNMENTS,
    PICTURE,
    SUMMARY,
    discover,
    read_review,
    review_examples,
    write_discovery,
)
from spacy_bert_pipes.io.errors import ConversionError

WIDTH = 16
TINY_WIDTH = 32  # the hidden size of the tiny BERT (helpers.write_tiny_bert)
LABELS = ["card", "fx", "pin"]
# Two new intents: one near "card" (its direction plus a little), one far.
NEW = {
    "refund": ("refund my delivery fee please", "card", 0.25),
    "weather": ("what weather tomorrow in paris", None, 0.0),
}


def route(decision: str, label: Any = None) -> Dict[str, Any]:
    return {"label": label, "top": label or "card", "confidence": 0.5, "decision": decision}


def pool_rows(seed: int = 0) -> List[Dict[str, Any]]:
    """Rows as annotate writes them with --keep-columns text --vectors."""
    rng = numpy.random.default_rng(seed)
    axes = numpy.eye(WIDTH)
    directions = {label: axes[i] for i, label in enumerate(LABELS)}
    directions["refund"] = axes[0] * 0.9 + axes[5] * 0.45
    directions["weather"] = axes[8]
    rows: List[Dict[str, Any]] = []

    def add(text: str, where: numpy.ndarray, spread: float, decision: str, label: Any) -> None:
        vector = where + spread * rng.normal(size=WIDTH)
        rows.append(
            {
                "id": f"d{len(rows)}",
                "text": text,
                "cats": {lb: 1 / 3 for lb in LABELS},
                "route": route(decision, label),
                "empty_text": not text.strip(),
                "vector": [round(float(x), 6) for x in vector] if text.strip() else [0.0] * WIDTH,
            }
        )

    for label in LABELS:
        for i in range(8):
            add(f"{label} question {i}", directions[label], 0.05, "routed", label)
    for name, (text, _, _) in NEW.items():
        for i in range(12):
            add(
                f"{text} {'now' if i % 2 else 'today'}",
                directions[name],
                0.05,
                "out_of_scope",
                None,
            )
    for i in range(6):  # scattered
        add(f"scattered thing number {i}", rng.normal(size=WIDTH) * 3, 0.0, "out_of_scope", None)
    for _ in range(3):  # ambiguous between card and fx: a small group of their own
        add("card or exchange", axes[12], 0.02, "ambiguous", None)
    add("   ", axes[0], 0.0, "out_of_scope", None)
    add("", axes[0], 0.0, "out_of_scope", None)
    return rows


def write_rows(path: Path, rows: List[Dict[str, Any]], drop: tuple = ()) -> Path:
    lines = [json.dumps({k: v for k, v in r.items() if k not in drop}) + "\n" for r in rows]
    path.write_text("".join(lines), encoding="utf8")
    return path


@pytest.fixture
def annotations(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "routed.jsonl", pool_rows())


def test_clusters_named_placed_and_represented(annotations: Path) -> None:
    found = discover(annotations, min_cluster_size=5, clusters="density")
    summary = found.summary
    assert summary["rows"] == 24 + 24 + 6 + 3 + 2
    assert summary["pooled"] == 24 + 6 + 2 and summary["empty_text"] == 2
    assert summary["clusters"] == 2 and summary["clustered"] + summary["noise"] == 30
    assert summary["labels_from"] == "the mean vector of the rows routed to each label"
    by_name = {c.keywords[0]: c for c in found.clusters}
    assert set(by_name) == {"delivery", "paris"}  # ties in alphabetical order
    refund, weather = by_name["delivery"], by_name["paris"]
    assert 12 <= refund.size <= 13 and 12 <= weather.size <= 13  # a scattered doc may join
    assert refund.keywords[:3] == ["delivery", "fee", "refund"]  # "please": a stop word
    assert refund.name == "_".join(refund.keywords[:3])
    assert refund.nearest_label == "card" and refund.verdict == "near card"
    assert refund.nearest_cosine is not None and refund.nearest_cosine > 0.8
    assert weather.verdict == "new intent" and weather.nearest_cosine < 0.7
    for cluster in found.clusters:
        assert len(cluster.representatives) == 5
        assert len({r["id"] for r in cluster.representatives}) == 5
    # every pooled doc has a row: the empty ones -1, flagged
    assignments = found.assignments
    assert len(assignments) == 32
    empty = [a for a in assignments if a["empty_text"]]
    assert len(empty) == 2 and all(a["cluster"] == -1 for a in empty)
    assert discover(annotations, min_cluster_size=5, clusters="density").assignments == assignments


def test_ambiguous_docs_join_when_asked(annotations: Path) -> None:
    found = discover(annotations, min_cluster_size=3, include_ambiguous=True, clusters="density")
    assert found.summary["pooled"] == 35
    assert found.summary["pooled_decisions"] == ["out_of_scope", "ambiguous"]
    ambiguous = {a["cluster"] for a in found.assignments if a["decision"] == "ambiguous"}
    assert len(ambiguous) == 1 and ambiguous != {-1}
    sizes = [c.size for c in found.clusters]  # numbered by size, the largest 0
    assert [c.cluster for c in found.clusters] == list(range(len(sizes)))
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 3


def test_low_confidence_routed_docs_join_below(tmp_path: Path) -> None:
    rows = pool_rows()
    for row in rows[:8]:  # the "card" docs, routed with a low confidence
        row["route"] = {**row["route"], "confidence": 0.05}
    path = write_rows(tmp_path / "near.jsonl", rows)
    found = discover(path, min_cluster_size=5, clusters="density", below=0.1)
    summary = found.summary
    assert summary["pooled"] == 32 + 8 and summary["pooled_routed"] == 8
    assert summary["below"] == 0.1 and summary["pooled_decisions"] == ["out_of_scope"]
    routed = [a for a in found.assignments if a["decision"] == "routed"]
    assert [a["id"] for a in routed] == [f"d{i}" for i in range(8)]
    # strictly below; 0 (the default) pools the decisions alone
    assert discover(path, clusters="density", below=0.05).summary["pooled"] == 32
    assert discover(path, clusters="density").summary["pooled"] == 32
    with pytest.raises(ValueError, match="--below takes a confidence from 0 to 1"):
        discover(path, below=1.5)
    # representatives: as many as asked
    few = discover(path, min_cluster_size=5, clusters="density", n_representatives=5)
    assert all(len(c.representatives) == 5 for c in few.clusters)


def test_an_encoder_checkpoint_gives_the_vectors(annotations: Path, tiny_bert: Path) -> None:
    found = discover(annotations, encoder=str(tiny_bert), clusters="density", min_cluster_size=3)
    summary = found.summary
    assert summary["vectors"] == f"the frozen sentence vectors of {tiny_bert}"
    assert summary["pooled"] == 32 and summary["clustered"] + summary["noise"] == 30
    # the known labels too are in the checkpoint's space: the mean vector of
    # the docs routed to each, embedded by it
    assert summary["labels_from"] == "the mean vector of the rows routed to each label"
    assert found.label_space.vectors.shape[1] == TINY_WIDTH  # not the column's WIDTH
    with pytest.raises(OSError, match="no-such-encoder"):
        discover(annotations, encoder="no-such-encoder", clusters="density")


def test_k_clusters(annotations: Path) -> None:
    found = discover(annotations, clusters=3, min_cluster_size=2, seed=1)
    assert found.summary["clusters"] == 3 and found.summary["method"] == "k-means, 3 clusters"
    assert found.summary["noise"] == 0
    # K from the data: the two groups of twelve, and the scattered docs in a
    # cluster of their own (or in the groups' as their nearest)
    found = discover(annotations, clusters="auto", min_cluster_size=5, seed=0)
    assert "by the cosine silhouette of 30 docs" in found.summary["method"]
    assert {"delivery", "paris"} <= {c.keywords[0] for c in found.clusters}
    assert len(found.clusters) <= 3
    with pytest.raises(ValueError, match="--clusters must be 'auto'"):
        discover(annotations, clusters="three")


def test_loose_clusters_left_out_when_the_curve_is_flat(
    annotations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import spacy_bert_pipes.discover.cluster as cluster

    # a silhouette curve with a peak: the scattered docs' cluster stays, "loose"
    found = discover(annotations, clusters="auto", min_cluster_size=5, seed=0)
    assert found.summary["loose_left_out"] == 0
    # a flat one (rising to the largest K tried): K = 3, the groups of twelve
    # and the scattered docs; theirs is loose, left out of the review
    monkeypatch.setattr(cluster, "choose_k", lambda *args, **kwargs: (3, {2: 0.1, 3: 0.2, 4: 0.3}))
    kept = discover(annotations, clusters="auto", min_cluster_size=5, seed=0, keep_loose=True)
    verdicts = sorted(c.verdict for c in kept.clusters)
    assert verdicts == ["loose", "near card", "new intent"]
    loose = next(c for c in kept.clusters if c.verdict == "loose")
    assert loose.silhouette is not None and loose.silhouette < 0.1
    assert all(c.silhouette > 0.5 for c in kept.clusters if c is not loose)
    assert kept.summary["loose"] == 1 and kept.summary["loose_left_out"] == 0
    found = discover(annotations, clusters="auto", min_cluster_size=5, seed=0)
    summary = found.summary
    assert [c.verdict for c in found.clusters] == ["near card", "new intent"] or [
        c.verdict for c in found.clusters
    ] == ["new intent", "near card"]
    assert summary["loose_left_out"] == 1 and summary["loose_docs_left_out"] == loose.size
    assert summary["noise"] == loose.size and summary["clusters"] == 2
    assert "1 loose clusters" in summary["warning"] and "--keep-loose" in summary["warning"]
    # nothing lost: every pooled doc has its row, the loose ones in cluster -1
    assert len(found.assignments) == 32
    assert sum(a["cluster"] == -1 and not a["empty_text"] for a in found.assignments) == loose.size


def test_a_cluster_the_router_routed_is_near_its_label(tmp_path: Path) -> None:
    rows = pool_rows()
    for row in rows[24:36]:  # the refund docs: routed to "fx", unsure
        row["route"] = {**route("routed", "fx"), "confidence": 0.05}
    path = write_rows(tmp_path / "routed.jsonl", rows)
    found = discover(path, min_cluster_size=5, clusters="density", below=0.1)
    refund = next(c for c in found.clusters if c.keywords[0] == "delivery")
    # the router's own decision outweighs the centroid's nearest label (card)
    assert refund.routed_share > 0.5 and refund.verdict == "near fx"
    assert refund.nearest_label == "card"


def test_files_and_the_review_read_back(annotations: Path, tmp_path: Path) -> None:
    found = discover(annotations, min_cluster_size=5, clusters="density")
    out = tmp_path / "review"
    paths = write_discovery(found, out)
    assert [p.name for p in paths] == ["review.jsonl", ASSIGNMENTS, PICTURE, SUMMARY]
    assert (out / PICTURE).read_bytes()[:4] == b"\x89PNG"
    rows = [json.loads(line) for line in (out / "review.jsonl").read_text().splitlines()]
    assert list(rows[0]) == [
        "cluster", "size", "name", "keywords", "nearest_label", "nearest_cosine",
        "verdict", "silhouette", "routed_share", "routed_to", "proposal", "merge_cosine",
        "representatives", "action",
    ]  # fmt: skip
    assert all(row["action"] == "" for row in rows)
    summary = json.loads((out / SUMMARY).read_text())
    assert summary["files"]["review"] == "review.jsonl" and summary["clusters"] == 2
    assert len((out / ASSIGNMENTS).read_text().splitlines()) == 32
    # a CSV review, filled in as a person would
    write_discovery(found, out, review_name="review.csv", picture=False)
    with (out / "review.csv").open(encoding="utf8", newline="") as file_:
        records = list(csv.DictReader(file_))
    records[0]["action"] = "rename:refund_fee"
    records[1]["action"] = "merge:0"
    with (out / "review.csv").open("w", encoding="utf8", newline="") as file_:
        writer = csv.DictWriter(file_, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    assert [r.action for r in read_review(out / "review.csv")] == ["rename:refund_fee", "merge:0"]
    examples = review_examples(out / "review.csv")
    assert list(examples) == ["refund_fee"]  # cluster 1 merged into it; each text once
    texts = examples["refund_fee"]
    assert len(texts) == len(set(texts)) and "what weather tomorrow in paris now" in texts


def review_file(path: Path, actions: List[str]) -> Path:
    rows = [
        {
            "cluster": i,
            "name": f"name{i}",
            "representatives": [{"id": f"{i}a", "text": f"text {i}"}],
            "action": action,
        }
        for i, action in enumerate(actions)
    ]
    return write_rows(path, rows)


def test_review_actions(tmp_path: Path) -> None:
    path = review_file(tmp_path / "r.jsonl", ["accept", "rename:new", "reject", "", "merge:1"])
    assert review_examples(path) == {"name0": ["text 0"], "new": ["text 1", "text 4"]}
    assert review_examples(review_file(tmp_path / "none.jsonl", ["reject", ""])) == {}
    cases = {
        "maybe": r"r.jsonl:1: action 'maybe': expected accept",
        "rename: ": r"r.jsonl:1: action 'rename:' gives no label name",
        "merge:x": r"r.jsonl:1: .*merge:<cluster> takes a cluster number",
        "merge:7": r"r.jsonl:1: merge:7, but cluster 7 is not accepted",
    }
    for action, message in cases.items():
        with pytest.raises(ConversionError, match=message):
            review_examples(review_file(tmp_path / "r.jsonl", [action]))


def test_bad_input_names_the_file_and_row(annotations: Path, tmp_path: Path) -> None:
    rows = pool_rows()
    no_route = write_rows(tmp_path / "no_route.jsonl", rows, drop=("route",))
    with pytest.raises(ConversionError, match=r"no_route.jsonl:1: no route \(None\)"):
        discover(no_route)
    bad = [dict(r) for r in rows]
    bad[30]["vector"] = [1.0, 2.0]
    with pytest.raises(ConversionError, match=r"bad.jsonl:31: the vector has 2 values"):
        discover(write_rows(tmp_path / "bad.jsonl", bad))
    bad = [dict(r) for r in rows]
    bad[3]["route"] = {**bad[3]["route"], "decision": "maybe"}
    with pytest.raises(ConversionError, match=r"decision.jsonl:4: route.decision is 'maybe'"):
        discover(write_rows(tmp_path / "decision.jsonl", bad))
    bad = [dict(r) for r in rows]
    bad[4]["route"] = {**bad[4]["route"], "confidence": "high"}
    with pytest.raises(ConversionError, match=r"conf.jsonl:5: route.confidence is 'high'"):
        discover(write_rows(tmp_path / "conf.jsonl", bad))
    bad[4]["route"] = {k: v for k, v in bad[4]["route"].items() if k != "confidence"}
    missing = write_rows(tmp_path / "missing.jsonl", bad)
    assert discover(missing, clusters="density").summary["rows"] == len(rows)
    with pytest.raises(ConversionError, match=r"missing.jsonl:5: route.confidence is missing"):
        discover(missing, clusters="density", below=0.1)
    no_vectors = write_rows(tmp_path / "plain.jsonl", rows, drop=("vector",))
    with pytest.raises(ConversionError, match=r"plain.jsonl: no 'vector' column: give --pipeline"):
        discover(no_vectors)
    zero = [dict(r) for r in rows]
    zero[30]["vector"] = [0.0] * WIDTH
    with pytest.raises(ConversionError, match=r"zero.jsonl:31: the vector is all zeros"):
        discover(write_rows(tmp_path / "zero.jsonl", zero))
    with pytest.raises(ValueError, match="--min-cluster-size must be at least 2"):
        discover(annotations, min_cluster_size=1)


def test_texts_from_the_input(tmp_path: Path) -> None:
    rows = pool_rows()
    annotations = write_rows(tmp_path / "routed.jsonl", rows, drop=("text",))
    with pytest.raises(ConversionError, match=r"routed.jsonl:25: no 'text' column: give --texts"):
        discover(annotations)
    source = write_rows(tmp_path / "in.jsonl", [{"id": r["id"], "text": r["text"]} for r in rows])
    found = discover(annotations, texts=source, min_cluster_size=5, clusters="density")
    assert sorted(c.keywords[0] for c in found.clusters) == ["delivery", "paris"]
    partial = write_rows(
        tmp_path / "part.jsonl", [{"id": r["id"], "text": r["text"]} for r in rows[:40]]
    )
    with pytest.raises(
        ConversionError, match=r"routed.jsonl:41: id 'd40' has no text in .*part.jsonl"
    ):
        discover(annotations, texts=partial)


def test_parquet_annotations(tmp_path: Path) -> None:
    rows = pool_rows()
    vectors = numpy.asarray([r["vector"] for r in rows], dtype="float32")
    table = pyarrow.table(
        {
            "id": [r["id"] for r in rows],
            "text": [r["text"] for r in rows],
            "cats": [json.dumps(r["cats"]) for r in rows],
            "route": [json.dumps(r["route"]) for r in rows],
            "empty_text": [r["empty_text"] for r in rows],
            "vector": pyarrow.FixedSizeListArray.from_arrays(pyarrow.array(vectors.ravel()), WIDTH),
        }
    )
    pq.write_table(table, tmp_path / "routed.parquet")
    found = discover(tmp_path / "routed.parquet", min_cluster_size=5, clusters="density")
    assert sorted(c.keywords[0] for c in found.clusters) == ["delivery", "paris"]


def test_the_picture_names_only_the_largest_clusters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of clusters (100,000 docs) would bury the picture under their
    names: it names the NAMED_CLUSTERS largest and their nearest labels, and
    says so; every cluster is still drawn."""
    from matplotlib.axes import Axes

    from spacy_bert_pipes.discover.labels import LabelSpace
    from spacy_bert_pipes.discover.picture import NAMED_CLUSTERS, draw_discovery
    from spacy_bert_pipes.discover.run import Cluster, Discovery

    rng = numpy.random.default_rng(0)
    labels = [f"label{i}" for i in range(60)]  # more than NAMED_LABELS: only the nearest
    n = NAMED_CLUSTERS + 20
    clusters = [
        Cluster(i, n - i, f"name{i}", [], labels[i], 0.9, f"near {labels[i]}", []) for i in range(n)
    ]
    found = Discovery(
        clusters=clusters,
        assignments=[],
        summary={"clusters": n, "new_intents": 0, "clustered": sum(c.size for c in clusters)},
        label_space=LabelSpace("label prototypes", labels, rng.normal(size=(60, WIDTH))),
        centers=rng.normal(size=(n, WIDTH)),
    )
    names: List[str] = []
    annotate = Axes.annotate
    monkeypatch.setattr(
        Axes,
        "annotate",
        lambda ax, text, *a, **k: names.append(text) or annotate(ax, text, *a, **k),
    )
    texts: List[str] = []
    text = Axes.text
    monkeypatch.setattr(
        Axes, "text", lambda ax, x, y, s, *a, **k: texts.append(s) or text(ax, x, y, s, *a, **k)
    )
    assert draw_discovery(found, tmp_path / "clusters.png").read_bytes()[:4] == b"\x89PNG"
    named = [f"{i}: name{i}" for i in range(NAMED_CLUSTERS)]
    assert sorted(names) == sorted(named + labels[:NAMED_CLUSTERS])
    assert any(f"the {NAMED_CLUSTERS} largest clusters named" in t for t in texts)
