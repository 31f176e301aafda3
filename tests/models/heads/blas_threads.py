"""A script on 1 and on 2 threads of numpy's OpenBLAS with its AVX2 kernels
(Haswell, Zen: most AMD EPYCs), which round a float32 product otherwise on 1
thread than on 2: a Ray actor runs 1 (OMP_NUM_THREADS=1), the local engine and
its workers all cores. A doc's scores must not see it."""

import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

# Gives a script `set_threads(n)`: numpy's OpenBLAS threads, set through
# OpenBLAS's own function, as threadpoolctl does.
SET_THREADS = """
import ctypes, glob, os
import numpy
(path,) = glob.glob(os.path.dirname(numpy.__file__) + ".libs/*scipy_openblas*.so*")
set_threads = ctypes.CDLL(path).scipy_openblas_set_num_threads64_
"""


def numpy_openblas() -> bool:
    """Whether numpy's BLAS is its own OpenBLAS (scipy-openblas, whose threads
    can be set) on a CPU that can run the AVX2 kernels."""
    libs = Path(numpy.__file__).parent.with_name("numpy.libs")
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()
    return len(list(libs.glob("*scipy_openblas*.so*"))) == 1 and {"avx2", "fma"} <= flags


needs_openblas = pytest.mark.skipif(
    not numpy_openblas(), reason="needs numpy's OpenBLAS and an AVX2 CPU"
)


def on_avx2_kernels(script: str) -> str:
    """The output of `script` (after SET_THREADS) in a new Python whose
    OpenBLAS runs its AVX2 (Haswell) kernels."""
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell"}
    found = subprocess.run(
        [sys.executable, "-c", SET_THREADS + script], env=env, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()
