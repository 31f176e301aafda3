"""The progress bar of a run, on stderr, over its rows (resumed ones included)."""

from typing import Any, Optional

from .. import progress


def progress_bar(total: Optional[int], initial: int, workers: int = 1) -> Any:
    """A tqdm bar over `total` rows (None: unknown), starting at `initial`,
    that names the worker processes when there are several."""
    desc = f"Annotating ({workers} workers)" if workers > 1 else "Annotating"
    return progress.progress_bar(total, initial, unit=" docs", desc=desc)
