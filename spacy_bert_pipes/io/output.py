"""The format `annotate` writes: its rows, their writers and their readers.

An output row (`doc_to_row`) has the columns `OUTPUT_COLUMNS`:

    {"id": str, "cats": {label: probability} | None,
     "entities": [{"text", "label", "start", "end", "score"}, ...],
     "answers": doc._.answers or [],
     "route": doc._.route | None}

JSONL writes one object per line; CSV (with a header row) and Parquet (every
column a string) hold the last four as JSON text. A folder OUTPUT holds
Parquet shards. With `annotate --vectors`, a fifth column, "vector", holds
each doc's `doc.vector` (`VectorColumn`): a list of floats in JSONL, a
fixed-size list of float32 (or float16) values in Parquet; never in CSV.
Rows that could not be annotated go to `OUTPUT.errors.jsonl`
(`error_row`). The writers write a chunk's rows (`write_rows`, a part without
a CSV header) and join parts into OUTPUT (`concatenate`, `link_shards`); the
readers (`read_output_rows`, `read_error_records`) read any OUTPUT back,
raising a `ConversionError` that names the file and line (or row) of a row
that is not in this format.

A new column is added here: to `OUTPUT_COLUMNS`, to `doc_to_row`, and, if it
is not a JSON value in CSV and Parquet, to `_cells` and `_parse_cells`.
"""

import csv
import io
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple

from spacy.tokens import Doc, Span

from .errors import ConversionError
from .rows import InputRow

OutputFormat = Literal["jsonl", "csv", "parquet"]
OUTPUT_SUFFIXES: Dict[str, OutputFormat] = {
    ".jsonl": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
# The output columns, in order; in CSV and Parquet the last four hold JSON text.
OUTPUT_COLUMNS = ("id", "cats", "entities", "answers", "route")
# Columns that outputs written before they existed lack: read back as None.
LATER_COLUMNS = ("route",)
REQUIRED_COLUMNS = tuple(c for c in OUTPUT_COLUMNS if c not in LATER_COLUMNS)
# The optional column of `annotate --vectors`, after OUTPUT_COLUMNS.
VECTOR_COLUMN = "vector"
ERRORS_SUFFIX = ".errors.jsonl"
# Output cells can be long (a long doc's entities): past the csv module's default.
CSV_FIELD_LIMIT = 2**31 - 1
PARQUET_BATCH_ROWS = 1024


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


def is_sharded_output(path: Path) -> bool:
    """Whether OUTPUT is a folder of Parquet shards: it is an existing folder,
    or a path without a suffix."""
    return Path(path).is_dir() or not Path(path).suffix


def errors_path_for(output_path: Path) -> Path:
    """OUTPUT.errors.jsonl: one JSON object per row that could not be annotated."""
    return output_path.with_name(output_path.name + ERRORS_SUFFIX)


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
        "top", "confidence", "decision"}, docs/routing.md), or None.
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
    path: Path, rows: List[Dict[str, Any]], fmt: str, vectors: Optional[VectorColumn] = None
) -> None:
    """A part: JSONL lines, CSV rows without the header, or a Parquet file.

    path (Path): The file to write.
    rows (List[Dict[str, Any]]): Output rows, or error records for "jsonl".
    fmt (str): "jsonl", "csv" or "parquet".
    vectors (Optional[VectorColumn]): The rows' "vector" column, if they have
        one (not in CSV).
    """
    if vectors is not None and fmt == "csv":
        raise ValueError("CSV output has no vector column: write JSONL or Parquet")
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(_arrow_table(rows, vectors), path, use_dictionary=_dictionary(vectors))
        return
    with path.open("wb") as file_:
        if fmt == "jsonl":
            file_.writelines(_json_line(row, vectors) for row in rows)
        else:
            file_.write(_csv_lines([_cells(row) for row in rows]))


