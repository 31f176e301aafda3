"""Distillation: heads trained apart annotate the docs a one-pass student lacks gold for.

Multi-task training on several corpora gives each head only its own corpus's docs.
A distilled corpus gives every head every doc: each teacher (a pipeline trained
apart, e.g. the workflow's `training/textcat/model-last`) annotates the docs of
every source that have no annotation for its head, and the student
(`configs/multitask.cfg` on the distilled corpora) learns gold where it exists and
the teachers' outputs everywhere else:

- a `bert_textcat` teacher: its probabilities for all its labels, as soft targets
  of the student component it is named for (`doc._.bert_pipes_targets`, see
  `targets.py`; `doc.cats` keeps the gold labels of one classifier only);
- a `bert_ner` teacher: its entities, as the doc's entities (every other token is
  outside an entity);
- a `bert_qa` teacher: its best answer to each of its questions, or the null
  answer, as `doc._.gold_answers` (its questions in `doc._.questions`).

A doc that has gold annotation for a head keeps it. There is no teacher annealing:
gold and teacher targets are not mixed on one doc. Teachers that share one
pipeline (`pipeline_teachers`: all the heads of a pipeline teaching its smaller
copy, `shrink.py`) annotate from one run of it.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from spacy.language import Language
from spacy.tokens import Doc, Span

from ..corpus_attrs import set_soft_targets, soft_targets
from ..io.docbins import read_docs, write_docs
from ..loading import PipelineLoadError, load_pipeline

KINDS = ("textcat", "ner", "qa")
T = TypeVar("T")
SUMMARY = "distill.json"


class DistillError(ValueError):
    """A teacher or a source cannot be used."""


@dataclass
class Teacher:
    """A pipeline trained apart that teaches one student component.

    component (str): The student component it teaches (textcat targets are keyed by it).
    path (Path): The teacher pipeline.
    nlp (Language): The loaded teacher.
    head (str): The teacher's own bert_textcat, bert_ner or bert_qa.
    kind (str): "textcat", "ner" or "qa".
    """

    component: str
    path: Path
    nlp: Language
    head: str
    kind: str

    @property
    def pipe(self) -> Any:
        """The teacher's head (a BertTextCategorizer, BertEntityRecognizer or
        BertQuestionAnswerer)."""
        return self.nlp.get_pipe(self.head)

    def lacks(self, doc: Doc) -> bool:
        """Whether `doc` has no annotation of this teacher's head (gold or earlier
        teacher targets), so that the teacher should annotate it."""
        if self.kind == "textcat":
            labels = self.pipe.labels
            return not any(label in doc.cats for label in labels) and (
                soft_targets(doc, self.component) is None
            )
        if self.kind == "ner":
            return not doc.has_annotation("ENT_IOB")
        return not doc._.get("gold_answers")


@dataclass
class SourceSummary:
    docs: int = 0
    annotated: Dict[str, int] = field(default_factory=dict)


def _kind(pipe: Any) -> Optional[str]:
    from ..pipeline.ner import BertEntityRecognizer
    from ..pipeline.qa import BertQuestionAnswerer
    from ..pipeline.textcat_pipe import BertTextCategorizer

    for kind, cls in (
        ("textcat", BertTextCategorizer),
        ("ner", BertEntityRecognizer),
        ("qa", BertQuestionAnswerer),
    ):
        if isinstance(pipe, cls):
            return kind
    return None


def load_teacher(component: str, path: Path) -> Teacher:
    """Load a teacher pipeline, which must hold exactly one bert_textcat, bert_ner
    or bert_qa."""
    try:
        nlp = load_pipeline(path)
    except PipelineLoadError as err:
        raise DistillError(f"teacher {component}={path}: {err}") from err
    heads = [(name, kind) for name, pipe in nlp.pipeline if (kind := _kind(pipe)) is not None]
    if len(heads) != 1:
        found = ", ".join(name for name, _ in heads) or "none"
        raise DistillError(
            f"teacher {component}={path}: a teacher is a pipeline with one bert_textcat, "
            f"bert_ner or bert_qa (found: {found})"
        )
    head, kind = heads[0]
    return Teacher(component=component, path=path, nlp=nlp, head=head, kind=kind)


def pipeline_teachers(path: Path, nlp: Language) -> List[Teacher]:
    """Every bert_textcat, bert_ner and bert_qa of one loaded pipeline, each the
    teacher of the student component of its own name (`bert-pipes shrink`: the
    student is a copy of the pipeline). They share `nlp`, so `distill` runs it
    once per batch for all of them."""
    teachers = [
        Teacher(component=name, path=path, nlp=nlp, head=name, kind=kind)
        for name, pipe in nlp.pipeline
        if (kind := _kind(pipe)) is not None
    ]
    if not teachers:
        names = ", ".join(nlp.pipe_names) or "none"
        raise DistillError(
            f"{path}: no bert_textcat, bert_ner or bert_qa to teach with (components: {names})"
        )
    return teachers


def _teacher_doc(nlp: Language, doc: Doc) -> Doc:
    """The doc's tokens as a new doc of the teacher's vocab, so that the teacher's
    token indices are the doc's."""
    words = [token.text for token in doc]
    spaces = [bool(token.whitespace_) for token in doc]
    return Doc(nlp.vocab, words=words, spaces=spaces)


