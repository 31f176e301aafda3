"""The torch module the encoder runs: a Hugging Face AutoModel returning one matrix per window.

`TransformerModule` wraps the transformer with what our configs add to it: the
hidden-state combination (`hidden_layers`), autocast in the configured precision
and the optional casing embeddings added to the input embeddings.
`set_frozen_layers` stops gradients for the bottom layers; `keep_layers` cuts
the layer stack down to some of its layers (a smaller student encoder). Branches
(`branches.py`) are heads' own copies of the top layers, run on the shared
layers' output in the same call. `hf_shim.HFShim` holds one of these for thinc.
"""

import inspect
from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ..text.casing import N_CASE_CLASSES
from .branches import checkpoint_name, copy_top_layers, run_branch
from .precision import PRECISION_CHOICES, PRECISIONS, resolve_precision

# Hidden-state combinations of the BERT paper's feature-based experiments.
HIDDEN_LAYERS = ("last", "sum_last_four", "concat_last_four")


class TransformerModule(torch.nn.Module):
    """A Hugging Face encoder returning one float32 matrix per window."""

    def __init__(
        self,
        transformer: torch.nn.Module,
        hidden_layers: str,
        precision: str,
        case_embeddings: bool = False,
    ):
        super().__init__()
        if hidden_layers not in HIDDEN_LAYERS:
            raise ValueError(f"hidden_layers must be one of {HIDDEN_LAYERS}, got {hidden_layers!r}")
        if precision not in PRECISION_CHOICES:
            raise ValueError(
                f"precision must be one of {list(PRECISION_CHOICES)}, got {precision!r}"
            )
        n_layers = getattr(transformer.config, "num_hidden_layers", None)
        if hidden_layers != "last" and n_layers is not None and n_layers < 4:
            raise ValueError(
                f"hidden_layers={hidden_layers!r} needs an encoder with at least 4 layers, "
                f"this one has {n_layers}"
            )
        self.transformer = transformer
        self.hidden_layers = hidden_layers
        self.precision = precision
        # DistilBERT and some others take no segment ids.
        params = inspect.signature(transformer.forward).parameters
        self.uses_token_types = "token_type_ids" in params
        # A learned vector per casing class, added to the input embeddings (at their
        # width: ALBERT's and ELECTRA's are narrower than the hidden states). Zeros at
        # first, so a pretrained encoder starts out computing exactly what it did.
        self.case_embeddings: Optional[torch.nn.Embedding] = None
        if case_embeddings:
            width = int(transformer.get_input_embeddings().embedding_dim)
            embedding = torch.nn.Embedding(N_CASE_CLASSES, width)
            torch.nn.init.zeros_(embedding.weight)
            self.case_embeddings = embedding
        # name -> a copy of the top layers that one head owns (`add_branch`); their
        # outputs follow the shared output in `forward`'s last dimension, in this order
        self.branches = torch.nn.ModuleDict()

    def add_branch(self, name: str, own_layers: int, frozen: bool = False) -> None:
        """Give the head `name` its own copy of the top `own_layers` layers, run on
        the output of the layers below them (replacing a branch of that name);
        `frozen`: the copy never trains (no gradients are computed for it)."""
        if self.hidden_layers != "last":
            raise ValueError(
                f"own_layers needs hidden_layers = 'last' in the shared encoder, "
                f"not {self.hidden_layers!r}"
            )
        if not name or "." in name:
            raise ValueError(f"A branch needs a component name without '.': {name!r}")
        branch = copy_top_layers(self.transformer, own_layers)
        for param in branch.parameters():
            param.requires_grad_(not frozen)
        self.branches[name] = branch

    def keep_layers(self, layers: Sequence[int]) -> None:
        """Keep only the transformer's layers at the 0-based positions `layers`
        (increasing), in that order (`keep_layers` below). A branch owning n top
        layers then runs on the output of the kept stack's layer K - n."""
        too_deep = {name: n for name, n in self.branch_layers.items() if n > len(layers)}
        if too_deep:
            name, n = next(iter(too_deep.items()))
            raise ValueError(
                f"{name} owns the top {n} layers of the encoder (own_layers = {n}): a "
                f"student of {len(layers)} layers needs at least {n}"
            )
        if self.hidden_layers != "last" and len(layers) < 4:
            raise ValueError(
                f"hidden_layers = {self.hidden_layers!r} needs at least 4 layers: "
                f"cannot keep {len(layers)}"
            )
        keep_layers(self.transformer, layers)

    @property
    def branch_layers(self) -> Dict[str, int]:
        """How many top layers each branch owns, in output order."""
        return {name: len(branch.layer) for name, branch in self.branches.items()}

    def branch_frozen(self, name: str) -> bool:
        """Whether the branch `name` never trains."""
        return not any(p.requires_grad for p in self.branches[name].parameters())

    def inputs(
        self, input_ids: torch.Tensor, case_ids: Optional[torch.Tensor] = None
    ) -> Dict[str, torch.Tensor]:
        """The transformer's input argument: the ids, or with case embeddings the
        word embeddings plus each wordpiece's casing vector (batch, length, embedding
        width)."""
        if self.case_embeddings is None:
            return {"input_ids": input_ids}
        if case_ids is None:
            raise ValueError("This encoder has case embeddings: pass case_ids")
        words = self.transformer.get_input_embeddings()(input_ids)
        return {"inputs_embeds": words + self.case_embeddings(case_ids)}

    def transformer_inputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        case_ids: Optional[torch.Tensor] = None,
    ) -> Dict[str, torch.Tensor]:
        """The transformer's keyword arguments for a batch: the mask, segment ids
        where the family takes them, and the ids or embeddings (`inputs`)."""
        kwargs: Dict[str, torch.Tensor] = {"attention_mask": attention_mask}
        if self.uses_token_types:
            kwargs["token_type_ids"] = token_type_ids
        kwargs.update(self.inputs(input_ids, case_ids))
        return kwargs

    @property
    def width(self) -> int:
        config: Any = self.transformer.config  # a transformers PretrainedConfig
        hidden = int(config.hidden_size)
        return hidden * 4 if self.hidden_layers == "concat_last_four" else hidden

    @property
    def max_positions(self) -> int:
        config: Any = self.transformer.config
        limit = int(getattr(config, "max_position_embeddings", 512))
        # RoBERTa-style models reserve positions for padding_idx + 1.
        if config.model_type in ("roberta", "xlm-roberta", "camembert", "longformer"):
            limit -= 2
        return limit

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        case_ids: Optional[torch.Tensor] = None,
        precision: Optional[str] = None,
    ) -> torch.Tensor:
        """precision: the autocast precision of this call (default: the module's).
        With branches, each branch's output follows the shared one in the last
        dimension: (batch, length, width * (1 + number of branches))."""
        # input_ids, attention_mask, token_type_ids, case_ids: (batch, length)
        device = input_ids.device
        dtype = PRECISIONS[resolve_precision(precision or self.precision, device)]
        with torch.autocast(
            device_type=input_ids.device.type, dtype=dtype, enabled=dtype is not None
        ):
            kwargs = self.transformer_inputs(input_ids, attention_mask, token_type_ids, case_ids)
            if len(self.branches):
                states = self.transformer(**kwargs, output_hidden_states=True).hidden_states
                outputs = [states[-1]]
                for name, branch in self.branches.items():
                    # a frozen branch needs no graph: nothing backpropagates through it
                    with torch.set_grad_enabled(
                        torch.is_grad_enabled() and not self.branch_frozen(name)
                    ):
                        outputs.append(
                            run_branch(branch, states[-1 - len(branch.layer)], attention_mask)
                        )
                hidden = torch.cat([out.float() for out in outputs], dim=-1)
            elif self.hidden_layers == "last":
                hidden = self.transformer(**kwargs).last_hidden_state
            else:
                states = self.transformer(**kwargs, output_hidden_states=True).hidden_states
                last_four = [s.float() for s in states[-4:]]
                if self.hidden_layers == "sum_last_four":
                    hidden = torch.stack(last_four).sum(0)
                else:
                    hidden = torch.cat(last_four, dim=-1)
        # (batch, length, width)
        return hidden.float()


