"""Masked-LM continued pretraining of an encoder: the model side, in torch.

`load_masked_lm` loads an encoder with its masked-LM head (`MaskedLM`),
`encode_texts` cuts texts into `Window`s, `collate` pads them into a `Batch`.
`mask_tokens` implements BERT's masking: each wordpiece that is not a special
token is chosen with probability 0.15 (or, with whole-word masking, each word
is chosen with probability 0.15 and then all of its pieces are); of the chosen
pieces 80% become [MASK], 10% a random wordpiece and 10% stay as they are, and
the model predicts the original piece at every chosen position.

The training loop (`MLMTrainer`: optimizer, schedule, checkpoints) is in
`trainer.py`, the orchestration (reading texts, batching, resuming) in the rest
of `pretrain/`.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch

from ..models.encoder.loaders import resolve_source

# Labels at positions the loss ignores (PyTorch's cross_entropy default).
IGNORE_INDEX = -100
# BERT vocabularies reserve placeholder entries that never occur in text.
_PLACEHOLDER = re.compile(r"\[unused\d+\]|<unused\d+>")


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
