"""`bert-pipes discover` through a tiny random BERT pipeline, then the accepted
clusters added as labels by `bert-pipes add-label --review`."""

import json
from pathlib import Path

import numpy
import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, loader_config, prototype_router, textcat_examples
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.discover import discover
from spacy_bert_pipes.discover.describe import centroid, representatives
from spacy_bert_pipes.discover.labels import prototype_samples, prototype_space

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()


def discovery_report(discovery: Path, folder: Path) -> str:
    """The markdown of `bert-pipes report --discovery DISCOVERY -o FOLDER`."""
    result = runner.invoke(app, ["report", "--discovery", str(discovery), "-o", str(folder)])
    assert result.exit_code == 0, result.output
    return (folder / "report.md").read_text(encoding="utf8")


NEW_TEXTS = ["top up my account", "hello world", "pin"]


@pytest.fixture(scope="module")
def router(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prototype bert_textcat, and bert_vectors over an encoder of its own."""
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    nlp.add_pipe("bert_textcat", config={"model": model})
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.add_pipe("bert_vectors")
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    path = tmp_path_factory.mktemp("discover") / "router"
    nlp.to_disk(path)
    return path


def test_discover_then_add_the_accepted_clusters(router: Path, tmp_path: Path) -> None:
    # five copies of each of three texts not routed: three clusters, whatever
    # a random encoder makes of them
    rows = []
    for i in range(15):
        text = NEW_TEXTS[i % 3]
        out = {"label": None, "top": "card", "confidence": 0.1, "decision": "out_of_scope"}
        rows.append({"id": f"n{i}", "route": out, "empty_text": False, "text": text})
    routed = {"label": "card", "top": "card", "confidence": 0.9, "decision": "routed"}
    rows.append({"id": "r0", "route": routed, "empty_text": False, "text": "my card"})
    annotations = tmp_path / "routed.jsonl"
    annotations.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    out = tmp_path / "found"
    args = ["discover", str(annotations), str(out), "--pipeline", str(router)]
    result = runner.invoke(app, [*args, "--min-cluster-size", "3"])
    assert result.exit_code == 0, result.output
    assert "15 docs not routed of 16: 0 with an empty text, 15 in 3 clusters" in result.output
    summary = json.loads((out / "summary.json").read_text())
    # three texts five times each: three tight clusters, none loose
    assert f"({summary['new_intents']} new intents, 0 loose), 0 in none\n" in result.output
    assert summary["labels_from"] == "the label prototypes of 'bert_textcat'"
    assert summary["vectors"] == "computed by the pipeline"
    review = [json.loads(line) for line in (out / "review.jsonl").read_text().splitlines()]
    assert all(r["nearest_label"] in LABELS for r in review)
    by_text = {r["representatives"][0]["text"]: r for r in review}
    by_text["top up my account"]["action"] = "accept"
    by_text["pin"]["action"] = "rename:new_pin"
    (out / "review.jsonl").write_text("".join(json.dumps(r) + "\n" for r in review))
    # the report shows the clusters with the reviewer's actions, and the picture
    reported = tmp_path / "report"
    markdown = discovery_report(out, reported)
    assert "## New intents among the docs not routed" in markdown
    assert "15 docs in 3 clusters, 0 left unclustered" in markdown
    assert f'{summary["new_intents"]} clusters are a "new intent", 0 "loose"' in markdown
    assert "| rename:new_pin |" in markdown and "| accept |" in markdown
    assert (reported / f"discovery_{out.name}.png").read_bytes() == (
        out / "clusters.png"
    ).read_bytes()
    result = runner.invoke(app, ["report", "--discovery", str(tmp_path), "-o", str(reported)])
    assert result.exit_code == 1
    assert f"{tmp_path}: no summary.json: not a folder `bert-pipes discover` wrote" in (
        result.output
    )
    extended = tmp_path / "extended"
    result = runner.invoke(
        app, ["add-label", str(router), str(extended), "--review", str(out / "review.jsonl")]
    )
    assert result.exit_code == 0, result.output
    name = by_text["top up my account"]["name"]
    assert name == "account"  # "top" and "up" are stop words
    labels = spacy.load(extended).get_pipe("bert_textcat").labels
    assert labels == (*LABELS, name, "new_pin")
    # the routed doc joins below its confidence; fewer representatives
    near = tmp_path / "near"
    result = runner.invoke(
        app,
        ["discover", str(annotations), str(near), "--pipeline", str(router), "--below", "0.95"]
        + ["--representatives", "2", "--min-cluster-size", "3", "--clusters", "3"],
    )
    assert result.exit_code == 0, result.output
    assert "16 docs pooled of 16 (1 routed below confidence 0.95)" in result.output
    review = [json.loads(line) for line in (near / "review.jsonl").read_text().splitlines()]
    assert all(len(r["representatives"]) == 2 for r in review)
    markdown = discovery_report(near, tmp_path / "near_report")
    assert "## New intents among the docs not routed or routed below confidence 0.95" in markdown
    assert "or a confidence below 0.95 (1 of them routed)" in markdown
    result = runner.invoke(app, ["discover", str(annotations), str(near), "--below", "2"])
    assert result.exit_code == 2 and "--below" in result.output
    result = runner.invoke(
        app, ["discover", str(annotations), str(near), "--encoder", "no-such-encoder"]
    )
    assert result.exit_code == 1 and "Could not load encoder 'no-such-encoder'" in result.output
    # without vectors or a pipeline: one line naming the file
    result = runner.invoke(app, ["discover", str(annotations), str(tmp_path / "x")])
    assert result.exit_code == 1
    assert f"{annotations}: no 'vector' column: give --pipeline" in result.output


@pytest.fixture(scope="module")
def router_alone(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prototype bert_textcat and nothing else, as configs/route.cfg trains:
    its docs have no vectors but its own encoder's."""
    return prototype_router(tiny_bert, tmp_path_factory.mktemp("discover") / "router_alone")


def write_unrouted(path: Path) -> Path:
    """Five copies of each of NEW_TEXTS not routed, and one routed doc."""
    rows = []
    for i in range(15):
        out = {"label": None, "top": "card", "confidence": 0.1, "decision": "out_of_scope"}
        rows.append({"id": f"n{i}", "route": out, "empty_text": False, "text": NEW_TEXTS[i % 3]})
    routed = {"label": "card", "top": "card", "confidence": 0.9, "decision": "routed"}
    rows.append({"id": "r0", "route": routed, "empty_text": False, "text": "my card"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    return path


def test_a_router_without_vectors_clusters_on_its_own(router_alone: Path, tmp_path: Path) -> None:
    annotations = write_unrouted(tmp_path / "routed.jsonl")
    out = tmp_path / "found"
    args = ["discover", str(annotations), str(out), "--pipeline", str(router_alone)]
    result = runner.invoke(app, [*args, "--min-cluster-size", "3", "--no-picture"])
    assert result.exit_code == 0, result.output
    assert "15 docs not routed of 16: 0 with an empty text, 15 in 3 clusters" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["vectors"].startswith("computed by 'bert_textcat' (its encoder's sentence")
    assert summary["labels_from"] == "the label prototypes of 'bert_textcat'"
    # the clusters are compared with the prototypes in the space they were made
    # in (a cluster is five copies of one text: its centroid is that text's vector)
    review = [json.loads(line) for line in (out / "review.jsonl").read_text().splitlines()]
    nlp = spacy.load(router_alone)
    prototypes = nlp.get_pipe("bert_textcat").prototypes
    for row in review:
        vector = prototypes.sentence_vectors([nlp.make_doc(row["representatives"][0]["text"])])
        space = prototype_space(nlp, "bert_textcat")
        cosines = space.vectors @ vector[0] / numpy.linalg.norm(vector[0])
        assert row["nearest_label"] == space.labels[int(numpy.argmax(cosines))]
        assert row["nearest_cosine"] == pytest.approx(float(cosines.max()), abs=1e-3)
    # every cluster a label, its action whatever it is
    extended = tmp_path / "extended"
    review_path = str(out / "review.jsonl")
    result = runner.invoke(
        app, ["add-label", str(router_alone), str(extended), "--review", review_path]
    )
    assert result.exit_code == 1
    assert "no cluster is accepted" in result.output
    args = ["add-label", str(router_alone), str(extended), "--review", review_path, "--accept-all"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    names = [row["name"] for row in review]
    assert spacy.load(extended).get_pipe("bert_textcat").labels == (*LABELS, *names)
    result = runner.invoke(
        app, ["add-label", str(router_alone), str(tmp_path / "x"), "--accept-all"]
    )
    assert result.exit_code == 1
    assert "--accept-all takes the clusters of a --review file: give one" in result.output


def test_a_bad_clusters_value_is_named_before_any_loading(tmp_path: Path) -> None:
    annotations = tmp_path / "routed.jsonl"
    annotations.write_text("{}\n", encoding="utf8")
    args = ["discover", str(annotations), str(tmp_path / "out"), "--clusters", "many"]
    result = runner.invoke(app, [*args, "--pipeline", str(tmp_path / "no-such-router")])
    assert result.exit_code == 1
    assert "--clusters must be 'auto'" in result.output and "'many'" in result.output
    assert not (tmp_path / "out").exists()


def test_representatives_are_nearest_the_centre_in_the_prototypes_space(
    router: Path, tmp_path: Path
) -> None:
    # two groups far apart in the vector column's space, every member equally
    # near its group's centre there: only the prototypes' space orders them
    words = ["card", "pin", "cash", "bank", "fee", "rate"]
    rows = []
    for i in range(12):
        vector = numpy.zeros(8)
        vector[i // 6] = 1.0
        vector[2 + i % 6] = 0.1
        out = {"label": None, "top": "card", "confidence": 0.1, "decision": "out_of_scope"}
        text = f"{'please' if i < 6 else 'maybe'} {words[i % 6]} {words[(i * 5) % 6]} now"
        rows.append(
            {"id": f"n{i}", "route": out, "empty_text": False, "text": text, "vector": list(vector)}
        )
    path = tmp_path / "routed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    nlp = spacy.load(router)
    found = discover(path, nlp=nlp, clusters=2, min_cluster_size=2, n_representatives=3)
    by_id = {row["id"]: row["text"] for row in rows}
    member_ids = {c.cluster: [] for c in found.clusters}
    for row in found.assignments:
        member_ids[row["cluster"]].append(row["id"])
    reordered = 0
    for cluster in found.clusters:
        texts = [by_id[i] for i in member_ids[cluster.cluster]]
        unit = prototype_samples(nlp, "bert_textcat", [texts])[0]
        nearest = representatives(unit, centroid(unit), 3)
        assert [r["text"] for r in cluster.representatives] == [texts[i] for i in nearest]
        reordered += nearest != [0, 1, 2]
    assert reordered  # the column's space alone would have kept the members' order


def test_k_means_needs_no_scikit_learn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default `--clusters auto` runs where scikit-learn cannot be imported
    (it is not in `make run`'s install)."""
    import sys

    for name in ("sklearn", "sklearn.cluster", "sklearn.metrics"):
        monkeypatch.setitem(sys.modules, name, None)
    rows = []
    rng = numpy.random.default_rng(0)
    for i in range(30):
        out = {"label": None, "top": "card", "confidence": 0.1, "decision": "out_of_scope"}
        vector = numpy.eye(6)[i % 3] + 0.05 * rng.normal(size=6)
        text = NEW_TEXTS[i % 3]
        rows.append({"id": f"n{i}", "route": out, "empty_text": False, "text": text})
        rows[-1]["vector"] = vector.tolist()
    annotations = tmp_path / "routed.jsonl"
    annotations.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    args = ["discover", str(annotations), str(tmp_path / "out"), "--no-picture"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "30 in 3 clusters" in result.output
