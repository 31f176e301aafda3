"""A head's own top layers: the way out when a head cannot share the whole encoder.

A listener with `own_layers = n` reads its own copy of the encoder's top n
layers, started from the same weights and fed with the output of the shared
layers below them, in the same call as the shared encoder (`TransformerModule`).
The bottom L - n layers stay shared, so a pipeline pays 1 + n / L encoder passes
for it. These are the torch parts; `models/encoder/bert.py` splits the outputs per
branch and `pipeline/encoder.py` gives each listening component its branch.
"""

import copy
from typing import Any

import torch


def copy_top_layers(transformer: torch.nn.Module, own_layers: int) -> torch.nn.Module:
    """A copy of the transformer's layer stack (`transformer.encoder`, as in BERT,
    RoBERTa and ELECTRA) that keeps only its top `own_layers` layers."""
    stack: Any = getattr(transformer, "encoder", None)
    layers = getattr(stack, "layer", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"own_layers needs a BERT-style encoder with its layers in encoder.layer; "
            f"a {type(transformer).__name__} has none. Use own_layers = 0."
        )
    if not 0 < own_layers <= len(layers):
        raise ValueError(
            f"own_layers must be between 1 and the encoder's {len(layers)} layers: {own_layers}"
        )
    branch = copy.deepcopy(stack)
    branch.layer = torch.nn.ModuleList(list(branch.layer)[len(layers) - own_layers :])
    return branch


def run_branch(
    branch: torch.nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """The branch's layers over `hidden` (batch, length, width), the output of the
    shared layer below them, where `attention_mask` (batch, length) is 1 over real
    wordpieces; the additive mask the transformer builds for its own layers."""
    dtype = hidden.dtype
    extended = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    return branch(hidden, attention_mask=extended)[0]
