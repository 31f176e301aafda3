"""The lock on OUTPUT: held by one run at a time, gone with its process,
re-entrant in a process, and the pid-file fallback where flock is missing."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_bert_pipes.annotate import AnnotateError
from spacy_bert_pipes.annotate import lock as lock_module
from spacy_bert_pipes.annotate.lock import lock_path_for, output_lock

HOLD = """
import sys, time
from spacy_bert_pipes.annotate.lock import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


def hold_in_another_process(output: Path) -> "subprocess.Popen[str]":
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(output)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    return process


def test_a_second_holder_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    process = hold_in_another_process(output)
    try:
        with pytest.raises(AnnotateError) as refused:
            with output_lock(output):
                pass
        message = str(refused.value)
        assert message.startswith(f"{output}: another annotate run")
        assert f"pid {process.pid} on host {socket.gethostname()}" in message
    finally:
        process.kill()  # SIGKILL: the kernel drops its flock
        process.wait()
    assert lock_path_for(output).exists()  # the file stays, but no one holds it
    with output_lock(output):
        with output_lock(output):  # re-entrant
            assert lock_path_for(output).read_text().split()[0] == str(os.getpid())
        assert lock_path_for(output).exists()
    assert not lock_path_for(output).exists()


def test_pid_file_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock_module, "fcntl", None)
    output = tmp_path / "out.jsonl"
    path = lock_path_for(output)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid} {socket.gethostname()}\n")
    with output_lock(output):  # a killed run's lock on this host: taken over
        assert path.read_text().split()[0] != str(dead.pid)
    assert not path.exists()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path.write_text(f"{alive.pid} {socket.gethostname()}\n")
        with pytest.raises(AnnotateError, match=f"pid {alive.pid} on host"):
            with output_lock(output):
                pass
    finally:
        alive.kill()
        alive.wait()
    path.write_text("123 another-host\n")
    with pytest.raises(AnnotateError, match=f"pid 123 on host another-host.*remove {path}"):
        with output_lock(output):
            pass
