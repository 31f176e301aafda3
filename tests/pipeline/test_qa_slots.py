"""bert_qa with SlotQAModel: fixed questions answered from the doc's own encoding,
so a whole pipeline (classifiers, NER, slot questions, vectors) runs one pass."""

from pathlib import Path
from typing import Any, Dict, List

import pytest
import spacy
from helpers import SMALL_ENCODER, count_calls, gold_answers, loader_config
from spacy.language import Language
from spacy.training import Example

from spacy_bert_pipes.models.encoder import bert as encoder_module

pytestmark = pytest.mark.usefixtures("one_thread")

LISTENER = {"@architectures": "spacy-bert-pipes.EncoderListener.v1"}
SLOTS = {"@architectures": "spacy-bert-pipes.SlotQAModel.v1"}
QUESTIONS = {
    "city": "which city",
    "person": "who is it",
    "company": "which company",
    "pin": "what about the pin",
    "cash": "what about cash",
}
# (text, {key: answer text or None})
DATA = [
    ("john smith is in paris", {"city": "paris", "person": "john smith", "company": None}),
    ("apple is a company in london", {"city": "london", "company": "apple", "person": None}),
    ("hello john", {"person": "john", "city": None, "company": None}),
    ("google is in new york", {"city": "new york", "company": "google", "person": None}),
    ("what is my pin", {"pin": "pin", "city": None, "person": None}),
    ("exchange rate for cash", {"cash": "cash", "city": None, "company": None}),
]


def slot_examples(nlp: Language, data: List[Any] = DATA) -> List[Example]:
    examples = []
    for text, answers in data:
        reference = nlp.make_doc(text)
        reference._.gold_answers = gold_answers(text, answers)
        examples.append(Example(nlp.make_doc(text), reference))
    return examples


def trained_slots(tiny_bert: Path, *, shared: bool, steps: int = 80) -> Language:
    nlp = spacy.blank("en")
    config: Dict[str, Any] = {"questions": QUESTIONS, "handle_impossible_answer": True}
    if shared:
        nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
        nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
        nlp.add_pipe("bert_qa", config={**config, "model": {**SLOTS, "encoder": LISTENER}})
    else:
        own = {"@architectures": "spacy-bert-pipes.BertEncoder.v2", **SMALL_ENCODER}
        nlp.add_pipe("bert_qa", config={**config, "model": {**SLOTS, "encoder": own}})
        nlp.config["initialize"]["components"]["bert_qa"] = loader_config(tiny_bert)
    examples = slot_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    optimizer.learn_rate = 3e-3
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


def top_answers(nlp: Language, text: str) -> Dict[str, str]:
    return {a["key"]: a["text"] for a in nlp(text)._.answers if a["rank"] == 0}


@pytest.mark.parametrize("shared", [False, True], ids=["own-encoder", "shared-encoder"])
def test_slots_learn_their_answers_and_null_answers(tiny_bert: Path, shared: bool) -> None:
    nlp = trained_slots(tiny_bert, shared=shared)
    for text, answers in DATA:
        found = top_answers(nlp, text)
        assert set(found) == set(QUESTIONS)
        for key, answer in answers.items():
            assert found[key] == (answer or ""), (text, key, found)
    doc = nlp("john smith is in paris")
    spans = {span.label_: span.text for span in doc.spans["answers"]}
    assert spans["city"] == "paris" and spans["person"] == "john smith"
    assert "company" not in spans  # its null answer won: no span


def test_a_question_that_comes_with_a_doc_needs_its_own_pass(tiny_bert: Path) -> None:
    nlp = trained_slots(tiny_bert, shared=False, steps=1)
    with pytest.raises(ValueError, match="not one of the fixed questions"):
        list(nlp.pipe([("hello john", {"questions": {"new": "who said hello"}})], as_tuples=True))


def test_saved_slots_answer_the_same(tiny_bert: Path, tmp_path: Path) -> None:
    nlp = trained_slots(tiny_bert, shared=True, steps=20)
    nlp.to_disk(tmp_path / "slots")
    loaded = spacy.load(tmp_path / "slots")
    model = loaded.get_pipe("bert_qa").model
    assert model.attrs["slot_questions"] == list(QUESTIONS.values())
    for text, _ in DATA:
        assert nlp(text)._.answers == loaded(text)._.answers


def test_the_whole_pipeline_runs_one_encoder_pass(
    tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Classifier, multi-label classifier, NER, five slot questions and the doc
    vector: one encoder forward per nlp.pipe batch, over each window once."""
    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder", config={"model": SMALL_ENCODER})
    nlp.config["initialize"]["components"]["bert_encoder"] = loader_config(tiny_bert)
    nlp.add_pipe("bert_textcat", config={"model": {"encoder": LISTENER}})
    multi = {"encoder": LISTENER, "exclusive_classes": False}
    nlp.add_pipe("bert_textcat", name="nlu", config={"model": multi, "score_prefix": "nlu"})
    nlp.add_pipe("bert_ner", config={"model": {"encoder": LISTENER}})
    qa_model = {**SLOTS, "encoder": LISTENER}
    nlp.add_pipe("bert_qa", config={"model": qa_model, "questions": QUESTIONS})
    nlp.add_pipe("bert_vectors")
    init = nlp.config["initialize"]["components"]
    init["bert_textcat"] = {"labels": ["card", "other"]}
    init["nlu"] = {"labels": ["greet", "pin"]}
    init["bert_ner"] = {"labels": ["LOC", "PER"]}
    nlp.initialize(lambda: slot_examples(nlp))
    texts = [text for text, _ in DATA] * 5
    runs = count_calls(monkeypatch, encoder_module, "run_windows")
    batches = count_calls(monkeypatch, encoder_module, "run_batch")
    docs = list(nlp.pipe(texts, batch_size=len(texts)))
    assert len(runs) == 1  # one encoder forward for the whole batch
    assert len(batches) >= 1
    for doc in docs:
        assert doc.cats and doc.has_vector
        assert {a["key"] for a in doc._.answers} <= set(QUESTIONS)