def set_frozen_layers(transformer: torch.nn.Module, frozen_layers: Union[int, str]) -> None:
    """Stop gradients for the embeddings and the bottom `frozen_layers` layers."""
    for param in transformer.parameters():
        param.requires_grad_(True)
    if frozen_layers == "all":
        for param in transformer.parameters():
            param.requires_grad_(False)
        return
    if not isinstance(frozen_layers, int) or frozen_layers < 0:
        raise ValueError(f"frozen_layers must be 'all' or an int >= 0, got {frozen_layers!r}")
    if frozen_layers == 0:
        return
    embeddings = getattr(transformer, "embeddings", None)
    layers = _encoder_layers(transformer)
    config: Any = transformer.config
    if config.model_type == "albert":
        raise ValueError(
            f"frozen_layers = {frozen_layers} on {checkpoint_name(transformer)}: ALBERT runs "
            "one shared layer at every depth, so its bottom layers cannot be frozen apart "
            "from its top ones. Use frozen_layers = 0 or 'all'."
        )
    if embeddings is None or layers is None:
        raise ValueError(
            f"frozen_layers = {frozen_layers} on {checkpoint_name(transformer)}: no "
            "'embeddings' and layer list found. Use frozen_layers = 0 or 'all'."
        )
    if frozen_layers > len(layers):
        raise ValueError(
            f"frozen_layers={frozen_layers} but the encoder has only {len(layers)} layers"
        )
    for param in embeddings.parameters():
        param.requires_grad_(False)
    for layer in layers[:frozen_layers]:
        for param in layer.parameters():
            param.requires_grad_(False)


