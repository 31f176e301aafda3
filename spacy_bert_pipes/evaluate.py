"""`evaluate`: score a pipeline on a corpus, and keep each doc's predictions.

The scores are those of `spacy evaluate`: `nlp.evaluate` runs the pipeline and
every component's scorer (for bert_qa, `score()` first asks the questions of
the reference docs), so the metrics JSON has the same keys. What it adds is
the per-doc record of what was predicted beside the gold annotation, one JSON
object per line, for confusion matrices and error analysis (`report`):

```
{"index": 0, "text": "...", "components": {
  "bert_textcat": {"task": "textcat", "score_prefix": "cats", "exclusive": true,
                   "gold": ["card_arrival"], "predicted": ["card_linking"],
                   "scores": {"card_arrival": 0.31, "card_linking": 0.52}},
  "bert_ner": {"task": "ner",
               "gold": [{"start": 0, "end": 10, "label": "PER", "text": "John Smith"}],
               "predicted": [{"start": 0, "end": 4, "label": "PER", "text": "John",
                              "score": 0.91}]},
  "bert_qa": {"task": "qa", "questions": [
               {"key": "time", "question": "What time?", "predicted": "7pm",
                "score": 8.1, "gold": ["7pm"], "exact": 1.0, "f1": 1.0}]}}}
```

textcat: "score_prefix" is the prefix of the component's scores in the metrics
("cats" unless configured); "gold" are the reference's labels with a value >= 0.5; "predicted" is
the top label for exclusive classes, else the labels at or over the
component's threshold; "scores" holds the predicted probability of each gold
and predicted label; an exclusive classifier's "route" holds the doc's decision
and confidence (docs/routing.md). ner: character offsets (end exclusive) of the entities
(or of the span group the component writes in "spans" mode). qa: one entry
per question of the reference (`doc._.gold_answers`), scored as `score_qa`
scores it: "exact" and "f1" against the best-matching reference answer, and
"" for a question left without an answer.
"""

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import srsly
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.tokens import Doc, Span
from spacy.training import Corpus, Example

from .io.docbins import codecs_looked_up_once
from .pipeline.ner import SCORE_ATTR, BertEntityRecognizer
from .pipeline.qa import BertQuestionAnswerer
from .pipeline.textcat_pipe import BertTextCategorizer
from .scorers import exact_match, normalize_answer, token_f1

# The scores printed by the command line, in this order: (key, name, percent?).
SUMMARY_SCORES: Tuple[Tuple[str, str, bool], ...] = (
    ("cats_routed_accuracy", "Routed right (in-scope docs)", True),
    ("cats_coverage", "In-scope docs routed (coverage)", True),
    ("cats_oos_r", "Out-of-scope recall", True),
    ("cats_accuracy", "Textcat accuracy", True),
    ("cats_micro_f", "Textcat micro F", True),
    ("cats_macro_p", "Textcat macro P", True),
    ("cats_macro_r", "Textcat macro R", True),
    ("cats_macro_f", "Textcat macro F", True),
    ("cats_macro_auc", "Textcat macro AUC", True),
    ("cats_oos_p", "Out-of-scope precision", True),
    ("cats_oos_auroc", "Out-of-scope AUROC", True),
    ("cats_oos_fpr95", "Out-of-scope FPR95", True),
    ("cats_ece", "Calibration error (ECE)", True),
    ("ents_p", "NER P", True),
    ("ents_r", "NER R", True),
    ("ents_f", "NER F", True),
    ("qa_exact", "QA exact match", True),
    ("qa_f1", "QA F1", True),
    ("qa_has_ans_exact", "QA exact match, has answer", True),
    ("qa_has_ans_f1", "QA F1, has answer", True),
    ("qa_no_ans_exact", "QA exact match, no answer", True),
    ("qa_span_p", "QA span P", True),
    ("qa_span_r", "QA span R", True),
    ("qa_span_f", "QA span F", True),
    ("qa_n", "QA questions", False),
    ("speed", "Words per second", False),
)


class EvaluateError(ValueError):
    """The corpus or the pipeline cannot be evaluated."""


@dataclass
class EvaluateResult:
    """What `evaluate` computed.

    scores (Dict[str, Any]): The scores of `nlp.evaluate` (as `spacy evaluate`).
    examples (List[Example]): The scored examples, their predicted docs annotated.
    """

    scores: Dict[str, Any]
    examples: List[Example] = field(default_factory=list)


class _KeepingScorer(Scorer):
    """spaCy's Scorer, keeping the examples it scores: `nlp.evaluate` copies the
    examples it is given, and the annotated copies are the predictions."""

    examples: List[Example]

    def score(self, examples: Iterable[Example], *, per_component: bool = False) -> Dict[str, Any]:
        self.examples = list(examples)
        return super().score(self.examples, per_component=per_component)


