"""Masked-LM continued pretraining of an encoder: the torch side.

`mask_tokens` implements BERT's masking: each wordpiece that is not a special
token is chosen with probability 0.15 (or, with whole-word masking, each word
is chosen with probability 0.15 and then all of its pieces are); of the chosen
pieces 80% become [MASK], 10% a random wordpiece and 10% stay as they are, and
the model predicts the original piece at every chosen position.

`MLMTrainer` holds a masked-LM model (`AutoModelForMaskedLM`), its AdamW
optimizer and linear warmup / decay schedule, runs training steps and
held-out evaluations, and saves and restores checkpoints (weights as
safetensors, optimizer, schedule and random states through `torch.save`, read
back with `weights_only=True`). `save_encoder` writes the trained base model
(no MLM head) with its tokenizer: a folder that `HFCheckpoint` loads.
Orchestration (reading texts, batching, resuming) is in `spacy_bert_pipes/pretrain.py`.
"""

import contextlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch
from safetensors.torch import load_model, save_model

from .hf_shim import PRECISIONS, resolve_precision
from .loaders import resolve_source

# Labels at positions the loss ignores (PyTorch's cross_entropy default).
IGNORE_INDEX = -100
# Where each architecture keeps the module that maps hidden states to vocabulary
# logits. With it the logits are computed at the masked positions only: the
# output layer (width x vocabulary) is the largest matrix multiplication of a
# small encoder, and 85% of its outputs would be thrown away. Other
# architectures run the model's own forward pass, which scores every position.
_MLM_HEADS = {
    "bert": "cls",
    "roberta": "lm_head",
    "xlm-roberta": "lm_head",
    "camembert": "lm_head",
}
# BERT vocabularies reserve placeholder entries that never occur in text.
_PLACEHOLDER = re.compile(r"\[unused\d+\]|<unused\d+>")
_MODEL_STATE = "model.safetensors"
_TRAINING_STATE = "training_state.pt"


@dataclass
class Window:
    """A tokenized stretch of text, at most `max_length` wordpieces with its
    special tokens.

    ids (numpy.ndarray): Wordpiece ids, [CLS] and [SEP] included. (length,)
    words (Optional[numpy.ndarray]): The word each piece belongs to, counted from
        0 within the window; -1 for special tokens. None without whole-word
        masking. (length,)
    """

    ids: numpy.ndarray
    words: Optional[numpy.ndarray] = None


@dataclass
class MaskedLM:
    """A masked-LM model with its tokenizer.

    model (Any): A transformers `AutoModelForMaskedLM` model.
    tokenizer (Any): Its fast tokenizer.
    location (str): The folder (or hub name) it was loaded from.
    new_head (List[str]): The MLM head weights the checkpoint lacked and that
        were newly initialised (empty if it shipped a head).
    """

    model: Any
    tokenizer: Any
    location: str
    new_head: List[str]


def load_masked_lm(source: str) -> MaskedLM:
    """Load an encoder checkpoint with a masked-LM head on top.

    A checkpoint saved without its pretraining head (such as the default
    encoder, a sentence-transformers BertModel) gets a newly initialised head:
    its names are in `MaskedLM.new_head`.

    source (str): A folder, an installed model package or a hub name (see
        `loaders.resolve_source`).
    RETURNS (MaskedLM): The model (in train mode, on the CPU) and tokenizer.
    """
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    location = resolve_source(source)
    kwargs = {"trust_remote_code": False, "local_files_only": Path(location).is_dir()}
    verbosity = hf_logging.get_verbosity()
    # transformers warns about the new head in words meant for fine-tuning
    # ("You should probably TRAIN this model..."); the caller reports it instead.
    hf_logging.set_verbosity_error()
    try:
        model, info = AutoModelForMaskedLM.from_pretrained(
            location, use_safetensors=True, output_loading_info=True, **kwargs
        )
        tokenizer = AutoTokenizer.from_pretrained(location, use_fast=True, **kwargs)
    except OSError as error:
        raise OSError(f"Could not load encoder {source!r} from {location}: {error}") from error
    except ValueError as error:  # an architecture without a masked-LM model
        raise ValueError(
            f"Encoder {source!r} ({location}) cannot be pretrained with a masked-LM head: {error}"
        ) from error
    finally:
        hf_logging.set_verbosity(verbosity)
    if not tokenizer.is_fast:
        raise ValueError(f"Encoder {source!r} has no fast tokenizer (tokenizer.json)")
    if tokenizer.mask_token_id is None:
        raise ValueError(f"The tokenizer of encoder {source!r} has no mask token")
    prefix = model.base_model_prefix + "."
    new_head = [name for name in info["missing_keys"] if not name.startswith(prefix)]
    model.train()
    return MaskedLM(model=model, tokenizer=tokenizer, location=location, new_head=new_head)


