"""A smaller copy of a trained pipeline: `bert-pipes shrink PIPELINE OUTPUT --layers K`.

The student is the teacher pipeline with each BERT encoder cut to K of its L
layers, which learns the teacher's hidden states and then trains its heads. In
order:

1. `cut`: load the teacher, keep K of each encoder's layers (`choose_layers`:
   spread evenly, the top one always kept) with their weights, and save it to
   OUTPUT/student-init. Every component comes along as it is: heads' weights,
   labels, fixed questions, calibration (temperature, threshold), heads' own top
   layers (branches, which then run on the kept stack's layer K - n).
2. `hidden_states.align` (`align_steps` > 0, the default): each cut encoder learns to
   compute the teacher's hidden states over the training texts (and `texts`).
3. With `labels` "teacher" only, `distill.distill`: the teacher annotates every
   training doc (and each unlabelled text of `texts`) wherever a doc lacks a
   head's annotation: class probabilities as soft targets, entities, slot
   answers. Gold is kept. With "gold" (the default) the heads train on the
   corpora as they are, each on its own corpus's docs, as the teacher did.
4. `train`: spaCy's train on OUTPUT/config.cfg (`student_config`): the teacher's
   own training config with every component sourced from OUTPUT/student-init
   (spaCy resumes training sourced components: nothing is initialized again),
   the (distilled) corpora as the train corpus and the teacher's dev corpora.
   The student is OUTPUT/model-last (and model-best, by the dev scores).

docs/shrink.md has what each recipe scored on the `make run` pipeline.
"""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple, get_args

from spacy.language import Language
from spacy.tokens import Doc, DocBin
from thinc.api import Config, Model

from ..int8_check import unmark_pipeline
from ..io.errors import ConversionError
from ..io.readers import InputFormat, read_input
from ..loading import PipelineLoadError, load_pipeline
from .corpus import READER
from .distill import DistillError, distill, pipeline_teachers
from .hidden_states import ALIGN_STEPS, AlignSummary, align

