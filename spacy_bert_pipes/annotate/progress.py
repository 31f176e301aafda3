"""The progress bar of a run, on stderr, over its rows (resumed ones included)."""

import sys
from typing import Any, Optional


def progress_bar(total: Optional[int], initial: int) -> Any:
    """A tqdm bar over `total` rows (None: unknown), starting at `initial`."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit=" docs",
        desc="Annotating",
        file=sys.stderr,
        dynamic_ncols=True,
    )
