"""`bert-pipes add-label`: new labels on a trained prototype bert_textcat."""

import json
from pathlib import Path

import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, loader_config, prototype_router, textcat_examples
from typer.testing import CliRunner, Result

from spacy_bert_pipes.cli import app

runner = CliRunner()


@pytest.fixture
def trained(tiny_bert: Path, tmp_path: Path) -> Path:
    return prototype_router(tiny_bert, tmp_path / "trained")


def test_add_label_by_description_and_examples(trained: Path, tmp_path: Path) -> None:
    descriptions = tmp_path / "new.json"
    descriptions.write_text(json.dumps({"pin": ["a new pin", "my pin"]}), encoding="utf8")
    examples = tmp_path / "examples.jsonl"
    rows = [{"text": "top up my account", "label": "top_up"}, {"text": "new pin", "label": "pin"}]
    examples.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf8")
    out = tmp_path / "extended"
    args = ["add-label", str(trained), str(out), "--descriptions", str(descriptions)]
    result = runner.invoke(app, args + ["--examples", str(examples)])
    assert result.exit_code == 0, result.output
    nlp = spacy.load(out)
    assert nlp.get_pipe("bert_textcat").labels == (*LABELS, "pin", "top_up")
    # what each label got: its examples, descriptions and bias; an uncalibrated
    # router remembers no docs, so what the label takes is not measured
    bias = nlp.get_pipe("bert_textcat").model.get_ref("output").get_param("b")
    lines = result.output.splitlines()
    assert f"  pin: 1 example(s), 2 description(s), bias {float(bias[-2]):.3f}; reach not" in (
        " ".join(lines)
    )
    assert f"  top_up: 1 example(s), 0 description(s), bias {float(bias[-1]):.3f}" in lines[-1]
    cats = nlp("top up my account").cats
    assert max(cats, key=cats.__getitem__) == "top_up"


def test_add_label_errors_name_the_problem(trained: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"pin": 3}', encoding="utf8")
    result = runner.invoke(
        app, ["add-label", str(trained), str(tmp_path / "o"), "--descriptions", str(bad)]
    )
    assert result.exit_code == 1
    assert "bad.json" in result.output and "'pin'" in result.output
    known = tmp_path / "known.json"
    known.write_text('{"card": "my card"}', encoding="utf8")
    result = runner.invoke(
        app, ["add-label", str(trained), str(tmp_path / "o"), "--descriptions", str(known)]
    )
    assert result.exit_code == 1
    assert "already has the label(s) ['card']" in result.output


def test_a_zero_shot_pipeline_runs_in_annotate(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    descriptions = {"card": "my card", "fx": "exchange rate"}
    nlp.add_pipe("bert_textcat", config={"model": model, "label_descriptions": descriptions})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize()
    nlp.to_disk(tmp_path / "zero")
    rows = [{"id": "a", "text": "my card"}, {"id": "b", "text": "exchange rate"}]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf8")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["annotate", str(tmp_path / "zero"), str(source), str(out)])
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in out.read_text(encoding="utf8").splitlines()]
    tops = {r["id"]: max(r["cats"], key=r["cats"].__getitem__) for r in written}
    assert tops == {"a": "card", "b": "fx"}


def test_add_label_refuses_a_non_empty_output_unless_overwrite(
    trained: Path, tmp_path: Path
) -> None:
    def add(label: str, *options: str) -> Result:
        descriptions = tmp_path / f"{label}.json"
        descriptions.write_text(json.dumps({label: f"my {label}"}), encoding="utf8")
        args = ["add-label", str(trained), str(out), "--descriptions", str(descriptions)]
        return runner.invoke(app, [*args, *options])

    out = tmp_path / "extended"
    out.mkdir()  # an empty folder is fine
    assert add("pin").exit_code == 0
    result = add("fee")
    assert result.exit_code == 1
    assert str(out) in result.output and "--overwrite" in result.output
    assert spacy.load(out).get_pipe("bert_textcat").labels == (*LABELS, "pin")
    result = add("fee", "--overwrite")
    assert result.exit_code == 0, result.output
    assert spacy.load(out).get_pipe("bert_textcat").labels == (*LABELS, "fee")


def test_add_label_labels_of_the_examples_must_be_strings(trained: Path, tmp_path: Path) -> None:
    examples = tmp_path / "examples.jsonl"
    rows = [{"text": "new pin", "label": "pin"}, {"text": "top up", "label": ["top_up", "pin"]}]
    examples.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf8")
    out = tmp_path / "o"
    result = runner.invoke(app, ["add-label", str(trained), str(out), "--examples", str(examples)])
    assert result.exit_code == 1
    assert f"{examples}:2" in result.output and "['top_up', 'pin']" in result.output
    assert not out.exists()


def test_adapt_saves_prototypes_moved_towards_the_texts(trained: Path, tmp_path: Path) -> None:
    texts = tmp_path / "tickets.jsonl"
    rows = [{"body": "my card has not come"}, {"body": "exchange rate please"}, {"body": "hi"}]
    texts.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf8")
    out = tmp_path / "adapted"
    args = ["adapt", str(trained), str(texts), str(out), "--text-column", "body"]
    result = runner.invoke(app, args + ["--min-confidence", "0"])
    assert result.exit_code == 0, result.output
    assert "Adapted 'bert_textcat' to 3 of 3 texts" in result.output
    before = spacy.load(trained).get_pipe("bert_textcat").model.get_ref("output").get_param("W")
    after = spacy.load(out).get_pipe("bert_textcat").model.get_ref("output").get_param("W")
    assert not (before == after).all()
    again = runner.invoke(app, args)
    assert again.exit_code != 0 and "not empty" in again.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "fine"}\n{"text": "no body"}\n', encoding="utf8")
    failed = runner.invoke(app, ["adapt", str(trained), str(bad), str(tmp_path / "x")])
    assert failed.exit_code != 0 and "bad.jsonl:1" in failed.output
    wrong = runner.invoke(app, args[:3] + [str(tmp_path / "y"), "--min-confidence", "2"])
    assert wrong.exit_code != 0 and "--min-confidence" in wrong.output


