"""The format `annotate` writes: its rows and their writers. The readers
that read any OUTPUT back are `output_readers.py`.

An output row (`doc_to_row`) holds, under these names:

    {"id": str, "cats": {label: probability} | None,
     "entities": [{"text", "label", "start", "end", "score"}, ...],
     "answers": doc._.answers or [],
     "route": doc._.route | None,
     "empty_text": bool}

and, from `annotate --keep-columns`, the values of the kept input columns.
An OUTPUT's columns (`OutputColumns`) are, in order: the id, under the
input's id column name ("ticket_id" stays "ticket_id"); the kept columns;
those of "cats", "entities", "answers" and "route" that the pipeline can
fill; "empty_text"; and with `annotate --vectors`, "vector" (`VectorColumn`):
a list of floats in JSONL, a fixed-size list of float32 (or float16) values
in Parquet; never in CSV.

JSONL writes one object per line. In CSV (with a header row) and Parquet the
annotations and "empty_text" are JSON text (Parquet: "empty_text" is a
boolean column), and a kept value is written as it is if it is a string,
empty (CSV) or null (Parquet) if it is null, else as its JSON text. A folder
OUTPUT holds Parquet shards. Rows that could not be annotated go to
`OUTPUT.errors.jsonl` (`error_row`, `write_records`); the run that finishes
OUTPUT times itself in `<OUTPUT stem>_time.json` (`timing_path_for`). The
writers write a chunk's rows (`write_rows`, a part without a CSV header) and
join parts into OUTPUT (`concatenate`, `link_shards`).

A new column is added here: to `OUTPUT_COLUMNS`, to `doc_to_row`, to
`OutputColumns.names`, and, if it is not a JSON value in CSV and Parquet,
to `_cells` and `_arrow_table` here and to `_parse_cells` in
`output_readers.py`.
"""

import csv
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from spacy.tokens import Doc, Span

from .rows import InputRow

