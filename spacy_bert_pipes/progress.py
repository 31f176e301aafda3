"""The progress bar of a long run (annotate, pretrain): tqdm on stderr, resumable."""

import sys
from typing import Any, Optional


def progress_bar(
    total: Optional[int], initial: int, *, unit: str, desc: str, disable: bool = False
) -> Any:
    """A tqdm bar on stderr over `total` units (None: unknown), starting at `initial`
    (what a resumed run had already done). tqdm is imported only when a bar is made."""
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit=unit,
        desc=desc,
        file=sys.stderr,
        dynamic_ncols=True,
        disable=disable,
    )
