"""The torch side of the encoder: a thinc Shim around a Hugging Face AutoModel.

With `transformer_module.py` (the torch module), `precision.py`, `fused_adam.py`
and `loaders.py` it is where the encoder's torch and transformers code lives.
It holds the transformer and its fast tokenizer, runs batches of windows through
the transformer (autocast, `torch.inference_mode` at predict time, frozen layers),
hands parameters to thinc's optimizer, and serializes to bytes without pickle: the
HF config as JSON, the tokenizer files, and the weights as safetensors.
"""

import contextlib
import copy
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union, cast

import srsly
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from thinc.api import Optimizer, Shim, get_torch_default_device, torch2xp, xp2torch
from thinc.shims.pytorch_grad_scaler import PyTorchGradScaler
from thinc.types import FloatsXd

from ...memory import trim_if_grown
from ..text.pairs import PairTemplate, read_pair_template
from .fused_adam import fused_adam, fused_adam_applies
from .hf_bytes import tokenizer_from_bytes, transformer_from_bytes
from .onnx_int8 import Int8Module
from .precision import (
    PRECISION_CHOICES,
    attention_backends,
    float32_matmuls,
    padded_length,
    resolve_precision,
)
from .serial import DamagedEncoderError
from .transformer_module import TransformerModule, layer_count, set_frozen_layers


def _one_thread_after_fork() -> None:
    # A process forked after torch ran a parallel (OpenMP) region deadlocks in its
    # next parallel op: nlp.pipe(n_process=N) forks. Each worker gets one intra-op
    # thread, so parallel regions run inline (and N workers do not oversubscribe).
    torch.set_num_threads(1)


_TOKENIZERS_ENV = "TOKENIZERS_PARALLELISM"
_env_set_for_fork = False


def _quiet_tokenizers_before_fork() -> None:
    # Hugging Face tokenizers disable their thread pool in a forked child and warn
    # unless this is set; the child inherits the setting, the parent gets it back.
    global _env_set_for_fork
    if _TOKENIZERS_ENV not in os.environ:
        os.environ[_TOKENIZERS_ENV] = "false"
        _env_set_for_fork = True


def _restore_after_fork() -> None:
    global _env_set_for_fork
    if _env_set_for_fork:
        os.environ.pop(_TOKENIZERS_ENV, None)
        _env_set_for_fork = False


os.register_at_fork(
    before=_quiet_tokenizers_before_fork,
    after_in_parent=_restore_after_fork,
    after_in_child=_one_thread_after_fork,
)


_NOT_LOADED = (
    "The BERT encoder has no weights yet. Call nlp.initialize() (which runs the "
    "component's encoder_loader) or load a trained pipeline with spacy.load()."
)


