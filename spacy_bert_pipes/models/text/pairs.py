"""How a checkpoint lays out a pair of texts (a question and its context): read
from its own tokenizer, as transformers' question-answering pipeline reads it.

BERT, DistilBERT, ALBERT, ELECTRA and DeBERTa read `[CLS] a [SEP] b [SEP]`,
the second text in segment 1; RoBERTa and XLM-R read `<s> a </s></s> b </s>`,
all in segment 0 (their checkpoints have one segment embedding, or none).
"""

from dataclasses import dataclass
from typing import Any, List, Tuple

# Two texts whose wordpieces every vocabulary has (byte-level, WordPiece and
# SentencePiece alike), found again in the encoded pair.
_FIRST, _SECOND = "a", "b"


@dataclass(frozen=True)
class PairTemplate:
    """The special tokens around two texts, and the second text's segment.

    cls_id (int): The token before the first text.
    middle (Tuple[int, ...]): The tokens between the texts: ([SEP],) or (</s>, </s>).
    end (Tuple[int, ...]): The tokens after the second text.
    second_type (int): The segment id of the second text and the end (0 where
        the model has a single segment); the cls and the middle are in segment 0.
    """

    cls_id: int
    middle: Tuple[int, ...]
    end: Tuple[int, ...]
    second_type: int

    @property
    def n_special(self) -> int:
        """Special tokens in a pair: the [CLS], the middle and the end."""
        return 1 + len(self.middle) + len(self.end)


def read_pair_template(tokenizer: Any, n_segments: int, name: str) -> PairTemplate:
    """The pair layout `tokenizer` makes (its post-processor's template).

    n_segments (int): The model's segment embeddings (`type_vocab_size`; 0 where
        it reads no segment ids): with fewer than two, the second text stays in
        segment 0, whatever the tokenizer says.
    name (str): The checkpoint, for errors.
    """
    first = _pieces(tokenizer, _FIRST)
    second = _pieces(tokenizer, _SECOND)
    encoded = tokenizer(_FIRST, _SECOND, return_token_type_ids=True)
    ids: List[int] = list(encoded["input_ids"])
    types: List[int] = list(encoded.get("token_type_ids") or [0] * len(ids))
    i = _find(ids, first, 0)
    j = _find(ids, second, i + len(first)) if i >= 0 else -1
    cls_id = tokenizer.cls_token_id
    if i != 1 or j < 0 or ids[0] != cls_id:
        raise ValueError(
            f"The tokenizer of {name} does not put its classification token "
            f"({tokenizer.cls_token!r}) before a pair of texts (it makes {ids} of "
            f"{_FIRST!r} and {_SECOND!r}): bert_qa and text pairs need a checkpoint "
            "whose tokenizer does"
        )
    k = j + len(second)
    head, tail = types[:j], types[j:]
    if any(head) or len(set(tail)) > 1:
        raise ValueError(
            f"The tokenizer of {name} gives segment ids {types} to a pair: not the first "
            "text and the tokens after it in segment 0, the second text and its end in one "
            "segment"
        )
    second_type = tail[0] if n_segments >= 2 and tail[0] < n_segments else 0
    return PairTemplate(
        cls_id=int(cls_id),
        middle=tuple(int(x) for x in ids[i + len(first) : j]),
        end=tuple(int(x) for x in ids[k:]),
        second_type=int(second_type),
    )


def _pieces(tokenizer: Any, text: str) -> List[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _find(ids: List[int], part: List[int], start: int) -> int:
    """The first index >= start where `part` occurs in `ids`, or -1."""
    for index in range(start, len(ids) - len(part) + 1):
        if ids[index : index + len(part)] == part:
            return index
    return -1