def test_add_label_with_nearest_examples(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy.tokens import DocBin

    from spacy_bert_pipes.pipeline.textcat_scope import ScopeRouter, calibrate_pipeline

    new = tmp_path / "new.jsonl"
    rows = [{"text": t, "label": "pin"} for t in ("a new pin", "my pin is lost", "pin reset")]
    new.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf8")
    args = ["--examples", str(new), "--nearest-examples", "1.0", "--allowance", "0.01"]
    args += ["--scope-correction"]
    # a router that is not calibrated remembers no docs to route by
    result = runner.invoke(app, ["add-label", str(trained), str(tmp_path / "o"), *args])
    assert result.exit_code == 1
    assert "calibrate" in result.output
    nlp = spacy.load(trained, config={"components": {"bert_textcat": {"oos_method": "knn"}}})
    docs = [eg.reference for eg in textcat_examples(nlp)]
    DocBin(docs=docs).to_disk(tmp_path / "train.spacy")
    calibrate_pipeline(nlp, tmp_path / "train.spacy", tmp_path / "train.spacy")
    nlp.to_disk(tmp_path / "calibrated")
    out = tmp_path / "extended"
    # the reach's math is tested with the router (tests/pipeline): here, that
    # --scope-correction asks for it
    monkeypatch.setattr(ScopeRouter, "example_reach", lambda self, n: 2.0)
    result = runner.invoke(app, ["add-label", str(tmp_path / "calibrated"), str(out), *args])
    assert result.exit_code == 0, result.output
    loaded = spacy.load(out)
    # the reach: how many of the remembered training docs now go to pin
    pipe = loaded.get_pipe("bert_textcat")
    said = " ".join(result.output.split())
    assert f"pin: {len(rows)} example(s), 0 description(s), bias " in said
    assert f"takes {pipe.new_labels.taken(['pin'])[0]['pin']} of the {len(docs)} docs" in said
    assert loaded.config["components"]["bert_textcat"]["model"]["example_weight"] == 1.0
    output = loaded.get_pipe("bert_textcat").model.get_ref("output")
    assert output.attrs["example_weight"] == 1.0
    assert len(output.get_param("E")) == len(docs) + len(rows)
    fit = loaded.get_pipe("bert_textcat").router.fit
    assert fit is not None and fit.reach is not None  # --scope-correction
    assert (fit.reach[-len(rows) :] == 2.0).all() and (fit.reach[: len(docs)] == 1.0).all()
    cats = loaded("my pin is lost").cats
    assert max(cats, key=cats.__getitem__) == "pin"


def test_a_review_on_a_knn_router_gets_the_measured_settings(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spacy.tokens import DocBin

    from spacy_bert_pipes.pipeline.new_labels import REVIEW_ALLOWANCE, REVIEW_NEAREST_EXAMPLES
    from spacy_bert_pipes.pipeline.textcat_scope import ScopeRouter, calibrate_pipeline

    # the reach's math is tested with the router (tests/pipeline): here, whether it is asked
    monkeypatch.setattr(ScopeRouter, "example_reach", lambda self, n: 2.0)

    review = tmp_path / "review.jsonl"
    shown = [{"id": f"d{i}", "text": t} for i, t in enumerate(("a new pin", "my pin is lost"))]
    row = {"cluster": 0, "name": "pin", "representatives": shown, "action": "accept"}
    review.write_text(json.dumps(row) + "\n", encoding="utf8")
    nlp = spacy.load(trained, config={"components": {"bert_textcat": {"oos_method": "knn"}}})
    DocBin(docs=[eg.reference for eg in textcat_examples(nlp)]).to_disk(tmp_path / "t.spacy")
    calibrate_pipeline(nlp, tmp_path / "t.spacy", tmp_path / "t.spacy")
    nlp.to_disk(tmp_path / "knn")

    def example_weight(args: list, source: Path) -> float:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        result = runner.invoke(app, ["add-label", str(source), str(out), *args])
        assert result.exit_code == 0, result.output
        assert ("discover workflow's settings" in result.output) == (
            source.name == "knn" and args == ["--review", str(review)]
        )
        loaded = spacy.load(out).get_pipe("bert_textcat")
        fit = loaded.router.fit
        if example_weight_is := loaded.model.get_ref("output").attrs["example_weight"]:
            assert fit is not None and fit.reach is not None  # the scope correction
        return float(example_weight_is)

    # a review on a knn router: the discover workflow's settings
    assert example_weight(["--review", str(review)], tmp_path / "knn") == REVIEW_NEAREST_EXAMPLES
    assert REVIEW_ALLOWANCE == 0.0005
    # any of them given: what is given, the others off
    assert example_weight(["--review", str(review), "--allowance", "0"], tmp_path / "knn") == 0
    # not a knn router: none
    assert example_weight(["--review", str(review)], trained) == 0
    # examples, not a review: none
    examples = tmp_path / "pin.jsonl"
    examples.write_text(json.dumps({"text": "a new pin", "label": "pin"}) + "\n")
    assert example_weight(["--examples", str(examples)], tmp_path / "knn") == 0
