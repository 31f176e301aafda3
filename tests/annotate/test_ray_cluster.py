"""The Ray engine on a cluster started with `ray start` (not by this
process): it attaches without an address and without the resources Ray
refuses, and a worker killed mid-run is replaced, its chunk redone and
committed once. Both give the local engine's bytes."""

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator, List

import pytest
import torch
from annotate_helpers import save_tiny_pipeline
from helpers import WORDS

from spacy_bert_pipes.annotate import AnnotateOptions, annotate, prepare_run

torch.set_num_threads(1)  # as in Ray's actors (OMP_NUM_THREADS=1): the same float sums

pytestmark = [
    pytest.mark.xdist_group("ray"),  # one Ray at a time on the machine (make test -n 2)
    pytest.mark.slow,  # a `ray start` cluster: ~15 s to start, ~10 s to stop
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray"),
]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`ray start --head --num-cpus 2` on a free port, for the module; the
    Ray temp dir it notes itself in (`RAY_TMPDIR`). Its own dir, not
    /tmp/ray: `ray start` writes its address there for every later
    `ray.init()` without an address to find, and another test's local Ray
    would then refuse its num_cpus. Stopped by ending that `ray start
    --block` process (which stops what it started), not with `ray stop`,
    which would stop every Ray on the machine."""
    port = free_port()
    log = tmp_path_factory.mktemp("ray") / "ray_start.log"
    # Short: Ray's sockets live under it, and a socket path has ~107 bytes.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["RAY_TMPDIR"] = ray_tmp
    ray_cli = Path(sys.executable).with_name("ray")
    command = [str(ray_cli), "start", "--head", "--num-cpus", "2", "--port", str(port)]
    with log.open("wb") as file_:
        process = subprocess.Popen(
            [*command, "--include-dashboard", "false", "--block"],
            stdout=file_,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start failed:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
        yield ray_tmp
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def pipeline(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("pipeline") / "nlp"
    return str(save_tiny_pipeline(path, tiny_bert, qa=False))


def write_input(path: Path, n: int) -> Path:
    lines = [
        json.dumps(
            {"id": f"d{i}", "text": " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 9))}
        )
        + "\n"
        for i in range(n)
    ]
    lines.insert(5, '{"id": "bad", "text": null}\n')
    path.write_text("".join(lines), encoding="utf8")
    return path


class MarkChunk:
    """The actors' `on_worker_chunk`: a marker file per chunk started,
    `chunk-{index}-{pid}`, then a pause, so the test can kill the actor while
    it annotates the chunk."""

    def __init__(self, folder: Path, pause: float) -> None:
        self.folder, self.pause = folder, pause

    def __call__(self, index: int) -> None:
        (self.folder / f"chunk-{index}-{os.getpid()}").touch()
        time.sleep(self.pause)


def test_attaches_without_an_address_and_survives_a_killed_worker(
    cluster: str, pipeline: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No address and no RAY_ADDRESS: the cluster started with `ray start` is
    used (Ray refused the num_cpus passed before). One actor is killed with
    SIGKILL while it annotates a chunk: Ray replaces it, the chunk is redone,
    and the output is the local engine's, byte for byte. (One Ray job for
    both: each costs ~30 s on this machine.)"""
    import ray.cloudpickle

    from spacy_bert_pipes.annotate.ray import run_annotation_ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers lack tests/
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", cluster)  # where the cluster noted its address
    input_path = write_input(tmp_path / "in.jsonl", 60)
    options = AnnotateOptions(chunk_size=10)
    expected = tmp_path / "local" / "out.jsonl"
    annotate(pipeline, input_path, expected, options)
    markers = tmp_path / "markers"
    markers.mkdir()
    killed: List[str] = []
    # Until the run ends: on a loaded machine the actors can take minutes to start.
    run_ended = threading.Event()

    def kill_the_first_worker() -> None:
        deadline = time.monotonic() + 900
        while not killed and not run_ended.is_set() and time.monotonic() < deadline:
            found = sorted(markers.iterdir())
            if found:
                _, index, pid = found[0].name.split("-")
                os.kill(int(pid), signal.SIGKILL)
                killed.append(index)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_worker)
    killer.start()
    output = tmp_path / "out.jsonl"
    try:
        summary = run_annotation_ray(
            prepare_run(pipeline, input_path, output, options),
            pipeline,
            address=None,
            workers=2,
            on_worker_chunk=MarkChunk(markers, pause=0.5),
        )
    finally:
        run_ended.set()
        killer.join()
    assert killed, "no worker started a chunk"
    # The killed chunk was started by two processes: the killed one and its replacement.
    pids = {m.name.split("-")[2] for m in markers.glob(f"chunk-{killed[0]}-*")}
    assert len(pids) == 2, sorted(m.name for m in markers.iterdir())
    assert (summary.input_rows, summary.error_rows) == (61, 1)
    assert output.read_bytes() == expected.read_bytes()
    errors = tmp_path / "out.jsonl.errors.jsonl"
    assert errors.read_bytes() == (tmp_path / "local" / "out.jsonl.errors.jsonl").read_bytes()
