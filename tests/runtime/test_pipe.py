"""`pipe_in_workers`: a saved pipeline over texts in spawned workers, Docs in
input order with the annotations one process gives."""

from pathlib import Path
from typing import List

import pytest
import spacy
import torch
from annotate_helpers import save_tiny_pipeline

from spacy_bert_pipes.runtime import pipe_in_workers

torch.set_num_threads(1)

TEXTS = [f"john smith {i} is in paris and my card {'not ' * (i % 4)}working" for i in range(23)] + [
    "",
    "apple in london",
]
QUESTIONS = {"questions": {"who": "Who is it?"}}


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", tiny_bert))


def annotations(doc: spacy.tokens.Doc) -> List:
    return [
        doc.text,
        [t.text for t in doc],
        doc.cats,
        [(e.start_char, e.end_char, e.label_, e._.bert_ner_score) for e in doc.ents],
        doc._.answers,
    ]


def test_workers_give_the_docs_of_one_process_in_order(pipeline: str) -> None:
    nlp = spacy.load(pipeline)
    items = [(text, QUESTIONS if i % 2 else {}) for i, text in enumerate(TEXTS)]
    expected = []
    for start in range(0, len(items), 5):  # as each worker batches: chunk by chunk
        chunk = items[start : start + 5]
        expected += [(annotations(d), c) for d, c in nlp.pipe(chunk, as_tuples=True, batch_size=2)]
    found = pipe_in_workers(pipeline, items, workers=2, batch_size=2, chunk_size=5, as_tuples=True)
    assert [(annotations(doc), context) for doc, context in found] == expected
    assert any(doc_answers for (*_, doc_answers), _ in expected)  # questions were asked
