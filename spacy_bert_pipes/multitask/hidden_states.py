"""Hidden-state matching: a cut student encoder learns to compute its teacher's layers.

After `shrink.cut` a student encoder keeps K of the teacher's L layers, but a kept
layer no longer reads what it was trained on (layer 4 of the teacher read layer
3's output; in a 3-layer student it reads layer 2's), so the heads on top start
far from the teacher's scores. `align` trains the student encoder, before its
heads train, to reproduce the teacher's hidden states over the training texts:
student layer i (1-based) learns teacher layer kept[i - 1] + 1's output, and
each head's own trainable top layers (a branch) learn the teacher's branch
output. The loss is each target's squared error over real wordpieces, divided by
the teacher state's mean square (so every layer counts alike), averaged over
the targets; both run without dropout. Frozen branches (a head's frozen copy of
the top layers) are left as they are. This is the hidden-state part of DistilBERT / TinyBERT-style
distillation; the heads' soft labels come after it, in spaCy's training.
"""

import random
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, cast

import numpy
import torch
from spacy.tokens import Doc
from thinc.api import Model

from ..models.encoder.bert import hf_shim, special_ids
from ..models.text.tokens import tokenized
from ..models.text.window_layout import layout_windows
from ..models.text.windows import padded_batch
from ..models.transformer.branches import run_branch
from ..models.transformer.transformer_module import TransformerModule
from ..progress import progress_bar

# The defaults `shrink` aligns with: AdamW at ALIGN_LEARN_RATE with a linear warm-up
# over the first ALIGN_WARMUP of the steps and a linear decay to 0 after it.
ALIGN_LEARN_RATE = 1e-4
# Steps `shrink` aligns for unless told: on the `make run` pipeline's 36,829
# training windows, about half an epoch (docs/shrink.md has what it gave).
ALIGN_STEPS = 600
ALIGN_WARMUP = 0.1
ALIGN_BATCH = 32
# Tokenize this many docs at a time (the encoder's own windows, as `nlp.pipe` makes them).
_TOKENIZE_CHUNK = 1000


@dataclass
class AlignSummary:
    """What `align` did for one encoder.

    steps (int): Optimizer steps.
    windows (int): Encoder windows it drew batches from.
    targets (List[str]): What each loss term matched: "layer i <- teacher j" or a branch.
    loss_first (float): Mean loss over the first tenth of the steps.
    loss_last (float): Mean loss over the last tenth of the steps.
    seconds (float): Wall time.
    """

    steps: int
    windows: int
    targets: List[str]
    loss_first: float
    loss_last: float
    seconds: float


Window = Tuple[numpy.ndarray, numpy.ndarray, Optional[numpy.ndarray]]


def encoder_windows(encoder: Model, docs: Sequence[Doc]) -> List[Window]:
    """Every window (ids, segment ids, casing classes or None) the encoder runs for
    `docs`, specials included, laid out as its forward lays them out."""
    cls_id, sep_id, _ = special_ids(encoder)
    size = encoder.attrs["max_length"] - 2
    uses_cases = hf_shim(encoder).uses_cases
    windows: List[Window] = []
    for start in range(0, len(docs), _TOKENIZE_CHUNK):
        chunk = list(docs[start : start + _TOKENIZE_CHUNK])
        layout = layout_windows(
            tokenized(encoder, chunk), cls_id, sep_id, size, encoder.attrs["stride"]
        )
        for i, (ids, types) in enumerate(layout.windows):
            cases = layout.cases[i] if uses_cases and layout.cases is not None else None
            case_array = None if cases is None else numpy.asarray(cases)
            windows.append((numpy.asarray(ids), numpy.asarray(types), case_array))
    return windows


def pad_batch(
    windows: Sequence[Window], pad_id: int, device: torch.device
) -> Tuple[torch.Tensor, ...]:
    """(ids, mask, segment ids, casing classes or None), each (batch, longest),
    padded as the encoder's forward pads them (`windows.padded_batch`)."""
    longest = max(len(ids) for ids, _, _ in windows)
    cases = None if windows[0][2] is None else [cast(numpy.ndarray, w[2]) for w in windows]
    arrays = padded_batch([w[0] for w in windows], [w[1] for w in windows], longest, pad_id, cases)
    tensors = [torch.from_numpy(a).long().to(device) for a in arrays]
    return (*tensors, None) if cases is None else tuple(tensors)


