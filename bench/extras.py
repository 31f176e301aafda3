"""The references some benchmarks compare with: spacy-transformers,
sentence-transformers and scikit-learn. `make install` puts them in the venv's
`extras` folder, apart from what every other process imports (the Makefile says
why); a script that needs them calls `use()` before it imports them, and the
commands it starts find them through PYTHONPATH."""

import importlib
import os
import sys
from pathlib import Path

FOLDER = Path(sys.prefix) / "extras"


def use() -> None:
    """Put the folder first on this process's path and on its commands'. Without
    it (another install), the references are wherever that install put them."""
    if not FOLDER.is_dir() or str(FOLDER) in sys.path:
        return
    sys.path.insert(0, str(FOLDER))
    importlib.invalidate_caches()
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FOLDER), path]))
