"""bert-pipes shrink: a student with K of the teacher's encoder layers, every head
carried over, that learns the teacher's hidden states, then trains its heads on
gold (the default) or on the teacher's annotation."""

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import (
    FP32_ENCODER,
    SMALL_ENCODER,
    loader_config,
    ner_examples,
    textcat_examples,
    write_jsonl,
    write_tiny_bert,
)
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.corpus_attrs import soft_targets
from spacy_bert_pipes.int8_check import Int8Check, ScoreCheck, mark_pipeline
from spacy_bert_pipes.models.encoder.bert import hf_shim
from spacy_bert_pipes.multitask.shrink import ShrinkError, choose_layers, cut, encoders, shrink

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]
TEACHER_LAYERS = 4


def write_corpus(path: Path) -> Path:
    """Docs with gold cats and docs with gold entities, apart (as the four corpora
    of configs/multitask.cfg are)."""
    nlp = spacy.blank("en")
    docs = [eg.reference for eg in textcat_examples(nlp) + ner_examples(nlp)]
    DocBin(docs=docs, store_user_data=True).to_disk(path)
    return path


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/multitask.cfg on a 4-layer tiny BERT (its intents own the top layer,
    its vectors the top 2), trained 2 steps, every corpus the one above."""
    from spacy.cli.train import train

    root = tmp_path_factory.mktemp("shrink_teacher")
    tiny = write_tiny_bert(root / "bert", num_hidden_layers=TEACHER_LAYERS)
    corpus = write_corpus(root / "corpus.spacy")
    overrides: Dict[str, Any] = {
        f"paths.{name}_{part}": str(corpus)
        for name in ("banking77", "nluplusplus", "conll2003", "restaurant8k")
        for part in ("train", "dev")
    }
    overrides.update({"paths.encoder": str(tiny), "training.max_steps": 2})
    overrides.update({"training.eval_frequency": 2})
    overrides.update({f"components.bert_encoder.model.{k}": v for k, v in FP32_ENCODER.items()})
    train(ROOT / "configs" / "multitask.cfg", root / "out", overrides=overrides)
    return root / "out" / "model-last"


@pytest.fixture(scope="module")
def student(teacher: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("shrink_student")
    texts = write_jsonl(output.parent / "texts.jsonl", [{"text": "my card is in paris"}])
    shrink(
        teacher,
        output,
        2,
        texts=texts,
        texts_weight=2.0,
        steps=2,
        labels="teacher",
        align_steps=0,
        progress=False,
    )
    return output


def test_layers_are_spread_evenly_with_the_top_one_kept() -> None:
    assert choose_layers(6, 3) == [1, 3, 5]
    assert choose_layers(6, 2) == [2, 5]
    assert choose_layers(6, 1) == [5]
    assert choose_layers(4, 4) == [0, 1, 2, 3]
    assert choose_layers(12, 4) == [2, 5, 8, 11]


def test_the_student_keeps_the_teachers_chosen_layers(teacher: Path, student: Path) -> None:
    """Before training: K layers, each equal to the teacher's chosen one; the
    config says K layers, and the heads' own top layers come along."""
    import torch

    before = spacy.load(teacher)
    after = spacy.load(student / "student-init")
    old = hf_shim(encoders(before)["bert_encoder"]).module
    new = hf_shim(encoders(after)["bert_encoder"]).module
    assert len(new.transformer.encoder.layer) == 2
    assert new.transformer.config.num_hidden_layers == 2
    for mine, theirs in zip(new.transformer.encoder.layer, [1, 3]):
        for (name, a), b in zip(
            mine.state_dict().items(), old.transformer.encoder.layer[theirs].state_dict().values()
        ):
            assert torch.equal(a, b), name
    assert new.branch_layers == old.branch_layers == {"intents": 1, "bert_vectors": 2}
    record = json.loads((student / "shrink.json").read_text())
    assert record["kept_layers_0_based"] == {"bert_encoder": [1, 3]}


def test_the_student_loads_and_annotates_with_every_head(teacher: Path, student: Path) -> None:
    nlp = spacy.load(student / "model-last")
    old = spacy.load(teacher)
    assert nlp.pipe_names == old.pipe_names
    for name in ("intents", "nluplusplus", "bert_ner"):
        assert nlp.get_pipe(name).labels == old.get_pipe(name).labels
    assert nlp.get_pipe("slots").cfg["questions"] == old.get_pipe("slots").cfg["questions"]
    assert nlp.get_pipe("intents").cfg["score_prefix"] == "cats"
    shim = hf_shim(encoders(nlp)["bert_encoder"])
    assert shim.n_layers == 2
    doc = nlp("john smith says my card still not arrived in paris")
    assert set(doc.cats) >= set(old.get_pipe("intents").labels)
    assert {a["key"] for a in doc._.answers} == set(old.get_pipe("slots").cfg["questions"])
    assert doc.has_vector