def _annotate(nlp: Language, rows: Sequence[Tuple[Doc, List[Teacher]]], batch_size: int) -> None:
    """Run the teachers' pipeline over the docs (the reference docs of a source)
    once, and write each teacher's output into the docs it lacks it on."""
    words = (_teacher_doc(nlp, doc) for doc, _ in rows)
    for (doc, teachers), out in zip(rows, nlp.pipe(words, batch_size=batch_size)):
        for teacher in teachers:
            if teacher.kind == "textcat":
                labels = teacher.pipe.labels
                probabilities = {label: out.cats[label] for label in labels}
                set_soft_targets(doc, teacher.component, probabilities)
            elif teacher.kind == "ner":
                ents = [Span(doc, e.start, e.end, label=e.label_) for e in out.ents]
                doc.set_ents(ents, default="outside")
            else:
                _set_answers(teacher, doc, out)


def _set_answers(teacher: Teacher, doc: Doc, out: Doc) -> None:
    questions = dict(teacher.pipe.cfg["questions"])
    best: Dict[str, Dict[str, Any]] = {}
    for answer in out._.get("answers") or []:
        if answer.get("component", teacher.head) != teacher.head:
            continue
        key = answer["key"]
        if key not in best or answer.get("score", 0.0) > best[key].get("score", 0.0):
            best[key] = answer
    gold: Dict[str, List[Dict[str, Any]]] = {}
    for key in questions:
        answer = best.get(key)
        if answer is None or answer.get("start") is None:
            gold[key] = []  # the null answer
        else:
            start, end = int(answer["start"]), int(answer["end"])
            gold[key] = [{"text": doc.text[start:end], "start": start, "end": end}]
    doc._.questions = {**(doc._.get("questions") or {}), **questions}
    doc._.gold_answers = gold


def _read(path: Path, vocab: Any) -> List[Doc]:
    if not path.exists():
        raise DistillError(f"source {path}: no such file")
    try:
        return read_docs(path, vocab)
    except (OSError, ValueError, KeyError) as err:
        raise DistillError(f"source {path}: not a .spacy file ({err})") from err


def distill(
    sources: Dict[str, Path],
    teachers: Sequence[Teacher],
    output_dir: Path,
    *,
    batch_size: int = 64,
    progress: bool = True,
) -> Dict[str, SourceSummary]:
    """Write each source, annotated by the teachers where it lacks annotation, to
    OUTPUT_DIR/<source>.spacy, and a summary to OUTPUT_DIR/distill.json.

    RETURNS: per source, its docs and how many each teacher annotated.
    """
    from ..progress import progress_bar

    if not teachers:
        raise DistillError("no teachers: give at least one COMPONENT=PIPELINE")
    output_dir.mkdir(parents=True, exist_ok=True)
    vocab = teachers[0].nlp.vocab
    summary: Dict[str, SourceSummary] = {}
    for name, path in sources.items():
        docs = _read(Path(path), vocab)
        entry = summary[name] = SourceSummary(docs=len(docs))
        for group in _by_pipeline(teachers):
            # which of the group's teachers each doc lacks, before any of them writes
            lacking = [[t for t in group if t.lacks(doc)] for doc in docs]
            for teacher in group:
                entry.annotated[teacher.component] = sum(teacher in ts for ts in lacking)
            rows = [(doc, ts) for doc, ts in zip(docs, lacking) if ts]
            desc = f"{name}: {', '.join(t.component for t in group)}"
            bar = progress_bar(len(rows), 0, unit="doc", desc=desc, disable=not progress)
            with bar:
                for chunk in _chunks(rows, batch_size * 8):
                    _annotate(group[0].nlp, chunk, batch_size)
                    bar.update(len(chunk))
        write_docs(docs, output_dir / f"{name}.spacy", store_user_data=True)
    record = {
        "sources": {n: str(p) for n, p in sources.items()},
        "teachers": {
            t.component: {"path": str(t.path), "head": t.head, "kind": t.kind} for t in teachers
        },
        "annotated": {n: {"docs": s.docs, **s.annotated} for n, s in summary.items()},
    }
    (output_dir / SUMMARY).write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")
    return summary


def _by_pipeline(teachers: Sequence[Teacher]) -> List[List[Teacher]]:
    """The teachers grouped by the pipeline object they run on, in order: a
    pipeline that teaches several components runs once per batch for all."""
    groups: Dict[int, List[Teacher]] = {}
    for teacher in teachers:
        groups.setdefault(id(teacher.nlp), []).append(teacher)
    return list(groups.values())


def _chunks(items: List[T], size: int) -> Iterator[List[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
