"""Small helpers shared by the components (no torch here)."""

import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_get_examples
from spacy.util import minibatch
from thinc.api import Model, Optimizer, set_dropout_rate

from ..models.encoder.bert import is_loaded
from ..models.encoder.listener import ENCODING_ATTR, EncoderListener
from ..models.encoder.loaders import HFCheckpointLoader
from ..models.encoder.trf import is_trf_encoder
from ..models.text.segments import learn_context
from ..models.text.tokens import TokenizedBatch, provide_tokens, segment_texts, tokenize_texts


def ensure_encoding_extension() -> None:
    if not Doc.has_extension(ENCODING_ATTR):
        Doc.set_extension(ENCODING_ATTR, default=None)


def own_encoder(model: Model) -> Optional[Model]:
    """The component's own BertEncoder, or None when it listens to an upstream
    `bert_encoder` or spacy-transformers `transformer` component."""
    encoder = model.get_ref("encoder")
    if isinstance(encoder, EncoderListener) or is_trf_encoder(encoder):
        return None
    return encoder


def load_encoder(
    encoder: Model, encoder_loader: Optional[HFCheckpointLoader], component: str
) -> None:
    """Bring pretrained weights into an encoder, unless it already has weights.

    With no loader configured, the default encoder package is used, so that
    `nlp.add_pipe(...)` followed by `nlp.initialize()` just works.
    """
    if encoder_loader is None:
        if is_loaded(encoder):
            return
        from ..models.encoder.loaders import HFCheckpoint

        encoder_loader = HFCheckpoint()
    if not isinstance(encoder_loader, HFCheckpointLoader):
        raise TypeError(
            f"[initialize.components.{component}.encoder_loader] must be a "
            f"spacy-bert-pipes.HFCheckpoint.v1, got {type(encoder_loader).__name__}"
        )
    encoder_loader.load_encoder(encoder)


def initialize_examples(
    get_examples: Callable[[], Iterable[Example]], method: str, limit: Optional[int] = None
) -> List[Example]:
    """`get_examples()` read once, into a list, and checked as spaCy's
    `validate_get_examples` checks it (its errors): a component that reads its
    examples more than once (labels, context, counts) reads the corpus once, not
    once for spaCy's check and once for each use. With `limit`, only the first
    `limit` examples are read and checked: for a component that learns nothing
    from them, so that the check does not read a whole corpus (the multitask
    corpus: ~34,000 examples, ~7 s on a 2-core Xeon)."""
    if not callable(get_examples):
        validate_get_examples(get_examples, method)  # raises spaCy's E930
    found = get_examples()
    if not isinstance(found, Iterable):
        validate_get_examples(lambda: found, method)  # raises spaCy's E978
    examples = list(found if limit is None else itertools.islice(found, limit))
    validate_get_examples(lambda: examples, method)  # E930 when empty, E978 if not Examples
    return examples


def learn_encoder_context(encoder: Model, examples: Iterable[Example]) -> None:
    """Let an encoder with `context = "auto"` learn from the training docs whether
    to read sentences apart (`models.segments.learn_context`)."""
    learn_context(encoder, (eg.reference for eg in examples))


# Question answering data on Docs (see pipeline/qa.py and convert.py):
# doc._.questions     Dict[str, str]: key -> question, asked of this doc (besides the
#                     component's fixed questions); settable through nlp.pipe contexts.
# doc._.gold_answers  Dict[str, List[Dict]]: key -> reference answers, each
#                     {"text": str, "start": int, "end": int} (character offsets in
#                     doc.text, end exclusive); an empty list means "no answer".
# doc._.answers       List[Dict]: the predictions, for export: {"key", "question",
#                     "text", "start", "end", "score", "rank"}; a null answer has
#                     text "" and start = end = None.
QA_EXTENSIONS = ("questions", "gold_answers", "answers")


def ensure_qa_extensions() -> None:
    for name in QA_EXTENSIONS:
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=None)


def train_step(
    pipe: TrainablePipe,
    inputs: Any,
    loss_fn: Callable[[Any], Tuple[float, Any]],
    *,
    drop: float,
    sgd: Optional[Optimizer],
    losses: Dict[str, float],
) -> Dict[str, float]:
    """One update of a pipe's model: forward on `inputs`, `loss_fn(scores)` gives
    the loss and its gradient, backward, then the optimizer step if `sgd` is set."""
    losses.setdefault(pipe.name, 0.0)
    set_dropout_rate(pipe.model, drop)
    scores, backprop = pipe.model.begin_update(inputs)
    loss, d_scores = loss_fn(scores)
    backprop(d_scores)
    if sgd is not None:
        pipe.finish_update(sgd)
    losses[pipe.name] += loss
    return losses


def head_pipe(pipe: TrainablePipe, stream: Iterable[Doc], batch_size: int) -> Iterator[Doc]:
    """`TrainablePipe.pipe` of a head: with its own encoder, `prefetching_pipe`;
    as a listener (the shared encoder tokenized already) spaCy's own."""
    encoder = own_encoder(pipe.model)
    if encoder is None:
        return TrainablePipe.pipe(pipe, stream, batch_size=batch_size)
    return prefetching_pipe(pipe, encoder, stream, batch_size)


def prefetching_pipe(
    pipe: TrainablePipe, encoder: Model, stream: Iterable[Doc], batch_size: int
) -> Iterator[Doc]:
    """`TrainablePipe.pipe` for a component that runs its own BertEncoder, with
    the wordpieces of batch k + 1 made in a worker thread while batch k runs.

    The fast tokenizer releases the GIL, so its work leaves the main thread's
    critical path. The Docs are read (texts, sentence spans) on the main thread;
    the worker only tokenizes strings. The output is the same as without the
    worker: the forward uses the wordpieces made for exactly its docs. An error
    in the worker is raised for its batch (naming the text) and goes through the
    component's error handler like any error of that batch. Training never goes
    through here (`update` tokenizes in its own forward).
    """
    error_handler = pipe.get_error_handler()
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"{pipe.name}-tokenize")
    try:
        pending: Optional[Tuple[List[Doc], Future[TokenizedBatch]]] = None
        for docs in minibatch(stream, size=batch_size):
            try:
                spans, texts = segment_texts(encoder, docs)
            except Exception as error:
                # docs that cannot be read: the batch fails now, like spaCy's pipe
                if pending is not None:
                    yield from _run_batch(pipe, encoder, *pending, error_handler)
                    pending = None
                error_handler(pipe.name, pipe, docs, error)
                continue
            future = pool.submit(_tokenized_batch, encoder, docs, spans, texts)
            if pending is not None:
                yield from _run_batch(pipe, encoder, *pending, error_handler)
            pending = (docs, future)
        if pending is not None:
            yield from _run_batch(pipe, encoder, *pending, error_handler)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        provide_tokens(encoder, None)


def _tokenized_batch(
    encoder: Model, docs: List[Doc], spans: List[List[Tuple[int, int]]], texts: List[str]
) -> TokenizedBatch:
    return TokenizedBatch(docs, spans, tokenize_texts(encoder, texts, spans))


def _run_batch(
    pipe: TrainablePipe,
    encoder: Model,
    docs: List[Doc],
    future: "Future[TokenizedBatch]",
    error_handler: Callable[..., Any],
) -> Iterator[Doc]:
    try:
        provide_tokens(encoder, future.result())
        scores = pipe.predict(docs)
        pipe.set_annotations(docs, scores)
        yield from docs
    except Exception as error:
        error_handler(pipe.name, pipe, docs, error)
    finally:
        provide_tokens(encoder, None)
