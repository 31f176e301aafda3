"""A doc the pipeline fails on, alone (an exception, or out of memory even as
one window), is an error row naming it; the rest of its chunk is annotated."""

from pathlib import Path

import pytest
import spacy
import torch
from annotate_helpers import read_errors, read_output, write_input
from spacy.language import Language
from spacy.tokens import Doc

from spacy_bert_pipes.annotate import AnnotateOptions, prepare_run, run_annotation


class WindowOutOfMemoryError(RuntimeError):
    """Like models.oom's: a single window that does not fit the device."""


@Language.component("test_fails_on_some_texts")
def fails_on_some_texts(doc: Doc) -> Doc:
    if doc.text == "too big":
        raise WindowOutOfMemoryError("a window of 512 wordpieces does not fit on cuda:0")
    if doc.text == "torch oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if doc.text == "bad":
        raise ValueError("bad text")
    return doc


@pytest.fixture
def nlp() -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("test_fails_on_some_texts")
    return nlp


@pytest.mark.parametrize("chunk_size", [1, 2, 10])
def test_out_of_memory_docs_become_error_rows(
    nlp: Language, tmp_path: Path, chunk_size: int
) -> None:
    """Whether the doc is alone in its chunk (chunk_size 1: every doc of the
    chunk fails) or not, it is an error row; the others are annotated."""
    texts = ["a", "too big", "b", "torch oom", "c", "bad", "d"]
    records = [{"id": f"doc{i}", "text": text} for i, text in enumerate(texts)]
    input_path = write_input(tmp_path, "jsonl", records)
    output = tmp_path / "out.jsonl"
    options = AnnotateOptions(chunk_size=chunk_size, batch_size=4)
    if chunk_size == 1:  # "bad" alone in its chunk: a failing chunk, not out of memory
        records[5]["text"] = "e"
        input_path = write_input(tmp_path, "jsonl", records)
    summary = run_annotation(prepare_run("blank", input_path, output, options), nlp)
    errors = read_errors(output)
    expected_errors = ["doc1", "doc3"] + (["doc5"] if chunk_size > 1 else [])
    assert [error["id"] for error in errors] == expected_errors
    assert [error["row"] for error in errors] == [int(i[3:]) for i in expected_errors]
    assert "WindowOutOfMemoryError: a window of 512 wordpieces" in errors[0]["reason"]
    assert errors[0]["reason"].startswith("out of memory: the pipeline failed on this text")
    assert "OutOfMemoryError: CUDA out of memory" in errors[1]["reason"]
    assert [row["id"] for row in read_output(output)] == [
        r["id"] for r in records if r["id"] not in expected_errors
    ]
    assert summary.input_rows == summary.output_rows + summary.error_rows == len(texts)


def test_a_chunk_failing_without_running_out_of_memory_stops_the_run(
    nlp: Language, tmp_path: Path
) -> None:
    """Every doc of a chunk fails, not for memory: the pipeline is broken."""
    input_path = write_input(tmp_path, "jsonl", [{"id": "a", "text": "bad"}])
    with pytest.raises(ValueError, match="bad text"):
        run_annotation(
            prepare_run("blank", input_path, tmp_path / "o.jsonl", AnnotateOptions()), nlp
        )
