"""Numeric precision of the encoder: names, the "auto" choice and the torch settings.

The precisions a config may name (`PRECISIONS`, `PRECISION_CHOICES`), how "auto"
and "tf32" resolve on a device (`resolve_precision`, from the CPU's flags or the
GPU's compute capability), and what a precision changes around a batch: the length
a bf16 batch is padded to on a CPU (`padded_length`), where attention may run on
CUDA (`attention_backends`) and TensorFloat-32 matmuls (`float32_matmuls`).
`hf_shim.HFShim` and the masked-LM trainer (`pretrain.trainer`) use them; the
measurements behind each choice are in docs/precision.md.
"""

import contextlib
import functools
from typing import Iterator

import torch

# Autocast dtype of each precision. "int8" runs fp32 in training and, at predict
# time on the CPU, the module exported to ONNX with int8 matrix products (int8
# weights, activations quantized per batch; `onnx_int8.py`); "tf32" is fp32 with
# TensorFloat-32 matmuls on CUDA (Ampere and newer; fp32 on the CPU); "auto" is
# resolved by `resolve_precision` on the device.
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
    which is why "auto" never picks bf16 on such CPUs.
    """
    flags = cpu_flags()
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cpu_kind() -> str:
    """This CPU's kind, by the flags the precisions depend on: "amx", "avx512bf16",
    "avx512vnni" (int8 dot products, no bf16), "avx512", "avx2" or "other"."""
    flags = cpu_flags()
    for flag, kind in (
        ("amx_bf16", "amx"),
        ("avx512_bf16", "avx512bf16"),
        ("avx512_vnni", "avx512vnni"),
        ("avx512f", "avx512"),
        ("avx2", "avx2"),
    ):
        if flag in flags:
            return kind
    return "other"


@functools.lru_cache(maxsize=1)
def int8_available() -> bool:
    """Whether ONNX Runtime and onnx, which the int8 backend runs on, can be imported."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def cuda_has_bf16(device: torch.device) -> bool:
    """Whether a CUDA device computes bf16 natively (compute capability 8.0+)."""
    return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_precision(
    precision: str, device: torch.device, *, predicting: bool = False, int8_checked: bool = False
) -> str:
    """Turn "auto" into a concrete precision for a device; other values pass through,
    except "tf32", which is "fp32" off CUDA.

    "auto" picks the fastest precision that keeps accuracy (docs/precision.md has
    the figures). On a CPU with AMX / AVX-512 BF16: bf16 (1.57x fp32 end to end on
    an AVX-512 BF16 EPYC, the heads within 0.1 point). On other CPUs, prediction
    (`predicting` true) runs int8 through ONNX Runtime when the encoder is
    `int8_checked` (its pipeline passed `bert-pipes check-int8`: every head within
    0.3 point of fp32 at int8) and ONNX Runtime is installed, else fp32; training
    is fp32 there (bf16 is emulated, and slower). On CUDA, training uses bf16 on
    GPUs that compute it natively (Ampere and newer), but prediction stays fp32: on
    an H100, bf16 prediction of the default 6-layer encoder measured 2.5-3.5x
    slower than fp32.
    """
    if precision == "tf32":
        return "tf32" if device.type == "cuda" else "fp32"
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if cuda_has_bf16(device) and not predicting else "fp32"
    if cpu_has_fast_bf16():
        return "bf16"
    return "int8" if predicting and int8_checked and int8_available() else "fp32"


# Padding a bf16 batch on a CPU: AMX multiplies bf16 in tiles of 16 rows, and lengths
# rounded to 16 leave oneDNN fewer kernel shapes to build and cache, but every padded
# position is computed as well. Round up to 16 only where that adds at most
# PAD_MAX_EXTRA of the batch's length (long windows), else to 8 under the same limit,
# else not at all (short queries: 20 wordpieces rounded to 32 were 60% more work).
PAD_MAX_EXTRA = 0.125


def padded_length(longest: int, precision: str, device: torch.device) -> int:
    """The length a predict batch whose longest window has `longest` wordpieces is
    padded to, for a precision (as configured; "auto" resolved here) on a device."""
    if device.type != "cpu" or resolve_precision(precision, device, predicting=True) != "bf16":
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
