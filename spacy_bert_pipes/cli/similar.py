"""`bert-pipes similar VECTORS QUERY`: the nearest rows of a vectors file;
`bert-pipes similar-collection ANNOTATIONS`: the near-duplicates and most
similar rows of a whole annotated collection."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from wasabi import Printer

from ..io.errors import ConversionError
from ..similar import (
    SAVED_KINDS,
    IndexKind,
    Neighbour,
    VectorCollection,
    VectorIndex,
    embed_texts,
    load_saved_index,
    read_labels,
    read_vectors,
    saved_index_paths,
    similar_collection,
    write_similar,
)
from .common import app, fail, text_column_option

if TYPE_CHECKING:
    from spacy.language import Language


@app.command("similar")
def similar_cli(
    vectors: Path = typer.Argument(
        ...,
        help="A .parquet or .jsonl file with an 'id' and a 'vector' column "
        "(as `bert-pipes annotate --vectors` writes)",
        metavar="VECTORS",
    ),
    query: Optional[str] = typer.Argument(
        None, help="A text to look for (embedded with --pipeline)", metavar="QUERY"
    ),
    pipeline: Optional[str] = typer.Option(
        None,
        "--pipeline",
        "-p",
        help="The pipeline that embeds QUERY: one with a bert_vectors component, "
        "the same encoder and pooling as the vectors",
        show_default=False,
    ),
    row_id: Optional[str] = typer.Option(
        None, "--id", help="Look for the rows nearest to this row of VECTORS instead of a text"
    ),
    k: int = typer.Option(10, "--top-k", "-k", min=1, help="How many neighbours to print"),
    index_kind: str = typer.Option(
        "flat", "--index", help="flat (exact) or hnsw (approximate, for large collections)"
    ),
    save_index: bool = typer.Option(
        True,
        "--save-index/--no-save-index",
        help="Save a newly built hnsw index beside VECTORS (VECTORS.hnsw.faiss and "
        "VECTORS.hnsw.faiss.json) for the next call to load",
    ),
    id_column: str = typer.Option("id", "--id-column", help="The column holding the ids"),
    vector_column: str = typer.Option(
        "vector", "--vector-column", help="The column holding the vectors"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table"),
) -> None:
    """Print the k rows of VECTORS most similar (cosine) to QUERY or to row --id.

    An hnsw index saved beside VECTORS by an earlier call is loaded when it was
    built from the same ids and vectors; otherwise it is built (and saved,
    unless --no-save-index). A flat index is always built: that is quicker.
    """
    msg = Printer(no_print=as_json)
    if (query is None) == (row_id is None):
        fail("Give either a QUERY text or --id ROW_ID (not both)")
    if query is not None and pipeline is None:
        fail("A QUERY text needs --pipeline to embed it (or use --id ROW_ID)")
    if index_kind not in ("flat", "hnsw"):
        fail(f"--index must be flat or hnsw, not {index_kind!r}")
    # The pipeline first: a missing or damaged one fails before VECTORS is read.
    nlp = None if query is None else _load_pipeline(str(pipeline))
    try:
        collection = read_vectors(
            vectors, id_column=id_column, vector_column=vector_column, progress=not as_json
        )
    except ConversionError as err:
        fail(str(err))
    kind: IndexKind = "hnsw" if index_kind == "hnsw" else "flat"
    index = _open_index(collection, kind, save_index, msg, progress=not as_json)
    exclude: Optional[List[int]] = None
    if row_id is not None:
        try:
            row = index.row(row_id)
        except KeyError as err:
            fail(str(err.args[0]))
        query_vectors = collection.vectors[row : row + 1]
        exclude = [row]
        title = f"Nearest to id {row_id!r}"
    else:
        assert nlp is not None  # loaded above for the QUERY
        try:
            query_vectors = embed_texts(nlp, [str(query)])
        except ValueError as err:
            fail(f"{pipeline}: {err}")
        title = f"Nearest to {query!r}"
    try:
        hits = index.search(query_vectors, k, exclude=exclude)[0]
    except ValueError as err:
        fail(str(err))
    if as_json:
        for rank, hit in enumerate(hits, 1):
            print(json.dumps({"rank": rank, "id": hit.id, "cosine": round(hit.cosine, 6)}))
        return
    msg.table(_rows(hits), header=("rank", "id", "cosine"), aligns=("r", "l", "r"), title=title)


def _load_pipeline(pipeline: str) -> "Language":
    """The pipeline that embeds a QUERY, or one line saying why it cannot load."""
    from ..loading import PipelineLoadError, load_pipeline

    try:
        return load_pipeline(pipeline)
    except PipelineLoadError as err:  # missing, foreign or damaged: one line
        fail(str(err))
    except OSError as err:  # a file in it that cannot be read
        fail(f"{pipeline}: {err}")


def _open_index(
    collection: VectorCollection, kind: IndexKind, save: bool, msg: Printer, progress: bool
) -> VectorIndex:
    """The saved index when it matches, else a new one (saved when asked)."""
    if kind not in SAVED_KINDS:
        return VectorIndex(collection, kind=kind, progress=progress)
    index = load_saved_index(collection, kind=kind)
    if index is not None:
        msg.info(f"Loaded the saved {kind} index {saved_index_paths(collection.path, kind)[0]}")
        return index
    index = VectorIndex(collection, kind=kind, progress=progress)
    if save:
        try:
            msg.info(f"Saved the {kind} index to {index.save()}")
        except OSError as err:
            # the search still works: only the next call loses the shortcut
            typer.secho(f"Warning: the index was not saved: {err}", fg="yellow", err=True)
    return index


def _rows(hits: List[Neighbour]) -> List[tuple]:
    return [(rank, hit.id, f"{hit.cosine:.4f}") for rank, hit in enumerate(hits, 1)]


@app.command("similar-collection")
def similar_collection_cli(
    annotations: Path = typer.Argument(
        ...,
        help="An OUTPUT of `bert-pipes annotate --vectors` (.jsonl, .parquet or a folder "
        "of Parquet shards)",
        metavar="ANNOTATIONS",
        exists=True,
    ),
    texts: Optional[Path] = typer.Option(
        None,
        "--texts",
        help="The input ANNOTATIONS was annotated from: the pairs get their texts (by id)",
        exists=True,
        show_default=False,
    ),
    text_column: str = text_column_option(),
    id_column: Optional[str] = typer.Option(
        None, "--id-column", help="The id column of --texts (default: 'id' if it has one)"
    ),
    intents: Optional[Path] = typer.Option(
        None,
        "--intents",
        help="The labels a row's intent (its most probable category) is chosen from: a JSON "
        "list or one label a line (default: all categories)",
        exists=True,
        dir_okay=False,
        show_default=False,
    ),
    threshold: float = typer.Option(
        0.95, "--threshold", min=-1.0, max=1.0, help="The cosine of a near-duplicate pair"
    ),
    k: int = typer.Option(5, "--top-k", "-k", min=1, help="Most similar rows kept per row"),
    output_dir: Optional[Path] = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Where to write (default: beside ANNOTATIONS)",
        file_okay=False,
        show_default=False,
    ),
) -> None:
    """Find the near-duplicate pairs and each row's most similar rows in ANNOTATIONS.

    An exact search (faiss, cosine) of every row against all others. Writes,
    for ANNOTATIONS <stem>.jsonl: <stem>_duplicates.jsonl (every pair with a
    cosine >= --threshold, the most similar first, with ids, predicted intents
    and, with --texts, texts), <stem>_neighbours.jsonl (each row's --top-k most
    similar other rows with their cosines) and <stem>_similar.json (the
    counts, which `bert-pipes report --annotations` shows).
    """
    try:
        labels = read_labels(intents) if intents is not None else None
        result = similar_collection(
            annotations,
            texts=texts,
            intent_labels=labels,
            k=k,
            threshold=threshold,
            text_column=text_column,
            id_column=id_column,
            progress=True,
        )
        paths = write_similar(result, output_dir)
    except (ConversionError, ValueError, ImportError) as err:
        fail(str(err))
    summary = result.summary()
    typer.echo(
        f"{summary['rows']} rows ({summary['rows_without_vector']} without a vector): "
        f"{summary['pairs']} near-duplicate pairs (cosine >= {threshold}) among "
        f"{summary['rows_in_pairs']} rows"
    )
    typer.secho(f"Wrote {', '.join(map(str, paths))}", fg="green")
