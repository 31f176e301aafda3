"""Small helpers shared by the components (no torch here)."""

from typing import Any, Callable, Dict, Optional, Tuple

from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from thinc.api import Model, Optimizer, set_dropout_rate

from ..models.encoder import is_loaded
from ..models.listener import ENCODING_ATTR, EncoderListener
from ..models.loaders import HFCheckpointLoader
from ..models.trf import is_trf_encoder


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
        from ..models.loaders import HFCheckpoint

        encoder_loader = HFCheckpoint()
    if not isinstance(encoder_loader, HFCheckpointLoader):
        raise TypeError(
            f"[initialize.components.{component}.encoder_loader] must be a "
            f"spacy-bert-pipes.HFCheckpoint.v1, got {type(encoder_loader).__name__}"
        )
    encoder_loader.load_encoder(encoder)


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
