"""The runtime: how the host's processes and the device are kept busy, apart
from what the pipes compute (the pipes know nothing of it).

pool.py   `WorkerPool`: worker processes (on the CPU forked from a fork
          server that imported the package once) that share the machine and
          its GPU, each set up once (a pipeline loaded), tasks handed out in
          order and their results yielded in order; a dead worker's task is
          retried once in a fresh worker, then given up as `WorkerLost`.
plan.py   `auto_workers`: how many workers a machine gets by default.
pipe.py   `pipe_in_workers`: `nlp.pipe` over a saved pipeline in N workers,
          Docs back in input order.

The `annotate` command's workers engine (`annotate.workers`) runs on the pool.
"""

from .pipe import pipe_in_workers
from .plan import auto_workers
from .pool import WorkerError, WorkerLost, WorkerPool, WorkerSetupError, available_cores

__all__ = [
    "WorkerError",
    "WorkerLost",
    "WorkerPool",
    "WorkerSetupError",
    "auto_workers",
    "available_cores",
    "pipe_in_workers",
]