def test_the_student_runs_in_int8(student: Path) -> None:
    """A normal pipeline: it loads at another precision and every head annotates."""
    from spacy_bert_pipes.loading import load_pipeline

    nlp = load_pipeline(student / "model-last", precision="int8")
    doc = nlp("john smith says my card still not arrived in paris")
    assert doc.cats and doc.has_annotation("ENT_IOB")
    assert {a["key"] for a in doc._.answers} == set(nlp.get_pipe("slots").cfg["questions"])


def test_the_teacher_annotated_what_each_doc_lacked(student: Path) -> None:
    nlp = spacy.blank("en")
    docs: List[Any] = list(
        DocBin().from_disk(student / "distilled" / "banking77.spacy").get_docs(nlp.vocab)
    )
    assert all(doc.has_annotation("ENT_IOB") for doc in docs)
    # the entity docs have no cats: both classifiers' probabilities come from the teacher
    no_cats = [doc for doc in docs if not doc.cats]
    assert no_cats and all(soft_targets(doc, "nluplusplus") for doc in no_cats)
    assert all(soft_targets(doc, "intents") for doc in no_cats)
    assert all(doc._.gold_answers is not None for doc in docs)
    texts = list(DocBin().from_disk(student / "distilled" / "texts.spacy").get_docs(nlp.vocab))
    assert [doc.text for doc in texts] == ["my card is in paris"]
    assert soft_targets(texts[0], "intents")
    config = spacy.util.load_config(student / "config.cfg")
    assert config["components"]["bert_ner"] == {"source": str(student / "student-init")}
    assert "texts" in config["corpora"]["train"]["sources"]
    assert config["corpora"]["train"]["weights"] == {"texts": 2.0}
    assert config["training"]["logger"]["@loggers"] == "spacy-bert-pipes.ProgressLogger.v1"


def test_bad_layer_counts_name_the_component(teacher: Path) -> None:
    nlp = spacy.load(teacher)
    with pytest.raises(ShrinkError, match="--layers 5: the encoder of bert_encoder has 4 layers"):
        cut(nlp, 5, "teacher")
    # intents owns the top layer and the vectors the top 2: one layer is too few
    with pytest.raises(ShrinkError, match="bert_vectors owns the top 2 layers"):
        cut(spacy.load(teacher), 1, "teacher")


