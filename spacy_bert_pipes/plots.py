"""What the report's and explain's pictures share: matplotlib, loaded lazily, and
PNGs embedded in an HTML page.

matplotlib is an optional extra (`spacy-bert-pipes[plots]`); it is imported only
when a picture is drawn, so that the rest of the package works without it.
"""

import base64
import html
from pathlib import Path
from typing import Any

PLOTS_EXTRA = "pip install 'spacy-bert-pipes[plots]'  (or: pip install matplotlib)"


def figure_class(purpose: str) -> Any:
    """matplotlib's `Figure`, or an ImportError that says how to install it.

    purpose (str): What needs it, for the error: "Drawing attention".
    RETURNS (Any): The class `matplotlib.figure.Figure`.
    """
    # The object-oriented API without pyplot: no global state and no change of the
    # user's backend (a Figure saves itself with the Agg canvas).
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(f"{purpose} needs matplotlib: {PLOTS_EXTRA}") from err
    return Figure


def embedded_png(path: Path, alt: str) -> str:
    """A PNG as an HTML <figure>, the image inline (base64), its file name the caption."""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(path.name)}</figcaption></figure>"
    )
