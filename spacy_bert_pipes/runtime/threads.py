"""The intra-op threads an annotating process computes with.

Matrix-product libraries split a product's sums between threads when they have
more of them: MKL's float32 products of a few rows, oneDNN's bf16 kernels on AMX.
So the last bits of a probability depend on how many threads the process that
computed it had. Every process that annotates a chunk (this one, a worker, a
Ray actor) runs the pipeline on `ANNOTATE_THREADS` intra-op threads, whatever
its caller set, and a machine's cores are kept busy by more processes
(`--workers`), so OUTPUT has the same bytes for any number of them.
"""

from contextlib import contextmanager
from typing import Iterator

# Intra-op threads of every annotating process (see the module docstring).
ANNOTATE_THREADS = 1


@contextmanager
def fixed_threads(threads: int = ANNOTATE_THREADS) -> Iterator[None]:
    """Run the block with torch's intra-op threads set to `threads`, then
    give the process its own setting back.

    threads (int): The intra-op threads inside the block.
    """
    import torch

    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
