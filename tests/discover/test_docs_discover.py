"""docs/discover.md's commands, run as written on a router as configs/route.cfg
trains (a prototype bert_textcat on its own encoder, no bert_encoder and no
bert_vectors): the tiny random BERT stands in for the trained router."""

import json
import shlex
from pathlib import Path
from typing import List

import pytest
import spacy
from helpers import LABELS, SMALL_ENCODER, loader_config, textcat_examples
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "discover.md"
runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")


def documented_commands() -> List[List[str]]:
    """The `bert-pipes` lines of the first bash block of docs/discover.md,
    split as a shell would (its lines joined where they end in a backslash)."""
    text = DOC.read_text(encoding="utf8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [line.strip() for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith("bert-pipes ")]


def test_the_quickstart_has_the_three_steps() -> None:
    steps = [command[1] for command in documented_commands()]
    assert steps == ["annotate", "discover", "add-label"]


def test_the_documented_commands_run_on_a_route_cfg_router(
    tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the router: every doc below its threshold, so the tickets are all pooled
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy-bert-pipes.PrototypeCatModel.v1",
        "encoder": {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER},
    }
    nlp.add_pipe("bert_textcat", config={"model": model, "oos_threshold": 1.0})
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny_bert)
    nlp.initialize(lambda: textcat_examples(nlp))
    assert "bert_encoder" not in nlp.pipe_names and "bert_vectors" not in nlp.pipe_names
    monkeypatch.chdir(tmp_path)
    nlp.to_disk("router")
    texts = ["top up my account", "what is the weather", "change my pin"]
    tickets = [{"id": f"t{i}", "text": texts[i % 3]} for i in range(15)]
    Path("tickets.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tickets))
    commands = documented_commands()
    for command in commands:
        if command[1] == "add-label":  # a person fills in the actions first
            review = Path(command[command.index("--review") + 1])
            rows = [json.loads(line) for line in review.read_text().splitlines()]
            assert len(rows) == 3 and all("proposal" in row for row in rows)
            rows[0]["action"] = "rename:top_up"
            review.write_text("".join(json.dumps(row) + "\n" for row in rows))
        result = runner.invoke(app, command[1:])
        assert result.exit_code == 0, f"{shlex.join(command)}:\n{result.output}"
    # --encoder base: the checkpoint the router's config names
    summary = json.loads(Path("discovered/summary.json").read_text())
    assert summary["vectors"] == f"the frozen sentence vectors of {tiny_bert}"
    extended = commands[-1][3]
    labels = spacy.load(extended).get_pipe("bert_textcat").labels
    assert labels == (*LABELS, "top_up")


def test_encoder_base_needs_a_router_that_names_its_checkpoint(tmp_path: Path) -> None:
    from spacy_bert_pipes.discover import discover
    from spacy_bert_pipes.discover.pool import base_checkpoint

    annotations = tmp_path / "routed.jsonl"
    annotations.write_text("")
    with pytest.raises(ValueError, match="--encoder base takes the checkpoint.*give --pipeline"):
        discover(annotations, encoder="base")
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="no bert_textcat with label prototypes"):
        base_checkpoint(nlp, None)
    with pytest.raises(ValueError, match=r"names no checkpoint \(\[initialize.components.router"):
        base_checkpoint(nlp, "router")
