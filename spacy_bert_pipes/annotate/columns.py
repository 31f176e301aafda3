"""The columns of a run's OUTPUT (`io.output.OutputColumns`), in order:

1. the id, under the input's id column name (`--id-column`, else "id");
2. the kept input columns (`--keep-columns`), in the order given;
3. those of "cats", "entities", "answers" and "route" that the pipeline can
   fill: a component declares that it assigns `doc.cats`, `doc.ents` or
   `doc._.answers` (spaCy's `assigns`, as `nlp.analyze_pipes` shows them), or
   sets them on a probe text; "route" when the probe text gets a `doc._.route`
   (an exclusive bert_textcat routes every doc);
4. "empty_text", then "vector" with `--vectors`.

`check_columns` refuses kept columns that would clash, before anything is
read; `with_columns` sets the run's columns from the loaded pipeline, which
every engine does before its first chunk, so that every part has them.
"""

from dataclasses import replace
from typing import Dict, Tuple

from spacy.language import Language

from ..io.output import (
    ANNOTATION_COLUMNS,
    RESERVED_COLUMNS,
    OutputColumns,
    VectorColumn,
    doc_to_row,
)
from ..io.readers import DEFAULT_ID_FIELD
from .types import AnnotateError, AnnotateOptions, AnnotateRun
from .vectors import PROBE_TEXT, vector_width

# What a component declares it assigns, for each annotation column.
ASSIGNS = {"cats": "doc.cats", "entities": "doc.ents", "answers": "doc._.answers"}


def check_columns(options: AnnotateOptions) -> None:
    """Raise an `AnnotateError` for kept columns OUTPUT cannot hold: an empty
    name, one given twice, the id column (every row starts with it), or the
    name of a column annotate writes; or an id column with such a name.

    options (AnnotateOptions): The settings.
    """
    id_name = options.id_column or DEFAULT_ID_FIELD
    if id_name != DEFAULT_ID_FIELD and id_name in RESERVED_COLUMNS:
        raise AnnotateError(
            f"--id-column {id_name!r}: annotate writes a column of that name; "
            "rename the input's column"
        )
    seen = set()
    for name in options.keep_columns:
        if not name.strip():
            raise AnnotateError(
                f"--keep-columns {','.join(options.keep_columns)!r}: an empty column name"
            )
        if name in seen:
            raise AnnotateError(f"--keep-columns: {name!r} is given twice")
        if name == id_name:
            raise AnnotateError(
                f"--keep-columns: {name!r} is the id column, which every output row "
                "starts with already"
            )
        if name in RESERVED_COLUMNS:
            raise AnnotateError(
                f"--keep-columns: {name!r} is the name of a column annotate writes "
                f"({', '.join(RESERVED_COLUMNS)}); rename the input's column"
            )
        seen.add(name)


def with_columns(run: AnnotateRun, nlp: Language) -> AnnotateRun:
    """The run with its columns (`run.columns`), from its settings and the
    loaded pipeline; with `options.vectors`, the vector column's width (an
    `AnnotateError` if the pipeline's docs have no vectors).

    run (AnnotateRun): The prepared run.
    nlp (Language): Its pipeline, loaded.
    RETURNS (AnnotateRun): The run, `columns` set.
    """
    options = run.options
    vectors = None
    if options.vectors:
        vectors = VectorColumn(vector_width(nlp), options.vectors_dtype)
    columns = OutputColumns(
        id=options.id_column or DEFAULT_ID_FIELD,
        kept=tuple(options.keep_columns),
        annotations=filled_annotations(nlp),
        vectors=vectors,
    )
    return replace(run, columns=columns)


def filled_annotations(nlp: Language) -> Tuple[str, ...]:
    """The annotation columns the pipeline can fill (see the module's docstring).

    nlp (Language): The pipeline.
    RETURNS (Tuple[str, ...]): Some of `ANNOTATION_COLUMNS`, in that order.
    """
    assigns = {attr for name in nlp.pipe_names for attr in nlp.get_pipe_meta(name).assigns}
    with nlp.memory_zone():
        probe = doc_to_row(nlp(PROBE_TEXT))
    filled: Dict[str, bool] = {
        column: attr in assigns or bool(probe[column]) for column, attr in ASSIGNS.items()
    }
    filled["route"] = probe["route"] is not None
    return tuple(column for column in ANNOTATION_COLUMNS if filled[column])
