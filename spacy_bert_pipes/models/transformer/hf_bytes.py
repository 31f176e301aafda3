"""A saved encoder's Hugging Face parts read back from their bytes, each checked.

`HFShim.to_bytes` saves the transformer's config as JSON with its weights as
safetensors, and the fast tokenizer's files; here they become a transformer and a
tokenizer again. A pipeline folder is untrusted input: a part that cannot be read
raises a DamagedEncoderError naming it, nothing is unpickled, no remote code runs,
and the tokenizer's file names and settings cannot reach outside a temporary folder.
"""

import json
import tempfile
from pathlib import Path
from typing import Any, Dict

import torch
from safetensors.torch import load as load_safetensors

from .serial import DamagedEncoderError, safe_file_name, without_file_settings


def transformer_from_bytes(msg: Dict[str, Any]) -> torch.nn.Module:
    """The saved transformer: built from its HF config, then given its weights."""
    from transformers import AutoConfig, AutoModel

    try:
        config_dict = json.loads(msg["config"])
        config = AutoConfig.for_model(**config_dict)
        transformer = AutoModel.from_config(config, trust_remote_code=False)
    except Exception as err:  # json, KeyError, transformers' ValueErrors on odd configs
        raise DamagedEncoderError("config", f"{type(err).__name__}: {err}") from err
    try:
        state = load_safetensors(msg["weights"])
    except Exception as err:  # safetensors raises its own SafetensorError
        raise DamagedEncoderError("weights", f"{type(err).__name__}: {err}") from err
    if getattr(transformer, "pooler", None) is not None and not any(
        key.startswith("pooler.") for key in state
    ):
        # The base model of a ...ForQuestionAnswering / ...ForTokenClassification
        # checkpoint is built without a pooler (add_pooling_layer=False), so it saves
        # none; AutoModel.from_config adds one. Rebuild what was saved.
        transformer.pooler = None
    try:
        transformer.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise DamagedEncoderError("weights", str(err)) from err
    return transformer


def tokenizer_from_bytes(files: Any) -> Any:
    """The saved fast tokenizer, written to a temporary folder under checked names
    and read back from there only."""
    from transformers import AutoTokenizer

    if not isinstance(files, dict) or not files:
        raise DamagedEncoderError("tokenizer", "no tokenizer files were saved")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp).resolve()
        for name, data in files.items():
            path = folder / safe_file_name(name)
            if path.parent != folder:  # safe_file_name already refuses paths
                raise DamagedEncoderError("tokenizer", f"file name {name!r} leaves its folder")
            if not isinstance(data, bytes):
                raise DamagedEncoderError("tokenizer", f"file {name!r} holds no bytes")
            if name == "tokenizer_config.json":
                data = _checked_tokenizer_config(data)
            with open(path, "xb") as f:  # "x": never follow or replace an existing file
                f.write(data)
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(folder), use_fast=True, local_files_only=True, trust_remote_code=False
            )
        except Exception as err:  # tokenizers' parse errors are plain Exceptions
            names = ", ".join(sorted(files))
            raise DamagedEncoderError(
                "tokenizer", f"{type(err).__name__}: {err} (files: {names})"
            ) from err
    if not getattr(tokenizer, "is_fast", False):
        raise DamagedEncoderError("tokenizer", "no fast tokenizer could be built from its files")
    return tokenizer


def _checked_tokenizer_config(data: bytes) -> bytes:
    try:
        settings = json.loads(data)
    except ValueError as err:
        raise DamagedEncoderError("tokenizer", f"tokenizer_config.json: {err}") from err
    if not isinstance(settings, dict):
        raise DamagedEncoderError("tokenizer", "tokenizer_config.json is not a JSON object")
    return json.dumps(without_file_settings(settings)).encode("utf8")