def read_examples(
    nlp: Language, path: Union[str, Path], *, sample: int = 0, seed: int = 0
) -> List[Example]:
    """The examples of a .spacy corpus, their predicted docs tokenized by `nlp`.

    nlp (Language): The pipeline.
    path (Union[str, Path]): A .spacy file (or a folder of them).
    sample (int): Keep a random sample of this many examples (0: all of them).
    seed (int): The seed of the sample.
    RETURNS (List[Example]): The examples, in the corpus's order.
    """
    path = Path(path)
    if not path.exists():
        raise EvaluateError(f"{path}: no such corpus")
    if sample < 0:
        raise EvaluateError(f"sample = {sample}: it must be 0 (every doc) or more")
    with codecs_looked_up_once():  # QA docs carry their questions as user data
        examples = list(Corpus(path)(nlp))
    if not examples:
        raise EvaluateError(f"{path}: the corpus has no docs")
    if 0 < sample < len(examples):
        drawn = sorted(random.Random(seed).sample(range(len(examples)), sample))
        examples = [examples[i] for i in drawn]
    return examples


def evaluate(
    nlp: Language, examples: Iterable[Example], *, batch_size: Optional[int] = None
) -> EvaluateResult:
    """Run the pipeline over the examples and score it with its components' scorers.

    nlp (Language): The pipeline.
    examples (Iterable[Example]): Reference docs (their predicted docs are not changed).
    batch_size (Optional[int]): Docs per batch (default: `nlp.batch_size`).
    RETURNS (EvaluateResult): The scores and the annotated examples.
    """
    scorer = _KeepingScorer(nlp=nlp)
    scores = nlp.evaluate(examples, batch_size=batch_size, scorer=scorer)
    return EvaluateResult(scores=scores, examples=scorer.examples)


def prediction_records(nlp: Language, examples: Iterable[Example]) -> Iterator[Dict[str, Any]]:
    """One record per example: its text and, per bert_textcat, bert_ner and
    bert_qa component, what it predicted beside the gold annotation (see the
    module's docstring).

    nlp (Language): The pipeline that annotated the examples' predicted docs.
    examples (Iterable[Example]): Annotated examples, e.g. `EvaluateResult.examples`.
    YIELDS (Dict[str, Any]): The records, in the examples' order.
    """
    for index, eg in enumerate(examples):
        components: Dict[str, Any] = {}
        for name, pipe in nlp.pipeline:
            if isinstance(pipe, BertTextCategorizer):
                components[name] = _textcat_record(pipe, eg)
            elif isinstance(pipe, BertEntityRecognizer):
                components[name] = _ner_record(pipe, eg)
            elif isinstance(pipe, BertQuestionAnswerer):
                components[name] = _qa_record(pipe, eg)
        yield {"index": index, "text": eg.reference.text, "components": components}


def write_predictions(path: Union[str, Path], records: Iterable[Dict[str, Any]]) -> int:
    """Write records as JSON lines (UTF-8).

    path (Union[str, Path]): The .jsonl file (its folder is created if missing).
    records (Iterable[Dict[str, Any]]): The records.
    RETURNS (int): The number of records written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf8") as file_:
        for record in records:
            file_.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_scores(path: Union[str, Path], scores: Dict[str, Any]) -> None:
    """Write the scores as JSON, as `spacy evaluate --output` does."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    srsly.write_json(path, scores)


def summary_rows(scores: Dict[str, Any]) -> List[Tuple[str, str]]:
    """The main scores as (name, value) rows: percentages with two decimals."""
    rows = []
    for key, name, percent in SUMMARY_SCORES:
        value = scores.get(key)
        if key == "speed" and value is not None:
            rows.append((name, f"{value:.0f}"))
        elif isinstance(value, (int, float)):
            rows.append((name, f"{value * 100:.2f}" if percent else str(value)))
        elif key in scores:
            rows.append((name, "-"))
    for key in sorted(scores):  # spans mode of bert_ner: spans_<key>_p/r/f
        if key.startswith("spans_") and key[-2:] in ("_p", "_r", "_f"):
            value = scores[key]
            shown = f"{value * 100:.2f}" if isinstance(value, (int, float)) else "-"
            rows.append((f"Spans {key[6:-2]} {key[-1].upper()}", shown))
    return rows


