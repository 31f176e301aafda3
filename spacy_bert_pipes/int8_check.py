"""The int8 check: does a pipeline keep its heads' scores when its encoders predict
in int8, and the mark that lets "auto" pick int8 on CPUs without fast bf16.

1. `check_int8` loads the pipeline twice, with every bert encoder at fp32 and at
   int8 (`loading.load_pipeline(precision=...)`), scores both on each corpus
   with the components' own scorers (`evaluate.evaluate`) and compares the
   scores the pipeline is trained for: the keys of its `[training.score_weights]`
   with a weight above zero (one per head, e.g. `cats_accuracy`, `ents_f`), or
   the keys asked for. A head passes where int8 loses at most `tolerance` points
   (a score of 0.8542 is 85.42 points); the pipeline passes when every head that
   scores above zero on some corpus does.
2. `mark_pipeline` writes the outcome into the pipeline folder: `int8_checked`
   in every `BertEncoder.v2` block of its config.cfg (what `resolve_precision`
   reads) and the figures under "int8_check" in its meta.json. `unmark_pipeline`
   takes a mark off a pipeline whose weights changed (`bert-pipes shrink` does it
   for its student).

int8's scales depend on the machine's kernels (ONNX Runtime's AVX2 and VNNI
kernels round differently), so the record names the CPU kind it was measured on.
"""

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import srsly
from confection import Config
from spacy.language import Language

from .evaluate import EvaluateError, evaluate, read_examples
from .loading import PipelineLoadError, encoder_config_paths, load_pipeline
from .models.transformer.precision import cpu_kind

# A head may lose this many points at int8 (the bar of docs/precision.md).
TOLERANCE = 0.3
# Where the record goes in meta.json, and the setting the mark sets.
META_KEY = "int8_check"
SETTING = "int8_checked"
ENCODER_V2 = "spacy-bert-pipes.BertEncoder.v2"


class Int8CheckError(ValueError):
    """The check cannot run or its outcome cannot be written."""


@dataclass
class ScoreCheck:
    """One score of one corpus at fp32 and at int8 (fractions, as spaCy's scorers
    give them)."""

    corpus: str
    key: str
    fp32: float
    int8: float

    @property
    def points(self) -> float:
        """What int8 changes, in points (negative: a loss)."""
        return round((self.int8 - self.fp32) * 100, 4)


@dataclass
class Int8Check:
    """What `check_int8` measured.

    pipeline (str): The pipeline checked.
    tolerance (float): The loss in points a head may have.
    cpu (str): The CPU kind the int8 scores were computed on (`cpu_kind`).
    docs (Dict[str, int]): Docs scored per corpus.
    scores (List[ScoreCheck]): Each judged score of each corpus.
    """

    pipeline: str
    tolerance: float
    cpu: str
    docs: Dict[str, int] = field(default_factory=dict)
    scores: List[ScoreCheck] = field(default_factory=list)

    def failed(self) -> List[ScoreCheck]:
        """The scores int8 lowers by more than the tolerance."""
        return [s for s in self.scores if s.points < -self.tolerance]

    def coarse(self) -> Dict[str, float]:
        """The corpora too small to tell the tolerance apart: {corpus: the points one
        doc is worth in a per-doc score (100 / docs)}, where that is above it."""
        return {
            corpus: round(100 / docs, 2)
            for corpus, docs in self.docs.items()
            if docs and 100 / docs > self.tolerance
        }

    @property
    def passed(self) -> bool:
        return bool(self.scores) and not self.failed()

    def to_dict(self) -> Dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        for row, score in zip(out["scores"], self.scores):
            row["points"] = score.points
        return out


def judged_keys(nlp: Language) -> List[str]:
    """The scores a pipeline is trained for: its `[training.score_weights]` keys with
    a weight above zero, in their order."""
    weights = dict(nlp.config.get("training", {}).get("score_weights") or {})
    return [key for key, weight in weights.items() if weight]


