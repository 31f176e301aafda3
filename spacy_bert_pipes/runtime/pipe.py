"""`pipe_in_workers`: `nlp.pipe` over a saved pipeline in N worker processes
(forked from the pool's fork server on the CPU, spawned for a GPU, which they
share), Docs back in input order.

The texts are cut into chunks of `chunk_size`; each worker runs
`nlp.pipe(chunk, as_tuples=True, batch_size=...)` on whole chunks, as one
process would, and sends the Docs back as bytes (`Doc.to_bytes`: text, tokens,
entities, cats, span groups and extension values such as `doc._.answers` and
`ent._.bert_ner_score`). A chunk's docs are batched only with each other, so
a doc's annotations do not depend on the number of workers.

What does not travel, as with spaCy's own `n_process`: `doc.user_hooks` (so
`doc.vector` and `similarity` of a `bert_vectors` component) and the encoder's
output (`doc._.bert_encoding`). For vectors of a collection, run
`bert-pipes annotate --vectors`, which takes them in the workers.
"""

import functools
import itertools
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union, cast

from spacy.language import Language
from spacy.tokens import Doc

from ..loading import load_pipeline
from ..models.encoder.listener import ENCODING_ATTR
from ..models.types import Precision
from .plan import auto_workers
from .pool import WorkerError, WorkerLost, WorkerPool, available_cores, start_fork_server

Item = Tuple[str, Any]
# The user_data key of the encoder's output on a doc: too big to send, and
# meaningless outside the process that made it.
_ENCODING_KEY = ("._.", ENCODING_ATTR, None, None)


def _setup(
    pipeline: str,
    gpu_id: int,
    precision: Optional[Precision],
    reproducible: bool,
    max_length: int,
) -> Language:
    from ..memory import bound_kernel_caches

    bound_kernel_caches()
    if gpu_id >= 0:
        import spacy

        spacy.require_gpu(gpu_id)
    nlp = load_pipeline(pipeline, precision=precision, reproducible=reproducible)
    nlp.max_length = max(nlp.max_length, max_length)
    return nlp


def _run_chunk(batch_size: int, nlp: Language, items: List[Item]) -> List[bytes]:
    docs = []
    for doc, _ in nlp.pipe(items, as_tuples=True, batch_size=batch_size):
        user_data: Dict[Any, Any] = doc.user_data
        user_data.pop(_ENCODING_KEY, None)
        # hooks do not travel (see above): left out, without spaCy's W109 per worker
        docs.append(doc.to_bytes(exclude=["user_hooks"]))
    return docs


def pipe_in_workers(
    pipeline: Union[str, Path],
    texts: Iterable[Union[str, Tuple[str, Any]]],
    *,
    workers: int = 0,
    gpu_id: int = -1,
    batch_size: int = 64,
    chunk_size: int = 256,
    as_tuples: bool = False,
    precision: Optional[Precision] = None,
    reproducible: bool = False,
    max_length: int = 0,
) -> Iterator[Union[Doc, Tuple[Doc, Any]]]:
    """Run a saved pipeline over `texts` in worker processes; yield the Docs
    in input order, as `nlp.pipe` does.

    This process loads the pipeline once on the CPU (its vocab reads the Docs
    back, and a pipeline that does not load fails here); each worker loads it
    too, onto the GPU `gpu_id` if that is >= 0. Texts are read lazily, a few
    chunks ahead of the Docs yielded.

    pipeline (Union[str, Path]): A folder saved with `nlp.to_disk`, or a
        package name.
    texts (Iterable[Union[str, Tuple[str, Any]]]): The texts, or with
        `as_tuples` (text, context) pairs; a context is passed to `nlp.pipe`
        (e.g. {"questions": {...}} for bert_qa) and yielded back with its Doc.
        Contexts must pickle.
    workers (int): Worker processes; 0: `auto_workers(gpu_id)`.
    gpu_id (int): The GPU the workers run on, -1 for the CPU.
    batch_size (int): `nlp.pipe` batch size in each worker.
    chunk_size (int): Texts per task handed to a worker.
    as_tuples (bool): The texts are (text, context) pairs; yield (Doc, context).
    precision (Optional[Precision]): Run the bert encoders at this precision
        ("fp32", "bf16"...); None keeps the saved one.
    reproducible (bool): Batch so that a doc's annotations do not depend on
        the other docs of its batch (see `loading.set_reproducible`).
    max_length (int): Raise the pipeline's `max_length` to this (0: keep it).
    YIELDS (Union[Doc, Tuple[Doc, Any]]): A Doc per text, or (Doc, context).
    RAISES (WorkerError): The pipeline raised on a chunk, or a chunk's worker
        died twice (no Doc is dropped silently).
    """
    if chunk_size < 1 or batch_size < 1:
        raise ValueError("chunk_size and batch_size must be at least 1")
    n_workers = workers or auto_workers(gpu_id)
    if gpu_id < 0:
        start_fork_server()  # its imports beside the loading below
    nlp = load_pipeline(pipeline, precision=precision)
    setup = functools.partial(_setup, str(pipeline), gpu_id, precision, reproducible, max_length)
    work = functools.partial(_run_chunk, batch_size)
    items: Iterator[Item] = (
        cast(Item, item) if as_tuples else (cast(str, item), None) for item in texts
    )
    chunks: Iterator[List[Item]] = iter(lambda: list(itertools.islice(items, chunk_size)), [])
    contexts: List[List[Any]] = []  # of the chunks handed out, in order

    def tasks() -> Iterator[List[Item]]:
        for chunk in chunks:
            contexts.append([context for _, context in chunk])
            yield [(text, context if as_tuples else {}) for text, context in chunk]

    threads = max(1, available_cores() // n_workers)
    with WorkerPool(n_workers, setup, work, threads=threads, fork_server=gpu_id < 0) as pool:
        for number, result in enumerate(pool.map(tasks())):
            chunk_contexts = contexts.pop(0)
            if isinstance(result, WorkerLost):
                first = number * chunk_size
                raise WorkerError(
                    f"texts {first} to {first + len(chunk_contexts) - 1}: {result.reason}"
                )
            for data, context in zip(result, chunk_contexts):
                doc = Doc(nlp.vocab).from_bytes(data)
                yield (doc, context) if as_tuples else doc