INIT = "student-init"
DISTILLED = "distilled"
CONFIG = "config.cfg"
TEXTS = "texts"
# The student trains twice the teacher's steps unless told: it starts from an
# encoder its heads were not trained on (docs/shrink.md: at the teacher's steps the
# 3-layer student of `make run` lost 3.1 entity F1, at twice them 1.2).
STEPS_FACTOR = 2
# What the student's heads train on (`shrink`'s `labels`).
Labels = Literal["gold", "teacher"]
LABELS: Tuple[str, ...] = get_args(Labels)
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
    aligned (Dict[str, AlignSummary]): Per component holding an encoder, its
        hidden-state matching (empty without `align_steps`).
    """

    student: Path
    kept: Dict[str, List[int]]
    annotated: Dict[str, Dict[str, int]]
    aligned: Dict[str, AlignSummary] = field(default_factory=dict)


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
    [training] with `steps` steps (None: STEPS_FACTOR times the teacher's
    max_steps; a warm-up of the same share) and the ProgressLogger,
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
    teacher_steps = int(training.get("max_steps") or 0)
    if steps is None and teacher_steps > 0:
        steps = STEPS_FACTOR * teacher_steps
    if steps is not None:
        training["max_steps"] = steps
        training["eval_frequency"] = min(int(training.get("eval_frequency") or steps), steps)
        schedule = training.get("optimizer", {}).get("learn_rate")
        if isinstance(schedule, dict) and "total_steps" in schedule:
            schedule["total_steps"] = steps
            if teacher_steps > 0 and "warmup_steps" in schedule:
                # the same share of the run warms up
                schedule["warmup_steps"] = round(schedule["warmup_steps"] * steps / teacher_steps)
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
    labels: Labels = "gold",
    align_steps: int = ALIGN_STEPS,
    batch_size: int = 64,
    gpu_id: int = -1,
    progress: bool = True,
) -> ShrinkResult:
    """Train a student of `pipeline` with K = `layers` encoder layers in OUTPUT.

    sources (Optional[Dict[str, Path]]): The training corpora, by name (None: those
        the teacher's config.cfg reads in [corpora.train], relative to the
        current folder).
    dev (Optional[Dict[str, Path]]): The dev corpora (None: the teacher's).
    texts (Optional[Path]): Unlabelled texts: the student learns the teacher's
        hidden states on them too, and with `labels` "teacher" its annotations.
    texts_weight (Optional[float]): Their sampling weight in the train corpus
        (labels "teacher"; None: as MultiCorpus gives a source without one).
    steps (Optional[int]): Training steps (None: STEPS_FACTOR times the teacher's
        max_steps).
    labels (str): What the heads train on: "gold", the corpora's annotation (each
        head on its own corpus, as the teacher trained), or "teacher", the
        teacher's annotation of every doc wherever gold is missing.
    align_steps (int): Steps of hidden-state matching before the heads train (0: none).
    RETURNS (ShrinkResult): The student's path, the kept layers, the annotation counts.
    """
    from spacy.cli.train import train as spacy_train

    if layers < 1:
        raise ShrinkError(f"--layers {layers}: a student needs at least 1 layer")
    if labels not in LABELS:
        raise ShrinkError(f"--labels {labels}: choose from {', '.join(LABELS)}")
    if texts is not None and labels == "gold" and not align_steps:
        raise ShrinkError(
            f"--texts {texts}: unlabelled texts teach the student the teacher's hidden "
            "states (--align-steps) or its annotation (--labels teacher); both are off"
        )
    if texts_weight is not None and labels == "gold":
        raise ShrinkError(
            "--texts-weight: with --labels gold the texts are not trained on (only their "
            "hidden states are matched); it needs --labels teacher"
        )
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
    texts_path: Dict[str, Path] = {}
    if texts is not None:
        texts_path[TEXTS] = output / f"{TEXTS}.spacy"
        write_texts(
            teacher, texts, texts_path[TEXTS], text_column=text_column, input_format=input_format
        )
    aligned = {}
    if align_steps:
        aligned = _align(teacher, student, kept, {**train, **texts_path}, align_steps, progress)
    student.to_disk(output / INIT)
    unmark_pipeline(output / INIT)  # the teacher's int8 check does not hold for the student
    annotated: Dict[str, Dict[str, int]] = {}
    corpora = dict(train)
    if labels == "teacher":
        train.update(texts_path)
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
        corpora = {name: output / DISTILLED / f"{name}.spacy" for name in train}
    config = student_config(
        teacher_config,
        (output / INIT).resolve(),
        {n: Path(p).resolve() for n, p in corpora.items()},
        {n: str(p) for n, p in dev_paths.items()},
        steps,
        {TEXTS: texts_weight} if TEXTS in corpora and texts_weight is not None else None,
    )
    config.to_disk(output / CONFIG)
    record = {
        "teacher": str(pipeline),
        "layers": layers,
        "labels": labels,
        "kept_layers_0_based": kept,
        "sources": {n: str(p) for n, p in {**train, **texts_path}.items()},
        "dev": {n: str(p) for n, p in dev_paths.items()},
        "aligned": {name: asdict(summary) for name, summary in aligned.items()},
        "annotated": annotated,
    }
    (output / SUMMARY).write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    spacy_train(output / CONFIG, output, use_gpu=gpu_id)
    return ShrinkResult(output / "model-last", kept, annotated, aligned)


def _align(
    teacher: Language,
    student: Language,
    kept: Dict[str, List[int]],
    train: Dict[str, Path],
    steps: int,
    progress: bool,
) -> Dict[str, AlignSummary]:
    """Match each cut encoder's hidden states to the teacher's over the texts of
    the training corpora (`hidden_states.align`), in place."""
    docs: List[Doc] = []
    for path in train.values():
        docs.extend(DocBin().from_disk(path).get_docs(student.vocab))
    teachers, students = encoders(teacher), encoders(student)
    return {
        name: align(
            teachers[name], students[name], layers, docs, steps, name=name, progress=progress
        )
        for name, layers in kept.items()
    }


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