def layer_count(transformer: torch.nn.Module) -> int:
    """How many layers the transformer's stack holds (0 when it has no list of
    layers, as ALBERT's shared layer group)."""
    layers = _encoder_layers(transformer)
    config: Any = transformer.config
    return 0 if layers is None or config.model_type == "albert" else len(layers)


def keep_layers(transformer: torch.nn.Module, layers: Sequence[int]) -> None:
    """Cut the transformer's layer stack down to the layers at the 0-based
    positions `layers` (strictly increasing), and set its config's layer count
    (`num_hidden_layers`, DistilBERT's `n_layers`) to match, so that it saves and
    loads as a smaller model of its family. The kept layers keep their weights."""
    stack = _encoder_layers(transformer)
    n_layers = layer_count(transformer)
    if stack is None or not n_layers:
        raise ValueError(
            f"{checkpoint_name(transformer)} has no list of layers to choose from "
            "(encoder.layer or transformer.layer; ALBERT shares one layer at every depth)"
        )
    chosen: List[int] = list(layers)
    if not chosen or chosen != sorted(set(chosen)) or not 0 <= chosen[0] <= chosen[-1] < n_layers:
        raise ValueError(
            f"layers to keep must be increasing positions between 0 and {n_layers - 1}: {chosen}"
        )
    kept = torch.nn.ModuleList([stack[i] for i in chosen])
    parent: Any = getattr(transformer, "encoder", None)
    if getattr(parent, "layer", None) is not stack:
        parent = transformer.transformer
    parent.layer = kept
    config: Any = transformer.config
    for attr in ("num_hidden_layers", "n_layers"):
        if hasattr(config, attr):
            setattr(config, attr, len(chosen))


def _encoder_layers(transformer: torch.nn.Module) -> Optional[torch.nn.ModuleList]:
    # BERT/RoBERTa/ELECTRA/MPNet: encoder.layer; DistilBERT: transformer.layer;
    # ALBERT shares one layer group, which cannot be frozen layer by layer.
    for path in ("encoder.layer", "transformer.layer"):
        module: Any = transformer
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, torch.nn.ModuleList):
            return module
    return None
