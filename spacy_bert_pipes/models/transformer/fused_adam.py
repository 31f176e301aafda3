"""thinc's Adam step on all of a torch module's parameters at once.

`HFShim.finish_update` hands the encoder's parameters to thinc's optimizer; on the
CPU, with thinc's plain Adam, `fused_adam` runs the same step with torch's fused
Adam kernel (one pass over each parameter) instead of one numpy call per
parameter (`fused_adam_applies` says when it may).
"""

from typing import Dict, List, Tuple, cast

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
    once, with torch's fused Adam kernel on all cores instead of one single-threaded
    numpy call per parameter (a quarter of a CPU training step for MiniLM); the
    kernel reads and writes each weight and moment once, where a chain of
    multi-tensor ops took about ten passes over them.

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
    # One pass over each parameter (torch's fused CPU kernel), per group of
    # parameters with the same update count. The kernel divides sqrt(mom2) by
    # sqrt(1 - b2^t) before adding eps, where thinc adds eps to sqrt(mom2): eps
    # scaled by the same factor gives thinc's step.
    groups: Dict[int, List[int]] = {}
    for index, (key, _) in enumerate(items):
        groups.setdefault(optimizer.nr_update[key], []).append(index)
    for nr_upd, members in groups.items():
        step = torch.tensor(float(nr_upd))
        torch._fused_adam_(
            [weights[i] for i in members],
            [grads[i] for i in members],
            [mom1[i] for i in members],
            [mom2[i] for i in members],
            [],
            [step] * len(members),
            lr=learn_rate,
            beta1=b1,
            beta2=b2,
            weight_decay=0.0,
            eps=eps / (1.0 - b2**nr_upd) ** 0.5,
            amsgrad=False,
            maximize=False,
        )
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
