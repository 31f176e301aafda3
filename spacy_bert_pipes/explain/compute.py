"""What `explain` computes: the encoder a component runs, its attention for one
window of the text, the chosen layers and heads, and the [CLS] attention each spaCy
token receives. With an output folder the result is drawn by `page.render`."""

from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy
from spacy.language import Language
from thinc.api import Model

from ..models.encoder.listener import EncoderListener
from ..pipeline.encoder import BertEncoderPipe
from ..pipeline.ner import BertEntityRecognizer
from ..pipeline.qa import BertQuestionAnswerer
from ..pipeline.textcat_pipe import BertTextCategorizer
from .attention import AttentionMaps, encoder_attention
from .page import render
from .types import EncoderTarget, ExplainError, ExplainResult, WordAttention


def explain(
    nlp: Language,
    text: str,
    *,
    component: Optional[str] = None,
    layers: Sequence[int] = (-1,),
    heads: Optional[Sequence[int]] = None,
    question: Optional[str] = None,
    window: int = 0,
    output_dir: Optional[Union[str, Path]] = None,
) -> ExplainResult:
    """Compute, and draw if `output_dir` is given, the attention of a component's
    encoder for a text.

    nlp (Language): A pipeline with a bert_encoder, bert_textcat, bert_ner or bert_qa.
    text (str): The text (for bert_qa: the context).
    component (Optional[str]): The component whose encoder to explain (default: the
        first component with one). A listener is explained through its upstream
        bert_encoder.
    layers (Sequence[int]): Layers to draw, 0-based; negative counts from the end.
    heads (Optional[Sequence[int]]): Heads to draw and average (default: all).
    question (Optional[str]): For bert_qa: the question paired with the text
        (default: the component's first fixed question).
    window (int): Which window of a text longer than the encoder's window (0-based).
    output_dir (Optional[Union[str, Path]]): Where to write the PNGs and HTML page;
        None only computes.
    RETURNS (ExplainResult): The weights, the chosen layers and heads and the files.
    """
    if not text.strip():
        raise ExplainError("The text is empty: there is nothing to explain")
    target = find_encoder(nlp, component)
    if target.pairs:
        if question is None:
            if not target.questions:
                raise ExplainError(
                    f"'{target.component}' encodes question and context pairs: give a "
                    "question (it has no fixed questions to take one from)"
                )
            question = next(iter(target.questions.values()))
        if not question.strip():
            raise ExplainError("The question is empty")
    elif question is not None:
        raise ExplainError(
            f"'{target.component}' encodes single texts; a question is only for a bert_qa component"
        )
    try:
        maps = encoder_attention(
            target.encoder, text, question=question, window=window, **target.window_settings
        )
    except ValueError as err:
        raise ExplainError(str(err)) from err
    if maps.pieces[1] == maps.pieces[0]:
        raise ExplainError(f"The text {text!r} has no wordpieces to explain")
    chosen_layers = _select(layers, maps.n_layers, "layer")
    chosen_heads = _select(range(maps.n_heads) if heads is None else heads, maps.n_heads, "head")
    # (layers, seq): the [CLS] row, averaged over the chosen heads
    cls_attention = maps.weights[:, chosen_heads, 0, :].mean(axis=1)
    words = _word_scores(nlp, text, question, maps, cls_attention[chosen_layers[0]])
    result = ExplainResult(
        text=text,
        component=target.component,
        encoder_component=target.encoder_component,
        attention=maps,
        layers=chosen_layers,
        heads=chosen_heads,
        cls_attention=cls_attention,
        words=words,
        question=question,
        notes=_notes(nlp, target.component),
    )
    if output_dir is not None:
        render(result, Path(output_dir), source=str(target.encoder.attrs.get("source", "")))
    return result


def find_encoder(nlp: Language, component: Optional[str] = None) -> EncoderTarget:
    """The encoder a component runs (default: the first component with one).

    nlp (Language): The pipeline.
    component (Optional[str]): A component name.
    RETURNS (EncoderTarget): The encoder and how the component builds its windows.
    """
    if component is None:
        for name, _ in nlp.pipeline:
            target = _target(nlp, name)
            if target is not None:
                return target
        raise ExplainError(
            "The pipeline has no component with a BERT encoder (its components: "
            f"{', '.join(nlp.pipe_names) or 'none'})"
        )
    if component not in nlp.pipe_names:
        raise ExplainError(
            f"The pipeline has no component '{component}' (its components: "
            f"{', '.join(nlp.pipe_names) or 'none'})"
        )
    target = _target(nlp, component)
    if target is None:
        with_encoder = [name for name in nlp.pipe_names if _target(nlp, name) is not None]
        raise ExplainError(
            f"'{component}' has no BERT encoder to explain (components with one: "
            f"{', '.join(with_encoder) or 'none'})"
        )
    return target


