"""The torch side of the encoder: a thinc Shim around a Hugging Face AutoModel.

This is the only module (with `loaders.py`) that imports torch and transformers.
It holds the transformer and its fast tokenizer, runs batches of windows through
the transformer (autocast, `torch.inference_mode` at predict time, frozen layers),
hands parameters to thinc's optimizer, and serializes to bytes without pickle: the
HF config as JSON, the tokenizer files, and the weights as safetensors.
"""

import contextlib
import copy
import functools
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union, cast

import numpy
import srsly
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from thinc.api import Optimizer, Shim, get_torch_default_device, torch2xp, xp2torch
from thinc.shims.pytorch_grad_scaler import PyTorchGradScaler
from thinc.types import FloatsXd

from ..memory import trim_if_grown
from .casing import N_CASE_CLASSES
from .serial import DamagedEncoderError, safe_file_name, without_file_settings


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

# Hidden-state combinations of the BERT paper's feature-based experiments.
HIDDEN_LAYERS = ("last", "sum_last_four", "concat_last_four")
# Autocast dtype of each precision. "int8" runs fp32 in training and dynamically
# quantized linear layers (int8 weights, activations quantized per batch) at predict
# time on the CPU; "tf32" is fp32 with TensorFloat-32 matmuls on CUDA (Ampere and
# newer; fp32 on the CPU); "auto" is resolved by `resolve_precision` on the device.
PRECISIONS = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "int8": None,
    "tf32": None,
}
PRECISION_CHOICES = (*PRECISIONS, "auto")


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The CPU feature flags of this machine (empty where /proc/cpuinfo is missing)."""
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU has bf16 matrix units (AMX) or AVX-512 BF16 instructions.

    Without them torch emulates bf16 matmuls and autocast makes the CPU slower,
    which is why "auto" keeps such CPUs on fp32.
    """
    flags = cpu_flags()
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cuda_has_bf16(device: torch.device) -> bool:
    """Whether a CUDA device computes bf16 natively (compute capability 8.0+)."""
    return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_precision(precision: str, device: torch.device) -> str:
    """Turn "auto" into a concrete precision for a device; other values pass through,
    except "tf32", which is "fp32" off CUDA.

    "auto" picks the fastest precision that keeps accuracy: bf16 on GPUs that
    compute it natively (Ampere and newer; their attention runs without cuDNN's
    per-shape plans, see `attention_backends`) and on CPUs with AMX / AVX-512 BF16,
    fp32 elsewhere, so no machine gets a slower default than fp32. Banking77 and
    CoNLL-2003 scores of a bf16 prediction are within 0.1 point of fp32 (docs/precision.md).
    """
    if precision == "tf32":
        return "tf32" if device.type == "cuda" else "fp32"
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if cuda_has_bf16(device) else "fp32"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


# Padding a bf16 batch on a CPU: AMX multiplies bf16 in tiles of 16 rows, and lengths
# rounded to 16 leave oneDNN fewer kernel shapes to build and cache, but every padded
# position is computed as well. Round up to 16 only where that adds at most
# PAD_MAX_EXTRA of the batch's length (long windows), else to 8 under the same limit,
# else not at all (short queries: 20 wordpieces rounded to 32 were 60% more work).
PAD_MAX_EXTRA = 0.125


