"""Plain data passed between the encoder and the heads (no torch here)."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Literal, Optional

import srsly
from thinc.types import Floats1d, Floats2d, Ints2d

# The values of BertEncoder.v2's `precision` and `predict_precision` settings.
Precision = Literal["fp32", "bf16", "fp16", "int8", "tf32", "auto"]


@dataclass
class BatchSlice:
    """Where a DocEncoding's wordpieces sit in the array of the batch it was
    encoded in: `array[start : start + n_pieces]`. Heads use it to read a whole
    batch's wordpieces without copying them; it is not serialized."""

    array: Floats2d  # (n_pieces of the batch, width)
    start: int


@dataclass
class DocEncoding:
    """The encoder's output for one Doc, after its windows are merged.

    cls (Floats1d): The [CLS] vector, averaged over the doc's windows. (width,)
    wordpieces (Floats2d): One vector per wordpiece of the text, each taken from the
        window where that wordpiece has the most context on both sides. (n_pieces, width)
    offsets (Ints2d): Character offsets of each wordpiece in `doc.text`, end exclusive.
        (n_pieces, 2)
    sep (Optional[Floats1d]): The final [SEP] vector, averaged like `cls`: with
        `cls` and `wordpieces` it makes up every position sentence-transformers'
        mean pooling averages (see `models/encoder/pooling.py`). None from encoders that do
        not record it. (width,)
    branches (Dict[str, DocEncoding]): The same doc through each branch, a head's
        own top layers (`models/transformer/branches.py`), by the name of the head it serves.
    """

    cls: Floats1d
    wordpieces: Floats2d
    offsets: Ints2d
    sep: Optional[Floats1d] = None
    batch: Optional[BatchSlice] = field(default=None, repr=False, compare=False)
    branches: Dict[str, "DocEncoding"] = field(default_factory=dict, repr=False)

    @property
    def width(self) -> int:
        return int(self.cls.shape[0])

    def to_dict(self) -> Dict[str, Any]:
        msg: Dict[str, Any] = {
            "cls": self.cls,
            "wordpieces": self.wordpieces,
            "offsets": self.offsets,
        }
        if self.sep is not None:
            msg["sep"] = self.sep
        if self.branches:
            msg["branches"] = {name: enc.to_dict() for name, enc in self.branches.items()}
        return msg

    @classmethod
    def from_dict(cls, msg: Dict[str, Any]) -> "DocEncoding":
        return cls(
            cls=msg["cls"],
            wordpieces=msg["wordpieces"],
            offsets=msg["offsets"],
            sep=msg.get("sep"),
            branches={
                name: cls.from_dict(enc) for name, enc in (msg.get("branches") or {}).items()
            },
        )


# Backprop callback of an encoder: gradients per doc for the [CLS] vector and
# (optionally) the wordpiece vectors, and those of the doc's branches by name.
@dataclass
class DocEncodingGrad:
    d_cls: Optional[Floats1d] = None
    d_wordpieces: Optional[Floats2d] = None
    branches: Dict[str, "DocEncodingGrad"] = field(default_factory=dict)

    def add(self, other: "DocEncodingGrad") -> None:
        """Sum `other` into these gradients (a new array where one is added)."""
        if other.d_cls is not None:
            self.d_cls = other.d_cls if self.d_cls is None else self.d_cls + other.d_cls
        if other.d_wordpieces is not None:
            if self.d_wordpieces is None:
                self.d_wordpieces = other.d_wordpieces
            else:
                self.d_wordpieces = self.d_wordpieces + other.d_wordpieces
        for name, grad in other.branches.items():
            self.branches.setdefault(name, DocEncodingGrad()).add(grad)


EncoderBackprop = Callable[[List[DocEncodingGrad]], List[Any]]


# Docs that carry a DocEncoding in `doc._.bert_encoding` must survive
# `Doc.to_bytes` (used by `nlp.pipe(n_process>1)` and DocBin): teach msgpack the type.
_MSGPACK_KEY = "__spacy_bert_pipes_doc_encoding__"


def _encode_doc_encoding(obj: Any, chain: Optional[Callable[[Any], Any]] = None) -> Any:
    if isinstance(obj, DocEncoding):
        return {_MSGPACK_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


def _decode_doc_encoding(obj: Any, chain: Optional[Callable[[Any], Any]] = None) -> Any:
    if isinstance(obj, dict) and _MSGPACK_KEY in obj:
        return DocEncoding.from_dict(obj[_MSGPACK_KEY])
    return obj if chain is None else chain(obj)


srsly.msgpack_encoders.register("spacy_bert_pipes_doc_encoding", func=_encode_doc_encoding)
srsly.msgpack_decoders.register("spacy_bert_pipes_doc_encoding", func=_decode_doc_encoding)
