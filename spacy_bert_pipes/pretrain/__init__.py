"""Domain-adaptive pretraining: continue an encoder's masked-LM training on a
text collection, then hand the encoder to any component's config.

`pretrain` reads the texts of a CSV, JSONL or Parquet file or a folder of
`.txt` files (with `io.readers.read_input`), holds out a seeded sample of them,
cuts the rest into windows of at most `max_length` wordpieces and trains with
BERT's masking (`mlm.mask_tokens`: 15% of the wordpieces chosen, of
those 80% masked, 10% replaced by a random wordpiece, 10% kept). Batches are
padded to their longest window, and windows of similar length are batched
together (sorted within pools of 50 batches, the batches then shuffled), so
little time goes to padding. It writes into OUTPUT:

    pretrain_settings.json   the input's identity and the settings of the run
    pretrain_log.jsonl       the mean loss every `log_every` steps, and the
                             held-out loss at the start, at each checkpoint
                             and at the end
    checkpoints/step-N/      model, optimizer, schedule, random and data
                             position state every `checkpoint_every` steps
                             (the last `keep_checkpoints` are kept)
    encoder/                 the trained encoder without its MLM head, and
                             its tokenizer: set a component's
                             [initialize.components.X.encoder_loader] source
                             to this folder
    pretrain_metrics.json    the summary, written last: the run is finished

Run the same command again after a crash or a kill and it resumes from the
latest checkpoint, provided the input and the settings are unchanged; the
resumed run ends with the same weights as an uninterrupted one (on the same
device). An unfinished run with another input or other settings is an error
(`overwrite` discards it). A finished run with the same input and settings is
not repeated; with others it is replaced, as spaCy's commands replace their
output.

settings.py     PretrainSettings, PretrainSummary, PretrainError, the output names
data.py         the texts, the held-out split, windows and epoch batches
checkpoints.py  the output folder between runs: settings record, log, checkpoints
mlm.py          the masked-LM model and its masking, in torch
trainer.py      MLMTrainer, the torch training loop (imported when a run starts)
run.py          pretrain: the stages of a run
"""

from .data import POOL_BATCHES, TextCollection, epoch_batches, held_out_split, read_texts
from .run import pretrain
from .settings import (
    CHECKPOINTS_DIR,
    ENCODER_DIR,
    LOG_NAME,
    METRICS_NAME,
    SETTINGS_NAME,
    STATE_NAME,
    PretrainError,
    PretrainPrecision,
    PretrainSettings,
    PretrainSummary,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "ENCODER_DIR",
    "LOG_NAME",
    "METRICS_NAME",
    "POOL_BATCHES",
    "SETTINGS_NAME",
    "STATE_NAME",
    "PretrainError",
    "PretrainPrecision",
    "PretrainSettings",
    "PretrainSummary",
    "TextCollection",
    "epoch_batches",
    "held_out_split",
    "pretrain",
    "read_texts",
]
