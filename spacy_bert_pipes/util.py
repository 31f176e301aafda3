"""Loading a trained pipeline with its bert encoders switched to another precision.

Prediction precision is a setting of the encoder (`predict_precision` of
`spacy-bert-pipes.BertEncoder.v2`, `precision` of v1, which uses one precision for
training and prediction), so a saved pipeline keeps the one it was configured
with. `load_pipeline(path, precision=...)` overrides it in every encoder of the
pipeline (a `bert_encoder` component's model, or a head's own `model.encoder`) at
load time; listeners follow the encoder they listen to.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import spacy
from spacy.language import Language

from .models.types import Precision

ENCODER_ARCHITECTURE = "spacy-bert-pipes.BertEncoder.v1"
# The setting that holds each encoder version's prediction precision.
PREDICT_PRECISION_KEYS = {
    ENCODER_ARCHITECTURE: "precision",
    "spacy-bert-pipes.BertEncoder.v2": "predict_precision",
}


def encoder_config_paths(config: Dict[str, Any]) -> List[str]:
    """The dotted config paths of every BertEncoder (v1, v2) in a pipeline's config,
    e.g. ["components.bert_encoder.model", "components.bert_ner.model.encoder"].
    """
    return list(_encoders(config))


def _encoders(config: Dict[str, Any]) -> Dict[str, str]:
    """{dotted path: architecture} of every BertEncoder in a pipeline's config."""
    paths = {}
    for name, component in config.get("components", {}).items():
        model = component.get("model") or {}
        if model.get("@architectures") in PREDICT_PRECISION_KEYS:
            paths[f"components.{name}.model"] = model["@architectures"]
        encoder = model.get("encoder") or {}
        if isinstance(encoder, dict) and encoder.get("@architectures") in PREDICT_PRECISION_KEYS:
            paths[f"components.{name}.model.encoder"] = encoder["@architectures"]
    return paths


def load_pipeline(
    pipeline: Union[str, Path],
    *,
    precision: Optional[Precision] = None,
    config: Optional[Dict[str, Any]] = None,
) -> Language:
    """Load a pipeline, optionally with every bert encoder at another precision.

    pipeline (Union[str, Path]): A folder saved with `nlp.to_disk`, or a package name.
    precision (Optional[Precision]): The prediction precision: "fp32", "bf16",
        "fp16", "int8", "tf32" or "auto"; None keeps the one each encoder was saved
        with. (A v1 encoder's `precision`, a v2 encoder's `predict_precision`.)
    config (Optional[Dict[str, Any]]): Further config overrides, as for `spacy.load`.
    RETURNS (Language): The loaded pipeline.
    RAISES (ValueError): A precision was asked for, but the pipeline has no
        bert encoder.
    """
    overrides = dict(config or {})
    if precision is not None:
        saved = _saved_config(pipeline)
        paths = _encoders(saved)
        if not paths:
            names = ", ".join(saved.get("nlp", {}).get("pipeline", [])) or "none"
            raise ValueError(
                f"precision {precision!r} was asked for, but the pipeline {pipeline} has no "
                f"{ENCODER_ARCHITECTURE} whose precision it could set (its components: {names})"
            )
        overrides.update(
            {f"{path}.{PREDICT_PRECISION_KEYS[arch]}": precision for path, arch in paths.items()}
        )
    return spacy.load(pipeline, config=overrides)


def _saved_config(pipeline: Union[str, Path]) -> Dict[str, Any]:
    folder = Path(pipeline)
    if (folder / "config.cfg").exists():
        return dict(spacy.util.load_config(folder / "config.cfg", interpolate=False))
    # A package: load it once as it is to read its config.
    return dict(spacy.load(pipeline).config)
