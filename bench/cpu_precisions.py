"""Words/s of ours, the bare forward and spacy-transformers at each CPU precision,
measured in one run: interleaved rounds, the median of each (not a test).

    python bench/cpu_precisions.py [--workloads news,short] [--rounds 3]
        [--precisions fp32,int8] [--trained DIR] [--output FILE]
    python bench/cpu_precisions.py --pipeline 6=PIPELINE --pipeline 3=STUDENT
        [--scores 6=SCORES.json ...] [--picture PNG]   (the frontier)

Each round runs every (system, precision) once, each in a fresh subprocess of
`bench/speed.py` (`speedlib.timing.spawn`: its warm-up, timing and peak RSS), in the same
order; a system's figure is the median over the rounds, so a noisy neighbour
slows one round of every system rather than all rounds of one. Systems:

  bare              the Hugging Face forward over our windows (fp32; bf16 weights;
                    int8: torch's own dynamic int8, per-channel weights)
  ours-textcat-ner  bench/trained.py's textcat + NER on one encoder, at each
                    precision, and at "default" (as saved: predict_precision "auto",
                    what a user gets out of the box; it stands for the precision
                    "auto" resolves to, which is not run twice)
  trf-textcat-ner   spacy-transformers with spaCy's textcat and ner, fp32 (its default)

bf16 is measured only where the CPU has AMX or AVX-512 BF16 (elsewhere torch
emulates it). Writes bench/results/cpu_precisions_<cpu kind>.json.

The frontier of a pipeline and its `bert-pipes shrink` students: with
`--pipeline LAYERS=PATH` (repeated), ours is each of those pipelines, every head,
at each precision (speed.py's `ours-pipeline`), in place of ours-textcat-ner;
`--scores LAYERS=FILE` adds bench/precision_scores.py's results for each (the
heads' test scores at each precision) to the record, and `--picture` plots each
head's score against words/s on the first workload, spacy-transformers' words/s
as the reference line.
"""

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extras  # noqa: E402  (bench/extras.py)
from speedlib import timing  # noqa: E402  (bench/speed.py's parts)
from speedlib import workloads as speed_workloads  # noqa: E402

from spacy_bert_pipes.models.transformer.precision import (  # noqa: E402
    cpu_has_fast_bf16,
    cpu_kind,
)

extras.use()  # as bench/speed.py: the references here and in the commands it starts


def runs(
    precisions: List[str],
    ours: str = "ours-textcat-ner",
    trf: bool = True,
    pipelines: Optional[Dict[str, str]] = None,
    keep: str = "",
    keep_precisions: Sequence[str] = (),
) -> List[Tuple[str, str, str, str, str]]:
    """(key, system, precision, pipeline path or "", heads kept) of one round, in
    order. Ours at the precision "auto" resolves to here is ours at "default" (as
    saved: "auto"), run once; with `pipelines`, ours is each of them at every
    precision, and with `keep` also each with only those heads at `keep_precisions`
    (keys `<layers>L-<heads>@<precision>`)."""
    import torch

    from spacy_bert_pipes.models.transformer.precision import resolve_precision

    auto = resolve_precision("auto", torch.device("cpu"), predicting=True)
    out = [(f"bare@{p}", "bare", p, "", "") for p in precisions]
    if pipelines:
        for layers, path in pipelines.items():
            out += [(f"{layers}L@{p}", "ours-pipeline", p, path, "") for p in precisions]
            if keep:
                tag = keep.replace(",", "+")
                out += [
                    (f"{layers}L-{tag}@{p}", "ours-pipeline", p, path, keep)
                    for p in keep_precisions
                    if p in precisions
                ]
    else:
        out += [(f"{ours}@{p}", ours, p, "", "") for p in precisions if p != auto]
        out += [(f"{ours}@default", ours, "default", "", "")]
    if trf:
        out += [("trf-textcat-ner@default", "trf-textcat-ner", "default", "", "")]
    return out


def name_values(items: List[str], option: str) -> Dict[str, str]:
    """LAYERS=VALUE options, in order."""
    out: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise typer.BadParameter(f"{option} {item!r}: expected LAYERS=PATH")
        out[name] = value
    return out


