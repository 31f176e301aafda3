"""A smaller copy of a trained pipeline: `bert-pipes shrink PIPELINE OUTPUT --layers K`.

The student is the teacher pipeline with each BERT encoder cut to K of its L
layers, trained on what the teacher says about its training corpora. In order:

1. `cut`: load the teacher, keep K of each encoder's layers (`choose_layers`:
   spread evenly, the top one always kept) with their weights, and save it to
   OUTPUT/student-init. Every component comes along as it is: heads' weights,
   labels, fixed questions, calibration (temperature, threshold), heads' own top
   layers (branches, which then run on the kept stack's layer K - n).
2. `distill.distill`: the teacher annotates every training doc (and each
   unlabelled text of `texts`) wherever a doc lacks a head's annotation: class
   probabilities as soft targets, entities, slot answers. Gold is kept.
3. `train`: spaCy's train on OUTPUT/config.cfg (`student_config`): the teacher's
   own training config with every component sourced from OUTPUT/student-init
   (spaCy resumes training sourced components: nothing is initialized again),
   the distilled corpora as the train corpus and the teacher's dev corpora.
   The student is OUTPUT/model-last (and model-best, by the dev scores).

Only the heads' outputs are distilled (soft labels); the student's hidden states
are not matched to the teacher's. `gold_only` leaves step 2 out: the cut student
is trained on the corpora's gold annotation alone (at the `make run` budget it
scored higher on every head than with the teacher's outputs: docs/shrink.md).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from spacy.language import Language
from spacy.tokens import DocBin
from thinc.api import Config, Model

from ..io.errors import ConversionError
from ..io.readers import InputFormat, read_input
from ..loading import PipelineLoadError, load_pipeline
from .corpus import READER
from .distill import DistillError, distill, pipeline_teachers

INIT = "student-init"
DISTILLED = "distilled"
CONFIG = "config.cfg"
TEXTS = "texts"
SUMMARY = "shrink.json"
LOGGER = {
    "@loggers": "spacy-bert-pipes.ProgressLogger.v1",
    "progress_bar": "eval",
    "console_output": True,
    "output_file": None,
    "interval_seconds": 60,
}


class ShrinkError(ValueError):
    """A pipeline, a corpus or a setting that shrink cannot use."""


@dataclass
class ShrinkResult:
    """What `shrink` wrote.

    student (Path): The trained student (OUTPUT/model-last).
    kept (Dict[str, List[int]]): Per component holding an encoder, the 0-based
        positions of the teacher's layers the student kept.
    annotated (Dict[str, Dict[str, int]]): Per training source, its docs and how
        many the teacher annotated for each head.
    """

    student: Path
    kept: Dict[str, List[int]]
    annotated: Dict[str, Dict[str, int]]


def choose_layers(n_layers: int, k: int) -> List[int]:
    """The 0-based positions of the K layers a student keeps of L: student layer i
    (1-based) is teacher layer floor(i * L / K), so the top layer is always kept
    and the others are spread evenly below it (6 -> 3: 1, 3, 5; 6 -> 2: 2, 5)."""
    if not 1 <= k <= n_layers:
        raise ValueError(f"a student keeps between 1 and {n_layers} layers: {k}")
    return [(i * n_layers) // k - 1 for i in range(1, k + 1)]


def encoders(nlp: Language) -> Dict[str, Model]:
    """Each component's BERT encoder (a shared `bert_encoder` pipe's model, or a
    head's own encoder), by component name."""
    found: Dict[str, Model] = {}
    for name, component in nlp.components:
        model = getattr(component, "model", None)
        if isinstance(model, Model):
            for node in model.walk():
                if node.name == "bert_encoder":
                    found[name] = node
                    break
    return found


