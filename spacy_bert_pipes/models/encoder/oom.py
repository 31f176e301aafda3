"""Prediction batches that do not fit in device memory: split in half and retry.

A batch of windows is packed under `max_batch_tokens`, but what fits on a device
also depends on what else holds its memory (another process, the heads, the
allocator's fragmentation). At predict time a transformer batch that raises an
out-of-memory error is split in half and each half run again, down to a single
window; only a single window that still does not fit is an error, naming the
start of its text. Training re-raises: a smaller batch would change the step.

torch is imported only when a batch runs (the shim has imported it by then).
"""

from typing import Any, Callable, Tuple

from thinc.api import get_array_module

# Wordpieces of a window decoded into the error message.
_TEXT_START_PIECES = 24


class WindowOutOfMemoryError(RuntimeError):
    """A single window that does not fit in device memory.

    n_wordpieces (int): The window's length, specials included.
    text_start (str): The start of its text, decoded from its wordpieces.
    """

    def __init__(self, n_wordpieces: int, text_start: str, device: str):
        self.n_wordpieces = n_wordpieces
        self.text_start = text_start
        super().__init__(
            f"A single window of {n_wordpieces} wordpieces does not fit in {device} memory, "
            f"even alone (the text starting {text_start!r}). Free memory on the device, "
            "or lower the encoder's max_length."
        )


def run_batch(shim: Any, inputs: Tuple[Any, ...], is_train: bool) -> Tuple[Any, Callable]:
    """Run one transformer batch through an HFShim (`shim(inputs, is_train)`); at
    predict time, split a batch that runs out of device memory in halves.

    shim (HFShim): The encoder's shim.
    inputs (Tuple[Array2d, ...]): ids, mask, segment ids[, casing classes];
        each (batch, length).
    is_train (bool): Training re-raises an out-of-memory error.
    RETURNS: the hidden states (batch, length, width) and the backprop callback,
        as `shim(inputs, is_train)` does.
    """
    if is_train:
        return shim(inputs, is_train)
    return _predict(shim, inputs), _no_backprop


def _predict(shim: Any, inputs: Tuple[Any, ...]) -> Any:
    import torch

    try:
        return shim(inputs, False)[0]
    except torch.OutOfMemoryError:  # torch.cuda.OutOfMemoryError is the same class
        # Retry outside the except block: its traceback holds the failed batch's tensors.
        pass
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    n_rows = int(inputs[0].shape[0])
    if n_rows == 1:
        raise WindowOutOfMemoryError(*_describe(shim, inputs)) from None
    half = n_rows // 2
    parts = [
        _predict(shim, tuple(a[rows] for a in inputs))
        for rows in (slice(0, half), slice(half, n_rows))
    ]
    # (batch, length, width): the halves keep the batch's padded length
    return get_array_module(parts[0]).concatenate(parts)


def _describe(shim: Any, inputs: Tuple[Any, ...]) -> Tuple[int, str, str]:
    """A single window's length, the start of its text and the device's name."""
    ids, mask = inputs[0][0], inputs[1][0]
    n_wordpieces = int(mask.sum())
    # [CLS] dropped; with a question, the start of the question
    start = [int(i) for i in ids[1 : min(n_wordpieces, 1 + _TEXT_START_PIECES)]]
    text = shim.tokenizer.decode(start, skip_special_tokens=True)
    return n_wordpieces, text, str(shim.device)


def _no_backprop(d_hidden: Any) -> None:
    return None