class HFShim(Shim):
    """Holds a TransformerModule and its tokenizer for a thinc Model.

    The shim is empty until a loader calls `load` (in `initialize`) or until
    `from_bytes` restores it from a saved pipeline.

    Why a `Shim` of our own and not thinc's `PyTorchShim`:

    - Gradients are unscaled once per optimizer step. One encoder forward runs
      one backprop per transformer batch of windows, and gradients may accumulate
      over several updates, all at the same fp16 loss scale. `PyTorchShim`
      unscales every parameter's `.grad` inside each backprop, which divides the
      gradients already accumulated from earlier batches by the scale again;
      here backprop only scales, and `finish_update` unscales (and skips the step
      on inf/NaN) once.
    - Precision lives in one place: `PyTorchShim` knows only a CUDA autocast
      switch; this shim resolves "auto" and "tf32" per device, trains in
      fp32/bf16/fp16, predicts in a separate `predict_precision` through a bf16
      or int8 copy of the module, pads bf16 CPU batches and picks the attention
      kernels (`precision.py`).
    - Serialization is the Hugging Face model's own, without pickle: the HF
      config as JSON, the fast tokenizer's files and safetensors weights, each
      checked on load (`DamagedEncoderError`), where `PyTorchShim` `torch.save`s
      a state dict and keeps no tokenizer or config.
    - `use_params` swaps in the averages under the (shim id, parameter name) keys
      the optimizer stores them by; `predict` stays in eval mode and runs under
      `torch.inference_mode`; a fully frozen encoder trains without autograd; and
      on the CPU thinc's Adam runs fused over all parameters (`fused_adam.py`).
    """

    _model: Optional[TransformerModule]

    def __init__(
        self,
        *,
        hidden_layers: str = "last",
        precision: str = "fp32",
        frozen_layers: Union[int, str] = 0,
        case_embeddings: bool = False,
        predict_precision: Optional[str] = None,
        int8_checked: bool = False,
    ):
        """precision: training (and, when predict_precision is None, prediction)
        precision; predict_precision: the precision of `predict`; int8_checked:
        whether "auto" may predict in int8 on a CPU without fast bf16
        (`resolve_precision`)."""
        super().__init__(None, config={}, optimizer=None)
        if predict_precision is not None and predict_precision not in PRECISION_CHOICES:
            raise ValueError(
                f"predict_precision must be one of {list(PRECISION_CHOICES)}, "
                f"got {predict_precision!r}"
            )
        self.hidden_layers = hidden_layers
        self.precision = precision
        self.predict_precision = predict_precision
        self.int8_checked = int8_checked
        self.frozen_layers = frozen_layers
        self.case_embeddings = case_embeddings
        self._tokenizer: Any = None
        self._grad_scaler = PyTorchGradScaler(enabled=precision == "fp16")
        # precision "bf16" / "int8": a reduced-precision copy of the module for
        # predict, rebuilt after the weights change (optimizer step, load, use_params).
        self._reduced: Optional[torch.nn.Module] = None
        self._reduced_precision = ""
        # (module, its first parameter): see `device`
        self._first_parameter: Optional[Tuple[torch.nn.Module, torch.nn.Parameter]] = None
        # (tokenizer, the pair layout read from it): see `pair_template`
        self._pair: Optional[Tuple[Any, PairTemplate]] = None

    # --- state -------------------------------------------------------------
    @property
    def module(self) -> TransformerModule:
        if self._model is None:
            raise ValueError(_NOT_LOADED)
        return self._model

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            raise ValueError(_NOT_LOADED)
        return self._tokenizer

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self, transformer: torch.nn.Module, tokenizer: Any) -> None:
        """Install a Hugging Face model and its fast tokenizer."""
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(
                f"{type(tokenizer).__name__} is not a fast tokenizer: character offsets "
                "are needed to align wordpieces with spaCy tokens."
            )
        set_frozen_layers(transformer, self.frozen_layers)
        module = TransformerModule(
            transformer, self.hidden_layers, self.precision, self.case_embeddings
        )
        module.to(get_torch_default_device())
        module.eval()
        self._model = module
        self._tokenizer = tokenizer
        self._reduced = None

    def add_branch(self, name: str, own_layers: int, frozen: bool = False) -> None:
        """Give the head `name` its own copy of the top `own_layers` layers
        (`TransformerModule.add_branch`), on the module's device."""
        module = self.module
        module.add_branch(name, own_layers, frozen)
        module.branches[name].to(self.device)
        self._reduced = None

    @property
    def n_layers(self) -> int:
        """The transformer's layers (0 when they cannot be told apart: ALBERT)."""
        return layer_count(self.module.transformer)

    def keep_layers(self, layers: Sequence[int]) -> None:
        """Cut the transformer down to its layers at the 0-based positions `layers`
        (`TransformerModule.keep_layers`); the bottom `frozen_layers` of the kept
        ones stay frozen."""
        self.module.keep_layers(layers)
        set_frozen_layers(self.module.transformer, self.frozen_layers)
        self._reduced = None

    def remove_branches(self) -> None:
        """Drop every branch (heads' own top layers) from the module."""
        self.module.branches = torch.nn.ModuleDict()
        self._reduced = None

    @property
    def device(self) -> torch.device:
        # Asked several times per batch; walking the module for its first
        # parameter each time cost ~1% of a host-bound run. The parameter object
        # stays the same when the module moves (its data moves), so it is kept
        # while the module is.
        module = self.module
        if self._first_parameter is None or self._first_parameter[0] is not module:
            self._first_parameter = (module, next(module.parameters()))
        return self._first_parameter[1].device

    def pair_template(self, name: str) -> PairTemplate:
        """How the checkpoint lays out a pair of texts (read once from its
        tokenizer); `name` names the checkpoint in errors."""
        tokenizer = self.tokenizer
        if self._pair is None or self._pair[0] is not tokenizer:
            module = self.module
            config: Any = module.transformer.config
            n_segments = int(getattr(config, "type_vocab_size", 0) or 0)
            template = read_pair_template(
                tokenizer, n_segments if module.uses_token_types else 0, name
            )
            self._pair = (tokenizer, template)
        return self._pair[1]

    @property
    def uses_cases(self) -> bool:
        """Whether batches carry a 4th array, the casing class of each wordpiece."""
        return self.module.case_embeddings is not None

    @property
    def fully_frozen(self) -> bool:
        return not any(p.requires_grad for p in self.module.parameters())

    # --- running -----------------------------------------------------------
    @property
    def prediction_precision(self) -> str:
        """What `predict` runs in on this device: predict_precision (or, unset,
        precision) with "auto" resolved."""
        setting = self.predict_precision or self.precision
        return resolve_precision(
            setting, self.device, predicting=True, int8_checked=self.int8_checked
        )

    @property
    def rows_share_scales(self) -> bool:
        """Whether a predict batch's rows change each other's outputs beyond the
        last bits: int8 quantizes activations with one scale per call."""
        return self.prediction_precision == "int8"

    def length_multiple(self, is_train: bool) -> int:
        """The multiple a predict batch's length is rounded up to when long enough:
        16 in bf16 on a CPU, else 1 (see `padded_length`, which decides per batch)."""
        if is_train or self.device.type != "cpu":
            return 1
        return 16 if self.prediction_precision == "bf16" else 1

    def padded_length(self, longest: int, is_train: bool) -> int:
        """The length of a batch whose longest window has `longest` wordpieces."""
        if is_train:
            return longest
        return padded_length(longest, self.prediction_precision, self.device)

    def __call__(self, inputs: Tuple[Any, ...], is_train: bool) -> Tuple[Any, Callable]:
        if is_train and not self.fully_frozen:
            return self.begin_update(inputs)
        # A fully frozen encoder in training runs without gradients, but in the
        # training precision: the heads learn from what `precision` computes.
        precision = resolve_precision(self.precision, self.device) if is_train else None
        return self.predict(inputs, precision=precision), _no_backprop

    def _to_tensors(self, inputs: Tuple[Any, ...]) -> List[torch.Tensor]:
        device = self.device
        return [xp2torch(arr, device=device).long() for arr in inputs]

    def predict(self, inputs: Tuple[Any, ...], precision: Optional[str] = None) -> Any:
        """Run a batch (ids, mask, segment ids[, casing classes]; each (batch, length))
        without gradients, in `precision` (default: the prediction precision)."""
        precision = precision or self.prediction_precision
        module = self._inference_module(precision)
        # Module.train()/eval() walk every submodule, which cost ~7% of nlp.pipe time
        # on short texts when done twice a batch: switch only when needed and stay
        # in eval mode (begin_update switches back to training itself).
        if module.training:
            module.eval()
        # the reduced copies compute in their own dtype: no autocast on top
        autocast = "fp32" if module is not self._model else precision
        device = self.device
        with torch.inference_mode(), attention_backends(device):
            with float32_matmuls(precision, device):
                hidden = module(*self._to_tensors(inputs), precision=autocast)
        # (batch, length, width)
        return torch2xp(hidden)

    def _inference_module(self, precision: str) -> torch.nn.Module:
        """The module predict runs: the fp32 module itself, or for "bf16" and "int8" a
        reduced-precision copy made on first use and dropped when the weights change.

        bf16: a copy with bf16 weights. Autocast alone re-casts every weight on every
        batch and keeps layer norms and softmax in fp32; the copy was 1.2-1.5x faster
        than autocast on this CPU (AMX), at the cost of a second, half-size set of
        weights in memory. int8: the module exported to ONNX and quantized, run by
        ONNX Runtime (`onnx_int8.Int8Module`; why that backend: docs/precision.md).
        """
        module = self.module
        if precision not in ("bf16", "int8"):
            return module
        if self._reduced is None or self._reduced_precision != precision:
            reduced: torch.nn.Module
            if precision == "bf16":
                reduced = copy.deepcopy(module).eval()
                reduced.to(torch.bfloat16)
                reduced.precision = "fp32"  # already bf16: no autocast on top
            else:
                if self.device.type != "cpu":
                    raise ValueError(
                        "predict_precision = 'int8' runs on the CPU only; "
                        "use 'bf16' or 'fp16' on a GPU"
                    )
                reduced = Int8Module.build(module)
            self._reduced = reduced
            self._reduced_precision = precision
        return self._reduced

    def begin_update(self, inputs: Tuple[Any, ...]) -> Tuple[Any, Callable]:
        module = self.module
        if self.precision == "fp16" and self.device.type == "cpu":
            raise ValueError(
                "precision = 'fp16' trains only on a GPU (it needs loss scaling); "
                "use 'bf16' or 'fp32' to train on the CPU"
            )
        module.train()
        with float32_matmuls(self.precision, self.device):
            hidden = module(*self._to_tensors(inputs))

        def backprop(d_hidden: Any) -> None:
            # d_hidden: (batch, length, width)
            grad = xp2torch(d_hidden, device=hidden.device)
            # fp16: scale the loss gradient so small values survive the half-precision
            # backward. The parameters' .grad accumulate over every batch of the step
            # (a forward runs one backprop per transformer batch, and gradients may be
            # accumulated over updates), all at the same scale: they are unscaled once,
            # in finish_update. Unscaling here would divide the gradients already
            # accumulated from earlier batches by the scale again.
            grad = self._grad_scaler.scale([grad], inplace=True)[0]
            with float32_matmuls(self.precision, self.device):
                torch.autograd.backward(hidden, grad_tensors=grad)

        return torch2xp(hidden.detach()), backprop

    def finish_update(self, optimizer: Optimizer) -> None:
        params = [(name, p) for name, p in self.module.named_parameters() if p.grad is not None]
        # Unscale the accumulated gradients once (a no-op unless fp16); inf/NaN skips the step.
        self._grad_scaler.unscale([p.grad for _, p in params])
        skip = self._grad_scaler.found_inf
        if not skip and params:
            if fused_adam_applies(optimizer, params):
                fused_adam(optimizer, [((self.id, name), p) for name, p in params])
            else:
                for name, param in params:
                    weights = cast(FloatsXd, torch2xp(param.data))
                    gradient = cast(FloatsXd, torch2xp(param.grad))
                    data, _ = optimizer((self.id, name), weights, gradient)
                    param.data = xp2torch(data, device=param.device)
        for _, param in params:
            param.grad = None
        if params:  # the weights changed (a frozen encoder keeps its reduced copy)
            self._reduced = None
        self._grad_scaler.update()
        # free memory back to the OS when the heap has grown (see `memory`): RSS stays flat
        trim_if_grown()

    @contextlib.contextmanager
    def use_params(self, params: Dict[Any, Any]) -> Iterator[None]:
        # Averaged parameters are keyed (shim id, parameter name) by thinc's optimizer.
        state = {
            key[1]: xp2torch(value, device=self.device)
            for key, value in params.items()
            if isinstance(key, tuple) and len(key) == 2 and key[0] == self.id
        }
        if not state or self._model is None:
            yield
            return
        backup = {k: v.clone() for k, v in self.module.state_dict().items()}
        self.module.load_state_dict(state, strict=False)
        self._reduced = None
        try:
            yield
        finally:
            self.module.load_state_dict(backup)
            self._reduced = None

    def to_device(self, device_type: str, device_id: int) -> None:
        self._first_parameter = None
        if self._model is None:
            return
        if device_type == "cpu":
            self._model.cpu()
        elif device_type == "gpu":
            self._model.cuda(device_id)
        else:
            raise ValueError(f"Invalid device_type: {device_type}. Try 'cpu' or 'gpu'")
        self._reduced = None
        self._grad_scaler.to_(self.device)

    # --- serialization (no pickle) --------------------------------------------
    def to_bytes(self) -> bytes:
        if self._model is None:
            return srsly.msgpack_dumps({"loaded": False})
        transformer = self.module.transformer
        config: Any = transformer.config
        state = {k: v.detach().contiguous().cpu() for k, v in transformer.state_dict().items()}
        with tempfile.TemporaryDirectory() as tmp:
            self.tokenizer.save_pretrained(tmp)
            tokenizer_files = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        msg = {
            "loaded": True,
            "config": config.to_json_string(use_diff=False),
            "tokenizer": tokenizer_files,
            "weights": save_safetensors(state),
        }
        case_embeddings = self.module.case_embeddings
        if case_embeddings is not None:
            weight = case_embeddings.weight.detach().contiguous().cpu()
            msg["case_embeddings"] = save_safetensors({"weight": weight})
        if len(self.module.branches):
            branches = self.module.branches
            weights = {k: v.detach().contiguous().cpu() for k, v in branches.state_dict().items()}
            msg["branches"] = {
                "layers": [
                    [name, n, self.module.branch_frozen(name)]
                    for name, n in self.module.branch_layers.items()
                ],
                "weights": save_safetensors(weights),
            }
        return srsly.msgpack_dumps(msg)

    def from_bytes(self, bytes_data: bytes) -> "HFShim":
        """Restore the encoder from `to_bytes` output. Every part is checked before
        it is used: a damaged one raises a DamagedEncoderError naming it, and the
        tokenizer's file names and settings cannot reach outside a temporary folder."""
        try:
            msg = srsly.msgpack_loads(bytes_data)
            loaded = msg["loaded"]
        except (ValueError, TypeError, KeyError) as err:
            raise DamagedEncoderError("data", f"not a saved encoder ({err})") from err
        if not loaded:
            self._model = None
            self._tokenizer = None
            return self
        transformer = transformer_from_bytes(msg)
        tokenizer = tokenizer_from_bytes(msg.get("tokenizer"))
        transformer.eval()
        self.load(transformer, tokenizer)
        case_embeddings = self.module.case_embeddings
        if "case_embeddings" in msg:
            if case_embeddings is None:
                raise ValueError(
                    "The saved encoder has case embeddings but this one is configured "
                    "without them (case_embeddings = false): loading it would drop "
                    "trained weights. Set case_embeddings = true."
                )
            try:
                weight = load_safetensors(msg["case_embeddings"])["weight"]
                case_embeddings.weight.data.copy_(weight.to(case_embeddings.weight.device))
            except Exception as err:  # safetensors' own error type, shape mismatches
                raise DamagedEncoderError("weights", f"case embeddings: {err}") from err
        # Saved without case embeddings but configured with them: they stay zero,
        # which is exactly the saved encoder.
        if "branches" in msg:
            self._branches_from_msg(msg["branches"])
        return self

    def _branches_from_msg(self, msg: Any) -> None:
        """Rebuild the saved branches (`to_bytes`), then give them their weights."""
        try:
            # [name, layers, frozen]; [name, layers] from before frozen branches
            for name, own_layers, *frozen in msg["layers"]:
                if not isinstance(name, str) or not isinstance(own_layers, int):
                    raise ValueError(f"not a branch name and layer count: {name!r}, {own_layers!r}")
                self.module.add_branch(name, own_layers, frozen == [True])
            state = load_safetensors(msg["weights"])
            self.module.branches.load_state_dict(state, strict=True)
        except Exception as err:  # bad structure, safetensors' own errors, shapes
            raise DamagedEncoderError("weights", f"branches: {err}") from err
        self.module.branches.to(self.device)


def _no_backprop(d_hidden: Any) -> None:
    return None
