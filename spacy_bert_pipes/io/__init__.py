"""The collection formats: reading inputs, writing and reading back outputs.

errors.py    `ConversionError(location, message)`: the error for bad data.
rows.py      `InputRow` and the checks of a row's raw values.
readers.py   the input readers: CSV, JSONL, Parquet, folders of .txt or .parquet.
output.py    the output format of `annotate`: its rows and writers.
output_readers.py  the readers of that format: any OUTPUT and its errors file back.
durable.py   atomic, fsynced writes of files and folders (one policy for all).
docbins.py   `codecs_looked_up_once()`, `read_docs`, `write_docs` and the reader
             spacy-bert-pipes.Corpus.v1: .spacy files with user data read and
             written fast.
"""

from .errors import ConversionError
from .output import (
    OUTPUT_COLUMNS,
    OutputColumns,
    OutputFormat,
    doc_to_row,
    error_row,
    errors_path_for,
    is_sharded_output,
)
from .output_readers import read_error_records, read_output_rows
from .readers import InputFormat, input_format_for, read_input, read_questions_file
from .rows import InputRow

__all__ = [
    "OUTPUT_COLUMNS",
    "ConversionError",
    "InputFormat",
    "InputRow",
    "OutputColumns",
    "OutputFormat",
    "doc_to_row",
    "error_row",
    "errors_path_for",
    "input_format_for",
    "is_sharded_output",
    "read_error_records",
    "read_input",
    "read_output_rows",
    "read_questions_file",
]
