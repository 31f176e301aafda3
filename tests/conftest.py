"""Shared fixtures: a tiny random BERT checkpoint built in the test session.

Unit tests never touch the network or the real encoder; tests marked `slow` use
the real pretrained encoder and datasets, tests marked `gpu` need CUDA.
"""

import importlib
import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from helpers import write_tiny_bert


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each process (and every command it starts) gets its
    share of the cores: two processes of two threads each on a 2-core machine
    run their torch work about 1.7x slower than two of one thread each."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ["OMP_NUM_THREADS"] = threads
    os.environ["MKL_NUM_THREADS"] = threads
    import torch

    torch.set_num_threads(int(threads))


# The references some tests compare with (spacy-transformers, sentence-transformers,
# scikit-learn): `make install` puts them in the venv's `extras` folder, apart, so that
# the many processes the tests start import only what a user's install gives them.
EXTRAS = Path(sys.prefix) / "extras"
REFERENCES = ("spacy_transformers", "sentence_transformers", "sklearn.cluster", "sklearn.metrics")


@pytest.fixture(scope="module")
def extras() -> Iterator[None]:
    """The references on this process's path and on its commands' (PYTHONPATH), for
    one test module; what it imported stays imported (a spaCy factory or architecture
    of spacy-transformers needs `import spacy_transformers`: spaCy read the entry points
    before). Without the folder (another install), they are wherever that install put
    them."""
    if not EXTRAS.is_dir():
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(EXTRAS))
        path = os.environ.get("PYTHONPATH")
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(EXTRAS), path])))
        for name in REFERENCES:  # a broken folder fails here, not as skipped tests
            try:
                importlib.import_module(name)
            except ImportError as error:
                pytest.fail(f"{EXTRAS}: import {name}: {error} (run `make install` again)")
        yield


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread, and leave the other cores alone. A
    module asks for it with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n_threads)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests never touch the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    yield


@pytest.fixture(autouse=True)
def seeded() -> None:
    """Every test starts from the same random state (thinc, numpy, torch): the
    tiny models' random heads then train the same way on every run."""
    from thinc.api import fix_random_seed

    fix_random_seed(0)


def check_groups(config: pytest.Config, items: list) -> None:
    """Under `--dist loadgroup` (make test), pytest-xdist sends the tests of an
    `xdist_group` (Ray's: one local Ray at a time) to one process by a suffix it
    adds to their ids; a pytest that drops it would run them side by side."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
            message = (
                f"{item.nodeid}: pytest {pytest.__version__} dropped its xdist_group, so "
                "--dist loadgroup cannot keep the group in one process; install pytest<9.2"
            )
            print(message, file=sys.__stderr__)  # a worker's error would not show it
            raise pytest.UsageError(message)


# The longest tests start first, so that with `make test`'s two processes
# (pytest-xdist) the other process takes the many short ones meanwhile instead
# of both waiting at the end for a workflow run that started last.
FIRST = ("tests/slow/test_project.py", "tests/slow/")


def start_order(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))


@pytest.hookimpl(trylast=True)  # after pytest-xdist's, which marks the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """The slow tests first (FIRST); GPU tests run on the device machine, and
    elsewhere they are reported as skipped."""
    import torch

    check_groups(config, items)
    items.sort(key=start_order)  # stable: the rest keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `make gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
