"""thinc's Adam step on all of a torch module's parameters at once.

`HFShim.finish_update` hands the encoder's parameters to thinc's optimizer; on the
CPU, with thinc's plain Adam, `fused_adam` runs the same step with torch's
multi-tensor ops instead of one numpy call per parameter (`fused_adam_applies`
says when it may).
"""

from typing import List, Tuple, cast

import numpy
import torch
from thinc.api import Optimizer
from thinc.types import FloatsXd


def fused_adam_applies(optimizer: Optimizer, params: List[Tuple[str, torch.nn.Parameter]]) -> bool:
    """Whether `fused_adam` can stand in for thinc's Optimizer on these parameters:
    thinc's Adam (not RAdam) on CPU float32 tensors. Elsewhere (on a GPU, thinc's
    Adam is already one fused kernel) the per-parameter path runs."""
    return (
        type(optimizer) is Optimizer
        and not optimizer.use_radam
        and optimizer.b1 > 0.0
        and optimizer.b2 > 0.0
        and all(
            p.device.type == "cpu" and p.dtype == torch.float32 and p.is_contiguous()
            for _, p in params
        )
    )


@torch.no_grad()
def fused_adam(
    optimizer: Optimizer, items: List[Tuple[Tuple[int, str], torch.nn.Parameter]]
) -> None:
    """thinc's Adam step (`Optimizer.__call__` with `_adam`) on every parameter at
    once, with torch's multi-tensor ops on all cores instead of one single-threaded
    numpy call per parameter (a quarter of a CPU training step for MiniLM).

    Same state, same arithmetic: the moments stay in `optimizer.mom1/mom2` (numpy
    arrays, updated in place through `torch.from_numpy`), `nr_update` counts per
    key, each gradient is clipped to `grad_clip` by its own norm, L2 is added to the
    gradient or applied as decoupled weight decay, the bias correction uses each
    key's own update count, and with `use_averages` the moving averages that
    `use_params` swaps in are updated as thinc's `Ops.update_averages` does.
    """
    learn_rate = float(optimizer.learn_rate)
    b1, b2, eps = float(optimizer.b1), float(optimizer.b2), float(optimizer.eps)
    l2, clip = float(optimizer.L2), float(optimizer.grad_clip or 0.0)
    items = [(key, p) for key, p in items if p.numel() > 0]
    weights = [p.data for _, p in items]
    grads = [cast(torch.Tensor, p.grad) for _, p in items]
    if l2 != 0.0 and not optimizer.L2_is_weight_decay:
        torch._foreach_add_(grads, weights, alpha=l2)
    if clip:
        norms = torch._foreach_norm(grads)
        for grad, norm in zip(grads, norms):
            if norm >= clip:
                grad.mul_(clip / norm)
    mom1, mom2 = [], []
    for key, p in items:
        if key not in optimizer.mom1:
            optimizer.mom1[key] = cast(FloatsXd, numpy.zeros(p.numel(), dtype="float32"))
        if key not in optimizer.mom2:
            optimizer.mom2[key] = cast(FloatsXd, numpy.zeros(p.numel(), dtype="float32"))
        mom1.append(torch.from_numpy(optimizer.mom1[key]).view(p.shape))
        mom2.append(torch.from_numpy(optimizer.mom2[key]).view(p.shape))
        optimizer.nr_update[key] += 1
    torch._foreach_mul_(mom1, b1)
    torch._foreach_add_(mom1, grads, alpha=1.0 - b1)
    torch._foreach_mul_(mom2, b2)
    torch._foreach_addcmul_(mom2, grads, grads, value=1.0 - b2)
    denom = torch._foreach_sqrt(mom2)
    torch._foreach_add_(denom, eps)
    steps = []
    for key, _ in items:
        nr_upd = optimizer.nr_update[key]
        steps.append(-learn_rate * (1.0 - b2**nr_upd) ** 0.5 / (1.0 - b1**nr_upd))
    updates = torch._foreach_div(mom1, denom)
    torch._foreach_mul_(updates, steps)
    torch._foreach_add_(weights, updates)
    if l2 != 0.0 and optimizer.L2_is_weight_decay:
        torch._foreach_mul_(weights, 1.0 - learn_rate * l2)
    if optimizer.averages is not None:
        averages = []
        keep = []
        for key, p in items:
            if key not in optimizer.averages:
                zeros = numpy.zeros(tuple(p.shape), dtype="float32")
                optimizer.averages[key] = cast(FloatsXd, zeros)
            averages.append(torch.from_numpy(optimizer.averages[key]))
            t = optimizer.nr_update[key]
            keep.append(min((1.0 + t) / (10.0 + t), 0.9999))
        # ema -= (1 - decay) * (ema - weights), i.e. ema = decay * ema + (1 - decay) * weights
        differences = torch._foreach_sub(averages, weights)
        torch._foreach_mul_(differences, [k - 1.0 for k in keep])
        torch._foreach_add_(averages, differences)
