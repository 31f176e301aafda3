"""The progress bar of a run, on stderr, over its rows (resumed ones included)."""

from typing import Any, Optional

from .. import progress


def progress_bar(total: Optional[int], initial: int) -> Any:
    """A tqdm bar over `total` rows (None: unknown), starting at `initial`."""
    return progress.progress_bar(total, initial, unit=" docs", desc="Annotating")