# (test set, score key, title, component): the heads the frontier's picture plots
HEADS = [
    ("banking77", "cats_accuracy", "Banking77 accuracy", "intents"),
    ("nluplusplus", "nlu_micro_f", "NLU++ micro F", "nluplusplus"),
    ("conll2003", "ents_f", "CoNLL-2003 entity F", "bert_ner"),
    ("restaurant8k", "qa_span_f", "Restaurant-8k span F", "slots"),
]


def picture(results: Dict[str, Any], workload: str, path: Path) -> None:
    """One panel per head: its test score against words/s, a point per (layers,
    precision) with every head running, a hollow one where only the --keep heads
    ran (a head scores the same either way), spacy-transformers' words/s as a
    dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = results["workloads"][workload]["words_per_second_median"]
    fig, axes = plt.subplots(1, len(HEADS), figsize=(4.0 * len(HEADS), 3.4))
    markers = {"fp32": "o", "bf16": "s", "int8": "^"}
    kept = [name for name in results.get("kept_heads", "").split(",") if name]
    tag = "+".join(kept)
    for ax, (test, key, title, component) in zip(axes, HEADS):
        for i, (layers, scores) in enumerate(results["scores"].items()):
            points = []
            for precision, score in scores.get(test, {}).items():
                wps = speed.get(f"{layers}L@{precision}")
                if wps is None or score.get(key) is None:
                    continue
                points.append((wps, 100 * score[key]))
                ax.scatter(*points[-1], marker=markers.get(precision, "o"), color=f"C{i}")
                ax.annotate(f"{layers}L {precision}", points[-1], fontsize=7)
                alone = speed.get(f"{layers}L-{tag}@{precision}")
                if component in kept and alone is not None:
                    ax.scatter(
                        alone,
                        100 * score[key],
                        marker=markers.get(precision, "o"),
                        facecolors="none",
                        edgecolors=f"C{i}",
                    )
            if points:
                ax.plot(*zip(*sorted(points)), color=f"C{i}", alpha=0.3)
        if "trf-textcat-ner@default" in speed:
            ax.axvline(speed["trf-textcat-ner@default"], color="grey", linestyle="--")
            ax.annotate(
                "spacy-transformers",
                (speed["trf-textcat-ner@default"], 0.02),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                rotation=90,
            )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"words/s, {workload}")
    axes[0].set_ylabel("test score")
    fig.tight_layout()
    if kept:
        fig.subplots_adjust(bottom=0.22)
        fig.text(
            0.01,
            0.01,
            f"filled: every head runs; hollow: only {', '.join(kept)} (with their encoder)",
            fontsize=8,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def int8_build_seconds(rounds: int, threads: int) -> List[float]:
    """Seconds to build the default encoder's int8 graph (export, quantize, first
    session), what the first int8 batch of a process waits for."""
    import time

    import torch
    from transformers import AutoModel

    from spacy_bert_pipes.models.transformer.onnx_int8 import Int8Module
    from spacy_bert_pipes.models.transformer.transformer_module import TransformerModule

    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(speed_workloads.encoder_folder(), local_files_only=True)
    module = TransformerModule(model, "last", "fp32").eval()
    ids = torch.ones((1, 8), dtype=torch.long)
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        Int8Module.build(module)(ids, torch.ones_like(ids), torch.zeros_like(ids))
        seconds.append(time.perf_counter() - start)
    return seconds


def main(
    workloads: str = typer.Option("news,short", help="Workloads of bench/speed.py"),
    limit: int = typer.Option(0, help="Texts per workload (0: speed.py's default)"),
    rounds: int = typer.Option(3, help="Interleaved rounds (the median is reported)"),
    precisions: str = typer.Option(
        "fp32,bf16,int8", help="Precisions to measure (bf16 is skipped without fast bf16)"
    ),
    trained: Optional[Path] = typer.Option(None, help="bench/trained.py's folder"),
    ours: str = typer.Option("ours-textcat-ner", help="Our system (a speed.py system)"),
    trf: bool = typer.Option(True, help="Also run spacy-transformers (trf-textcat-ner)"),
    threads: int = typer.Option(2, help="torch threads of every system"),
    output: Optional[Path] = typer.Option(None, help="JSON results"),
    pipeline: List[str] = typer.Option(
        [], help="LAYERS=PATH: a pipeline to run as ours, every head (repeat; the frontier)"
    ),
    scores: List[str] = typer.Option(
        [], help="LAYERS=FILE: bench/precision_scores.py's results for a --pipeline"
    ),
    picture_path: Optional[Path] = typer.Option(
        None, "--picture", help="PNG: each head's score against words/s (with --scores)"
    ),
    keep: str = typer.Option(
        "",
        help="With --pipeline: also run each pipeline with only these heads, e.g. "
        "intents,bert_ner (the tasks of spacy-transformers' textcat + ner)",
    ),
    keep_precisions: str = typer.Option("bf16,int8", help="The precisions of the --keep runs"),
) -> None:
    wanted = [p for p in precisions.split(",") if p and (p != "bf16" or cpu_has_fast_bf16())]
    pipelines = name_values(pipeline, "--pipeline")
    results: Dict[str, Any] = {
        "machine": timing.machine(),
        "versions": timing.versions(),
        "cpu_kind": cpu_kind(),
        "rounds": rounds,
        "command": " ".join(sys.argv),
        "pipelines": pipelines,
        "kept_heads": keep,
        "scores": {
            layers: json.loads(Path(file).read_text(encoding="utf8"))["scores"]
            for layers, file in name_values(scores, "--scores").items()
        },
        "workloads": {},
    }
    for workload in workloads.split(","):
        texts = speed_workloads.load_texts(
            workload,
            limit or speed_workloads.DEFAULT_LIMITS[workload],
            speed_workloads.DEFAULT_DATA,
        )
        n_words = speed_workloads.count_words(texts)
        timings: Dict[str, List[float]] = {}
        details: Dict[str, Any] = {}
        for round_ in range(rounds):
            kept_runs = runs(wanted, ours, trf, pipelines, keep, keep_precisions.split(","))
            for key, system, precision, path, heads in kept_runs:
                s = speed_workloads.Settings(
                    workload=workload,
                    limit=limit or speed_workloads.DEFAULT_LIMITS[workload],
                    precision=precision,
                    threads=threads,
                    max_batch_tokens=4096,
                    batch_size=128,
                    hf_batch_size=32,
                    max_length=128,
                    stride=32,
                    repeats=1,
                    gpu=-1,
                    data=str(speed_workloads.DEFAULT_DATA),
                    trained=path or str(trained or ""),
                    keep=heads,
                )
                result = timing.spawn(system, s, timeout=1800)
                if "error" in result:
                    print(f"{workload} round {round_} {key}: {result['error']}", file=sys.stderr)
                    continue
                result["words_per_second"] = n_words / result["seconds"]
                timings.setdefault(key, []).append(result["words_per_second"])
                details[key] = {
                    k: result.get(k) for k in ("words", "peak_rss_mb", "settings", "checks")
                }
                print(f"{workload} round {round_} {key}: {result['words_per_second']:,.0f} words/s")
        medians = {key: statistics.median(v) for key, v in timings.items()}
        reference = medians.get("trf-textcat-ner@default")
        results["workloads"][workload] = {
            "texts": len(texts),
            "words": n_words,
            "words_per_second_median": medians,
            "times_spacy_transformers": {
                key: value / reference for key, value in medians.items() if reference
            },
            "words_per_second_rounds": timings,
            "details": details,
        }
        for key, value in sorted(medians.items()):
            print(f"{workload}: {key:28s} {value:10,.0f} words/s")
    if "int8" in wanted:
        build = int8_build_seconds(rounds, threads)
        results["int8_build_seconds"] = {"rounds": build, "median": statistics.median(build)}
        print(f"int8 graph build: median {statistics.median(build):.1f} s ({build})")
    out = output or speed_workloads.RESULTS / f"cpu_precisions_{cpu_kind()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf8")
    print(f"wrote {out}")
    if picture_path is not None and results["scores"]:
        picture(results, workloads.split(",")[0], picture_path)
        print(f"wrote {picture_path}")


if __name__ == "__main__":
    typer.run(main)
