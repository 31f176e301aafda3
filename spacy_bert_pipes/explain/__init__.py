"""`explain`: draw a component's encoder attention for one text.

Renders, into an output folder:
* `attention_layer<L>.png`: a heatmap (query wordpiece x attended wordpiece) of
  layer L, averaged over the chosen heads (or of the one chosen head);
* `attention_layer<L>_heads.png`: the chosen heads of layer L side by side;
* `cls_attention.png`: the attention from [CLS] to every wordpiece, as bars for the
  chosen layers and as a strip per layer of the encoder;
* `explain.html`: one self-contained page with the pictures and the text, each word
  shaded by the [CLS] attention it receives.

Layers and heads are numbered from 0, and negative numbers count from the end
(-1 is the last layer). A text longer than the encoder's window is explained one
window at a time (the first by default), with the window built as the component
builds it. Attention weights show where the model looks, not why it decides: read
them as a picture of one part of the computation, not as an explanation.

The parts: `types.py` (the result and the error), `attention.py` (the torch
side: an encoder's attention weights for one window), `compute.py` (`explain`:
which encoder, its attention, the chosen layers and heads, the words' scores),
`pictures.py` (the PNGs) and `page.py` (`render`: the files and the HTML page).
"""

from .compute import explain, find_encoder
from .page import render
from .types import EncoderTarget, ExplainError, ExplainResult, WordAttention

__all__ = [
    "EncoderTarget",
    "ExplainError",
    "ExplainResult",
    "WordAttention",
    "explain",
    "find_encoder",
    "render",
]
