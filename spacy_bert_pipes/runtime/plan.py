"""How many worker processes a machine gets by default (`--workers auto`).

On a CPU the encoder's matrix products already use every core (intra-op
threads), but tokenizing, building Docs and writing rows run on one: two
workers with half the cores each keep both kinds of work going. With a GPU,
each worker's host work (tokenizing, decoding, Docs) feeds the device while
the others' batches run on it, so the device is fed by several processes; each
worker holds its own copy of the pipeline on the GPU (about 0.1 GB for
all-MiniLM-L6-v2 plus its batches' activations).
"""

from .pool import available_cores

# The most workers `auto` starts with a GPU.
MAX_GPU_WORKERS = 8


def auto_workers(gpu_id: int, cores: int = 0) -> int:
    """The workers `--workers auto` starts.

    - CPU (gpu_id < 0): one worker per 2 cores, at least 1 (docs/annotate.md
      has the measurement behind it);
    - GPU: one worker per 2 cores, at most `MAX_GPU_WORKERS`.

    gpu_id (int): The GPU, or -1 for the CPU.
    cores (int): The cores to plan for; 0: those this process may use.
    RETURNS (int): The number of workers.
    """
    cores = cores or available_cores()
    if gpu_id < 0:
        return max(1, cores // 2)
    return max(1, min(MAX_GPU_WORKERS, cores // 2))
