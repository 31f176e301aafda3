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

# How a copied layer stack is called with the attention mask (an attribute of
# the copy, so that a branch rebuilt on load gets it again from the transformer):
# "additive": BERT-style stacks take (batch, 1, 1, length) additive masks;
# "ones": DeBERTa's (and eager DistilBERT's) take the (batch, length) mask of ones.
_MASK_ATTR = "bert_pipes_mask"
# Whether the copy is DistilBERT's stack, which names its arguments otherwise.
_DISTILBERT_ATTR = "bert_pipes_distilbert"


def checkpoint_name(transformer: torch.nn.Module) -> str:
    """The transformer's family and checkpoint, for errors."""
    config: Any = transformer.config
    name = getattr(config, "name_or_path", "") or ""
    return f"the {config.model_type} checkpoint {name}".rstrip()


def copy_top_layers(transformer: torch.nn.Module, own_layers: int) -> torch.nn.Module:
    """A copy of the transformer's layer stack (`transformer.encoder` in BERT,
    RoBERTa, XLM-R, ELECTRA and DeBERTa, `transformer.transformer` in DistilBERT)
    that keeps only its top `own_layers` layers."""
    config: Any = transformer.config
    if config.model_type == "albert":
        raise ValueError(
            f"own_layers = {own_layers} on {checkpoint_name(transformer)}: ALBERT runs one "
            "shared layer at every depth, so a head cannot own top layers of its own. "
            "Use own_layers = 0."
        )
    stack: Any = getattr(transformer, "encoder", None)
    mask = "ones" if config.model_type in ("deberta", "deberta-v2") else "additive"
    if config.model_type == "distilbert":
        stack = getattr(transformer, "transformer", None)
        mask = "additive" if config._attn_implementation == "sdpa" else "ones"
    layers = getattr(stack, "layer", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ValueError(
            f"own_layers = {own_layers} on {checkpoint_name(transformer)}: own layers need a "
            f"layer stack in encoder.layer; a {type(transformer).__name__} has none. "
            "Use own_layers = 0."
        )
    if not 0 < own_layers <= len(layers):
        raise ValueError(
            f"own_layers must be between 1 and the encoder's {len(layers)} layers: {own_layers}"
        )
    if getattr(stack, "conv", None) is not None and own_layers < len(layers):
        raise ValueError(
            f"own_layers = {own_layers} on {checkpoint_name(transformer)}: its encoder runs a "
            "convolution after its first layer, which a copy of the top layers would "
            f"run after its own first; use own_layers = 0 or {len(layers)}."
        )
    branch = copy.deepcopy(stack)
    branch.layer = torch.nn.ModuleList(list(branch.layer)[len(layers) - own_layers :])
    setattr(branch, _MASK_ATTR, mask)
    setattr(branch, _DISTILBERT_ATTR, config.model_type == "distilbert")
    return branch


def run_branch(
    branch: torch.nn.Module, hidden: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """The branch's layers over `hidden` (batch, length, width), the output of the
    shared layer below them, where `attention_mask` (batch, length) is 1 over real
    wordpieces, given as the transformer gives it to its own layers."""
    if getattr(branch, _MASK_ATTR, "additive") == "ones":
        mask = attention_mask
    else:
        dtype = hidden.dtype
        mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    if getattr(branch, _DISTILBERT_ATTR, False):
        # DistilBERT's stack names its mask attn_mask and wants a head mask per layer
        return branch(hidden, attn_mask=mask, head_mask=[None] * len(branch.layer))[0]
    return branch(hidden, attention_mask=mask)[0]
