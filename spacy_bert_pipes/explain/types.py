"""What `explain` works with: the encoder a component runs, the [CLS] attention of
each word, the result, and the error for arguments that do not fit."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy
from thinc.api import Model

from .attention import AttentionMaps


class ExplainError(ValueError):
    """An argument of `explain` does not fit the pipeline or the text."""


@dataclass
class WordAttention:
    """The [CLS] attention received by one spaCy token of the text or question.

    score (Optional[float]): The sum over the token's wordpieces of the attention
        from [CLS] (chosen heads averaged, first chosen layer); None when none of its
        wordpieces is in the explained window.
    """

    text: str
    start: int
    end: int
    score: Optional[float]
    is_question: bool = False


@dataclass
class EncoderTarget:
    """Which encoder a component runs, and how it builds its windows.

    component (str): The component asked about.
    encoder_component (str): The component that owns the encoder (differs from
        `component` for a listener of a shared `bert_encoder`).
    encoder (Model): The spacy-bert-pipes.BertEncoder.v1.
    pairs (bool): Whether the component encodes question and context pairs (bert_qa).
    window_settings (Dict[str, int]): max_length, stride (and max_question_length).
    questions (Dict[str, str]): The component's fixed questions (bert_qa).
    """

    component: str
    encoder_component: str
    encoder: Model
    pairs: bool = False
    window_settings: Dict[str, int] = field(default_factory=dict)
    questions: Dict[str, str] = field(default_factory=dict)


@dataclass
class ExplainResult:
    """What `explain` computed and wrote.

    text (str): The text explained (for bert_qa: the context).
    component (str): The component asked about.
    encoder_component (str): The component owning the encoder that ran.
    attention (AttentionMaps): Wordpieces and weights (layers, heads, seq, seq) of
        the explained window, all layers and heads.
    layers (List[int]): The chosen layers (0-based, in the order asked).
    heads (List[int]): The chosen heads (0-based).
    cls_attention (numpy.ndarray): Attention from [CLS] to each position, averaged
        over the chosen heads, for every layer. (layers, seq)
    words (List[WordAttention]): The question's (if any) and the text's spaCy tokens
        with the [CLS] attention they receive in the first chosen layer.
    question (Optional[str]): The question of a question and context pair.
    notes (List[str]): What to keep in mind when reading the pictures of this component.
    files (List[Path]): The files written (none without an output folder).
    html (Optional[Path]): The HTML page, if written.
    """

    text: str
    component: str
    encoder_component: str
    attention: AttentionMaps
    layers: List[int]
    heads: List[int]
    cls_attention: numpy.ndarray
    words: List[WordAttention]
    question: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    files: List[Path] = field(default_factory=list)
    html: Optional[Path] = None

    @property
    def tokens(self) -> List[str]:
        return self.attention.tokens

    def head_mean(self, layer: int) -> numpy.ndarray:
        """Layer `layer`'s attention averaged over the chosen heads. (seq, seq)"""
        return self.attention.weights[layer, self.heads].mean(axis=0)