def check_int8(
    pipeline: Union[str, Path],
    corpora: Sequence[Path],
    *,
    keys: Optional[Sequence[str]] = None,
    tolerance: float = TOLERANCE,
    sample: int = 0,
    seed: int = 0,
    batch_size: Optional[int] = None,
) -> Int8Check:
    """Score a pipeline on each corpus at fp32 and at int8 and compare.

    pipeline (Union[str, Path]): A pipeline folder (or package name).
    corpora (Sequence[Path]): .spacy corpora, e.g. each head's dev set.
    keys (Optional[Sequence[str]]): The scores to compare (default: `judged_keys`).
    tolerance (float): The loss in points a score may have at int8.
    sample (int): Score a random sample of this many docs of each corpus (0: all).
    seed (int): The seed of the sample.
    batch_size (Optional[int]): Docs per batch (default: the pipeline's).
    RETURNS (Int8Check): Every judged score that is a number above zero at fp32 on
        a corpus (a head without gold docs in a corpus scores None or 0 there).
    RAISES (Int8CheckError): The pipeline cannot be loaded, has no bert encoder,
        a corpus cannot be read, or no judged score is measured on any corpus.
    """
    if tolerance < 0:
        raise Int8CheckError(f"tolerance = {tolerance}: it must be 0 or more points")
    if not corpora:
        raise Int8CheckError("no corpus to score the pipeline on")
    try:
        reference = load_pipeline(pipeline, precision="fp32")
        quantized = load_pipeline(pipeline, precision="int8")
    except (PipelineLoadError, ValueError) as err:
        raise Int8CheckError(str(err)) from err
    judged = list(keys or judged_keys(reference))
    if not judged:
        raise Int8CheckError(
            f"{pipeline}: its config has no [training.score_weights] above zero to tell "
            "which scores to compare; name them with keys (--score)"
        )
    check = Int8Check(str(pipeline), tolerance, cpu_kind())
    for path in corpora:
        try:
            fp32, check.docs[str(path)] = _scores(reference, path, sample, seed, batch_size)
            int8, _ = _scores(quantized, path, sample, seed, batch_size)
        except EvaluateError as err:
            raise Int8CheckError(str(err)) from err
        for key in judged:
            if _number(fp32.get(key)) and fp32[key] > 0 and _number(int8.get(key)):
                check.scores.append(ScoreCheck(str(path), key, fp32[key], int8[key]))
    if not check.scores:
        raise Int8CheckError(
            f"none of the scores {', '.join(judged)} was measured above zero on "
            f"{', '.join(str(p) for p in corpora)}: give each head's own corpus"
        )
    return check


def _scores(
    nlp: Language, path: Path, sample: int, seed: int, batch_size: Optional[int]
) -> Tuple[Dict[str, Any], int]:
    """The pipeline's scores on a corpus, and the docs scored."""
    examples = read_examples(nlp, path, sample=sample, seed=seed)
    return evaluate(nlp, examples, batch_size=batch_size).scores, len(examples)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mark_pipeline(folder: Union[str, Path], check: Int8Check) -> List[str]:
    """Write a check's outcome into a pipeline folder: `int8_checked = passed` in
    every BertEncoder.v2 of its config.cfg, the record in meta.json. Returns the
    config paths set.

    RAISES (Int8CheckError): Not a pipeline folder, or an encoder without the
        setting (BertEncoder.v1: one precision for training and prediction).
    """
    paths = _set_mark(Path(folder), check.passed)
    meta_path = Path(folder) / "meta.json"
    meta = srsly.read_json(meta_path) if meta_path.exists() else {}
    meta[META_KEY] = check.to_dict()
    srsly.write_json(meta_path, meta)
    return paths


def unmark_pipeline(folder: Union[str, Path]) -> bool:
    """Take an int8 mark off a pipeline folder whose heads or weights changed since
    the check: `int8_checked = false`, and no record in meta.json. Returns whether
    it had a mark."""
    folder = Path(folder)
    config = _read_config(folder)
    marked = any(_get(config, p).get(SETTING) for p in encoder_config_paths(config))
    if marked:
        _set_mark(folder, False)
    meta_path = folder / "meta.json"
    if meta_path.exists():
        meta = srsly.read_json(meta_path)
        if meta.pop(META_KEY, None) is not None:
            srsly.write_json(meta_path, meta)
    return marked


def _read_config(folder: Path) -> Config:
    path = folder / "config.cfg"
    if not path.is_file():
        raise Int8CheckError(f"{folder}: no config.cfg; not a pipeline folder")
    return Config().from_disk(path, interpolate=False)


def _set_mark(folder: Path, value: bool) -> List[str]:
    config = _read_config(folder)
    paths = encoder_config_paths(config)
    if not paths:
        raise Int8CheckError(f"{folder}: its config.cfg has no bert encoder to mark")
    for path in paths:
        block = _get(config, path)
        if block.get("@architectures") != ENCODER_V2:
            raise Int8CheckError(
                f"{folder}/config.cfg: [{path}] is {block.get('@architectures')}, which has "
                f"no {SETTING} setting (it uses one precision for training and prediction); "
                f"set its @architectures to {ENCODER_V2} to let 'auto' pick int8"
            )
        block[SETTING] = value
    config.to_disk(folder / "config.cfg", interpolate=False)
    return paths


def _get(config: Dict[str, Any], dotted: str) -> Dict[str, Any]:
    node: Dict[str, Any] = config
    for part in dotted.split("."):
        node = node[part]
    return node
