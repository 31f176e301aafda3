"""`MLMTrainer`: the torch training loop of masked-LM pretraining.

It holds a masked-LM model (`mlm.MaskedLM`), its AdamW optimizer and
linear warmup / decay schedule, runs training steps and held-out evaluations
(the masks from `mlm.mask_tokens`), and saves and restores checkpoints
(weights as safetensors, optimizer, schedule and random states through
`torch.save`, read back with `weights_only=True`). `save_encoder` writes the
trained base model (no MLM head) with its tokenizer: a folder that
`HFCheckpoint` loads. torch is imported with this module, which `run.py`
imports only when a run starts.

Why torch code lives in `pretrain/` and not in `models/`: `models/` holds thinc
Models and what they run (the encoder's shim, its precision and optimizer), the
layers a pipeline is built from. This is neither: a plain torch training loop
over the Hugging Face masked-LM, with torch's own AdamW, schedule and
checkpoints, run by `bert-pipes pretrain` before any pipeline exists. Its output
reaches a pipeline only as a checkpoint folder. The masked-LM model and its
masking live beside it (`mlm.py`); the precision settings it shares with the
encoder stay in `models/transformer/precision.py`.
"""

import contextlib
import math
from pathlib import Path
from typing import Any, Dict, Sequence, Tuple

import torch
from safetensors.torch import load_model, save_model

from ..models.transformer.precision import PRECISIONS, resolve_precision
from .mlm import (
    IGNORE_INDEX,
    Batch,
    MaskedLM,
    Window,
    collate,
    mask_tokens,
    replacement_ids,
)

# Where each architecture keeps the module that maps hidden states to vocabulary
# logits. With it the logits are computed at the masked positions only: the
# output layer (width x vocabulary) is the largest matrix multiplication of a
# small encoder, and 85% of its outputs would be thrown away. Other
# architectures run the model's own forward pass, which scores every position.
MLM_HEADS = {
    "bert": "cls",
    "roberta": "lm_head",
    "xlm-roberta": "lm_head",
    "camembert": "lm_head",
}
MODEL_STATE = "model.safetensors"
TRAINING_STATE = "training_state.pt"


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
        head_name = MLM_HEADS.get(self.model.config.model_type)
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
        save_model(self.model, str(path / MODEL_STATE))
        state: Dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "mask_generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        torch.save(state, path / TRAINING_STATE)

    def load_checkpoint(self, path: Path) -> None:
        """Restore what `save_checkpoint` wrote.

        path (Path): The checkpoint folder.
        """
        missing, unexpected = load_model(
            self.model, str(path / MODEL_STATE), strict=False, device=str(self.device)
        )
        if unexpected or missing:
            raise ValueError(
                f"Checkpoint {path} does not fit the model: missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        state = torch.load(path / TRAINING_STATE, map_location=self.device, weights_only=True)
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
