"""How many worker processes a machine gets by default (`--workers auto`).

On a CPU each annotating process computes on `ANNOTATE_THREADS` intra-op
threads (so that the bytes do not depend on the number of processes, see
`threads`): one worker per core keeps every core busy, with the tokenizing,
Doc building and decoding of each worker beside its matrix products (on a
2-core machine, 2 workers of 1 thread ran as fast as 1 of 2). With a GPU,
each worker's host work (tokenizing, decoding, Docs) feeds the device while
the others' batches run on it, so the device is fed by several processes; each
worker holds its own copy of the pipeline on the GPU (about 0.1 GB for
all-MiniLM-L6-v2 plus its batches' activations).
"""

from .pool import available_cores
from .threads import ANNOTATE_THREADS

# The most workers `auto` starts with a GPU.
MAX_GPU_WORKERS = 8


def auto_workers(gpu_id: int, cores: int = 0) -> int:
    """The workers `--workers auto` starts.

    - CPU (gpu_id < 0): one worker per `ANNOTATE_THREADS` cores, at least 1;
    - GPU: one worker per 2 cores, at most `MAX_GPU_WORKERS`.

    gpu_id (int): The GPU, or -1 for the CPU.
    cores (int): The cores to plan for; 0: those this process may use.
    RETURNS (int): The number of workers.
    """
    cores = cores or available_cores()
    if gpu_id < 0:
        return max(1, cores // ANNOTATE_THREADS)
    return max(1, min(MAX_GPU_WORKERS, cores // 2))
