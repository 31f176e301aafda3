"""A pool of worker processes that share one machine and its GPU.

On the CPU, each worker is forked from a *fork server* (multiprocessing's
"forkserver" start method): a clean process, started once per parent process,
that imports `PRELOAD` (this package, spaCy, torch and transformers' BERT) and
forks every worker from itself. A worker starts with those imports done instead
of paying for them (~6 s of CPU per worker on a 2-core Xeon) and shares their
memory pages with its siblings; a later pool in the same process reuses the
server. For a GPU (`fork_server=False`), and where there is no fork server
(Windows), workers are spawned: the server's imports may reach the CUDA driver
(thinc counts the GPUs when it is imported), and CUDA does not survive a fork
of a process that has used it; spawned workers are what ran on an H200. A
worker takes the environment (`os.environ`) its pool has when it starts it, as
a spawned process would. Each worker runs `setup` once (e.g. loads a pipeline
onto the GPU), then `work(state, task)` for one task at a time. The pool hands
out tasks in the order given and yields their results in that order, whichever
worker finishes first, keeping at most `ahead` tasks handed out beyond the next
result owed. Workers start when there is a task for them, up to the pool's
number: a job of 3 chunks starts 3 workers, not 8 that would each load a
pipeline (and, on a GPU, a CUDA context of their own) for nothing. On an H200,
8 workers over 3 chunks took 1.6x the time of 1 worker.

A worker that dies (killed, out of host memory, a crash in native code) is
noticed at once (the pool waits on each process's sentinel as well as its
pipe): its task goes to a fresh worker; if that one dies too, the task's result
is a `WorkerLost` naming how the process ended, and the pool goes on with the
next tasks. A task that raises in a worker raises `WorkerError` here, with the
worker's traceback. A `setup` that raises (a pipeline that does not load)
raises `WorkerSetupError` before any task runs. Nothing waits on a dead process.
"""

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    Iterator,
    List,
    Optional,
    Tuple,
    TypeVar,
    Union,
)

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

# The variables that set the intra-op threads of torch, MKL and OpenMP, read
# once when each library starts: set in the worker before it imports them.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# What the fork server imports once for all the workers it forks: what a
# worker that loads a pipeline of this package imports anyway.
PRELOAD = (
    "spacy_bert_pipes.runtime.pool",
    "spacy_bert_pipes.loading",
    "spacy_bert_pipes.annotate.workers",
    "transformers.models.bert.modeling_bert",
)
# How long a worker that was asked to stop may take before it is killed.
STOP_SECONDS = 10.0
# Attempts per task: the first, then one retry in a fresh worker.
ATTEMPTS = 2


class WorkerSetupError(RuntimeError):
    """A worker's `setup` raised (or its process died twice before it was
    ready): no task can run. The message ends with the worker's error, as the
    last line of its traceback says it."""


class WorkerError(RuntimeError):
    """A task raised in a worker; the message ends with the worker's traceback."""


