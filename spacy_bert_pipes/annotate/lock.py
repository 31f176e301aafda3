"""The lock on OUTPUT: one run at a time writes an OUTPUT and its parts.

`output_lock(output_path)` holds `OUTPUT.lock` (beside `OUTPUT.parts`) for
the `with` block. Where `fcntl.flock` works, the lock is the kernel's: it
goes with the process, so a run killed with SIGKILL leaves no lock behind and
the next run resumes at once. Elsewhere (no `fcntl`, or a file system that
refuses `flock`), the lock file is created exclusively and holds the owner's
pid and host name; a lock left by a dead process on this host is taken over,
one from another host must be removed by hand (the message says so).

The lock is re-entrant within a process: the CLI takes it before loading the
pipeline (so that a second run is refused at once), and the engine takes it
again around the run.
"""

import errno
import os
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

from ..io import durable
from .types import AnnotateError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

LOCK_SUFFIX = ".lock"
# Per process: lock path -> (open file descriptor or -1, depth).
_held: Dict[Path, Tuple[int, int]] = {}
_held_guard = threading.Lock()


def lock_path_for(output_path: Path) -> Path:
    """OUTPUT.lock, beside OUTPUT and OUTPUT.parts."""
    return durable.sibling(Path(output_path), LOCK_SUFFIX)


@contextmanager
def output_lock(output_path: Path) -> Iterator[Path]:
    """Hold the lock on OUTPUT for the block; raise `AnnotateError` naming
    OUTPUT and the holder's pid and host if another run holds it.

    output_path (Path): The run's OUTPUT.
    YIELDS (Path): The lock file.
    """
    path = Path(os.path.abspath(lock_path_for(output_path)))
    with _held_guard:
        if path in _held:
            fd, depth = _held[path]
            _held[path] = (fd, depth + 1)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            _held[path] = (_acquire(path, Path(output_path)), 1)
    try:
        yield path
    finally:
        with _held_guard:
            fd, depth = _held[path]
            if depth > 1:
                _held[path] = (fd, depth - 1)
            else:
                del _held[path]
                _release(path, fd)


def _owner_text() -> str:
    return f"{os.getpid()} {socket.gethostname()}\n"


def _describe_owner(path: Path) -> str:
    owner = _read_owner(path)
    if owner is None:
        return "another process"
    pid, host = owner
    return f"pid {pid} on host {host}"


def _read_owner(path: Path) -> Optional[Tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf8").split()
        return int(text[0]), text[1]
    except (OSError, ValueError, IndexError):
        return None


def _refuse(output_path: Path, path: Path, extra: str = "") -> AnnotateError:
    return AnnotateError(
        f"{output_path}: another annotate run ({_describe_owner(path)}) is writing it "
        f"(lock {path}); wait for it to finish, or stop it and run again{extra}"
    )


def _acquire(path: Path, output_path: Path) -> int:
    """Take the lock: an open, flock-ed descriptor, or -1 for a pid file."""
    if fcntl is not None:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise _refuse(output_path, path) from None
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    break  # no flock here: a pid file instead
                raise
            # The holder before us may have removed the file as it released it:
            # then our lock is on a deleted file, so take it again.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, _owner_text().encode("utf8"))
            return fd
    _acquire_pid_file(path, output_path)
    return -1


def _acquire_pid_file(path: Path, output_path: Path) -> None:
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = _read_owner(path)
            if owner is not None and owner[1] == socket.gethostname() and not _alive(owner[0]):
                path.unlink(missing_ok=True)  # left by a killed run on this host
                continue
            raise _refuse(output_path, path, f"; if no run is left, remove {path}") from None
        with os.fdopen(fd, "w", encoding="utf8") as file_:
            file_.write(_owner_text())
        return
    raise _refuse(output_path, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _release(path: Path, fd: int) -> None:
    # Remove the file while still holding the lock (a waiter that opened it
    # sees it is gone, see `_acquire`), then let go.
    try:
        path.unlink(missing_ok=True)
    finally:
        if fd >= 0:
            os.close(fd)
