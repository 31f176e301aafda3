"""`bert-pipes discover ANNOTATIONS OUTPUT_DIR`: the docs a router did not
route, clustered into candidate new intents for a person to review."""

from pathlib import Path
from typing import Optional

import typer

from ..discover import (
    DEFAULT_CLUSTERS,
    N_REPRESENTATIVES,
    NEAR_COSINE,
    REVIEW,
    discover,
    write_discovery,
)
from ..discover.cluster import parse_clusters
from ..io.errors import ConversionError
from .common import app, fail, text_column_option


@app.command("discover")
def discover_cli(
    annotations: Path = typer.Argument(
        ...,
        help="An OUTPUT of `bert-pipes annotate` by a pipeline that routes (with a 'route' "
        "column): .jsonl, .csv, .parquet or a folder of Parquet shards",
        metavar="ANNOTATIONS",
        exists=True,
    ),
    output_dir: Path = typer.Argument(
        ..., help="The folder to write the files into", metavar="OUTPUT_DIR", file_okay=False
    ),
    pipeline: Optional[str] = typer.Option(
        None,
        "--pipeline",
        "-p",
        help="The pipeline: it embeds the docs when ANNOTATIONS has no vectors (a "
        "bert_vectors component), and its bert_textcat's label prototypes are the known labels",
        show_default=False,
    ),
    texts: Optional[Path] = typer.Option(
        None,
        "--texts",
        help="The input ANNOTATIONS was annotated from, for texts it did not keep (by id)",
        exists=True,
        show_default=False,
    ),
    text_column: str = text_column_option(),
    id_column: Optional[str] = typer.Option(
        None, "--id-column", help="The id column of --texts (default: 'id' if it has one)"
    ),
    clusters: str = typer.Option(
        DEFAULT_CLUSTERS,
        "--clusters",
        help="'auto': k-means, K from the data (the silhouette on a sample); 'density': as "
        "many as the density holds, scattered docs left out (HDBSCAN*); or K, a number",
    ),
    min_cluster_size: int = typer.Option(
        5, "--min-cluster-size", min=2, help="The fewest docs of a cluster"
    ),
    include_ambiguous: bool = typer.Option(
        False, "--include-ambiguous", help="Pool the 'ambiguous' docs with the 'out_of_scope' ones"
    ),
    below: float = typer.Option(
        0.0,
        "--below",
        min=0.0,
        max=1.0,
        help="Also pool the docs routed with an in-scope confidence below this: a new "
        "intent worded like a known one is often routed, with a low confidence (0: off)",
    ),
    encoder: Optional[str] = typer.Option(
        None,
        "--encoder",
        help="Cluster on this encoder checkpoint's own sentence vectors (nothing trained; a "
        "name or folder; 'base': the one the --pipeline's router was initialised from): a "
        "router's fine-tuning pulls a new intent's docs towards the known intent they resemble",
        show_default=False,
    ),
    n_representatives: int = typer.Option(
        N_REPRESENTATIVES,
        "--representatives",
        min=1,
        help="The texts shown per cluster; accepted clusters get them as examples",
    ),
    near_cosine: float = typer.Option(
        NEAR_COSINE,
        "--near-cosine",
        min=-1.0,
        max=1.0,
        help="A cluster whose centroid has this cosine with a label is 'near' it, "
        "else a 'new intent'",
    ),
    keep_loose: bool = typer.Option(
        False,
        "--keep-loose",
        help="When the silhouette curve is flat, keep the loose clusters (silhouette below "
        "0.1: scattered requests) in the review instead of leaving their docs in none",
    ),
    seed: int = typer.Option(0, "--seed", help="The seed of k-means and of the sampled docs"),
    review: str = typer.Option(
        REVIEW, "--review", help="The review file's name in OUTPUT_DIR: .jsonl, or .csv"
    ),
    picture: bool = typer.Option(
        True, "--picture/--no-picture", help="Draw clusters.png (needs matplotlib)"
    ),
) -> None:
    """Cluster the docs ANNOTATIONS did not route and describe each cluster.

    Writes into OUTPUT_DIR the review file (one row per cluster: size, name,
    keywords, nearest label, verdict, representatives and an empty action to
    fill in), assignments.jsonl (each pooled doc's cluster, -1: none),
    summary.json and clusters.png. See docs/discover.md.
    """
    try:
        parse_clusters(clusters)  # a bad --clusters, before the pool is read and embedded
    except ValueError as err:
        fail(str(err))
    nlp = None
    if pipeline is not None:
        from ..loading import PipelineLoadError, load_pipeline

        try:
            nlp = load_pipeline(pipeline)
        except PipelineLoadError as err:
            fail(str(err))
        except OSError as err:
            fail(f"{pipeline}: {err}")
    try:
        result = discover(
            annotations,
            nlp=nlp,
            texts=texts,
            include_ambiguous=include_ambiguous,
            below=below,
            encoder=encoder,
            clusters=clusters,
            min_cluster_size=min_cluster_size,
            seed=seed,
            near_cosine=near_cosine,
            n_representatives=n_representatives,
            keep_loose=keep_loose,
            text_column=text_column,
            id_column=id_column,
            progress=True,
        )
        paths = write_discovery(result, output_dir, review_name=review, picture=picture)
    except (ConversionError, ValueError, ImportError, OSError) as err:
        fail(str(err))
    summary = result.summary
    routed = f" ({summary['pooled_routed']} routed below confidence {below})" if below > 0 else ""
    left_out = (
        f" ({summary['loose_docs_left_out']} of them in {summary['loose_left_out']} loose "
        "clusters left out)"
        if summary["loose_left_out"]
        else ""
    )
    typer.echo(
        f"{summary['pooled']} docs {'pooled' if below > 0 else 'not routed'} of "
        f"{summary['rows']}{routed}: {summary['empty_text']} "
        f"with an empty text, {summary['clustered']} in {summary['clusters']} clusters "
        f"({summary['new_intents']} new intents, {summary['loose']} loose), "
        f"{summary['noise']} in none{left_out}"
    )
    if summary.get("warning"):
        typer.secho(f"Warning: {summary['warning']}", fg="yellow")
    typer.secho(f"Wrote {', '.join(map(str, paths))}", fg="green")