@dataclass(frozen=True)
class WorkerLost:
    """The result of a task whose worker process died on each attempt.

    reason (str): How the last process ended, e.g. "killed by SIGKILL".
    """

    reason: str


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ended(exitcode: Optional[int]) -> str:
    """How a process ended, in words: "killed by SIGKILL", "exit code 3"."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the system's out-of-memory killer sends it)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exit code {exitcode}"


def start_context(fork_server: bool = True) -> Any:
    """The multiprocessing context workers start from: the fork server, with
    `PRELOAD` to import (when it is not running yet), or spawn (for a GPU, or
    where there is no fork server)."""
    if not fork_server or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def start_fork_server() -> None:
    """Start the fork server now, if it is not running: it imports `PRELOAD`
    in the background, beside what this process does before its first pool
    starts a worker (e.g. loading the pipeline to check it), instead of after."""
    if start_context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


def _serve(
    conn: Connection,
    setup: Callable[[], Any],
    work: Callable[[Any, Any], Any],
    threads: Optional[int],
    environ: Dict[str, str],
) -> None:
    """A worker's life: take its pool's environment, set its threads, run
    `setup`, then one task per message until it is sent None (or its parent
    is gone)."""
    if os.environ != environ:  # the fork server's is that of its start
        os.environ.clear()
        os.environ.update(environ)
    if threads is not None:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(threads)
        # torch was imported (and fixed its threads) before the variables were
        # set: by the fork server, or by spawn importing the target's package
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(threads)
    try:
        state = setup()
    except BaseException:  # sent to the parent, which raises WorkerSetupError
        conn.send(("setup-failed", None, traceback.format_exc()))
        return
    conn.send(("ready", None, None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message is None:
            return
        key, task = message
        try:
            result = work(state, task)
        except BaseException:  # sent to the parent, which raises WorkerError
            conn.send(("failed", key, traceback.format_exc()))
            return
        conn.send(("done", key, result))


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


class _Worker:
    """One worker process, its end of the pipe, and the task it holds."""

    def __init__(self, context: Any, setup: Callable, work: Callable, threads: Optional[int]):
        self.conn, child = context.Pipe(duplex=True)
        self.process: BaseProcess = context.Process(
            target=_serve, args=(child, setup, work, threads, dict(os.environ)), daemon=True
        )
        self.process.start()
        child.close()
        self.ready = False
        self.task: Optional[int] = None  # the key of the task it holds

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):  # already gone
            pass

    def reap(self, timeout: float) -> None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class WorkerPool(Generic[S, T, R]):
    """`workers` processes, each running `setup` once and then `work(state,
    task)` per task. Use it as a context manager: leaving it stops the workers
    (and kills those that do not stop).

    workers (int): The most worker processes (each started when a task waits for it).
    setup (Callable[[], S]): Run once in each worker; its result is the state
        passed to `work`. It and `work` must pickle (module-level functions,
        or `functools.partial` of them).
    work (Callable[[S, T], R]): Run in a worker for each task.
    threads (Optional[int]): Intra-op threads of each worker (torch, MKL,
        OpenMP); None leaves the libraries' defaults.
    fork_server (bool): Fork the workers from the fork server (CPU work);
        False spawns them (a worker that will use a GPU).
    """

    def __init__(
        self,
        workers: int,
        setup: Callable[[], S],
        work: Callable[[S, T], R],
        *,
        threads: Optional[int] = None,
        fork_server: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1: {workers}")
        self.n_workers = workers
        self.setup = setup
        self.work = work
        self.threads = threads
        self.context = start_context(fork_server)
        self.workers: List[_Worker] = []  # started when tasks wait (see `map`)
        self.open = False
        self.setup_deaths = 0

    def __enter__(self) -> "WorkerPool[S, T, R]":
        self.open = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker: ask, wait up to `STOP_SECONDS`, then kill."""
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            worker.reap(STOP_SECONDS)
        self.workers = []
        self.open = False

    @property
    def pids(self) -> List[Optional[int]]:
        """The process ids of the current workers."""
        return [worker.process.pid for worker in self.workers]

    def _start(self) -> _Worker:
        return _Worker(self.context, self.setup, self.work, self.threads)

    def map(
        self, tasks: Iterable[T], ahead: Optional[int] = None
    ) -> Iterator[Union[R, WorkerLost]]:
        """The results of `tasks`, in their order: a task's result, or a
        `WorkerLost` where its worker died on both attempts.

        tasks (Iterable[T]): The tasks, read lazily.
        ahead (Optional[int]): The most tasks handed out (or done and waiting)
            beyond the next result owed; default twice the workers.
        RAISES (WorkerError): A task raised in a worker.
        RAISES (WorkerSetupError): A worker could not set up.
        """
        if not self.open:
            raise RuntimeError("start the pool first: `with WorkerPool(...) as pool:`")
        limit = ahead if ahead is not None else 2 * self.n_workers
        source = enumerate(tasks)
        exhausted = False
        held: Dict[int, Tuple[T, int]] = {}  # key: (task, attempts so far)
        queue: List[int] = []  # keys to hand out (retries first)
        results: Dict[int, Union[R, WorkerLost]] = {}
        next_key = 0  # the next result owed
        read = 0  # tasks read from `tasks`
        while True:
            while next_key in results:
                yield results.pop(next_key)
                next_key += 1
            while not exhausted and read < next_key + limit:
                try:
                    key, task = next(source)
                except StopIteration:
                    exhausted = True
                    break
                held[key] = (task, 0)
                queue.append(key)
                read += 1
            if exhausted and not held and not results:
                return
            idle = sum(1 for worker in self.workers if worker.task is None)
            for _ in range(min(len(queue) - idle, self.n_workers - len(self.workers))):
                self.workers.append(self._start())
            for worker in self.workers:
                if worker.ready and worker.task is None and queue:
                    key = queue.pop(0)
                    task, attempts = held[key]
                    held[key] = (task, attempts + 1)
                    worker.task = key
                    worker.conn.send((key, task))
            self._wait(held, queue, results)

    def _wait(
        self,
        held: Dict[int, Tuple[T, int]],
        queue: List[int],
        results: Dict[int, Union[R, WorkerLost]],
    ) -> None:
        """Wait for any worker to be ready, finish a task or die, and act on it."""
        by_handle: Dict[Any, _Worker] = {}
        for worker in self.workers:
            by_handle[worker.conn] = worker
            by_handle[worker.process.sentinel] = worker
        for handle in wait(list(by_handle)):
            worker = by_handle[handle]
            if worker not in self.workers:
                continue  # replaced already through its other handle
            # A message sent before the process died is read first; the
            # sentinel wakes the next wait again.
            kind: Optional[str] = None
            key: int = -1
            payload: Any = None
            try:
                if worker.conn.poll():
                    kind, key, payload = worker.conn.recv()
            except (EOFError, OSError):  # its end of the pipe closed: it is gone
                kind = None
            if kind is None:
                self._replace(worker, held, queue, results)
            elif kind == "ready":
                worker.ready = True
            elif kind == "done":
                held.pop(key)
                results[key] = payload
                worker.task = None
            elif kind == "failed":
                raise WorkerError(f"a worker failed on task {key}:\n{payload}")
            else:  # "setup-failed": the traceback's last line says what
                raise WorkerSetupError(f"a worker could not start: {_last_line(payload)}")

    def _replace(
        self,
        worker: _Worker,
        held: Dict[int, Tuple[T, int]],
        queue: List[int],
        results: Dict[int, Union[R, WorkerLost]],
    ) -> None:
        """A worker died: start another, and retry its task once (or give it
        up as `WorkerLost`)."""
        worker.reap(STOP_SECONDS)
        how = ended(worker.process.exitcode)
        if not worker.ready:
            self.setup_deaths += 1
            if self.setup_deaths >= ATTEMPTS:
                raise WorkerSetupError(f"worker processes died while setting up ({how})")
        key = worker.task
        if key is not None:
            task, attempts = held[key]
            if attempts >= ATTEMPTS:
                del held[key]
                results[key] = WorkerLost(
                    f"the worker process died on each of {attempts} attempts ({how})"
                )
            else:
                queue.insert(0, key)
        self.workers[self.workers.index(worker)] = self._start()
