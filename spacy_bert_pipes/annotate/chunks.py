"""Chunks: the input read in numbered, checked chunks, and a chunk annotated.

Both engines read the input the same way (`checked_chunks`: the same chunk
boundaries, whatever chunks a run resumes, and the same checks that need the
rows before: duplicate ids, the length limit) and annotate a chunk the same
way (`annotate_chunk`, on `runtime.threads.ANNOTATE_THREADS` intra-op threads),
so their rows and error rows are the same bytes.
"""

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple, Union

from spacy.language import Language
from spacy.tokens import Doc

from ..io.output import VECTOR_COLUMN, VectorColumn, doc_to_row, error_row
from ..io.readers import read_input
from ..io.rows import InputRow
from ..memory import trim
from ..runtime.threads import fixed_threads
from .types import AnnotateOptions
from .vectors import VectorError, doc_vector

# The reason of a doc that ran out of memory even alone starts with this.
OOM_PREFIX = "out of memory: "


def read_rows(path: Path, options: AnnotateOptions) -> Iterator[InputRow]:
    """The input's rows, read with the options' format and columns."""
    return read_input(
        path,
        input_format=options.input_format,
        text_column=options.text_column,
        id_column=options.id_column,
        questions_column=options.questions_column,
        keep_columns=options.keep_columns,
    )


def checked_chunks(path: Path, options: AnnotateOptions) -> Iterator[Tuple[int, List[InputRow]]]:
    """The input's chunks of `options.chunk_size` rows, numbered from 0, each
    row checked (see `check_row`).

    path (Path): The input file or folder.
    options (AnnotateOptions): The settings.
    RETURNS (Iterator[Tuple[int, List[InputRow]]]): (index, rows) per chunk.
    """
    seen: Set[str] = set()
    rows = read_rows(path, options)
    for index in itertools.count():
        chunk = list(itertools.islice(rows, options.chunk_size))
        if not chunk:
            return
        yield index, [check_row(row, seen, options.max_length) for row in chunk]


def check_row(row: InputRow, seen: Set[str], max_length: int) -> InputRow:
    """Checks that need the rows before this one (or the settings): a
    duplicate id or a text over `max_length` makes it an error row.

    row (InputRow): The row as read.
    seen (Set[str]): The ids of the rows before; this row's is added.
    max_length (int): The longest text in characters.
    RETURNS (InputRow): The row, or an error row.
    """
    if row.id is not None:
        if row.id in seen:
            return replace(
                row, text=None, context={}, error=f"duplicate id {row.id!r}: an earlier row has it"
            )
        seen.add(row.id)
    if row.error is None and row.text is not None and len(row.text) > max_length:
        error = f"the text has {len(row.text)} characters, more than the limit ({max_length})"
        return replace(row, text=None, context={}, error=error)
    return row


def annotate_chunk(
    nlp: Language,
    rows: List[InputRow],
    options: AnnotateOptions,
    vectors: Optional[VectorColumn] = None,
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The output rows and error records of a chunk, each in input order.

    nlp (Language): The pipeline.
    rows (List[InputRow]): The chunk's rows (error rows included).
    options (AnnotateOptions): The settings (questions, batch size, processes).
    vectors (Optional[VectorColumn]): Add each doc's vector (see `doc_vector`;
        a doc without a usable one is an error row); None: no vectors.
    RETURNS (Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]): The output
        rows (see `doc_to_row`, with each row's kept values) and the error
        records (see `error_row`).
    """
    good = [row for row in rows if row.error is None]
    inputs = [(row.text, _context(row, options.questions)) for row in good]
    # Strings interned for this chunk are freed with it: memory stays flat. The
    # float sums happen in one order in every engine (see `runtime.threads`).
    with nlp.memory_zone(), fixed_threads():
        results = _pipe(nlp, inputs, options.batch_size, options.n_process)
        outputs: List[Dict[str, Any]] = []
        errors: List[Dict[str, Any]] = []
        found = iter(zip(good, results))
        for row in rows:
            if row.error is not None:
                errors.append(error_row(row))
                continue
            _, result = next(found)
            if isinstance(result, str):
                errors.append(error_row(replace(row, error=result)))
            elif vectors is None:
                outputs.append({**doc_to_row(result, row.id), **row.kept})
            else:
                try:
                    vector = doc_vector(result, vectors)
                except VectorError as err:
                    errors.append(error_row(replace(row, error=str(err))))
                    continue
                outputs.append({**doc_to_row(result, row.id), **row.kept, VECTOR_COLUMN: vector})
    del results
    trim()  # the chunk's tensors and docs are gone: hand their memory back (see `memory`)
    return outputs, errors


def _context(row: InputRow, questions: Dict[str, str]) -> Dict[str, Any]:
    if not questions:
        return row.context
    return {"questions": {**questions, **row.context.get("questions", {})}}


def _pipe(
    nlp: Language, inputs: List[Tuple[Any, Dict[str, Any]]], batch_size: int, n_process: int
) -> List[Union[Doc, str]]:
    """The Docs of a chunk. If the pipeline fails on the chunk, each doc is run
    alone, and those that fail alone become error rows (a string, the reason);
    if every doc fails, the pipeline is broken, not the data: it raises, unless
    they ran out of memory (a window too big for the device, see
    `models.oom`): that is the docs' size, so they are error rows too."""
    try:
        docs = nlp.pipe(inputs, as_tuples=True, batch_size=batch_size, n_process=n_process)
        return [doc for doc, _ in docs]
    except Exception as err:  # isolated below, per doc; re-raised if every doc fails
        first_error = err
    results: List[Union[Doc, str]] = []
    for item in inputs:
        try:
            results.append(next(iter(nlp.pipe([item], as_tuples=True)))[0])
        except Exception as err:  # the reason goes to the errors file
            reason = _reason(err)
            results.append(OOM_PREFIX + reason if _is_out_of_memory(err) else reason)
    if all(isinstance(result, str) for result in results) and not all(
        reason.startswith(OOM_PREFIX) for reason in results if isinstance(reason, str)
    ):
        raise first_error
    return results


def _reason(err: Exception) -> str:
    return f"the pipeline failed on this text: {type(err).__name__}: {err}"


def _is_out_of_memory(err: BaseException) -> bool:
    """An out-of-memory error (MemoryError, torch's OutOfMemoryError, or the
    typed error of a window that fits no batch), itself or as a cause."""
    seen: Set[int] = set()
    current: Optional[BaseException] = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or "OutOfMemory" in type(current).__name__:
            return True
        current = current.__cause__ or current.__context__
    return False