def cut(nlp: Language, k: int, where: str) -> Dict[str, List[int]]:
    """Cut every BERT encoder of `nlp` down to K of its layers, in place.

    where (str): How errors name the pipeline.
    RETURNS (Dict[str, List[int]]): Per component, the kept layers' 0-based positions.
    """
    from ..models.encoder.bert import hf_shim

    found = encoders(nlp)
    if not found:
        names = ", ".join(nlp.pipe_names) or "none"
        raise ShrinkError(
            f"{where}: no BERT encoder to shrink (components: {names}); shrink needs a "
            "bert_encoder, or a bert_textcat, bert_ner or bert_qa with its own encoder"
        )
    kept: Dict[str, List[int]] = {}
    for name, encoder in found.items():
        shim = hf_shim(encoder)
        n_layers = shim.n_layers
        if not n_layers:
            raise ShrinkError(
                f"{where}: the encoder of {name} has no separate layers to keep (ALBERT "
                "shares one layer at every depth)"
            )
        if not 1 <= k <= n_layers:
            raise ShrinkError(
                f"{where}: --layers {k}: the encoder of {name} has {n_layers} layers; a "
                f"student keeps between 1 and {n_layers}"
            )
        kept[name] = choose_layers(n_layers, k)
        try:
            shim.keep_layers(kept[name])
        except ValueError as err:
            raise ShrinkError(f"{where}: component {name}: {err}") from err
    return kept


def config_sources(config: Config, section: str) -> Dict[str, str]:
    """The corpora a (resolved-variables) training config reads in `[corpora.<section>]`:
    a MultiCorpus's sources, or a single corpus's `path` as "train" or "dev"."""
    corpus = config.get("corpora", {}).get(section, {})
    if corpus.get("@readers") == READER:
        return {str(name): str(path) for name, path in dict(corpus["sources"]).items()}
    path = corpus.get("path")
    return {section: str(path)} if path else {}


def write_texts(nlp: Language, path: Path, output: Path, **read: Any) -> int:
    """Tokenize the unlabelled texts of `path` (CSV, JSONL, Parquet or a folder
    of .txt, as `bert-pipes annotate` reads) and save them as a corpus."""
    docs = DocBin()
    try:
        for row in read_input(path, **read):
            if row.error is not None:
                raise ShrinkError(f"--texts {row.source}: {row.error}")
            if row.text and row.text.strip():
                docs.add(nlp.make_doc(row.text))
    except ConversionError as err:
        raise ShrinkError(f"--texts {err}") from err
    if not len(docs):
        raise ShrinkError(f"--texts {path}: no text to learn from")
    docs.to_disk(output)
    return len(docs)


def student_config(
    teacher: Config,
    init: Path,
    train: Dict[str, Path],
    dev: Dict[str, str],
    steps: Optional[int] = None,
    weights: Optional[Dict[str, float]] = None,
) -> Config:
    """The student's training config, from the teacher's (variables resolved):
    every component sourced from `init`, `train` as a MultiCorpus train corpus
    (the teacher's sampling settings kept where it had one), `dev` as its dev
    corpus (`weights` added to the teacher's sampling weights), the teacher's
    [training] with `steps` steps (None: the teacher's) and the ProgressLogger,
    and nothing to initialize."""
    config = Config(teacher).interpolate()
    for name in config["nlp"]["pipeline"]:
        config["components"][name] = {"source": str(init)}
    old = dict(config["corpora"].get("train", {}))
    corpus: Dict[str, Any] = {"@readers": READER, "sources": {n: str(p) for n, p in train.items()}}
    if old.get("@readers") == READER:
        for key in ("alpha", "shuffle", "epoch_size", "max_length", "limit", "seed"):
            if key in old:
                corpus[key] = old[key]
        kept = {n: w for n, w in dict(old.get("weights") or {}).items() if n in train}
        weights = {**kept, **(weights or {})}
    if weights:
        corpus["weights"] = weights
    config["corpora"]["train"] = corpus
    old_dev = dict(config["corpora"].get("dev", {}))
    dev_corpus: Dict[str, Any] = {"@readers": READER, "sources": dict(dev), "shuffle": False}
    if old_dev.get("@readers") == READER:
        dev_corpus.update(limit=old_dev.get("limit", 0), max_length=old_dev.get("max_length", 0))
    config["corpora"]["dev"] = dev_corpus
    training = config["training"]
    if steps is not None:
        training["max_steps"] = steps
        training["eval_frequency"] = min(int(training.get("eval_frequency") or steps), steps)
        schedule = training.get("optimizer", {}).get("learn_rate")
        if isinstance(schedule, dict) and "total_steps" in schedule:
            schedule["total_steps"] = steps
    training["logger"] = dict(LOGGER)
    config["initialize"]["components"] = {}
    return config


