"""Settings come from the config, also when a pipeline is loaded.

spaCy's `TrainablePipe.from_disk` / `from_bytes` update `self.cfg` with the saved
cfg, and thinc's `Model.from_bytes` restores every model attribute from the saved
bytes. Both would replace a setting given at `spacy.load(path, config=...)` by
its saved value while `nlp.config` shows the new one. A `ConfiguredPipe` restores
only what was learned: the weights, the `cfg` keys named in `learned_cfg`
(labels, label counts) and the model attributes in `LEARNED_ATTRS`; every other
`cfg` key and model attribute keeps the value its config gave.
"""

import contextlib
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Tuple, Union

from spacy.pipeline import TrainablePipe
from thinc.api import Model

from ..models.heads.scope import SCOPE_ATTR, TEMPERATURE_ATTR

# Model attributes that record what happened, not what was configured: the
# checkpoint an encoder's weights were loaded from, what `context = "auto"`
# learned from the training docs, the questions a SlotQAModel's rows answer, and
# a classifier's calibration (out-of-scope fit and temperature).
LEARNED_ATTRS = frozenset(
    {
        "source",
        "learned_context",
        "learned_splitter",
        "slot_questions",
        SCOPE_ATTR,
        TEMPERATURE_ATTR,
    }
)


@contextlib.contextmanager
def settings_kept(cfg: Dict[str, Any], learned: Iterable[str], model: Model) -> Iterator[None]:
    """Put back, after the block, the configured `cfg` keys (all but `learned`)
    and the model attributes (all but LEARNED_ATTRS) that the block's loading
    replaced."""
    learned = set(learned)
    settings = {key: value for key, value in cfg.items() if key not in learned}
    attrs: List[Tuple[Model, Dict[str, Any]]] = [
        (node, {k: v for k, v in node.attrs.items() if k not in LEARNED_ATTRS})
        for node in model.walk()
    ]
    yield
    cfg.update(settings)
    for node, values in attrs:
        node.attrs.update(values)


class ConfiguredPipe(TrainablePipe):
    """A TrainablePipe whose settings come from its config when it is loaded.

    `learned_cfg` names the `cfg` keys that training or `initialize` wrote
    (they are restored from the saved pipeline); every other `cfg` key is a
    setting from the factory's arguments.
    """

    learned_cfg: Tuple[str, ...] = ("labels",)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> Any:
        with settings_kept(self.cfg, self.learned_cfg, self.model):
            TrainablePipe.from_bytes(self, bytes_data, exclude=exclude)
        self.check_loaded()
        return self

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> Any:
        with settings_kept(self.cfg, self.learned_cfg, self.model):
            TrainablePipe.from_disk(self, path, exclude=exclude)
        self.check_loaded()
        return self

    def check_loaded(self) -> None:
        """Raise if the configured settings cannot run the loaded weights (a
        component overrides this where a setting fixes the output layer)."""