def concatenate(
    parts: List[Path], path: Path, fmt: str, vectors: Optional[VectorColumn] = None
) -> None:
    """Join parts (see `write_rows`) into one file: a CSV gets its header row,
    a Parquet file one row group per non-empty part.

    parts (List[Path]): The parts, in order.
    path (Path): The file to write.
    fmt (str): "jsonl", "csv" or "parquet".
    vectors (Optional[VectorColumn]): The parts' "vector" column, if any.
    """
    if fmt == "parquet":
        import pyarrow.parquet as pq

        schema = _arrow_table([], vectors).schema
        with pq.ParquetWriter(path, schema, use_dictionary=_dictionary(vectors)) as writer:
            for part in parts:
                table = pq.read_table(part)
                if table.num_rows:
                    writer.write_table(table)
        return
    with path.open("wb") as out:
        if fmt == "csv":
            out.write(_csv_lines([list(OUTPUT_COLUMNS)]))
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


def _dictionary(vectors: Optional[VectorColumn]) -> Any:
    """Parquet's dictionary encoding, for the text columns only: a vector's
    values rarely repeat, and a dictionary page of them made a float32 column
    40% larger (2,165 against 1,542 bytes a row of 384 values)."""
    return True if vectors is None else list(OUTPUT_COLUMNS)


def _json_line(record: Dict[str, Any], vectors: Optional[VectorColumn] = None) -> bytes:
    if vectors is None or VECTOR_COLUMN not in record:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf8")
    # The vector comes last, its values written with `VectorColumn.json_text`.
    rest = {k: v for k, v in record.items() if k != VECTOR_COLUMN}
    text = json.dumps(rest, ensure_ascii=False)[:-1]
    vector = vectors.json_text(record[VECTOR_COLUMN])
    return f'{text}, "{VECTOR_COLUMN}": {vector}}}\n'.encode()


def _cells(row: Dict[str, Any]) -> List[str]:
    """A row for CSV and Parquet: the id, then the other fields as JSON text
    ("null" for the cats of a pipeline without a text classifier)."""
    return [row["id"]] + [json.dumps(row[c], ensure_ascii=False) for c in OUTPUT_COLUMNS[1:]]


def _csv_lines(records: List[List[str]]) -> bytes:
    buffer = io.StringIO()
    minimal = csv.writer(buffer, lineterminator="\n")
    # csv quotes a cell with "\n" (the line terminator) but not one with a bare
    # "\r", which a reader takes for a line end: such a record is quoted whole
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for record in records:
        (quoted if any("\r" in cell for cell in record) else minimal).writerow(record)
    return buffer.getvalue().encode("utf8")


def _arrow_table(rows: List[Dict[str, Any]], vectors: Optional[VectorColumn] = None) -> Any:
    import numpy
    import pyarrow as pa

    fields = [(c, pa.string()) for c in OUTPUT_COLUMNS]
    cells = [_cells(row) for row in rows]
    columns: List[Any] = [[r[i] for r in cells] for i in range(len(OUTPUT_COLUMNS))]
    if vectors is not None:
        values = numpy.asarray([row[VECTOR_COLUMN] for row in rows], dtype=vectors.dtype).reshape(
            -1
        )
        fields.append((VECTOR_COLUMN, vectors.arrow_type()))
        columns.append(pa.FixedSizeListArray.from_arrays(pa.array(values), vectors.width))
    return pa.table(columns, schema=pa.schema(fields))


# --- readers -------------------------------------------------------------------------