def encode_texts(
    tokenizer: Any, texts: Sequence[str], max_length: int, *, words: bool = False
) -> Iterator[Tuple[int, Window]]:
    """Tokenize texts into windows of at most `max_length` wordpieces: a longer
    text is cut into consecutive windows (none of its pieces is dropped).

    tokenizer (Any): A fast tokenizer.
    texts (Sequence[str]): The texts.
    max_length (int): The most wordpieces per window, special tokens included.
    words (bool): Record the word of each piece (for whole-word masking).
    YIELDS (Tuple[int, Window]): The index of the text and one of its windows.
    """
    encoded = tokenizer(
        list(texts),
        truncation=True,
        max_length=max_length,
        return_overflowing_tokens=True,
        stride=0,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    for i, ids in enumerate(encoded["input_ids"]):
        window = Window(ids=numpy.asarray(ids, dtype=numpy.int32))
        if words:
            word_ids = numpy.asarray(
                [-1 if w is None else w for w in encoded.word_ids(i)], dtype=numpy.int32
            )
            real = word_ids >= 0
            if real.any():
                # Numbered from 0 in each window, to index a per-window table.
                word_ids[real] -= word_ids[real].min()
            window.words = word_ids
        yield int(encoded["overflow_to_sample_mapping"][i]), window


def replacement_ids(tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """The wordpieces a chosen piece may be replaced by: the vocabulary without
    special tokens and unused placeholders.

    tokenizer (Any): The tokenizer.
    vocab_size (int): The model's vocabulary size (ids at or above it are left out).
    RETURNS (torch.Tensor): The ids, ascending. (n_ids,)
    """
    special = set(tokenizer.all_special_ids)
    keep = [
        i
        for token, i in tokenizer.get_vocab().items()
        if i < vocab_size and i not in special and not _PLACEHOLDER.fullmatch(token)
    ]
    return torch.tensor(sorted(keep), dtype=torch.long)


def mask_tokens(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    *,
    mask_id: int,
    replacement_ids: torch.Tensor,
    generator: torch.Generator,
    mlm_probability: float = 0.15,
    word_ids: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Choose wordpieces to predict and corrupt them: of the chosen pieces 80%
    become `mask_id`, 10% a random id from `replacement_ids` and 10% stay.
    Special tokens and padding (where `special_mask` is True) are never chosen.

    input_ids (torch.Tensor): Wordpiece ids, on the CPU. (batch, length)
    special_mask (torch.Tensor): True at special tokens and padding. (batch, length)
    mask_id (int): The id of the mask token.
    replacement_ids (torch.Tensor): The ids a random replacement is drawn from. (n_ids,)
    generator (torch.Generator): The source of randomness (a CPU generator).
    mlm_probability (float): The probability that a piece (or, with `word_ids`,
        a word) is chosen.
    word_ids (Optional[torch.Tensor]): The word of each piece, from 0 within its
        row, -1 at special tokens and padding: when given, a chosen word has all
        of its pieces chosen. (batch, length)
    RETURNS (Tuple[torch.Tensor, torch.Tensor]): The corrupted ids, and labels
        holding the original id at chosen positions and -100 elsewhere.
        Both (batch, length).
    """
    if word_ids is None:
        draw = torch.rand(input_ids.shape, generator=generator)
        chosen = draw < mlm_probability
    else:
        n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
        # (batch, n_words): choosing words with the pieces' probability keeps
        # the expected share of chosen pieces at mlm_probability.
        word_draw = torch.rand((input_ids.shape[0], max(n_words, 1)), generator=generator)
        chosen = torch.gather(word_draw, 1, word_ids.clamp(min=0)) < mlm_probability
        chosen &= word_ids >= 0
    chosen &= ~special_mask
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    # One draw per position decides its fate: [0, 0.8) mask, [0.8, 0.9) random, rest keep.
    fate = torch.rand(input_ids.shape, generator=generator)
    picks = torch.randint(len(replacement_ids), input_ids.shape, generator=generator)
    corrupted = torch.where(chosen & (fate < 0.8), torch.full_like(input_ids, mask_id), input_ids)
    random_piece = chosen & (fate >= 0.8) & (fate < 0.9)
    corrupted = torch.where(random_piece, replacement_ids[picks], corrupted)
    return corrupted, labels


@dataclass
class Batch:
    """Padded windows as tensors, on the CPU.

    input_ids (torch.Tensor): (batch, length)
    attention_mask (torch.Tensor): 1 at real pieces, 0 at padding. (batch, length)
    special_mask (torch.Tensor): True at special tokens and padding. (batch, length)
    word_ids (Optional[torch.Tensor]): -1 at special tokens and padding. (batch, length)
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_mask: torch.Tensor
    word_ids: Optional[torch.Tensor]


def collate(windows: Sequence[Window], pad_id: int, special_ids: torch.Tensor) -> Batch:
    """Pad windows to the longest of them (dynamic padding).

    windows (Sequence[Window]): The windows of one batch.
    pad_id (int): The padding id.
    special_ids (torch.Tensor): The ids of all special tokens. (n_special,)
    RETURNS (Batch): The batch.
    """
    length = max(len(w.ids) for w in windows)
    ids = numpy.full((len(windows), length), pad_id, dtype=numpy.int64)
    attention = numpy.zeros((len(windows), length), dtype=numpy.int64)
    words = None
    if windows[0].words is not None:
        words = numpy.full((len(windows), length), -1, dtype=numpy.int64)
    for row, window in enumerate(windows):
        ids[row, : len(window.ids)] = window.ids
        attention[row, : len(window.ids)] = 1
        if words is not None and window.words is not None:
            words[row, : len(window.words)] = window.words
    input_ids = torch.from_numpy(ids)
    attention_mask = torch.from_numpy(attention)
    special_mask = torch.isin(input_ids, special_ids) | (attention_mask == 0)
    word_ids = torch.from_numpy(words) if words is not None else None
    return Batch(input_ids, attention_mask, special_mask, word_ids)


class MLMTrainer:
    """Trains a masked-LM model: AdamW (no weight decay on biases and norms),
    linear warmup then linear decay to 0, gradient clipping, optional bf16
    autocast. Masks are drawn on the CPU from the trainer's own generator, so
    a run is reproducible and its random state can be checkpointed.
    """

    def __init__(
        self,
        mlm: MaskedLM,
        *,
        total_steps: int,
        warmup_steps: int,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.01,
        max_grad_norm: float = 1.0,
        mlm_probability: float = 0.15,
        whole_word_masking: bool = False,
        precision: str = "fp32",
        gpu_id: int = -1,
        seed: int = 0,
    ):
        """Set up the optimizer and schedule and move the model to its device.

        mlm (MaskedLM): The model and tokenizer.
        total_steps (int): Steps of the whole run (the schedule reaches 0 there).
        warmup_steps (int): Steps of linear warmup from 0 to `learning_rate`.
        learning_rate (float): The peak learning rate.
        weight_decay (float): AdamW weight decay of the weight matrices.
        max_grad_norm (float): Gradients are clipped to this global norm.
        mlm_probability (float): The share of pieces (or words) chosen.
        whole_word_masking (bool): Choose whole words (windows need `words`).
        precision (str): "fp32", "bf16" autocast, or "auto" (bf16
            where the GPU or CPU computes it fast, else fp32).
        gpu_id (int): The CUDA device, or -1 for the CPU.
        seed (int): Seeds the masks and dropout.
        """
        if gpu_id >= 0:
            if not torch.cuda.is_available():
                raise ValueError(f"gpu_id is {gpu_id} but torch sees no CUDA device")
            self.device = torch.device("cuda", gpu_id)
        else:
            self.device = torch.device("cpu")
        self.precision = resolve_precision(precision, self.device)
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be fp32, bf16 or auto, got {precision!r}")
        self.mlm = mlm
        self.model = mlm.model.to(self.device)
        self.model.train()
        tokenizer = mlm.tokenizer
        self.mask_id = int(tokenizer.mask_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        self.special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        self.replacement_ids = replacement_ids(tokenizer, self.model.config.vocab_size)
        self.mlm_probability = mlm_probability
        self.whole_word_masking = whole_word_masking
        self.max_grad_norm = max_grad_norm
        head_name = _MLM_HEADS.get(self.model.config.model_type)
        self._head = getattr(self.model, head_name) if head_name else None
        torch.manual_seed(seed)  # dropout
        self.generator = torch.Generator().manual_seed(seed)
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        self.optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=learning_rate,
            fused=True,
        )

        def schedule(step: int) -> float:
            if step < warmup_steps:
                return (step + 1) / (warmup_steps + 1)
            return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)

    @property
    def learning_rate(self) -> float:
        """The learning rate of the next step."""
        return float(self.optimizer.param_groups[0]["lr"])

    def train_step(self, windows: Sequence[Window]) -> Tuple[float, int]:
        """Mask a batch, take one optimizer step and advance the schedule.

        windows (Sequence[Window]): The batch.
        RETURNS (Tuple[float, int]): The mean loss over the masked positions and
            their number (0 when none was chosen: the step then only advances
            the schedule).
        """
        self.model.train()
        batch = collate(windows, self.pad_id, self.special_ids)
        loss, n_masked = self._loss(batch, self.generator)
        self.optimizer.zero_grad(set_to_none=True)
        if n_masked:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach()), n_masked

    def evaluate(self, batches: Sequence[Sequence[Window]], seed: int) -> Tuple[float, int]:
        """The mean masked-LM loss over held-out batches. The masks come from a
        generator seeded with `seed`: the same seed scores the same masks.

        batches (Sequence[Sequence[Window]]): The held-out batches.
        seed (int): Seeds the masks.
        RETURNS (Tuple[float, int]): The mean loss per masked position (nan if
            none was chosen) and the number of masked positions.
        """
        generator = torch.Generator().manual_seed(seed)
        self.model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for windows in batches:
                batch = collate(windows, self.pad_id, self.special_ids)
                loss, n_masked = self._loss(batch, generator)
                total += float(loss) * n_masked
                count += n_masked
        self.model.train()
        return (total / count if count else math.nan), count

    def _loss(self, batch: Batch, generator: torch.Generator) -> Tuple[torch.Tensor, int]:
        corrupted, labels = mask_tokens(
            batch.input_ids,
            batch.special_mask,
            mask_id=self.mask_id,
            replacement_ids=self.replacement_ids,
            generator=generator,
            mlm_probability=self.mlm_probability,
            word_ids=batch.word_ids if self.whole_word_masking else None,
        )
        n_masked = int((labels != IGNORE_INDEX).sum())
        input_ids = corrupted.to(self.device)
        attention_mask = batch.attention_mask.to(self.device)
        labels = labels.to(self.device)
        chosen = labels != IGNORE_INDEX  # (batch, length)
        with self._autocast():
            if self._head is None:
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
                logits = logits[chosen]  # (n_masked, vocab)
            else:
                hidden = self.model.base_model(
                    input_ids=input_ids, attention_mask=attention_mask
                ).last_hidden_state  # (batch, length, width)
                logits = self._head(hidden[chosen])  # (n_masked, vocab)
        target = labels[chosen]  # (n_masked,)
        # Summed and divided by max(n, 1): a batch without chosen positions gives 0.
        loss = torch.nn.functional.cross_entropy(logits.float(), target, reduction="sum")
        return loss / max(n_masked, 1), n_masked

    def _autocast(self) -> Any:
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def save_checkpoint(self, path: Path) -> None:
        """Write the model, optimizer, schedule and random states into a folder.

        path (Path): The folder (created if missing).
        """
        path.mkdir(parents=True, exist_ok=True)
        # save_model handles the output layer that shares the word embeddings.
        save_model(self.model, str(path / _MODEL_STATE))
        state: Dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "mask_generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        torch.save(state, path / _TRAINING_STATE)

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote.

        path (Path): The checkpoint folder.
        """
        missing, unexpected = load_model(
            self.model, str(path / _MODEL_STATE), strict=False, device=str(self.device)
        )
        if unexpected or missing:
            raise ValueError(
                f"Checkpoint {path} does not fit the model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        state = torch.load(path / _TRAINING_STATE, map_location=self.device, weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["mask_generator"].cpu())
        torch.set_rng_state(state["torch_rng"].cpu())
        if self.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)

    def save_encoder(self, path: Path) -> None:
        """Save the trained encoder without its MLM head, with its tokenizer, as a
        folder `HFCheckpoint` loads (config.json, model.safetensors, tokenizer
        files). Weights the MLM model lacks (BERT's pooler) are kept from the
        checkpoint the run started from.

        path (Path): The folder (created if missing).
        """
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            encoder = AutoModel.from_pretrained(
                self.mlm.location,
                use_safetensors=True,
                trust_remote_code=False,
                local_files_only=Path(self.mlm.location).is_dir(),
            )
        finally:
            hf_logging.set_verbosity(verbosity)
        trained = {k: v.detach().cpu() for k, v in self.model.base_model.state_dict().items()}
        _, unexpected = encoder.load_state_dict(trained, strict=False)
        if unexpected:
            raise ValueError(f"The trained encoder has weights its base model lacks: {unexpected}")
        path.mkdir(parents=True, exist_ok=True)
        encoder.save_pretrained(path, safe_serialization=True)
        self.mlm.tokenizer.save_pretrained(path)
