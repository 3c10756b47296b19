"""The optimizer side: AdamW parameter groups (no weight decay on biases and LayerNorm), the optimizer itself,
and the learning-rate schedule as a pure function of the step and the share of the budget used.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from mlmtrain.config import OptimConfig, TrainConfig


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW groups: decay on matrices (ndim >= 2), none on vectors (ndim < 2).

    The shape rule needs no name patterns: in BERT the vectors are exactly the biases (the decoder's included) and
    the LayerNorm weights and biases, embeddings' LayerNorm too; every matrix (linear weights, the word, position
    and token-type embeddings) decays, as in the original BERT recipe. `named_parameters` yields a tied weight
    once, so each parameter lands in exactly one group. Frozen parameters are left out. Each group carries
    `param_names`, torch's own key, so an optimizer state dict says which tensor is which.
    """
    decay: list[tuple[str, torch.nn.Parameter]] = []
    no_decay: list[tuple[str, torch.nn.Parameter]] = []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append((name, param))
    return [
        {"params": [p for _, p in group], "param_names": [n for n, _ in group], "weight_decay": rate}
        for group, rate in ((decay, weight_decay), (no_decay, 0.0))
    ]


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over `parameter_groups`, with torch's fused kernel on GPU and CPU alike: one pass over each tensor's
    parameter, gradient and moments instead of the foreach path's several. The starting lr is the peak; the loop
    sets the scheduled value with `set_learning_rate` before every step.
    """
    return torch.optim.AdamW(
        parameter_groups(model, cfg.weight_decay),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        fused=True if device.type in ("cuda", "cpu") else None,  # elsewhere (mps, ...) torch picks
    )


def apply_optim_config(optimizer: torch.optim.Optimizer, cfg: OptimConfig) -> list[str]:
    """Put the config's betas, eps and weight decay into an optimizer restored from a checkpoint, so that on resume
    the config wins over the saved settings (the decay group is the first, as `parameter_groups` orders them).
    Returns the settings that changed, as 'key: saved -> config' (the learning rate is set every step anyway)."""
    changed = []
    for index, group in enumerate(optimizer.param_groups):
        wanted = {
            "betas": (cfg.beta1, cfg.beta2),
            "eps": cfg.eps,
            "weight_decay": cfg.weight_decay if index == 0 else 0.0,
        }
        for key, value in wanted.items():
            saved = tuple(group[key]) if key == "betas" else group[key]
            if saved != value and index == 0:
                changed.append(f"{key}: {saved} -> {value}")
            group[key] = value
    return changed


def warmup_share(cfg: OptimConfig, train: TrainConfig) -> Optional[float]:
    """The share of the budget warm-up takes when a budget other than steps may end the run first (max_time,
    max_tokens or max_flops beside max_steps): optim.warmup_steps / train.max_steps, so warm-up stretches or shrinks
    with the budget as the decay does. None where warm-up counts steps: steps alone set the length, or max_steps is
    null (a time budget alone has no step count to scale from)."""
    other_budget = train.max_tokens or train.max_time_seconds or train.max_flops
    if cfg.schedule == "one-cycle" or not (cfg.warmup_steps and train.max_steps and other_budget):
        return None
    return min(cfg.warmup_steps / train.max_steps, 1.0)


def learning_rate(
    step: int,
    progress: float,
    cfg: OptimConfig,
    warmup_end_progress: float = 0.0,
    share: Optional[float] = None,
) -> float:
    """The learning rate for optimizer step `step` (0-based: the number of steps already taken).

    Warm-up, counted in steps: lr * (step + 1) / (warmup_steps + 1) for step <= warmup_steps, a straight line
    whose first step is already non-zero and which reaches the peak exactly at step == warmup_steps.

    Decay, after warm-up, follows `progress` in [0, 1] (clamped): the share of the budget used, i.e. the loop's
    step / max_steps, tokens / max_tokens or elapsed / max_time (so a max_time run stretches the schedule to fit).
    So that decay starts at the end of warm-up, it is measured from `warmup_end_progress`, the progress value
    at step == warmup_steps: warmup_steps / max_steps for a step budget (warmup_steps * tokens_per_step /
    max_tokens for a token budget), known up front; for a time budget the loop records it when warm-up ends
    (and keeps it in its resume state). With t = (progress - warmup_end_progress) / (1 - warmup_end_progress):

        linear:   lr * (1 - (1 - min_lr_ratio) * t)
        cosine:   lr * (min_lr_ratio + (1 - min_lr_ratio) * (1 + cos(pi * t)) / 2)
        constant: lr

    wsd (warm-up, stable, decay) holds lr until the last `decay_share` of the budget, then decays over it: with
    d = decay_share and t = (progress - (1 - d)) / d (from the end of warm-up, should warm-up end later),

        linear:   lr * (min_lr_ratio + (1 - min_lr_ratio) * (1 - t))
        1-sqrt:   lr * (min_lr_ratio + (1 - min_lr_ratio) * (1 - sqrt(t)))

    The decay depends on the budget alone, so a run resumed or branched with a larger budget extends the stable
    phase, and one branched with a budget that ends sooner places its decay at its own end.

    With a warm-up `share` of the budget (`warmup_share`), warm-up rises to lr at whichever comes first, step
    == warmup_steps or progress == share, and decay is measured from share: a run whose steps end it first warms up
    exactly as above, one that a time, token or FLOP budget ends first warms up over that share of it.

    one-cycle (Cramming's triangle) is measured in budget from the start, warm-up included, so it fits any budget
    (steps, tokens or time) with no step count to tune: with p = progress and c = cycle_peak,

        p <= c:   lr * max(p / c, min_lr_ratio)          (the first step, at p = 0, runs at lr * min_lr_ratio)
        p >  c:   lr * (1 - (1 - min_lr_ratio) * (p - c) / (1 - c))
    """
    if cfg.schedule == "one-cycle":
        return _one_cycle(min(max(progress, 0.0), 1.0), cfg)
    rising = (step + 1) / (cfg.warmup_steps + 1) if step < cfg.warmup_steps else 1.0
    if share is not None:
        rising, warmup_end_progress = min(max(rising, progress / share), 1.0), share
    if rising < 1.0:
        return cfg.lr * rising
    if cfg.schedule == "constant":
        return cfg.lr
    start = min(max(warmup_end_progress, 0.0), 1.0)
    if cfg.schedule == "wsd":
        start = max(start, 1.0 - cfg.decay_share)
    progress = min(max(progress, 0.0), 1.0)
    # A warm-up that used the whole budget leaves nothing to decay over: sit at the end value.
    t = 1.0 if start >= 1.0 else max(progress - start, 0.0) / (1.0 - start)
    if cfg.schedule == "linear":
        shape = 1.0 - t
    elif cfg.schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * t))
    elif cfg.schedule == "wsd":
        shape = 1.0 - (t if cfg.decay_shape == "linear" else math.sqrt(t))
    else:
        raise ValueError(f"unknown schedule {cfg.schedule!r}")  # config validation makes this unreachable
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape)


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set `lr` on every parameter group (both groups share one schedule)."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def _one_cycle(progress: float, cfg: OptimConfig) -> float:
    """The triangle of `learning_rate`'s docstring: up to lr at cycle_peak, then down to lr * min_lr_ratio."""
    if progress <= cfg.cycle_peak:
        return cfg.lr * max(progress / cfg.cycle_peak, cfg.min_lr_ratio)
    fall = (progress - cfg.cycle_peak) / (1.0 - cfg.cycle_peak)
    return cfg.lr * (1.0 - (1.0 - cfg.min_lr_ratio) * fall)
