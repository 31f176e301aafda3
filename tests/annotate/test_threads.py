"""The bytes of `annotate` do not depend on threads (spacy_bert_pipes.runtime.threads):
every engine annotates on ANNOTATE_THREADS intra-op threads, whatever the
calling process set and however many workers share the cores."""

from pathlib import Path
from typing import Iterator, List

import pytest
import torch
from annotate_helpers import read_output, run, save_tiny_pipeline, word_rows, write_input
from helpers import write_tiny_bert
from spacy.language import Language
from spacy.tokens import Doc

from spacy_bert_pipes.annotate import AnnotateOptions, prepare_run
from spacy_bert_pipes.annotate.chunks import annotate_chunk
from spacy_bert_pipes.annotate.workers import run_annotation_workers
from spacy_bert_pipes.io.rows import InputRow
from spacy_bert_pipes.runtime.threads import ANNOTATE_THREADS, fixed_threads

N_ROWS = 24
CHUNK = 8
SEEN: List[int] = []


@Language.component("test_threads_seen")
def record_threads(doc: Doc) -> Doc:
    SEEN.append(torch.get_num_threads())
    return doc


@pytest.fixture(scope="module")
def wide_pipeline(tmp_path_factory: pytest.TempPathFactory) -> str:
    # A feed-forward layer 2,048 wide: MKL splits such float32 sums between
    # threads when it has several (the last bits of the scores then differ).
    bert = write_tiny_bert(tmp_path_factory.mktemp("wide_bert"), intermediate_size=2048)
    return str(save_tiny_pipeline(tmp_path_factory.mktemp("pipeline") / "nlp", bert, qa=False))


@pytest.fixture(scope="module")
def input_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    records = word_rows(N_ROWS, step=5, shortest=4, spread=23)
    for i, record in enumerate(records):
        record["score"] = i / 7  # a kept float: the same digits from every engine
    records[3]["text"] = "  "  # flagged empty_text
    return write_input(tmp_path_factory.mktemp("input"), "jsonl", records)


@pytest.fixture
def calling_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_fixed_threads_sets_and_gives_back(calling_threads: None) -> None:
    torch.set_num_threads(2)
    with fixed_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_a_chunk_is_annotated_on_the_fixed_threads(calling_threads: None) -> None:
    nlp = Language()
    nlp.add_pipe("test_threads_seen")
    torch.set_num_threads(2)
    SEEN.clear()
    rows = [InputRow(i, f"r{i}", "some text", {}, f"line {i + 1}") for i in range(3)]
    outputs, errors = annotate_chunk(nlp, rows, AnnotateOptions())
    assert (len(outputs), errors) == (3, [])
    assert SEEN == [ANNOTATE_THREADS] * 3
    assert torch.get_num_threads() == 2  # the caller's setting, given back


def write_threads(path: Path, index: int) -> None:
    """A worker's `on_worker_chunk` hook: write its torch threads."""
    with path.open("a") as file_:
        file_.write(f"{torch.get_num_threads()}\n")


@pytest.mark.parametrize("precision", ["fp32", None])
def test_the_bytes_do_not_depend_on_workers_or_the_callers_threads(
    wide_pipeline: str,
    input_path: Path,
    tmp_path: Path,
    calling_threads: None,
    precision: str,
) -> None:
    """--workers 1 (this process) with 1 and 2 threads set by the caller, the
    second after this process annotated at another precision, and --workers 2:
    the same bytes, at fp32 and at the pipeline's own precision."""
    import functools

    options = dict(
        chunk_size=CHUNK, batch_size=4, precision=precision, keep_columns=("score", "text")
    )
    other = dict(options, precision="bf16" if precision == "fp32" else "fp32")
    outputs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        if threads == 2:  # what ran before in this process leaves no trace
            run(wide_pipeline, input_path, tmp_path / "other.jsonl", workers=1, **other)
        output = tmp_path / f"local_{threads}.jsonl"
        run(wide_pipeline, input_path, output, workers=1, **options)
        outputs.append(output.read_bytes())
    seen = tmp_path / "worker_threads.txt"
    output = tmp_path / "workers.jsonl"
    two = AnnotateOptions(workers=2, **options)  # type: ignore[arg-type]
    run_annotation_workers(
        prepare_run(wide_pipeline, input_path, output, two),
        wide_pipeline,
        on_worker_chunk=functools.partial(write_threads, seen),
    )
    outputs.append(output.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    rows = read_output(output)
    assert list(rows[0])[:3] == ["id", "score", "text"] and rows[1]["score"] == 1 / 7
    assert [row["empty_text"] for row in rows[:5]] == [False, False, False, True, False]
    assert seen.read_text().split() == [str(ANNOTATE_THREADS)] * (N_ROWS // CHUNK)
