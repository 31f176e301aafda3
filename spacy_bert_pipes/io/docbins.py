"""Reading `.spacy` files whose docs carry user data, at the speed of the rest.

srsly looks its msgpack decoders up again on every `msgpack_loads`: a scan of
catalogue's whole registry and of every installed package's entry points, about
1.5 ms. spaCy's `DocBin.get_docs` unpacks each doc's user data with its own
call, so reading 8,000 Restaurant-8k requests with their gold answers spends
~12 s on that lookup alone. Within `decoders_looked_up_once()` the lookup is
done once, on entry: the same decoders, as long as none is registered meanwhile
(nothing registers one while a corpus is read).
"""

import threading
from contextlib import contextmanager
from typing import Iterator

import srsly.msgpack

_lock = threading.Lock()
_depth = 0


@contextmanager
def decoders_looked_up_once() -> Iterator[None]:
    """srsly's msgpack decoders looked up once for the block, not once a doc."""
    global _depth
    registry = srsly.msgpack.msgpack_decoders
    with _lock:
        if _depth == 0:
            found = registry.get_all()
            registry.get_all = lambda: dict(found)  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                del registry.get_all  # the class's method again
