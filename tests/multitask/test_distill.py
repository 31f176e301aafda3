"""bert-pipes distill: teachers annotate the docs that lack their head's annotation."""

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy
import pytest
import spacy
from helpers import (
    FP32_ENCODER,
    LABELS,
    NER_TEXTS,
    SMALL_ENCODER,
    TRAIN_TEXTS,
    gold_answers,
    loader_config,
    ner_examples,
    textcat_examples,
)
from spacy.tokens import DocBin
from spacy.training import Example
from typer.testing import CliRunner

from spacy_bert_pipes.cli import app
from spacy_bert_pipes.corpus_attrs import set_soft_targets, soft_targets
from spacy_bert_pipes.multitask.distill import DistillError, distill, load_teacher

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = {"city": "which city", "person": "who is it"}
QA_MODEL = {"encoder": FP32_ENCODER, "max_seq_len": 24, "doc_stride": 4, "max_question_len": 8}


def teacher(tiny_bert: Path, folder: Path, factory: str) -> Path:
    """A one-head pipeline on the tiny BERT, initialized (not trained), on disk."""
    nlp = spacy.blank("en")
    # fp32: the tests compare batched soft targets with one doc at a time
    config: Dict[str, Any] = {"model": {"encoder": FP32_ENCODER}}
    if factory == "bert_qa":
        config = {"model": QA_MODEL, "questions": QUESTIONS, "handle_impossible_answer": True}
    nlp.add_pipe(factory, config=config)
    nlp.config["initialize"]["components"][factory] = loader_config(tiny_bert)
    if factory == "bert_textcat":
        examples = textcat_examples(nlp)
    elif factory == "bert_ner":
        examples = ner_examples(nlp)
    else:
        examples = []
        for text in ("john is in paris", "hello world"):
            reference = nlp.make_doc(text)
            reference._.gold_answers = gold_answers(text, {"city": None, "person": None})
            examples.append(Example(nlp.make_doc(text), reference))
    nlp.initialize(lambda: examples)
    nlp.to_disk(folder)
    return folder


def sources(tmp_path: Path) -> Dict[str, Path]:
    """A classifier corpus (gold cats) and an entity corpus (gold entities)."""
    nlp = spacy.blank("en")
    intents = [eg.reference for eg in textcat_examples(nlp)]
    entities = [eg.reference for eg in ner_examples(nlp)]
    paths = {"intents": tmp_path / "intents.spacy", "entities": tmp_path / "entities.spacy"}
    DocBin(docs=intents, store_user_data=True).to_disk(paths["intents"])
    DocBin(docs=entities, store_user_data=True).to_disk(paths["entities"])
    return paths


def read(path: Path) -> List[Any]:
    return list(DocBin().from_disk(path).get_docs(spacy.blank("en").vocab))


