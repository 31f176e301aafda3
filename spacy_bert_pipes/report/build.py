"""`write_report`: reads the inputs, puts the sections together in order (a
summary, the one-pass pipeline beside the heads apart, each run's tasks, the
annotated collections, the timings, the skipped inputs) and writes report.md,
report.html and the PNGs."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..discover import DiscoveryFiles, read_discovery
from ..multitask.compare import APART_SOURCE, TASKS, CompareError, compare
from .collection import collection_section
from .discovery import discovery_section
from .document import Block, Heading, Paragraph, Table, duration, pct, short, to_html, to_markdown
from .inputs import Inputs, ReportError, Run, read_inputs
from .ner import ner_section
from .plots import Figures, figure_class
from .qa import qa_section
from .similarity import similarity_section
from .textcat import textcat_section


@dataclass
class Report:
    """What `write_report` wrote.

    markdown (Path): report.md.
    html (Path): report.html.
    images (List[Path]): The PNGs.
    notes (List[str]): Inputs skipped, and why.
    """

    markdown: Path
    html: Path
    images: List[Path]
    notes: List[str]


def write_report(
    paths: Sequence[Union[str, Path]],
    output_dir: Union[str, Path],
    *,
    predictions: Sequence[Union[str, Path]] = (),
    annotations: Sequence[Union[str, Path]] = (),
    title: str = "Evaluation report",
    plots: bool = True,
    intents: Optional[Sequence[str]] = None,
    one_pass: Optional[Union[str, Path]] = None,
    discoveries: Sequence[Union[str, Path]] = (),
) -> Report:
    """Write report.md, report.html and the PNGs of the metrics in `paths`.

    paths (Sequence[Union[str, Path]]): Metrics JSONs and folders of them.
    output_dir (Union[str, Path]): The folder to write (created if missing).
    predictions (Sequence[Union[str, Path]]): More `bert-pipes evaluate` predictions
        files, besides the `*_predictions.jsonl` of the folders.
    annotations (Sequence[Union[str, Path]]): Outputs of `bert-pipes annotate`
        (.jsonl, .csv, .parquet or a folder of Parquet shards), each described
        in a section "Annotated collection" (see `read_collection`).
    title (str): The report's title.
    plots (bool): Whether to draw the PNGs (needs matplotlib).
    intents (Optional[Sequence[str]]): The categories an annotated row's
        predicted intent (on the map of its vectors) is chosen from; None: all.
    one_pass (Optional[Union[str, Path]]): A metrics folder with the one-pass
        pipeline's `multitask_<corpus>.json` (project.yml's workflow `all`): adds
        a table of each head's score beside the head trained apart, where the
        folder has its metrics (`spacy_bert_pipes.multitask.compare`).
    discoveries (Sequence[Union[str, Path]]): Folders `bert-pipes discover`
        wrote, each a section of its clusters (after the annotated collections).
    RETURNS (Report): The files written.
    """
    if plots:
        figure_class()  # fail before anything is written when matplotlib is missing
    if not paths and not annotations and not discoveries:
        raise ReportError(
            "Nothing to report: give metrics JSONs or folders, annotate outputs or discover folders"
        )
    found = [read_discovery(folder) for folder in discoveries]
    inputs = read_inputs(paths, predictions, annotations, intents)
    if not inputs.runs and not inputs.timings and not inputs.collections and not found:
        raise ReportError(
            f"No metrics in {', '.join(map(str, paths))}: expected JSONs with cats_, "
            "ents_, spans_ or qa_ scores, or *_time.json timings"
        )
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    figures = Figures(output_dir, plots)
    blocks = document(inputs, title, figures, found)
    if one_pass is not None:
        blocks[2:2] = _one_pass_section(Path(one_pass))  # after the title and sources
    markdown_path = output_dir / "report.md"
    markdown_path.write_text(to_markdown(blocks), encoding="utf8")
    html_path = output_dir / "report.html"
    html_path.write_text(to_html(blocks, title), encoding="utf8")
    return Report(markdown_path, html_path, figures.images, inputs.notes)


def document(
    inputs: Inputs, title: str, figures: Figures, discoveries: Sequence[DiscoveryFiles] = ()
) -> List[Block]:
    """The blocks of the whole report, drawing its pictures with `figures`."""
    blocks: List[Block] = [Heading(1, title)]
    sources = [f"`{run.path}`" for run in inputs.runs]
    sources += [f"`{run.predictions_path}`" for run in inputs.runs if run.predictions_path]
    sources += [f"`{c.path}`" for c in inputs.collections]
    sources += [f"`{d.folder}`" for d in discoveries]
    if sources:
        blocks.append(Paragraph("Made from " + ", ".join(sources) + "."))
    if inputs.runs or not (inputs.collections or discoveries):
        blocks.append(
            Paragraph(
                "Scores are percentages. P, R and F are precision, recall and F-score; "
                "EM is exact match."
            )
        )
    if inputs.runs:
        blocks += _summary(inputs.runs)
    for run in inputs.runs:
        blocks.append(Heading(2, f"Run `{run.name}`"))
        for task in run.tasks:
            if task.startswith("textcat:"):
                blocks += textcat_section(run, task[len("textcat:") :], figures)
            elif task.startswith("ner:"):
                blocks += ner_section(run, task[len("ner:") :], figures)
            elif task == "qa":
                blocks += qa_section(run, figures)
    for collection in inputs.collections:
        blocks += collection_section(collection, figures)
        blocks += similarity_section(collection, figures)
    for found in discoveries:
        blocks += discovery_section(found, figures)
    if inputs.timings:
        blocks += _timings(inputs.timings)
    if inputs.notes:
        blocks.append(Heading(2, "Skipped inputs"))
        blocks += [Paragraph(note) for note in inputs.notes]
    return blocks


def _one_pass_section(metrics_dir: Path) -> List[Block]:
    try:
        rows = compare(metrics_dir)
    except CompareError as err:
        raise ReportError(f"--one-pass: {err}") from err
    table = [row.cells() for row in rows]
    files = ", ".join(f"`{stem}.json`" for stem in dict.fromkeys(t.one_pass for t in TASKS))
    blocks: List[Block] = [
        Heading(2, "One encoder pass and the heads trained apart"),
        Paragraph(
            f"Each head of the one-pass pipeline on its own test set ({files} in "
            f"`{metrics_dir}`), beside the same head trained apart."
        ),
        Table(["Task (own test set)", "Heads apart", "One pass", "Difference"], table, "lrrr"),
    ]
    if any(row.apart is None for row in rows):
        blocks.append(Paragraph(f"Heads apart: not scored in `{metrics_dir}`; {APART_SOURCE}."))
    return blocks


def _summary(runs: List[Run]) -> List[Block]:
    rows = []
    for run in runs:
        s = run.scores
        for task in run.tasks:
            name, main = _main_scores(s, task)
            speed = s.get("speed")
            rows.append(
                [
                    f"`{run.name}`",
                    name,
                    main,
                    f"{speed:.0f}" if isinstance(speed, (int, float)) else "-",
                    duration((run.timing or {}).get("seconds")),
                ]
            )
    return [
        Heading(2, "Summary"),
        Table(["Run", "Task", "Main scores", "Words/s", "Training (h:mm:ss)"], rows, "lllrr"),
    ]


def _timings(timings: Dict[str, Dict[str, Any]]) -> List[Block]:
    rows = []
    for stem, data in sorted(timings.items()):
        data = data if isinstance(data, dict) else {}
        command = str(data.get("command", ""))
        # The interpreter's absolute path says nothing about the run.
        command = re.sub(r"^\S*python\S*", "python", command)
        rows.append(
            [
                f"`{stem}`",
                duration(data.get("seconds")),
                str(data.get("machine") or "-"),
                f"`{short(command, 160)}`" if command else "-",
            ]
        )
    return [
        Heading(2, "Timings"),
        Table(["File", "h:mm:ss", "Machine", "Command"], rows, "lrll"),
    ]


def _main_scores(s: Dict[str, Any], task: str) -> Tuple[str, str]:
    """A task's name and main scores, for the summary table."""
    if task.startswith("textcat:"):
        p = task[len("textcat:") :]
        exclusive = s.get(f"{p}_accuracy") is not None
        notes = ([] if exclusive else ["multi-label"]) + ([] if p == "cats" else [f"`{p}_`"])
        name = "text classification" + (f" ({', '.join(notes)})" if notes else "")
        scores = f"accuracy {pct(s.get(f'{p}_accuracy'))}, macro F {pct(s.get(f'{p}_macro_f'))}"
        if exclusive and s.get(f"{p}_routed_accuracy") is not None:
            routing = (
                f"routed right {pct(s[f'{p}_routed_accuracy'])}, "
                f"coverage {pct(s.get(f'{p}_coverage'))}, "
                f"out-of-scope recall {pct(s.get(f'{p}_oos_r'))}"
            )
            return name, f"{routing}; {scores}"
        if exclusive:
            return name, scores
        return name, f"macro F {pct(s.get(f'{p}_macro_f'))}, micro F {pct(s.get(f'{p}_micro_f'))}"
    if task.startswith("ner:"):
        prefix = task[len("ner:") :]
        p, r, f = (pct(s.get(f"{prefix}_{k}")) for k in "prf")
        return ("NER" if prefix == "ents" else f"NER ({prefix})"), f"F {f} (P {p}, R {r})"
    main = f"EM {pct(s.get('qa_exact'))}, F1 {pct(s.get('qa_f1'))}"
    if s.get("qa_span_f") is not None:
        main += f", span F {pct(s['qa_span_f'])}"
    return "question answering", main