def states(
    module: TransformerModule,
    ids: torch.Tensor,
    mask: torch.Tensor,
    types: torch.Tensor,
    cases: Optional[torch.Tensor],
    trainable_branches: bool,
) -> Tuple[Tuple[torch.Tensor, ...], Dict[str, torch.Tensor]]:
    """The module's hidden states (embeddings, then each layer's output) and the
    outputs of its branches (those that train, when `trainable_branches`)."""
    kwargs = module.transformer_inputs(ids, mask, types, cases)
    hidden = module.transformer(**kwargs, output_hidden_states=True).hidden_states
    branches: Dict[str, torch.Tensor] = {}
    for name, branch in module.branches.items():
        if trainable_branches and module.branch_frozen(name):
            continue
        branches[name] = run_branch(branch, hidden[-1 - len(branch.layer)], mask)
    return hidden, branches


def matched_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Squared error over the real wordpieces, over the teacher's mean square there."""
    real = mask.bool()
    s, t = student[real].float(), teacher[real].float()
    return ((s - t) ** 2).mean() / (t**2).mean().clamp_min(1e-6)


def align(
    teacher: Model,
    student: Model,
    kept: Sequence[int],
    docs: Sequence[Doc],
    steps: int,
    *,
    batch_size: int = ALIGN_BATCH,
    learn_rate: float = ALIGN_LEARN_RATE,
    seed: int = 0,
    name: str = "encoder",
    progress: bool = True,
) -> AlignSummary:
    """Train the student encoder's module to compute the teacher's hidden states.

    teacher, student (Model): The teacher's BERT encoder and the student's, cut to
        `kept` (the 0-based teacher layers the student's layers started from).
    docs (Sequence[Doc]): The texts (their encoder windows are the batches).
    steps (int): Optimizer steps, each on `batch_size` windows drawn in a seeded
        shuffled order.
    name (str): The component, for the progress bar.
    RETURNS (AlignSummary): The steps, the targets and the loss before and after.
    """
    if steps < 1:
        raise ValueError(f"align needs at least 1 step: {steps}")
    t_module = hf_shim(teacher).module
    s_module = hf_shim(student).module
    device = next(s_module.parameters()).device
    pad_id = special_ids(student)[2]
    windows = encoder_windows(student, docs)
    if not windows:
        raise ValueError(f"{name}: no text to align the student on")
    targets = [f"layer {i + 1} <- teacher layer {j + 1}" for i, j in enumerate(kept)]
    targets += [f"branch {n}" for n in s_module.branches if not s_module.branch_frozen(n)]
    params = [p for p in s_module.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learn_rate, weight_decay=0.01)
    warmup = max(1, int(steps * ALIGN_WARMUP))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (steps - step) / max(1, steps - warmup))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    order = _batches(len(windows), batch_size, seed)
    # no dropout: the student matches the teacher's deterministic states
    t_module.eval()
    s_module.eval()
    losses: List[float] = []
    start = time.perf_counter()
    bar = progress_bar(steps, 0, unit="step", desc=f"align {name}", disable=not progress)
    try:
        for _ in range(steps):
            rows = next(order)
            ids, mask, types, cases = pad_batch([windows[i] for i in rows], pad_id, device)
            with torch.no_grad():
                t_hidden, t_branches = states(t_module, ids, mask, types, cases, False)
            s_hidden, s_branches = states(s_module, ids, mask, types, cases, True)
            terms = [
                matched_loss(s_hidden[i + 1], t_hidden[j + 1], mask) for i, j in enumerate(kept)
            ]
            terms += [matched_loss(s, t_branches[n], mask) for n, s in s_branches.items()]
            loss = torch.stack(terms).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
    finally:
        bar.close()
    tenth = max(1, steps // 10)
    return AlignSummary(
        steps=steps,
        windows=len(windows),
        targets=targets,
        loss_first=float(numpy.mean(losses[:tenth])),
        loss_last=float(numpy.mean(losses[-tenth:])),
        seconds=time.perf_counter() - start,
    )


def _batches(n: int, batch_size: int, seed: int) -> Iterator[List[int]]:
    """Endless batches of indices in [0, n): a seeded shuffle per epoch."""
    rng = random.Random(seed)
    size = min(batch_size, n)
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for start in range(0, n - size + 1, size):
            yield order[start : start + size]