@pytest.fixture(scope="module")
def teachers(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("teachers")
    return {
        "intents": teacher(tiny_bert, root / "textcat", "bert_textcat"),
        "bert_ner": teacher(tiny_bert, root / "ner", "bert_ner"),
        "slots": teacher(tiny_bert, root / "qa", "bert_qa"),
    }


def test_every_doc_gets_every_heads_annotation_and_gold_is_kept(
    teachers: Dict[str, Path], tmp_path: Path
) -> None:
    loaded = [load_teacher(name, path) for name, path in teachers.items()]
    summary = distill(sources(tmp_path), loaded, tmp_path / "out", progress=False)
    assert summary["intents"].annotated == {"intents": 0, "bert_ner": 6, "slots": 6}
    assert summary["entities"].annotated == {"intents": 6, "bert_ner": 0, "slots": 6}
    record = json.loads((tmp_path / "out" / "distill.json").read_text())
    assert record["annotated"]["entities"]["docs"] == len(NER_TEXTS)
    textcat, ner, qa = (spacy.load(path) for path in teachers.values())

    intents = read(tmp_path / "out" / "intents.spacy")
    for doc, (text, gold) in zip(intents, TRAIN_TEXTS):
        assert doc.text == text and max(doc.cats, key=doc.cats.get) == gold  # gold kept
        assert soft_targets(doc, "intents") is None
        expected = [(e.start_char, e.end_char, e.label_) for e in ner(text).ents]
        assert doc.has_annotation("ENT_IOB")
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == expected
        assert set(doc._.gold_answers) == set(QUESTIONS) == set(doc._.questions)

    entities = read(tmp_path / "out" / "entities.spacy")
    for doc, (text, ents) in zip(entities, NER_TEXTS):
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == ents  # gold kept
        assert doc.cats == {}
        targets = soft_targets(doc, "intents")
        assert targets is not None and set(targets) == set(LABELS)
        assert targets == pytest.approx(textcat(text).cats, abs=1e-5)
        answered = {a["key"]: a for a in qa(text)._.answers if a["rank"] == 0}
        for key, references in doc._.gold_answers.items():
            if answered[key]["start"] is None:
                assert list(references) == []  # (DocBin reads lists back as tuples)
            else:
                assert references[0]["text"] == answered[key]["text"]


def test_a_student_learns_a_teachers_probabilities_where_it_has_no_gold(
    tiny_bert: Path,
) -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_textcat", name="intents", config={"model": {"encoder": SMALL_ENCODER}})
    nlp.config["initialize"]["components"]["intents"] = {
        **loader_config(tiny_bert),
        "labels": LABELS,
    }
    nlp.initialize(lambda: textcat_examples(nlp))
    student = nlp.get_pipe("intents")
    reference = nlp.make_doc("john is in paris")
    set_soft_targets(reference, "intents", {"card": 0.2, "fx": 0.3, "other": 0.5})
    gold = textcat_examples(nlp)[:1]
    examples = gold + [Example(nlp.make_doc(reference.text), reference)]
    probs = numpy.full((2, 3), 1 / 3, dtype="f")
    loss, d = student.get_loss(examples, probs)
    order = [student.labels.index(label) for label in ("card", "fx", "other")]
    targets = numpy.asarray([0.2, 0.3, 0.5], dtype="f")
    numpy.testing.assert_allclose(numpy.asarray(d)[1, order], (1 / 3 - targets) / 2, rtol=1e-5)
    # cross-entropy with a one-hot row and with the soft row, both -log(1/3): the mean
    assert loss == pytest.approx(-numpy.log(1 / 3), rel=1e-4)
    # the soft targets are not gold: the doc is not scored
    assert not student.annotates(examples[1])
    set_soft_targets(reference, "intents", {"card": 0.5, "fx": 0.5})
    with pytest.raises(ValueError, match="teacher targets for 'intents'.*missing: \\['other'\\]"):
        student.get_loss(examples, probs)


def test_a_teacher_is_one_head(teachers: Dict[str, Path], tmp_path: Path, tiny_bert: Path) -> None:
    nlp = spacy.load(teachers["intents"])
    ner = spacy.load(teachers["bert_ner"])
    nlp.add_pipe("bert_ner", source=ner)
    nlp.to_disk(tmp_path / "two")
    with pytest.raises(DistillError, match=r"teacher x=.*two: .*one bert_textcat.*bert_ner"):
        load_teacher("x", tmp_path / "two")
    with pytest.raises(DistillError, match="teacher x=.*missing"):
        load_teacher("x", tmp_path / "missing")


def test_the_command_names_what_is_wrong(teachers: Dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(app, ["distill", str(out), "--source", "x", "--teacher", "a=b"])
    assert result.exit_code == 1 and "--source 'x': expected NAME=PATH" in result.output
    teacher_arg = f"intents={teachers['intents']}"
    missing = tmp_path / "none.spacy"
    result = runner.invoke(
        app, ["distill", str(out), "--source", f"s={missing}", "--teacher", teacher_arg]
    )
    assert result.exit_code == 1 and f"source {missing}: no such file" in result.output
    paths = sources(tmp_path)
    result = runner.invoke(
        app,
        ["distill", str(out), "--source", f"entities={paths['entities']}"]
        + ["--teacher", teacher_arg],
    )
    assert result.exit_code == 0, result.output
    assert "entities.spacy: 6 docs; teacher-annotated: intents 6" in result.output
