"""The worker pool (spacy_bert_pipes.runtime.pool): results in task order,
a dead worker's task retried once, then given up; errors carried back;
workers forked from a fork server with the package imported, in the
environment their pool has when it starts them.

The tasks are plain functions of this module: each worker imports it."""

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

from spacy_bert_pipes.runtime import (
    WorkerError,
    WorkerLost,
    WorkerPool,
    WorkerSetupError,
    auto_workers,
)
from spacy_bert_pipes.runtime.pool import PRELOAD, ended


def no_state() -> None:
    return None


def threads_of_worker() -> str:
    return os.environ.get("OMP_NUM_THREADS", "")


def square_and_threads(threads: str, n: int) -> Tuple[int, str]:
    # later tasks often finish first: results still come back in task order
    import time

    time.sleep(0.01 * (n % 3))
    return n * n, threads


def die_on(doomed: Dict[int, Tuple[Path, int]], state: None, n: int) -> int:
    """Kill this worker (SIGKILL) on task n the first `times` times, for each
    n: (marker, times) in `doomed`; each kill is a line in the marker."""
    marker, times = doomed.get(n, (None, 0))
    if marker is not None:
        kills = marker.read_text().count("\n") if marker.exists() else 0
        if kills < times:
            with marker.open("a") as file_:
                file_.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
    return n


def fail_on_three(state: None, n: int) -> int:
    if n == 3:
        raise ValueError("three is not allowed")
    return n


def broken_setup() -> None:
    raise OSError("no pipeline here")


def how_it_started() -> Tuple[int, bool, str]:
    """This worker's parent, whether the heavy modules were imported before
    its setup ran, and a variable of its environment."""
    return os.getppid(), all(name in sys.modules for name in PRELOAD), os.environ["POOL_PROBE"]


def started(state: Tuple[int, bool, str], task: None) -> Tuple[int, bool, str]:
    return state


def test_results_in_task_order_threads_shared_workers_stopped() -> None:
    with WorkerPool(2, threads_of_worker, square_and_threads, threads=3) as pool:
        expected = [(n * n, "3") for n in range(20)]
        assert list(pool.map(range(20), ahead=3)) == expected
        assert list(pool.map([])) == []
        assert list(pool.map(range(3))) == expected[:3]  # the pool is reused
        processes = [worker.process for worker in pool.workers]
    assert all(process.exitcode == 0 for process in processes)


def test_workers_start_only_for_tasks_that_wait() -> None:
    """4 workers allowed, 2 tasks: 2 processes start (each would load a
    pipeline); none for no tasks."""
    with WorkerPool(4, threads_of_worker, square_and_threads, threads=1) as pool:
        assert list(pool.map([])) == [] and pool.pids == []
        assert [result for result, _ in pool.map(range(2))] == [0, 1]
        assert len(pool.pids) == 2
        assert [result for result, _ in pool.map(range(9))] == [n * n for n in range(9)]
        assert len(pool.pids) == 4


def test_a_dead_workers_task_is_retried_once_then_lost(tmp_path: Path) -> None:
    """Task 2's worker is killed once: a fresh worker redoes it. Task 5's is
    killed on both attempts: it is lost, and the pool goes on."""
    once, twice = tmp_path / "once", tmp_path / "twice"
    work = functools.partial(die_on, {2: (once, 1), 5: (twice, 2)})
    with WorkerPool(2, no_state, work) as pool:
        results = list(pool.map(range(8)))
    assert len(once.read_text().splitlines()) == 1
    assert len(twice.read_text().splitlines()) == 2
    assert results[:5] + results[6:] == [0, 1, 2, 3, 4, 6, 7]
    assert isinstance(results[5], WorkerLost)
    assert "2 attempts" in results[5].reason and "SIGKILL" in results[5].reason


def test_a_task_that_raises_raises_with_the_workers_traceback() -> None:
    with WorkerPool(1, no_state, fail_on_three) as pool:
        with pytest.raises(WorkerError, match="three is not allowed"):
            list(pool.map(range(6)))


def test_a_setup_that_raises_is_named() -> None:
    with WorkerPool(1, broken_setup, fail_on_three) as pool:
        with pytest.raises(WorkerSetupError, match="OSError: no pipeline here"):
            list(pool.map(range(2)))


def test_workers_fork_from_a_server_with_the_imports_done_in_the_pools_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork server imported PRELOAD before forking the worker (a spawned
    worker would import it again); a later pool reuses the server, and its
    worker sees the environment as it is now, not as the server started. A
    pool for a GPU (fork_server=False) spawns its workers."""
    monkeypatch.setenv("POOL_PROBE", "first")
    with WorkerPool(1, how_it_started, started) as pool:
        [(server, preloaded, probe)] = pool.map([None])
    assert server != os.getpid() and preloaded and probe == "first"
    monkeypatch.setenv("POOL_PROBE", "second")
    with WorkerPool(1, how_it_started, started) as pool:
        [(again, preloaded, probe)] = pool.map([None])
    assert again == server and preloaded and probe == "second"
    # for a GPU: spawned by this process, importing only what setup needs
    with WorkerPool(1, how_it_started, started, fork_server=False) as pool:
        [(parent, preloaded, probe)] = pool.map([None])
    assert parent == os.getpid() and not preloaded and probe == "second"


SERVERS = """
import os, sys
from pathlib import Path
from spacy_bert_pipes.runtime.pool import start_fork_server

def servers():
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            line = (stat.parent / "cmdline").read_bytes().replace(b"\\0", b" ")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"forkserver" in line:
            found.append(stat.parent.name)
    return len(found)

before = servers()
start_fork_server()
print(before, servers())
"""


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_the_fork_server_starts_before_the_first_pool() -> None:
    """`start_fork_server` (annotate's workers engine and pipe_in_workers call
    it before they load the pipeline) starts the server at once, so that its
    imports run beside the loading; in a fresh process, where none ran."""
    result = subprocess.run(
        [sys.executable, "-c", SERVERS], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "1"]


def test_how_a_process_ended_in_words() -> None:
    assert ended(-signal.SIGKILL).startswith("killed by SIGKILL")
    assert ended(3) == "exit code 3"


def test_auto_workers() -> None:
    assert auto_workers(-1, cores=1) == 1
    assert auto_workers(-1, cores=2) == 2  # one single-threaded worker per core
    assert auto_workers(-1, cores=16) == 16
    assert auto_workers(0, cores=16) == 8
    assert auto_workers(0, cores=64) == 8
    assert auto_workers(0, cores=1) == 1
