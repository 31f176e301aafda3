"""The pool of `bert-pipes discover`: the rows of a `bert-pipes annotate` OUTPUT
with their routing decisions, texts and vectors, read with the package's
readers (`io.output_readers` for the rows, `similar.read_vectors` for the
`vector` column), each problem a `ConversionError` naming the file and row.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

import numpy

from ..io.errors import ConversionError
from ..io.output_readers import output_id_column, read_output_rows
from ..progress import progress_bar
from ..similar import embed_texts, has_vectors, read_vectors
from .labels import prototype_vectors

if TYPE_CHECKING:
    from spacy.language import Language

DECISIONS = ("routed", "out_of_scope", "ambiguous")
# Texts per call of `embed_texts` (one step of the progress bar).
EMBED_CHUNK = 256


@dataclass
class Pool:
    """The rows of an annotate OUTPUT, in order.

    path (str): Where they were read.
    ids (List[str]): Each row's id.
    locations (List[str]): Each row's place ("file:line" or "file:row n").
    decisions (List[str]): Each row's `route.decision`.
    labels (List[Optional[str]]): Each row's `route.label` (None: not routed).
    confidences (List[Optional[float]]): Each row's `route.confidence`, the
        router's in-scope confidence (None where the route has none).
    empty (List[bool]): Whether the row's text is empty or whitespace only.
    texts (List[Optional[str]]): Each row's text, where known.
    vectors (Optional[numpy.ndarray]): Each row's vector, when the OUTPUT has
        them (`annotate --vectors`). (n_rows, width)
    """

    path: str
    ids: List[str]
    locations: List[str]
    decisions: List[str]
    labels: List[Optional[str]]
    confidences: List[Optional[float]]
    empty: List[bool]
    texts: List[Optional[str]]
    vectors: Optional[numpy.ndarray] = None

    def pooled(self, decisions: Sequence[str], below: float = 0.0) -> List[int]:
        """The rows discover clusters: those whose decision is one of
        `decisions`, and with `below` > 0 also those whose confidence is below
        it, routed or not (a new intent worded like a known one is often routed,
        with a low confidence).

        RAISES (ConversionError): With `below`, a row without a confidence.
        """
        rows = []
        for row, (decision, conf) in enumerate(zip(self.decisions, self.confidences)):
            if below > 0 and conf is None:
                raise ConversionError(
                    self.locations[row], "route.confidence is missing: --below needs it"
                )
            if decision in decisions or (below > 0 and conf is not None and conf < below):
                rows.append(row)
        return rows


def read_pool(
    annotations: Union[str, Path],
    *,
    text_column: str = "text",
    vectors: bool = True,
    progress: bool = False,
) -> Pool:
    """Read an annotate OUTPUT (.jsonl, .csv, .parquet or a folder of Parquet
    shards) with its `route` column, its texts when it kept them
    (`--keep-columns text`) and, unless `vectors` is False, its vectors when it
    has them.

    RAISES (ConversionError): A row without an id or a route, a decision that
        is not one of DECISIONS, or a bad vector; the error names the row.
    """
    path = Path(annotations)
    ids: List[str] = []
    locations: List[str] = []
    decisions: List[str] = []
    labels: List[Optional[str]] = []
    confidences: List[Optional[float]] = []
    empty: List[bool] = []
    texts: List[Optional[str]] = []
    bar = progress_bar(None, 0, unit=" rows", desc=f"Reading {path.name}", disable=not progress)
    with bar:
        for where, row in read_output_rows(path):
            if row["id"] is None:
                raise ConversionError(where, "the row has no id")
            route = row["route"]
            if not isinstance(route, dict):
                raise ConversionError(
                    where,
                    f"no route ({route!r}): discover reads the OUTPUT of a pipeline that "
                    "routes (an exclusive bert_textcat, see docs/routing.md)",
                )
            decision = route.get("decision")
            if decision not in DECISIONS:
                raise ConversionError(
                    where, f"route.decision is {decision!r}, not one of {', '.join(DECISIONS)}"
                )
            conf = route.get("confidence")
            if conf is not None and (
                isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 <= conf <= 1
            ):
                raise ConversionError(
                    where, f"route.confidence is {conf!r}, not a number from 0 to 1"
                )
            text = row.get(text_column)
            text = text if isinstance(text, str) else None
            is_empty = row["empty_text"]
            if not isinstance(is_empty, bool):  # an OUTPUT written before the column
                is_empty = text is not None and not text.strip()
            ids.append(str(row["id"]))
            locations.append(where)
            decisions.append(str(decision))
            label = route.get("label")
            labels.append(str(label) if decision == "routed" and label is not None else None)
            confidences.append(None if conf is None else float(conf))
            empty.append(is_empty)
            texts.append(text)
            bar.update(1)
    if not ids:
        raise ConversionError(str(path), "the file has no rows")
    pool = Pool(str(path), ids, locations, decisions, labels, confidences, empty, texts)
    if vectors and has_vectors(path):
        collection = read_vectors(path, id_column=output_id_column(path), progress=progress)
        for number, (got, want) in enumerate(zip(collection.ids, ids)):
            if got != want:
                raise ConversionError(
                    locations[number], f"the vector's row has id {got!r}, the row {want!r}"
                )
        pool.vectors = collection.vectors
    return pool


def read_pool_texts(
    pool: Pool,
    rows: Sequence[int],
    input_path: Union[str, Path],
    *,
    text_column: str = "text",
    id_column: Optional[str] = None,
) -> None:
    """Fill in the texts of `rows` of the pool from the input it was annotated
    from (any input of `bert-pipes annotate`), matched by id.

    RAISES (ConversionError): A row whose id the input lacks, named by its
        place in the pool's file.
    """
    from ..io.readers import texts_by_id

    ids = [pool.ids[row] for row in rows]
    found = texts_by_id(Path(input_path), ids, text_column=text_column, id_column=id_column)
    for row in rows:
        if pool.ids[row] not in found:
            raise ConversionError(
                pool.locations[row],
                f"id {pool.ids[row]!r} has no text in {input_path} (is it the input "
                "these annotations were made from?)",
            )
        pool.texts[row] = found[pool.ids[row]]


def missing_text(pool: Pool, rows: Sequence[int]) -> Optional[int]:
    """The first of `rows` whose text the pool lacks, or None."""
    return next((row for row in rows if pool.texts[row] is None), None)


def embed_rows(
    nlp: "Language",
    texts: Sequence[str],
    *,
    component: Optional[str] = None,
    progress: bool = False,
) -> numpy.ndarray:
    """`doc.vector` of each text by the pipeline (`similar.embed_texts`: it
    needs a bert_vectors component), or with `component` the sentence vectors
    of that bert_textcat (`labels.prototype_vectors`), with a progress bar.
    (n_texts, width)

    RAISES (ValueError): The pipeline gives no contextual vectors.
    """
    parts: List[numpy.ndarray] = []
    bar = progress_bar(len(texts), 0, unit=" docs", desc="Embedding", disable=not progress)
    with bar:
        for start in range(0, len(texts), EMBED_CHUNK):
            chunk = texts[start : start + EMBED_CHUNK]
            if component is None:
                parts.append(embed_texts(nlp, chunk))
            else:
                parts.append(prototype_vectors(nlp, component, chunk))
            bar.update(len(parts[-1]))
    if not parts:
        return numpy.zeros((0, 0), dtype="float32")
    return numpy.concatenate(parts).astype("float32")


def checkpoint_embedder(checkpoint: Optional[str] = None) -> "Language":
    """A pipeline of an encoder checkpoint's own sentence vectors, nothing
    trained: a `bert_encoder` and a `bert_vectors` (`doc.vector`).

    checkpoint (Optional[str]): A name or folder, as `bert-pipes assemble
        --vectors` takes it; None: the bert_encoder's default.
    RAISES (OSError): The checkpoint cannot be loaded, named.
    """
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("bert_encoder")
    nlp.add_pipe("bert_vectors")
    if checkpoint is not None:
        loader = {"@misc": "spacy-bert-pipes.HFCheckpoint.v1", "source": checkpoint}
        nlp.config["initialize"]["components"]["bert_encoder"] = {"encoder_loader": loader}
    nlp.initialize()
    return nlp


# `discover --encoder base`: the checkpoint the pipeline's router started from
BASE_ENCODER = "base"


def base_checkpoint(nlp: "Language", component: Optional[str]) -> str:
    """The checkpoint a pipeline's router (`component`, a bert_textcat) was
    initialised from, as its config names it (its `encoder_loader`'s source,
    `paths.encoder` in the configs of this package).

    RAISES (ValueError): No such component, or its config names no checkpoint.
    """
    if component is None:
        raise ValueError(
            f"--encoder {BASE_ENCODER}: the pipeline has no bert_textcat with label "
            "prototypes whose checkpoint to take: give --encoder CHECKPOINT"
        )
    config = nlp.config.interpolate()
    loader = config.get("initialize", {}).get("components", {}).get(component, {})
    source = (loader.get("encoder_loader") or {}).get("source")
    if not isinstance(source, str) or not source.strip():
        raise ValueError(
            f"--encoder {BASE_ENCODER}: the config of '{component}' names no checkpoint "
            f"([initialize.components.{component}.encoder_loader] source): give --encoder "
            "CHECKPOINT"
        )
    return source


def has_bert_vectors(nlp: "Language") -> bool:
    """Whether the pipeline has a bert_vectors component (its docs have vectors)."""
    return "bert_vectors" in {nlp.get_pipe_meta(name).factory for name in nlp.pipe_names}
