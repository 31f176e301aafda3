"""Sentence-embedding pooling of an encoder's vectors: the checkpoint's own recipe.

A sentence-transformers checkpoint says how its sentence vector is made: the
folder's `modules.json` lists a Transformer, a `Pooling` module (its
`config.json` picks [CLS], max, mean or mean/sqrt(length) pooling, concatenated
when several are on) and optionally `Normalize` (unit length). all-MiniLM-L6-v2
is mean pooling plus normalisation. A checkpoint without `modules.json` gets
mean pooling, not normalised.

Which positions are pooled: sentence-transformers averages every position its
attention mask covers, so [CLS] and [SEP] count like any wordpiece. A
DocEncoding keeps the [CLS] vector, the [SEP] vector and the text's wordpieces,
which are exactly those positions. A text longer than one window is pooled over
its merged wordpieces (each counted once, from its max-context window) plus the
[CLS] and [SEP] vectors averaged over its windows: the pooling of one long
sequence in which every wordpiece appears once.

Plain numpy (or cupy) here, no torch.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy
from thinc.api import get_array_module
from thinc.types import Floats1d, Floats2d

from ..types import DocEncoding

# sentence-transformers' pooling modes, in the order it concatenates them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len")
# The keys of sentence-transformers' 1_Pooling/config.json for each mode.
_ST_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
}
# Modes of newer sentence-transformers' single `pooling_mode` string.
_ST_NAMES = {
    "cls": "cls",
    "max": "max",
    "mean": "mean",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "mean_sqrt_len": "mean_sqrt_len",
}
_UNSUPPORTED_KEYS = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


@dataclass(frozen=True)
class Pooling:
    """How a text's vectors become one vector.

    modes (Tuple[str, ...]): Pooling modes from POOLING_MODES, concatenated in
        that order when several are given.
    normalize (bool): Scale the pooled vector to unit length.
    source (str): Where the recipe was read, for messages ("" when set by hand).
    max_seq_length (Optional[int]): The checkpoint's sentence-transformers input
        limit in wordpieces (texts longer than it are cut by sentence-transformers
        and windowed by us), when it says.
    """

    modes: Tuple[str, ...] = ("mean",)
    normalize: bool = False
    source: str = ""
    max_seq_length: Optional[int] = None

    def __post_init__(self) -> None:
        if not self.modes:
            raise ValueError("Pooling needs at least one mode")
        unknown = [m for m in self.modes if m not in POOLING_MODES]
        if unknown:
            raise ValueError(
                f"Unknown pooling mode(s) {unknown}: expected some of {', '.join(POOLING_MODES)}"
            )
        ordered = tuple(m for m in POOLING_MODES if m in self.modes)
        object.__setattr__(self, "modes", ordered)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "modes": list(self.modes),
            "normalize": self.normalize,
            "source": self.source,
            "max_seq_length": self.max_seq_length,
        }

    @classmethod
    def from_dict(cls, msg: Dict[str, Any]) -> "Pooling":
        return cls(
            modes=tuple(msg["modes"]),
            normalize=bool(msg["normalize"]),
            source=str(msg.get("source", "")),
            max_seq_length=msg.get("max_seq_length"),
        )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read the pooling recipe: {error}") from error


def read_pooling(folder: str) -> Pooling:
    """The pooling recipe of a checkpoint folder (sentence-transformers layout).

    folder (str): A Hugging Face checkpoint folder.
    RETURNS (Pooling): Its recipe; mean pooling, not normalised, when the folder
        has no modules.json.
    """
    root = Path(folder)
    max_seq_length = None
    st_config = root / "sentence_bert_config.json"
    if st_config.exists():
        max_seq_length = _read_json(st_config).get("max_seq_length")
    modules_path = root / "modules.json"
    if not modules_path.exists():
        return Pooling(("mean",), False, str(root), max_seq_length)
    modules = _read_json(modules_path)
    if not isinstance(modules, list):
        raise ValueError(
            f"{modules_path}: expected a list of modules, got {type(modules).__name__}"
        )
    modes: Tuple[str, ...] = ("mean",)
    normalize = False
    for module in modules:
        kind = str(module.get("type", ""))
        if kind.endswith(".Normalize"):
            normalize = True
        elif kind.endswith(".Pooling"):
            config_path = root / str(module.get("path", "")) / "config.json"
            modes = _pooling_modes(config_path)
    return Pooling(modes, normalize, str(root), max_seq_length)


def _pooling_modes(config_path: Path) -> Tuple[str, ...]:
    config = _read_json(config_path)
    if isinstance(config.get("pooling_mode"), str):
        name = config["pooling_mode"]
        if name not in _ST_NAMES:
            raise ValueError(
                f"{config_path}: pooling_mode {name!r} is not supported (supported: "
                f"{', '.join(sorted(_ST_NAMES))})"
            )
        return (_ST_NAMES[name],)
    for key in _UNSUPPORTED_KEYS:
        if config.get(key):
            raise ValueError(f"{config_path}: {key} is not supported")
    modes = tuple(mode for mode, key in _ST_KEYS.items() if config.get(key))
    if not modes:
        raise ValueError(f"{config_path}: no pooling mode is switched on")
    return modes


def pool(vectors: Floats2d, pooling: Pooling, cls: Optional[Floats1d] = None) -> Floats1d:
    """Pool rows of vectors by the recipe.

    vectors (Floats2d): The positions to pool (for a doc: [CLS], wordpieces,
        [SEP]). (n, width)
    pooling (Pooling): The recipe.
    cls (Optional[Floats1d]): The vector "cls" pooling takes; without one (a span
        has no [CLS]) "cls" falls back to the mean. (width,)
    RETURNS (Floats1d): (width * len(pooling.modes),), float32.
    """
    xp = get_array_module(vectors)
    rows: Any = vectors
    n, width = rows.shape
    parts = []
    for mode in pooling.modes:
        if mode == "cls" and cls is not None:
            parts.append(cls)
        elif mode == "max":
            parts.append(rows.max(0) if n else xp.zeros((width,), dtype="f"))
        elif mode == "mean_sqrt_len":
            parts.append(rows.sum(0, dtype="f") / max(numpy.sqrt(n), 1e-9))
        else:  # mean, or cls without a [CLS]
            parts.append(rows.sum(0, dtype="f") / max(n, 1))
    out: Any = parts[0] if len(parts) == 1 else xp.concatenate(parts)
    out = out.astype("f", copy=False)
    if pooling.normalize:
        # sentence-transformers' Normalize: F.normalize, eps 1e-12
        out = out / max(float(xp.linalg.norm(out)), 1e-12)
    return out


def doc_positions(encoding: DocEncoding) -> Floats2d:
    """Every position a sentence-transformers model pools for the text: [CLS],
    the wordpieces and [SEP] (without [SEP] when the encoding lacks it). (n, width)"""
    xp = get_array_module(encoding.wordpieces)
    cls: Any = encoding.cls
    rows: List[Any] = [cls[None, :], encoding.wordpieces]
    if encoding.sep is not None:
        sep: Any = encoding.sep
        rows.append(sep[None, :])
    return xp.concatenate(rows)


def pool_doc(encoding: DocEncoding, pooling: Pooling) -> Floats1d:
    """A text's sentence vector from its encoding, by the checkpoint's recipe."""
    return pool(doc_positions(encoding), pooling, cls=encoding.cls)