def test_a_pipeline_without_a_bert_encoder_is_refused(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    with pytest.raises(ShrinkError, match="no BERT encoder to shrink.*sentencizer"):
        cut(nlp, 2, "blank")


def test_cut_shrinks_a_head_with_its_own_encoder(tmp_path: Path) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": SMALL_ENCODER}})
    tiny = write_tiny_bert(tmp_path / "bert", num_hidden_layers=3)
    nlp.config["initialize"]["components"]["bert_textcat"] = loader_config(tiny)
    nlp.initialize(lambda: textcat_examples(nlp))
    assert cut(nlp, 1, "textcat") == {"bert_textcat": [2]}
    nlp.to_disk(tmp_path / "small")
    loaded = spacy.load(tmp_path / "small")
    assert hf_shim(encoders(loaded)["bert_textcat"]).n_layers == 1
    assert loaded("my card").cats


def test_gold_labels_train_on_the_corpora_as_they_are(teacher: Path, tmp_path: Path) -> None:
    """The default labels: each head on its corpus's gold; unlabelled texts only
    feed the hidden-state matching, which they need."""
    texts = write_jsonl(tmp_path / "texts.jsonl", [{"text": "my card is in paris"}])
    shrink(teacher, tmp_path / "gold", 2, steps=1, texts=texts, align_steps=2, progress=False)
    assert not (tmp_path / "gold" / "distilled").exists()
    config = spacy.util.load_config(tmp_path / "gold" / "config.cfg")
    sources = config["corpora"]["train"]["sources"]
    assert set(sources.values()) == {str((teacher.parent.parent / "corpus.spacy").resolve())}
    record = json.loads((tmp_path / "gold" / "shrink.json").read_text())
    assert record["labels"] == "gold" and "texts" in record["sources"]
    # the four corpora (one file here) and the one text: a window per short doc
    corpus_docs = len(DocBin().from_disk(teacher.parent.parent / "corpus.spacy"))
    assert record["aligned"]["bert_encoder"]["windows"] == 4 * corpus_docs + 1
    assert spacy.load(tmp_path / "gold" / "model-last")("what is my pin").cats
    with pytest.raises(ShrinkError, match="--texts .*both are off"):
        shrink(teacher, tmp_path / "x", 2, align_steps=0, texts=texts)
    with pytest.raises(ShrinkError, match="--texts-weight: with --labels gold"):
        shrink(teacher, tmp_path / "x", 2, texts=texts, texts_weight=1.0)
    with pytest.raises(ShrinkError, match="--labels silver: choose from gold, teacher"):
        shrink(teacher, tmp_path / "x", 2, labels="silver")  # type: ignore[arg-type]


def test_cli_errors(teacher: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = str(tmp_path / "out")
    result = runner.invoke(app, ["shrink", str(teacher), out, "--layers", "0"])
    assert result.exit_code == 1
    assert "--layers 0: a student needs at least 1 layer" in result.output
    # a K the encoder cannot give stops before the teacher's run
    result = runner.invoke(app, ["shrink", str(teacher), out, "--layers", "9"])
    assert result.exit_code == 1
    assert "--layers 9: the encoder of bert_encoder has 4 layers" in result.output
    assert not (tmp_path / "out").exists()
    result = runner.invoke(
        app, ["shrink", str(teacher), out, "--layers", "2", "--source", "a=missing.spacy"]
    )
    assert result.exit_code == 1
    assert "a = missing.spacy: no such file here" in result.output
    result = runner.invoke(app, ["shrink", str(tmp_path / "nothing"), out, "--layers", "2"])
    assert result.exit_code == 1
    assert "nothing" in result.output


def test_align_steps_match_the_teachers_states_first(teacher: Path, tmp_path: Path) -> None:
    """--align-steps (on by default): the cut encoder learns the teacher's hidden states before its
    heads train: its kept layers and the intents' own top layer (trainable), not
    the vectors' frozen copy; shrink.json and the terminal say so."""
    out = tmp_path / "aligned"
    result = CliRunner().invoke(
        app,
        [
            "shrink", str(teacher), str(out), "--layers", "2", "--steps", "1",
            "--align-steps", "3",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "bert_encoder: hidden states matched in 3 steps, loss" in result.output
    aligned = json.loads((out / "shrink.json").read_text())["aligned"]["bert_encoder"]
    assert aligned["steps"] == 3
    assert aligned["targets"] == [
        "layer 1 <- teacher layer 2",
        "layer 2 <- teacher layer 4",
        "branch intents",
    ]
    # the saved starting point is the aligned one, not the bare cut
    import torch

    cut_only = spacy.load(teacher)
    cut(cut_only, 2, "teacher")
    start = spacy.load(out / "student-init")
    a = hf_shim(encoders(cut_only)["bert_encoder"]).module.transformer.encoder.layer[0]
    b = hf_shim(encoders(start)["bert_encoder"]).module.transformer.encoder.layer[0]
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_the_student_trains_twice_the_teachers_steps_by_default(teacher: Path) -> None:
    from thinc.api import Config

    from spacy_bert_pipes.multitask.shrink import STEPS_FACTOR, student_config

    config = Config(spacy.load(teacher).config).interpolate()
    config["training"]["optimizer"]["learn_rate"].update(total_steps=2, warmup_steps=1)
    student = student_config(config, Path("init"), {}, {})["training"]
    assert STEPS_FACTOR == 2 and student["max_steps"] == 4
    assert student["optimizer"]["learn_rate"]["total_steps"] == 4
    assert student["optimizer"]["learn_rate"]["warmup_steps"] == 2
    given = student_config(config, Path("init"), {}, {}, steps=6)["training"]
    assert given["max_steps"] == 6 and given["optimizer"]["learn_rate"]["warmup_steps"] == 3


def test_the_teachers_int8_mark_does_not_pass_to_the_student(teacher: Path, tmp_path: Path) -> None:
    """check-int8 measured the teacher's heads, not the student's: the student
    must be checked itself before "auto" may pick int8 for it."""
    import shutil

    marked = tmp_path / "teacher"
    shutil.copytree(teacher, marked)
    check = Int8Check(str(marked), 0.3, "avx2", scores=[ScoreCheck("d", "k", 0.5, 0.5)])
    assert mark_pipeline(marked, check) == ["components.bert_encoder.model"]
    shrink(marked, tmp_path / "student", 2, steps=1, align_steps=0, progress=False)
    for folder in ("student-init", "model-last"):
        config = spacy.util.load_config(tmp_path / "student" / folder / "config.cfg")
        assert config["components"]["bert_encoder"]["model"]["int8_checked"] is False, folder
        meta = json.loads((tmp_path / "student" / folder / "meta.json").read_text())
        assert "int8_check" not in meta, folder
