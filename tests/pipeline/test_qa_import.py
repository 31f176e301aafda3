"""Importing a Hugging Face ...ForQuestionAnswering: same answers as transformers' pipeline."""

from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import write_tiny_bert
from spacy.language import Language
from spacy.training import Example

CONTEXTS = [
    "john smith is in paris and the bank of london is a company . " * 4,
    "my card still not arrived , what exchange rate is this ?",
    "hello world",
    "apple , google and the bank are in new york . john works there .",
]
QUESTIONS = ["who is in paris ?", "what is the exchange rate", "where is the bank of london ?"]


def write_qa_checkpoint(path: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, BertForQuestionAnswering

    base = write_tiny_bert(path / "base")
    torch.manual_seed(0)
    model = BertForQuestionAnswering.from_pretrained(base)
    with torch.no_grad():
        model.qa_outputs.weight.normal_(0.0, 1.0)
    out = path / "qa"
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def imported(folder: Path, settings: Dict[str, Any]) -> Language:
    nlp = spacy.blank("en")
    model: Dict[str, Any] = {
        k: settings[k] for k in ("max_seq_len", "doc_stride", "max_question_len")
    }
    model["encoder"] = {"predict_precision": "fp32"}  # as the transformers pipeline
    rest = {k: v for k, v in settings.items() if k not in model}
    nlp.add_pipe("bert_qa", config={"model": model, **rest})
    nlp.config["initialize"]["components"]["bert_qa"] = {
        "encoder_loader": {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": str(folder)}
    }
    nlp.initialize(lambda: [Example(nlp.make_doc("x"), nlp.make_doc("x"))])
    return nlp


def pipeline_answers(qa: Any, question: str, context: str, settings: Dict[str, Any]) -> List[tuple]:
    out = qa(question=question, context=context, **settings)
    out = out if isinstance(out, list) else [out]
    return [
        (
            a["answer"],
            a["start"] if a["answer"] else None,
            a["end"] if a["answer"] else None,
            a["score"],
        )
        for a in out
    ]


@pytest.mark.parametrize(
    "settings",
    [
        {"max_seq_len": 384, "doc_stride": 128, "max_question_len": 64},
        {"max_seq_len": 40, "doc_stride": 8, "max_question_len": 20, "top_k": 3},
        {
            "max_seq_len": 40,
            "doc_stride": 8,
            "max_question_len": 20,
            "handle_impossible_answer": True,
        },
        {
            "max_seq_len": 32,
            "doc_stride": 4,
            "max_question_len": 20,
            "max_answer_len": 3,
            "top_k": 2,
        },
    ],
)
def test_same_answers_as_transformers_pipeline(tmp_path: Path, settings: Dict[str, Any]) -> None:
    from transformers import pipeline

    folder = write_qa_checkpoint(tmp_path)
    nlp = imported(folder, settings)
    qa = pipeline("question-answering", model=str(folder), tokenizer=str(folder))
    for context in CONTEXTS:
        for question in QUESTIONS:
            doc = nlp.make_doc(context)
            doc._.questions = {"q": question}
            doc = nlp(doc)
            ours = [(a["text"], a["start"], a["end"], a["score"]) for a in doc._.answers]
            theirs = pipeline_answers(qa, question, context, settings)
            assert [a[:3] for a in ours] == [a[:3] for a in theirs], (question, context)
            assert [a[3] for a in ours] == pytest.approx([a[3] for a in theirs], abs=1e-5)