def _target(nlp: Language, name: str) -> Optional[EncoderTarget]:
    pipe = nlp.get_pipe(name)
    if isinstance(pipe, BertEncoderPipe):
        return EncoderTarget(name, name, pipe.model)
    model = getattr(pipe, "model", None)
    if not isinstance(model, Model) or not model.has_ref("encoder"):
        return None
    encoder = model.get_ref("encoder")
    if isinstance(encoder, EncoderListener):
        upstream, upstream_pipe = _upstream(nlp, name, encoder)
        return EncoderTarget(name, upstream, upstream_pipe.model)
    if encoder.name != "bert_encoder":
        return None
    if isinstance(pipe, BertQuestionAnswerer):
        settings = {
            "max_length": model.attrs["max_seq_len"],
            "stride": model.attrs["doc_stride"],
            "max_question_length": model.attrs["max_question_len"],
        }
        return EncoderTarget(name, name, encoder, True, settings, dict(pipe.cfg["questions"]))
    return EncoderTarget(name, name, encoder)


def _notes(nlp: Language, component: str) -> List[str]:
    """How the component reads the encoder, when [CLS] is not what its head reads."""
    pipe = nlp.get_pipe(component)
    if isinstance(pipe, BertTextCategorizer) and pipe.model.attrs.get("pooling") == "mean":
        return [
            f"'{component}' classifies the mean of all wordpiece vectors, not the [CLS] "
            "vector: the [CLS] row shows what [CLS] gathers, while every row of the "
            "heatmap feeds the classifier."
        ]
    if isinstance(pipe, BertEntityRecognizer):
        return [
            f"'{component}' tags each token from its own wordpiece vectors: a token's row "
            "in the heatmap shows what it gathers; the [CLS] row is only a summary."
        ]
    if isinstance(pipe, BertQuestionAnswerer):
        return [
            f"'{component}' scores answer starts and ends from each context wordpiece's "
            "vector (and the null answer from [CLS]): read the context rows of the heatmap."
        ]
    return []


def _upstream(nlp: Language, name: str, listener: EncoderListener) -> Tuple[str, BertEncoderPipe]:
    """The bert_encoder component a listener reads from."""
    for other, pipe in nlp.pipeline:
        if isinstance(pipe, BertEncoderPipe) and name in pipe.listening_components:
            return other, pipe
    before = nlp.pipeline[: nlp.pipe_names.index(name)]
    for other, pipe in reversed(before):
        if isinstance(pipe, BertEncoderPipe) and listener.upstream_name in ("*", other):
            return other, pipe
    raise ExplainError(
        f"'{name}' listens to {listener.upstream_label}, which is not in the pipeline"
    )


def _select(asked: Sequence[int], n: int, what: str) -> List[int]:
    """Check 0-based (or negative) indices against `n` and make them non-negative,
    dropping repeats."""
    if len(asked) == 0:
        raise ExplainError(f"No {what} chosen")
    chosen: List[int] = []
    for index in asked:
        if not -n <= index < n:
            raise ExplainError(
                f"{what} {index} is out of range: the encoder has {n} {what}s "
                f"(0 to {n - 1}, or -1 to -{n} from the end)"
            )
        if index % n not in chosen:
            chosen.append(index % n)
    return chosen


def _word_scores(
    nlp: Language,
    text: str,
    question: Optional[str],
    maps: AttentionMaps,
    scores: numpy.ndarray,
) -> List[WordAttention]:
    """Sum the [CLS] attention of each spaCy token's wordpieces (by character overlap)."""
    words: List[WordAttention] = []
    parts: List[Tuple[str, bool]] = [(question, True)] if question is not None else []
    parts.append((text, False))
    for part, is_question in parts:
        offsets = numpy.asarray(maps.offsets)
        rows = numpy.nonzero((maps.is_question == int(is_question)) & (offsets[:, 0] >= 0))[0]
        starts, ends = offsets[rows, 0], offsets[rows, 1]
        for token in nlp.make_doc(part):
            if token.is_space:
                continue
            begin, end = token.idx, token.idx + len(token)
            inside = rows[(starts < end) & (ends > begin)]
            score = float(scores[inside].sum()) if len(inside) else None
            words.append(WordAttention(token.text, begin, end, score, is_question))
    return words