def routing_summary(scores: Dict[str, Any]) -> List[str]:
    """One line per routing classifier (a `<prefix>_routed_accuracy` key): the
    in-scope docs routed right, the coverage and the out-of-scope recall, in
    percent, its score prefix first unless it is "cats"."""
    lines = []
    for key in sorted(scores):
        if not key.endswith("_routed_accuracy") or scores[key] is None:
            continue
        prefix = key[: -len("_routed_accuracy")]
        right, coverage, oos = (
            _percent(scores.get(f"{prefix}_{name}"))
            for name in ("routed_accuracy", "coverage", "oos_r")
        )
        lines.append(
            ("" if prefix == "cats" else f"{prefix}: ")
            + f"routed right {right}, coverage {coverage}, out-of-scope recall {oos}"
            + (" (no out-of-scope docs)" if oos == "-" else "")
        )
    return lines


def _percent(value: Any) -> str:
    return f"{value * 100:.2f}" if isinstance(value, (int, float)) else "-"


# --- records -------------------------------------------------------------------


def _textcat_record(pipe: BertTextCategorizer, eg: Example) -> Dict[str, Any]:
    labels = pipe.labels
    predicted_cats = {label: eg.predicted.cats.get(label) for label in labels}
    known = {k: v for k, v in predicted_cats.items() if v is not None}
    gold = [label for label in labels if eg.reference.cats.get(label, 0.0) >= 0.5]
    if pipe.exclusive:
        predicted = [max(known, key=lambda k: known[k])] if known else []
    else:
        threshold = pipe.cfg["threshold"]
        predicted = [label for label, value in known.items() if value >= threshold]
    shown = dict.fromkeys(gold + predicted)
    record = {
        "task": "textcat",
        "score_prefix": pipe.cfg.get("score_prefix", "cats"),
        "exclusive": pipe.exclusive,
        "gold": gold,
        "predicted": predicted,
        "scores": {label: round(float(known[label]), 4) for label in shown if label in known},
    }
    route = eg.predicted._.get(pipe.router.attr) if pipe.exclusive else None
    if route:
        record["route"] = {
            "decision": route["decision"],
            "confidence": round(float(route["confidence"]), 4),
        }
    return record


def _ner_spans(pipe: BertEntityRecognizer, doc: Doc) -> List[Span]:
    # As the scorer reads them: the span group in "spans" mode when the doc has it.
    key = pipe.cfg["spans_key"]
    if pipe.cfg["annotate"] == "spans" and key in doc.spans:
        return list(doc.spans[key])
    return list(doc.ents)


def _ner_record(pipe: BertEntityRecognizer, eg: Example) -> Dict[str, Any]:
    def entity(span: Span, with_score: bool) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "start": span.start_char,
            "end": span.end_char,
            "label": span.label_,
            "text": span.text,
        }
        if with_score:
            score = span._.get(SCORE_ATTR) if Span.has_extension(SCORE_ATTR) else None
            out["score"] = None if score is None else round(float(score), 4)
        return out

    return {
        "task": "ner",
        "gold": [entity(span, False) for span in _ner_spans(pipe, eg.reference)],
        "predicted": [entity(span, True) for span in _ner_spans(pipe, eg.predicted)],
    }


def question_scores(prediction: str, answers: List[Dict[str, Any]]) -> Tuple[float, float]:
    """Exact match and F1 of one prediction, as `score_qa` computes them: against
    the best-matching reference answer, where references that normalize to
    nothing are dropped and none left means "no answer" ("")."""
    references = [a["text"] for a in answers if normalize_answer(a["text"])] or [""]
    exact = max(exact_match(prediction, r) for r in references)
    f1 = max(token_f1(prediction, r) for r in references)
    return exact, f1


def _qa_record(pipe: BertQuestionAnswerer, eg: Example) -> Dict[str, Any]:
    gold = eg.reference._.get("gold_answers") or {}
    # The best-ranked answer per question, as the scorer takes it.
    best: Dict[str, Dict[str, Any]] = {}
    for answer in eg.predicted._.get("answers") or []:
        if answer["key"] not in best or answer["rank"] < best[answer["key"]]["rank"]:
            best[answer["key"]] = answer
    asked = dict(pipe.cfg["questions"])
    asked.update(eg.reference._.get("questions") or {})
    questions = []
    for key, answers in gold.items():
        prediction = best.get(key, {}).get("text") or ""
        exact, f1 = question_scores(prediction, answers)
        score = best.get(key, {}).get("score")
        questions.append(
            {
                "key": key,
                "question": best.get(key, {}).get("question") or asked.get(key),
                "predicted": prediction,
                "score": None if score is None else round(float(score), 4),
                "gold": [a["text"] for a in answers],
                "exact": exact,
                "f1": f1,
            }
        )
    return {"task": "qa", "questions": questions}