def shrink(
    pipeline: Path,
    output: Path,
    layers: int,
    *,
    sources: Optional[Dict[str, Path]] = None,
    dev: Optional[Dict[str, Path]] = None,
    texts: Optional[Path] = None,
    texts_weight: Optional[float] = None,
    text_column: str = "text",
    input_format: InputFormat = "auto",
    steps: Optional[int] = None,
    gold_only: bool = False,
    batch_size: int = 64,
    gpu_id: int = -1,
    progress: bool = True,
) -> ShrinkResult:
    """Train a student of `pipeline` with K = `layers` encoder layers in OUTPUT.

    sources (Optional[Dict[str, Path]]): The training corpora, by name (None: those
        the teacher's config.cfg reads in [corpora.train], relative to the
        current folder).
    dev (Optional[Dict[str, Path]]): The dev corpora (None: the teacher's).
    texts (Optional[Path]): Unlabelled texts the teacher annotates for the student too.
    texts_weight (Optional[float]): Their sampling weight in the train corpus
        (None: as MultiCorpus gives a source without one, size ** alpha).
    steps (Optional[int]): Training steps (None: the teacher's max_steps).
    gold_only (bool): Train on the corpora's gold annotation alone: the teacher
        annotates nothing (no `texts`).
    RETURNS (ShrinkResult): The student's path, the kept layers, the annotation counts.
    """
    from spacy.cli.train import train as spacy_train

    if layers < 1:
        raise ShrinkError(f"--layers {layers}: a student needs at least 1 layer")
    if gold_only and texts is not None:
        raise ShrinkError(f"--texts {texts}: unlabelled texts need the teacher (not --gold-only)")
    try:
        teacher = load_pipeline(pipeline)
        student = load_pipeline(pipeline)
    except PipelineLoadError as err:
        raise ShrinkError(str(err)) from err
    # cut before the teacher's long run, so that a bad K stops at once
    kept = cut(student, layers, str(pipeline))
    teacher_config = Config(teacher.config).interpolate()
    train = _corpora(sources, teacher_config, "train", pipeline)
    dev_paths = _corpora(dev, teacher_config, "dev", pipeline)
    output.mkdir(parents=True, exist_ok=True)
    student.to_disk(output / INIT)
    if texts is not None:
        text_path = output / f"{TEXTS}.spacy"
        write_texts(teacher, texts, text_path, text_column=text_column, input_format=input_format)
        train[TEXTS] = text_path
    annotated: Dict[str, Dict[str, int]] = {}
    distilled = dict(train)
    if not gold_only:
        try:
            summary = distill(
                train,
                pipeline_teachers(pipeline, teacher),
                output / DISTILLED,
                batch_size=batch_size,
                progress=progress,
            )
        except DistillError as err:
            raise ShrinkError(str(err)) from err
        annotated = {n: {"docs": s.docs, **s.annotated} for n, s in summary.items()}
        distilled = {name: output / DISTILLED / f"{name}.spacy" for name in train}
    config = student_config(
        teacher_config,
        (output / INIT).resolve(),
        {n: Path(p).resolve() for n, p in distilled.items()},
        {n: str(p) for n, p in dev_paths.items()},
        steps,
        {TEXTS: texts_weight} if texts is not None and texts_weight is not None else None,
    )
    config.to_disk(output / CONFIG)
    record = {
        "teacher": str(pipeline),
        "layers": layers,
        "gold_only": gold_only,
        "kept_layers_0_based": kept,
        "sources": {n: str(p) for n, p in train.items()},
        "dev": {n: str(p) for n, p in dev_paths.items()},
        "annotated": annotated,
    }
    (output / SUMMARY).write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    spacy_train(output / CONFIG, output, use_gpu=gpu_id)
    return ShrinkResult(output / "model-last", kept, annotated)


def _corpora(
    given: Optional[Dict[str, Path]], config: Config, section: str, pipeline: Path
) -> Dict[str, Path]:
    """The corpora given, else those the teacher's config reads; each must exist."""
    option = "--source" if section == "train" else "--dev"
    if given:
        paths = dict(given)
        where = option
    else:
        paths = {name: Path(path) for name, path in config_sources(config, section).items()}
        where = f"{pipeline / CONFIG} [corpora.{section}]"
    if not paths:
        raise ShrinkError(f"{where}: names no {section} corpus; give each with {option} NAME=PATH")
    for name, path in paths.items():
        if not path.exists():
            raise ShrinkError(
                f"{where}: {name} = {path}: no such file here; give it with {option} NAME=PATH"
            )
    return paths


def layer_names(kept: Sequence[int]) -> str:
    """The kept layers as people count them: "2, 4, 6"."""
    return ", ".join(str(i + 1) for i in kept)