def padded_length(longest: int, precision: str, device: torch.device) -> int:
    """The length a predict batch whose longest window has `longest` wordpieces is
    padded to, for a precision (as configured; "auto" resolved here) on a device."""
    if device.type != "cpu" or resolve_precision(precision, device) != "bf16":
        return longest
    for multiple in (16, 8):
        rounded = -(-longest // multiple) * multiple
        if rounded - longest <= PAD_MAX_EXTRA * longest:
            return rounded
    return longest


def attention_backends(device: torch.device) -> contextlib.AbstractContextManager:
    """Where scaled-dot-product attention may run for a predict batch on a device.

    On CUDA torch prefers cuDNN's attention for bf16/fp16 with a mask (sm90: H100),
    and cuDNN builds an execution plan for every new (batch, length) shape: with
    length-sorted batches of varied sizes almost every batch is a new shape, which
    made bf16 2.5-3.5x slower than fp32 on an H100. Flash / memory-efficient / math
    kernels need no per-shape plan, so cuDNN attention is left out. No change on the
    CPU.
    """
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


@contextlib.contextmanager
def float32_matmuls(precision: str, device: torch.device) -> Iterator[None]:
    """With precision "tf32" on CUDA, fp32 matmuls (and cuDNN convolutions) use
    TensorFloat-32 inside this block; torch's process-wide setting is restored after."""
    if resolve_precision(precision, device) != "tf32":
        yield
        return
    before = torch.get_float32_matmul_precision()
    before_cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
        torch.backends.cudnn.allow_tf32 = before_cudnn


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
        import inspect

        params = inspect.signature(transformer.forward).parameters
        self.uses_token_types = "token_type_ids" in params
        # A learned vector per casing class, added to the input embeddings. Zeros at
        # first, so a pretrained encoder starts out computing exactly what it did.
        self.case_embeddings: Optional[torch.nn.Embedding] = None
        if case_embeddings:
            config: Any = transformer.config
            embedding = torch.nn.Embedding(N_CASE_CLASSES, int(config.hidden_size))
            torch.nn.init.zeros_(embedding.weight)
            self.case_embeddings = embedding

    def inputs(
        self, input_ids: torch.Tensor, case_ids: Optional[torch.Tensor] = None
    ) -> Dict[str, torch.Tensor]:
        """The transformer's input argument: the ids, or with case embeddings the
        word embeddings plus each wordpiece's casing vector (batch, length, hidden)."""
        if self.case_embeddings is None:
            return {"input_ids": input_ids}
        if case_ids is None:
            raise ValueError("This encoder has case embeddings: pass case_ids")
        words = self.transformer.get_input_embeddings()(input_ids)
        return {"inputs_embeds": words + self.case_embeddings(case_ids)}

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
        """precision: the autocast precision of this call (default: the module's)."""
        # input_ids, attention_mask, token_type_ids, case_ids: (batch, length)
        kwargs: Dict[str, torch.Tensor] = {"attention_mask": attention_mask}
        if self.uses_token_types:
            kwargs["token_type_ids"] = token_type_ids
        device = input_ids.device
        dtype = PRECISIONS[resolve_precision(precision or self.precision, device)]
        with torch.autocast(
            device_type=input_ids.device.type, dtype=dtype, enabled=dtype is not None
        ):
            kwargs.update(self.inputs(input_ids, case_ids))
            if self.hidden_layers == "last":
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
    if embeddings is None or layers is None:
        raise ValueError(
            f"Cannot freeze bottom layers of a {type(transformer).__name__}: no "
            "'embeddings' and layer list found. Use frozen_layers=0 or 'all'."
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


_NOT_LOADED = (
    "The BERT encoder has no weights yet. Call nlp.initialize() (which runs the "
    "component's encoder_loader) or load a trained pipeline with spacy.load()."
)


class HFShim(Shim):
    """Holds a TransformerModule and its tokenizer for a thinc Model.

    The shim is empty until a loader calls `load` (in `initialize`) or until
    `from_bytes` restores it from a saved pipeline.
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
    ):
        """precision: training (and, when predict_precision is None, prediction)
        precision; predict_precision: the precision of `predict`."""
        super().__init__(None, config={}, optimizer=None)
        if predict_precision is not None and predict_precision not in PRECISION_CHOICES:
            raise ValueError(
                f"predict_precision must be one of {list(PRECISION_CHOICES)}, "
                f"got {predict_precision!r}"
            )
        self.hidden_layers = hidden_layers
        self.precision = precision
        self.predict_precision = predict_precision
        self.frozen_layers = frozen_layers
        self.case_embeddings = case_embeddings
        self._tokenizer: Any = None
        self._grad_scaler = PyTorchGradScaler(enabled=precision == "fp16")
        # precision "bf16" / "int8": a reduced-precision copy of the module for
        # predict, rebuilt after the weights change (optimizer step, load, use_params).
        self._reduced: Optional[torch.nn.Module] = None
        self._reduced_precision = ""

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

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

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
        return resolve_precision(setting, self.device)

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
        weights in memory. int8: linear layers dynamically quantized with per-channel
        weight scales (per-tensor scales lost ~1 point of Banking77 accuracy).
        """
        module = self.module
        if precision not in ("bf16", "int8"):
            return module
        if self._reduced is None or self._reduced_precision != precision:
            reduced = copy.deepcopy(module).eval()
            if precision == "bf16":
                reduced.to(torch.bfloat16)
                reduced.precision = "fp32"  # already bf16: no autocast on top
            else:
                if self.device.type != "cpu":
                    raise ValueError(
                        "precision = 'int8' (dynamic quantization) runs on the CPU only; "
                        "use 'bf16' or 'fp16' on a GPU"
                    )
                from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

                # Eager-mode quantization is deprecated in favour of torchao, which
                # is not a dependency; it still works in torch 2.13.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    warnings.simplefilter("ignore", DeprecationWarning)
                    reduced = quantize_dynamic(
                        reduced, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
                    )
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
        transformer = _transformer_from_bytes(msg)
        tokenizer = _tokenizer_from_bytes(msg.get("tokenizer"))
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
        return self


def _transformer_from_bytes(msg: Dict[str, Any]) -> torch.nn.Module:
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


def _tokenizer_from_bytes(files: Any) -> Any:
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


def fused_adam_applies(optimizer: Optimizer, params: List[Tuple[str, torch.nn.Parameter]]) -> bool:
    """Whether `fused_adam` can stand in for thinc's Optimizer on these parameters:
    thinc's Adam (not RAdam) on CPU float32 tensors. Elsewhere (on a GPU, thinc's
    Adam is already one fused kernel) the per-parameter path runs."""
    return (
        type(optimizer) is Optimizer
        and not optimizer.use_radam
        and optimizer.b1 > 0.0
        and optimizer.b2 > 0.0
        and all(
            p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous()
            for _, p in params
        )
    )


@torch.no_grad()
def fused_adam(
    optimizer: Optimizer, items: List[Tuple[Tuple[int, str], torch.nn.Parameter]]
) -> None:
    """thinc's Adam step (`Optimizer.__call__` with `_adam`) on every parameter at
    once, with torch's multi-tensor ops on all cores instead of one single-threaded
    numpy call per parameter (a quarter of a CPU training step for MiniLM).

    Same state, same arithmetic: the moments stay in `optimizer.mom1/mom2` (numpy
    arrays, updated in place through `torch.from_numpy`), `nr_update` counts per
    key, each gradient is clipped to `grad_clip` by its own norm, L2 is added to the
    gradient or applied as decoupled weight decay, the bias correction uses each
    key's own update count, and with `use_averages` the moving averages that
    `use_params` swaps in are updated as thinc's `Ops.update_averages` does.
    """
    learn_rate = float(optimizer.learn_rate)
    b1, b2, eps = float(optimizer.b1), float(optimizer.b2), float(optimizer.eps)
    l2, clip = float(optimizer.L2), float(optimizer.grad_clip or 0.0)
    items = [(key, p) for key, p in items if p.numel() > 0]
    weights = [p.data for _, p in items]
    grads = [cast(torch.Tensor, p.grad) for _, p in items]
    if l2 != 0.0 and not optimizer.L2_is_weight_decay:
        torch._foreach_add_(grads, weights, alpha=l2)
    if clip:
        norms = torch._foreach_norm(grads)
        for grad, norm in zip(grads, norms):
            if norm >= clip:
                grad.mul_(clip / norm)
    mom1, mom2 = [], []
    for key, p in items:
        if key not in optimizer.mom1:
            optimizer.mom1[key] = cast(FloatsXd, numpy.zeros(p.numel(), dtype="float32"))
        if key not in optimizer.mom2:
            optimizer.mom2[key] = cast(FloatsXd, numpy.zeros(p.numel(), dtype="float32"))
        mom1.append(torch.from_numpy(optimizer.mom1[key]).view(p.shape))
        mom2.append(torch.from_numpy(optimizer.mom2[key]).view(p.shape))
        optimizer.nr_update[key] += 1
    torch._foreach_mul_(mom1, b1)
    torch._foreach_add_(mom1, grads, alpha=1.0 - b1)
    torch._foreach_mul_(mom2, b2)
    torch._foreach_addcmul_(mom2, grads, grads, value=1.0 - b2)
    denom = torch._foreach_sqrt(mom2)
    torch._foreach_add_(denom, eps)
    steps = []
    for key, _ in items:
        nr_upd = optimizer.nr_update[key]
        steps.append(-learn_rate * (1.0 - b2**nr_upd) ** 0.5 / (1.0 - b1**nr_upd))
    updates = torch._foreach_div(mom1, denom)
    torch._foreach_mul_(updates, steps)
    torch._foreach_add_(weights, updates)
    if l2 != 0.0 and optimizer.L2_is_weight_decay:
        torch._foreach_mul_(weights, 1.0 - learn_rate * l2)
    if optimizer.averages is not None:
        averages = []
        keep = []
        for key, p in items:
            if key not in optimizer.averages:
                zeros = numpy.zeros(tuple(p.shape), dtype="float32")
                optimizer.averages[key] = cast(FloatsXd, zeros)
            averages.append(torch.from_numpy(optimizer.averages[key]))
            t = optimizer.nr_update[key]
            keep.append(min((1.0 + t) / (10.0 + t), 0.9999))
        # ema -= (1 - decay) * (ema - weights), i.e. ema = decay * ema + (1 - decay) * weights
        differences = torch._foreach_sub(averages, weights)
        torch._foreach_mul_(differences, [k - 1.0 for k in keep])
        torch._foreach_add_(averages, differences)


def _no_backprop(d_hidden: Any) -> None:
    return None
