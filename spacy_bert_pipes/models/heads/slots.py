"""Fixed questions answered from a doc's own encoding: one encoder pass for all.

`bert_qa` with `QAModel` runs `[CLS] question [SEP] context [SEP]` through the
encoder once per question. The questions fixed in the config are the same for
every doc, so `SlotQAModel` learns, for each of them, a start and an end scorer
over the doc's wordpiece vectors (as span extractors for slots do, e.g.
Span-ConveRT), and a null ("no answer") score from its [CLS] vector. The doc's
encoding can come from a shared `bert_encoder` (a listener), so the fixed
questions cost no encoder pass of their own. A question that arrives with a doc
has no trained scorer: it needs `QAModel`.

The output is `QAModel`'s: a `DocQAScores` per doc, one window per question that
spans the whole doc (index 0 the null score, 1 + i wordpiece i), so `bert_qa`
decodes, scores and writes answers exactly as it does for question/context pairs.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple, cast

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init
from thinc.types import Floats1d, Floats2d, Ints1d, Ints2d

from ..types import DocEncoding, DocEncodingGrad
from .qa_types import DocQAScores, QAQuery, WindowLogits

# The attr holding the fixed questions, in the order of the scorers' rows: set
# by `bert_qa` in `initialize` and saved with the weights (the rows are learned).
QUESTIONS_ATTR = "slot_questions"


@registry.architectures("spacy-bert-pipes.SlotQAModel.v1")
def SlotQAModel(encoder: Model[List[Doc], List[DocEncoding]]) -> Model[List[QAQuery], List[Any]]:
    """Start/end logits of each fixed question over each doc's own wordpieces.

    encoder (Model[List[Doc], List[DocEncoding]]): A BertEncoder, or an
        EncoderListener to read the shared `bert_encoder` pass.
    """
    return Model(
        "slot_qa",
        _forward,
        init=_init,
        layers=[encoder],
        refs={"encoder": encoder},
        dims={"nI": None, "nO": None},
        params={"W": None, "b": None},
        attrs={QUESTIONS_ATTR: None},
    )


def is_slot_model(model: Model) -> bool:
    """Whether a bert_qa model answers fixed questions from the doc's encoding."""
    return QUESTIONS_ATTR in model.attrs


def set_questions(model: Model, questions: List[str]) -> None:
    """Give the model its fixed questions (before `initialize`: one start and one
    end scorer each)."""
    if not questions:
        raise ValueError(
            "SlotQAModel answers the questions fixed in the component's config, and "
            "none are set: add [components.<name>.questions]"
        )
    model.attrs[QUESTIONS_ATTR] = list(questions)


def _init(model: Model, X: Optional[Any] = None, Y: Optional[Any] = None) -> None:
    questions = model.attrs[QUESTIONS_ATTR]
    if not questions:
        raise ValueError("SlotQAModel has no questions: bert_qa sets them in initialize")
    encoder = model.get_ref("encoder")
    if encoder.has_dim("nO") is not True:
        encoder.initialize()
    width = encoder.get_dim("nO")
    n_out = 2 * len(questions)  # start, end of each question, interleaved
    model.set_dim("nI", width, force=True)
    model.set_dim("nO", n_out, force=True)
    model.set_param("W", glorot_uniform_init(model.ops, (n_out, width)))
    model.set_param("b", model.ops.alloc1f(n_out))


def _forward(
    model: Model, queries: List[QAQuery], is_train: bool
) -> Tuple[List[DocQAScores], Callable]:
    ops = model.ops
    rows = _question_rows(model, queries)
    docs = [query.doc for query in queries]
    encodings, backprop_encoder = model.layers[0](docs, is_train)
    W = cast(Floats2d, model.get_param("W"))  # (2 * n_questions, width)
    b = cast(Floats1d, model.get_param("b"))  # (2 * n_questions,)
    inputs: List[Floats2d] = []
    outputs: List[DocQAScores] = []
    for doc, encoding, doc_rows in zip(docs, encodings, rows):
        # [CLS] (the null answer's row), then the doc's wordpieces: (1 + n, width)
        X = ops.xp.concatenate([encoding.cls[None, :], encoding.wordpieces])
        logits = ops.affine(X, W, b)  # (1 + n, 2 * n_questions)
        n = len(encoding.wordpieces)
        questions = [
            [WindowLogits(0, n, logits[:, 2 * q].copy(), logits[:, 2 * q + 1].copy())]
            for q in doc_rows
        ]
        offsets = cast(Ints2d, ops.to_numpy(encoding.offsets).reshape((-1, 2)).astype("i"))
        outputs.append(
            DocQAScores(
                offsets=offsets,
                words=_token_of_pieces(doc, offsets),
                questions=questions,
                truncated=[False] * len(doc_rows),
            )
        )
        inputs.append(X)

    def backprop(d_outputs: List[List[List[Optional[Floats2d]]]]) -> List[Doc]:
        """d_outputs[doc][question][0]: d(logits) (1 + n, 2), or None."""
        grads: List[DocEncodingGrad] = []
        for X, doc_rows, d_doc in zip(inputs, rows, d_outputs):
            d_logits = ops.alloc2f(X.shape[0], W.shape[0])  # (1 + n, 2 * n_questions)
            for q, d_question in zip(doc_rows, d_doc):
                if d_question and d_question[0] is not None:
                    d_logits[:, 2 * q : 2 * q + 2] += d_question[0]
            model.inc_grad("W", ops.gemm(d_logits, X, trans1=True))
            model.inc_grad("b", d_logits.sum(axis=0))
            d_X = ops.gemm(d_logits, W)  # (1 + n, width)
            grads.append(DocEncodingGrad(d_cls=d_X[0], d_wordpieces=d_X[1:]))
        backprop_encoder(grads)
        return []

    return outputs, backprop


def _question_rows(model: Model, queries: List[QAQuery]) -> List[List[int]]:
    """The scorer row of each question asked of each doc."""
    known = model.attrs[QUESTIONS_ATTR] or []
    row_of: Dict[str, int] = {question: i for i, question in enumerate(known)}
    rows = []
    for index, query in enumerate(queries):
        missing = [q for q in query.questions if q not in row_of]
        if missing:
            raise ValueError(
                f"Doc {index} is asked {missing[0]!r}, which is not one of the fixed "
                f"questions this bert_qa was trained to answer from the doc's own encoding "
                f"({len(known)}: {known[:5]}): a question that comes with a doc needs "
                "spacy-bert-pipes.QAModel.v1 (a question/context pass of its own)"
            )
        rows.append([row_of[q] for q in query.questions])
    return rows


def _token_of_pieces(doc: Doc, offsets: Ints2d) -> Ints1d:
    """The spaCy token holding the start of each wordpiece: the "words" answers
    are widened to with `align_to_words`. (n_pieces,)"""
    starts = numpy.fromiter((token.idx for token in doc), dtype="int64", count=len(doc))
    if not len(starts):
        return cast(Ints1d, numpy.zeros((len(offsets),), dtype="i"))
    index = numpy.searchsorted(starts, numpy.asarray(offsets)[:, 0], side="right") - 1
    return cast(Ints1d, numpy.maximum(index, 0).astype("i"))
