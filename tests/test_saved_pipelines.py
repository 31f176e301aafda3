"""Pipelines saved by an earlier version of the package still load and predict
the same: registered names, serialized model attributes and the layout of the
saved folders are a promise to every user with a trained pipeline on disk.

`tests/saved/pipelines/` holds one tiny pipeline per shipped config (textcat,
few-shot textcat, ner, qa, multitask), saved before `models/` was split into
subpackages, and `tests/saved/predictions.json` what they predicted then
(`tests/saved/make_saved.py` made both).
"""

import json
import math
from pathlib import Path
from typing import Any, Dict

import pytest
import spacy
from saved.make_saved import QUESTIONS, TEXTS

SAVED = Path(__file__).parent / "saved"
PREDICTIONS: Dict[str, Any] = json.loads((SAVED / "predictions.json").read_text())
# The same forward in fp32 on another CPU (other kernels, other sums) moves the
# last bits; a loading bug moves far more.
TOLERANCE = 1e-4


pytestmark = pytest.mark.usefixtures("one_thread")


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


@pytest.mark.parametrize("name", sorted(PREDICTIONS))
def test_a_pipeline_saved_before_loads_and_predicts_the_same(name: str) -> None:
    nlp = spacy.load(SAVED / "pipelines" / name)
    for text, expected in zip(TEXTS, PREDICTIONS[name]):
        doc = nlp.make_doc(text)
        if "bert_qa" in nlp.pipe_names:
            doc._.questions = QUESTIONS
        doc = nlp(doc)
        where = f"{name}: {text!r}"
        assert set(doc.cats) == set(expected["cats"]), where
        assert all(close(doc.cats[k], v) for k, v in expected["cats"].items()), where
        assert [[e.start_char, e.end_char, e.label_] for e in doc.ents] == expected["ents"], where
        scores = [e._.get("bert_ner_score") for e in doc.ents] if expected["ent_scores"] else []
        assert all(close(a, b) for a, b in zip(scores, expected["ent_scores"])), where
        answers = doc._.get("answers") if doc.has_extension("answers") else None
        answers = answers or []
        assert [(a["key"], a["text"], a["start"], a["end"]) for a in answers] == [
            (a["key"], a["text"], a["start"], a["end"]) for a in expected["answers"]
        ], where
        assert all(close(a["score"], b["score"]) for a, b in zip(answers, expected["answers"]))
        vector = [float(v) for v in doc.vector] if expected["vector"] else []
        assert len(vector) == len(expected["vector"]), where
        assert all(close(a, b) for a, b in zip(vector, expected["vector"])), where
