"""Heads imported from Hugging Face checkpoints survive to_disk / spacy.load.

The base model of a ...ForQuestionAnswering or ...ForTokenClassification has no
pooler; a checkpoint file may or may not still carry pooler weights.
"""

from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import write_tiny_bert
from spacy.language import Language

TEXTS = [
    "john smith is in paris and the bank of london is a company .",
    "my card still not arrived , what exchange rate is this ?",
    "hello world",
    "",
]
QUESTIONS = {"who": "who is in paris ?", "rate": "what exchange rate is this"}


def write_checkpoint(path: Path, kind: str, pooler_weights: bool) -> Path:
    """A tiny BertFor... checkpoint (random head with large weights) whose
    model.safetensors has (or lacks) bert.pooler.* weights."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (
        AutoTokenizer,
        BertForQuestionAnswering,
        BertForSequenceClassification,
        BertForTokenClassification,
    )

    base = write_tiny_bert(path / "base")
    torch.manual_seed(0)
    if kind == "qa":
        model: Any = BertForQuestionAnswering.from_pretrained(base)
        head = model.qa_outputs
    elif kind == "ner":
        tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
        model = BertForTokenClassification.from_pretrained(
            base, num_labels=len(tags), id2label=dict(enumerate(tags))
        )
        head = model.classifier
    else:
        labels = {0: "card", 1: "fx", 2: "other"}
        model = BertForSequenceClassification.from_pretrained(base, num_labels=3, id2label=labels)
        head = model.classifier
    with torch.no_grad():
        head.weight.normal_(0.0, 1.0)
        head.bias.normal_(0.0, 1.0)
    out = path / kind
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    weights = load_file(out / "model.safetensors")
    has_pooler = any(k.startswith("bert.pooler.") for k in weights)
    if pooler_weights and not has_pooler:
        base_weights = load_file(base / "model.safetensors")
        for name in ("weight", "bias"):
            weights[f"bert.pooler.dense.{name}"] = base_weights[f"pooler.dense.{name}"]
    elif not pooler_weights and has_pooler:
        weights = {k: v for k, v in weights.items() if not k.startswith("bert.pooler.")}
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return out


def imported(kind: str, checkpoint: Path) -> Language:
    factory = {"qa": "bert_qa", "ner": "bert_ner", "textcat": "bert_textcat"}[kind]
    config: Dict[str, Any] = {}
    if kind == "qa":
        config = {"questions": QUESTIONS}
    elif kind == "textcat":
        config = {"model": {"pooler_activation": "tanh"}}
    nlp = spacy.blank("en")
    nlp.add_pipe(factory, config=config)
    nlp.config["initialize"]["components"][factory] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(checkpoint)}
    }
    nlp.initialize()
    return nlp


def predictions(nlp: Language) -> List[Any]:
    out: List[Any] = []
    for doc in nlp.pipe(TEXTS):
        out.append(
            {
                "cats": doc.cats,
                "ents": [(e.start_char, e.end_char, e.label_, e._.bert_ner_score) for e in doc.ents]
                if "bert_ner" in nlp.pipe_names
                else [],
                "answers": [
                    (a["question"], a["start"], a["end"], a["score"]) for a in doc._.answers
                ]
                if "bert_qa" in nlp.pipe_names
                else [],
            }
        )
    return out


def assert_same(ours: List[Any], theirs: List[Any]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        assert a["cats"].keys() == b["cats"].keys()
        assert list(a["cats"].values()) == pytest.approx(list(b["cats"].values()), abs=1e-5)
        for key in ("ents", "answers"):
            assert [x[:-1] for x in a[key]] == [x[:-1] for x in b[key]]
            assert [x[-1] for x in a[key]] == pytest.approx([x[-1] for x in b[key]], abs=1e-5)


@pytest.mark.parametrize("kind", ["qa", "ner", "textcat"])
@pytest.mark.parametrize("pooler_weights", [True, False], ids=["pooler", "no_pooler"])
def test_imported_head_round_trips(tmp_path: Path, kind: str, pooler_weights: bool) -> None:
    checkpoint = write_checkpoint(tmp_path / "hf", kind, pooler_weights)
    nlp = imported(kind, checkpoint)
    before = predictions(nlp)
    assert any(p["cats"] or p["ents"] or p["answers"] for p in before)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert_same(predictions(loaded), before)
    # and once more: the loaded pipeline saves what it loaded
    loaded.to_disk(tmp_path / "again")
    assert_same(predictions(spacy.load(tmp_path / "again")), before)
