"""Helpers for tests of damaged pipelines: rewrite one part of a saved encoder."""

from pathlib import Path
from typing import Any, Callable, Dict

import srsly


def rewrite_encoder(
    model_file: Path, change: Callable[[Dict[str, Any]], None], key: str = "loaded"
) -> None:
    """Apply `change` to the saved encoder message (the HFShim's `to_bytes` dict,
    found by its `key`: "loaded" for ours, "tokenizer" for spacy-transformers')
    inside a component's `model` file, and write the file back."""
    msg = srsly.msgpack_loads(model_file.read_bytes())
    done = 0
    for node_shims in msg["shims"]:
        for i, shim_bytes in enumerate(node_shims):
            shim = srsly.msgpack_loads(shim_bytes)
            if isinstance(shim, dict) and shim.get(key):
                change(shim)
                node_shims[i] = srsly.msgpack_dumps(shim)
                done += 1
    assert done == 1, f"expected one loaded encoder in {model_file}, found {done}"
    model_file.write_bytes(srsly.msgpack_dumps(msg))