def read_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Stream the rows of an OUTPUT, with CSV and Parquet cells parsed from JSON.

    path (Path): A .jsonl, .csv or .parquet file, or a folder of Parquet shards.
    RETURNS (Iterator[Tuple[str, Dict[str, Any]]]): ("file:line" or "file:row
        n", row) per row, in order. A row's values are not checked beyond the
        JSON of its cells; a row without "id" is passed on as it is.
    """
    path = Path(path)
    if is_sharded_output(path):
        return _parquet_output_rows(path, sorted(path.rglob("*.parquet")))
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _jsonl_output_rows(path)
    if suffix == ".csv":
        return _csv_output_rows(path)
    if suffix == ".parquet":
        return _parquet_output_rows(path, [path])
    raise ConversionError(
        str(path),
        "not an output of bert-pipes annotate (expected .jsonl, .csv, "
        ".parquet or a folder of Parquet shards)",
    )


def read_error_records(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Stream the records of an OUTPUT.errors.jsonl file.

    path (Path): The errors file.
    RETURNS (Iterator[Tuple[str, Dict[str, Any]]]): ("file:line", record) per
        non-blank line, each an object with a "reason".
    """
    for where, record in read_jsonl_records(path):
        if not isinstance(record, dict) or "reason" not in record:
            raise ConversionError(where, "not an error record of bert-pipes annotate")
        yield where, record


def read_jsonl_records(path: Path) -> Iterator[Tuple[str, Any]]:
    """("file:line", record) per non-blank line of a JSONL file, one at a time."""
    try:
        with path.open("rb") as file_:
            for number, line in enumerate(file_, 1):
                if line.strip():
                    try:
                        yield f"{path}:{number}", json.loads(line)
                    except ValueError as err:  # not JSON, or not UTF-8
                        raise ConversionError(f"{path}:{number}", f"not JSON ({err})") from err
    except OSError as err:
        raise ConversionError(str(path), str(err)) from err


def _jsonl_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    for where, record in read_jsonl_records(path):
        if not isinstance(record, dict):
            raise ConversionError(where, f"not a JSON object: {_show(record)}")
        missing = [c for c in REQUIRED_COLUMNS if c not in record]
        for column in LATER_COLUMNS:
            record.setdefault(column, None)
        if missing:
            raise ConversionError(
                where,
                f"a row without {', '.join(map(json.dumps, missing))} (not an output "
                f"of bert-pipes annotate, whose rows have {', '.join(OUTPUT_COLUMNS)})",
            )
        yield where, record


def _csv_output_rows(path: Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    try:
        with path.open(encoding="utf8", newline="") as file_:
            reader = csv.reader(file_)
            header: Optional[List[str]] = None
            while True:
                number = reader.line_num + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    break
                except (csv.Error, UnicodeDecodeError) as err:
                    raise ConversionError(f"{path}:{number}", str(err)) from err
                if not cells:
                    continue
                where = f"{path}:{number}"
                if header is None:
                    header = cells
                    _check_columns(where, header)
                    continue
                if len(cells) != len(header):
                    raise ConversionError(
                        where, f"{len(cells)} cells, the header has {len(header)}"
                    )
                yield where, _parse_cells(dict(zip(header, cells)), where)
    except OSError as err:
        raise ConversionError(str(path), str(err)) from err


def _parquet_output_rows(path: Path, shards: List[Path]) -> Iterator[Tuple[str, Dict[str, Any]]]:
    import pyarrow
    import pyarrow.parquet as pq

    if not shards:
        raise ConversionError(
            str(path), "no .parquet files (expected the shards of bert-pipes annotate)"
        )
    for shard in shards:
        try:
            file_ = pq.ParquetFile(shard)
            _check_columns(str(shard), file_.schema_arrow.names)
            number = 0
            batches = file_.iter_batches(
                batch_size=PARQUET_BATCH_ROWS,
                columns=[c for c in OUTPUT_COLUMNS if c in file_.schema_arrow.names],
            )
            for batch in batches:
                for row in batch.to_pylist():
                    where = f"{shard}:row {number}"
                    number += 1
                    yield where, _parse_cells(row, where)
        except (pyarrow.ArrowException, OSError) as err:
            raise ConversionError(str(shard), f"not a readable Parquet file ({err})") from err


def _check_columns(where: str, names: List[str]) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ConversionError(
            where,
            f"no column {', '.join(map(repr, missing))}: not an output of bert-pipes "
            f"annotate, whose columns are {', '.join(OUTPUT_COLUMNS)} "
            f"(found {', '.join(map(repr, names))})",
        )


def _parse_cells(row: Dict[str, Any], where: str) -> Dict[str, Any]:
    """A CSV or Parquet row with its JSON text cells (cats, entities, answers,
    route) parsed."""
    if row["id"] is None:
        return row  # the caller says what is wrong
    for column in LATER_COLUMNS:
        row.setdefault(column, "null")
    for column in OUTPUT_COLUMNS[1:]:
        try:
            row[column] = json.loads(row[column])
        except (TypeError, ValueError) as err:
            raise ConversionError(
                where, f"{column} is not JSON text ({err}): {_show(row[column])}"
            ) from err
    return row


def _show(value: Any, n: int = 80) -> str:
    """A value in a message: its JSON on one line, cut to n characters."""
    text = " ".join(json.dumps(value, ensure_ascii=False, default=str).split())
    return text if len(text) <= n else text[: n - 1] + "…"