OutputFormat = Literal["jsonl", "csv", "parquet"]
OUTPUT_SUFFIXES: Dict[str, OutputFormat] = {
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
# The columns a pipeline's annotations fill; an OUTPUT has those its pipeline can fill.
ANNOTATION_COLUMNS = ("cats", "entities", "answers", "route")
# True for an empty or whitespace-only text (annotated all the same).
EMPTY_TEXT_COLUMN = "empty_text"
# The keys of `doc_to_row` (and of the rows the readers give), in order.
OUTPUT_COLUMNS = ("id", *ANNOTATION_COLUMNS, EMPTY_TEXT_COLUMN)
# The value a reader gives a column that an OUTPUT omits (its pipeline cannot
# fill it) or that outputs written before it existed lack.
OMITTED_VALUES: Dict[str, Any] = {
    "cats": None,
    "entities": [],
    "answers": [],
    "route": None,
    EMPTY_TEXT_COLUMN: None,
}
# The optional column of `annotate --vectors`, last.
VECTOR_COLUMN = "vector"
# Names a kept column cannot have: the readers give these columns their meaning.
RESERVED_COLUMNS = (*OUTPUT_COLUMNS, VECTOR_COLUMN)
ERRORS_SUFFIX = ".errors.jsonl"
# The timing a finished run writes beside OUTPUT (`<stem>_time.json`), the name
# under which the report looks for a collection's wall time.
TIMING_SUFFIX = "_time.json"


@dataclass(frozen=True)
class VectorColumn:
    """The "vector" column of a run with vectors: every row's `doc.vector`,
    `width` values stored as `dtype`. A row holds them as Python floats, each
    exactly a value of `dtype`.

    width (int): The pipeline's doc vector width.
    dtype (str): "float32" or "float16".
    """

    width: int
    dtype: str = "float32"

    def arrow_type(self) -> Any:
        """The Parquet column's type: a fixed-size list of `dtype` values."""
        import pyarrow as pa

        item = pa.float16() if self.dtype == "float16" else pa.float32()
        return pa.list_(item, self.width)

    def json_text(self, values: List[float]) -> str:
        """The JSON list of a row's values, each with the fewest significant
        digits that always read back to the same `dtype` value (9 for
        float32, 5 for float16)."""
        spec = "%.5g" if self.dtype == "float16" else "%.9g"
        return "[" + ", ".join([spec % value for value in values]) + "]"


@dataclass(frozen=True)
class OutputColumns:
    """The columns of an OUTPUT (see `names`).

    id (str): The id column's name: the input's id column, else "id".
    kept (Tuple[str, ...]): The input columns carried into each row, in order.
    annotations (Tuple[str, ...]): Those of `ANNOTATION_COLUMNS` the pipeline
        can fill, in that order.
    vectors (Optional[VectorColumn]): The "vector" column, if any.
    """

    id: str = "id"
    kept: Tuple[str, ...] = ()
    annotations: Tuple[str, ...] = ANNOTATION_COLUMNS
    vectors: Optional[VectorColumn] = None

    def names(self) -> List[str]:
        """The column names, in order: the id, the kept columns, the
        annotations, "empty_text", and "vector" with vectors."""
        vector = [VECTOR_COLUMN] if self.vectors is not None else []
        return [self.id, *self.kept, *self.annotations, EMPTY_TEXT_COLUMN, *vector]

    def record(self, row: Dict[str, Any]) -> Dict[str, Any]:
        """A row (`doc_to_row` and the kept values) as the JSONL object written:
        its columns in order, the id under its name."""
        record = {self.id: row["id"]}
        for name in (*self.kept, *self.annotations, EMPTY_TEXT_COLUMN):
            record[name] = row[name]
        if self.vectors is not None:
            record[VECTOR_COLUMN] = row[VECTOR_COLUMN]
        return record


def is_sharded_output(path: Path) -> bool:
    """Whether OUTPUT is a folder of Parquet shards: it is an existing folder,
    or a path without a suffix."""
    return Path(path).is_dir() or not Path(path).suffix


def errors_path_for(output_path: Path) -> Path:
    """OUTPUT.errors.jsonl: one JSON object per row that could not be annotated."""
    return output_path.with_name(output_path.name + ERRORS_SUFFIX)


def timing_path_for(output_path: Path) -> Path:
    """`<OUTPUT stem>_time.json` beside OUTPUT ("out_time.json" for "out.jsonl"
    or a folder "out"): the wall time and docs of the run that finished it."""
    return output_path.with_name(output_path.stem + TIMING_SUFFIX)


# --- rows ----------------------------------------------------------------------------


def doc_to_row(doc: Doc, doc_id: Optional[str] = None) -> Dict[str, Any]:
    """The output row of an annotated Doc (keys in `OUTPUT_COLUMNS` order).

    doc (Doc): The annotated Doc.
    doc_id (Optional[str]): The row's id.
    RETURNS (Dict[str, Any]): "id"; "cats": {label: probability}, or None when
        no text classifier set `doc.cats`; "entities": one {"text", "label",
        "start", "end", "score"} per entity of `doc.ents` (character offsets,
        end exclusive; the score is `span._.bert_ner_score`, None when the
        entity has none); "answers": `doc._.answers` (see bert_qa), or [];
        "route": `doc._.route`, an exclusive bert_textcat's decision ({"label",
        "top", "confidence", "decision"}, docs/routing.md), or None;
        "empty_text": whether the text is empty or whitespace only.
    """
    has_score = Span.has_extension("bert_ner_score")
    entities = [
        {
            "text": ent.text,
            "label": ent.label_,
            "start": ent.start_char,
            "end": ent.end_char,
            "score": _plain(ent._.bert_ner_score) if has_score else None,
        }
        for ent in doc.ents
    ]
    answers = doc._.get("answers") if Doc.has_extension("answers") else None
    route = doc._.get("route") if Doc.has_extension("route") else None
    return {
        "id": doc_id,
        "cats": {label: float(score) for label, score in doc.cats.items()} or None,
        "entities": entities,
        "answers": _plain(answers or []),
        "route": _plain(route) if route else None,
        EMPTY_TEXT_COLUMN: not doc.text.strip(),
    }


def _plain(value: Any) -> Any:
    """Plain Python values for JSON: numpy scalars become floats and ints."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def error_row(row: InputRow) -> Dict[str, Any]:
    """The errors-file record of an error row."""
    return {"id": row.id, "row": row.number, "source": row.source, "reason": row.error}


# --- writers -------------------------------------------------------------------------


def write_rows(
    path: Path, rows: List[Dict[str, Any]], fmt: str, columns: OutputColumns = OutputColumns()
) -> None:
    """A part: JSONL lines, CSV rows without the header, or a Parquet file.

    path (Path): The file to write.
    rows (List[Dict[str, Any]]): Output rows (`doc_to_row`, with the values of
        the kept columns and the vector, if any).
    fmt (str): "jsonl", "csv" or "parquet".
    columns (OutputColumns): The columns to write (no vector in CSV).
    """
    if columns.vectors is not None and fmt == "csv":
        raise ValueError("CSV output has no vector column: write JSONL or Parquet")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(_arrow_table(rows, columns), path, use_dictionary=_dictionary(columns))
        return
    with path.open("wb") as file_:
        if fmt == "jsonl":
            file_.writelines(_json_line(columns.record(row), columns.vectors) for row in rows)
        else:
            file_.write(_csv_lines([_cells(row, columns) for row in rows]))


def write_records(path: Path, records: List[Dict[str, Any]]) -> None:
    """JSON objects, one a line, as they are (error records: see `error_row`)."""
    with path.open("wb") as file_:
        file_.writelines(_json_line(record) for record in records)


def concatenate(
    parts: List[Path], path: Path, fmt: str, columns: Optional[OutputColumns] = None
) -> None:
    """Join parts (see `write_rows`) into one file: a CSV gets its header row,
    a Parquet file one row group per non-empty part.

    parts (List[Path]): The parts, in order.
    path (Path): The file to write.
    fmt (str): "jsonl", "csv" or "parquet".
    columns (Optional[OutputColumns]): The parts' columns (CSV and Parquet);
        None for JSONL records (an errors file).
    """
    if fmt in ("csv", "parquet") and columns is None:
        raise ValueError(f"joining {fmt} parts needs their columns")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert columns is not None
        schema = _arrow_table([], columns).schema
        with pq.ParquetWriter(path, schema, use_dictionary=_dictionary(columns)) as writer:
            for part in parts:
                table = pq.read_table(part)
                if table.num_rows:
                    writer.write_table(table)
        return
    with path.open("wb") as out:
        if fmt == "csv":
            assert columns is not None
            out.write(_csv_lines([columns.names()]))
        for part in parts:
            with part.open("rb") as file_:
                shutil.copyfileobj(file_, out)


def link_shards(folder: Path, parts: List[Path]) -> None:
    """Make a folder of Parquet shards from the Parquet parts, one per part,
    under their names: hard links, or copies across file systems.

    folder (Path): The folder to create.
    parts (List[Path]): The Parquet parts.
    """
    folder.mkdir()
    for part in parts:
        try:
            os.link(part, folder / part.name)
        except OSError:  # another file system, or no hard links
            shutil.copyfile(part, folder / part.name)


def _dictionary(columns: OutputColumns) -> Any:
    """Parquet's dictionary encoding, for the text columns only: a vector's
    values rarely repeat, and a dictionary page of them made a float32 column
    40% larger (2,165 against 1,542 bytes a row of 384 values)."""
    if columns.vectors is None:
        return True
    return [name for name in columns.names() if name != VECTOR_COLUMN]


def _json_line(record: Dict[str, Any], vectors: Optional[VectorColumn] = None) -> bytes:
    if vectors is None or VECTOR_COLUMN not in record:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf8")
    # The vector comes last, its values written with `VectorColumn.json_text`.
    rest = {k: v for k, v in record.items() if k != VECTOR_COLUMN}
    text = json.dumps(rest, ensure_ascii=False)[:-1]
    vector = vectors.json_text(record[VECTOR_COLUMN])
    return f'{text}, "{VECTOR_COLUMN}": {vector}}}\n'.encode()


def _kept_cell(value: Any) -> Optional[str]:
    """A kept value in CSV and Parquet: a string as it is, None as None, else
    its JSON text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _cells(row: Dict[str, Any], columns: OutputColumns) -> List[str]:
    """A row for CSV: the id, the kept values (a null one empty), then the
    annotations and "empty_text" as JSON text ("null" for the cats of a
    doc no text classifier scored)."""
    kept = [_kept_cell(row[name]) or "" for name in columns.kept]
    annotations = [
        json.dumps(row[name], ensure_ascii=False)
        for name in (*columns.annotations, EMPTY_TEXT_COLUMN)
    ]
    return [row["id"], *kept, *annotations]


def _csv_lines(records: Sequence[Sequence[str]]) -> bytes:
    buffer = io.StringIO()
    minimal = csv.writer(buffer, lineterminator="\n")
    # csv quotes a cell with "\n" (the line terminator) but not one with a bare
    # "\r", which a reader takes for a line end: such a record is quoted whole
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for record in records:
        (quoted if any("\r" in cell for cell in record) else minimal).writerow(record)
    return buffer.getvalue().encode("utf8")


def _arrow_table(rows: List[Dict[str, Any]], columns: OutputColumns) -> Any:
    """A part as an Arrow table: the id and kept values as strings, the
    annotations as JSON text, "empty_text" as booleans, the vector as a
    fixed-size list."""
    import numpy
    import pyarrow as pa

    fields: List[Tuple[str, Any]] = [(columns.id, pa.string())]
    arrays: List[Any] = [[row["id"] for row in rows]]
    for name in columns.kept:
        fields.append((name, pa.string()))
        arrays.append([_kept_cell(row[name]) for row in rows])
    for name in columns.annotations:
        fields.append((name, pa.string()))
        arrays.append([json.dumps(row[name], ensure_ascii=False) for row in rows])
    fields.append((EMPTY_TEXT_COLUMN, pa.bool_()))
    arrays.append([row[EMPTY_TEXT_COLUMN] for row in rows])
    vectors = columns.vectors
    if vectors is not None:
        values = numpy.asarray([row[VECTOR_COLUMN] for row in rows], dtype=vectors.dtype).reshape(
            -1
        )
        fields.append((VECTOR_COLUMN, vectors.arrow_type()))
        arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values), vectors.width))
    return pa.table(arrays, schema=pa.schema(fields))
