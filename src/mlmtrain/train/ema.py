"""The exponential moving average of the weights (`train.ema`): updated after every step on the device in fp32, kept
in the training state so a resumed run goes on exactly, swapped into the model to evaluate it or to save it as the
checkpoint's model (`checkpoint.save_ema`, the live weights then travelling in the training state).

The average is bias-corrected as Adam's moments are: after t updates it is sum_i (1 - d) d^(t-i) w_i / (1 - d^t),
a weighted mean of the weights after each step whose weights sum to 1, so a short run is not pulled towards its
random initialisation. One lerp a step keeps it so: the t-th update moves it by (1 - d) / (1 - d^t) towards w_t.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from mlmtrain.errors import UserError

STATE_KEY = "ema"  # the training state's entry of the average
LIVE_KEY = "live_weights"  # the live weights, in the training state of a checkpoint whose model is the average


class WeightAverage:
    """The moving average of `model`'s parameters (tied ones once) with decay `decay`."""

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay, self.updates = decay, 0
        named = list(model.named_parameters())
        self.names = [name for name, _ in named]
        self.params = [param for _, param in named]
        self.average = [torch.zeros_like(param, dtype=torch.float32) for param in self.params]

    @torch.no_grad()
    def update(self) -> None:
        """Fold the weights after this step in: one fused lerp over every tensor, nothing read on the host."""
        self.updates += 1
        # 1 at the first update: the average starts at the weights after the first step
        weight = (1.0 - self.decay) / (1.0 - self.decay**self.updates)
        torch._foreach_lerp_(self.average, [param.detach().float() for param in self.params], weight)

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values, for the training state (cloned: a later update must not change what is saved)."""
        return {
            "decay": self.decay,
            "updates": self.updates,
            "weights": {name: tensor.clone() for name, tensor in zip(self.names, self.average, strict=True)},
        }

    def load_state_dict(self, saved: Any) -> None:
        """Go on from a checkpoint's average (the config's decay applies from here on)."""
        try:
            weights, updates = saved["weights"], int(saved["updates"])
            _copy_into(self.average, [weights[name] for name in self.names])
        except (TypeError, KeyError, ValueError) as error:
            raise UserError(
                "checkpoint",
                f"the training state's moving average of the weights does not fit the model ({type(error).__name__}); "
                "resume from another checkpoint",
            ) from None
        self.updates = updates

    @contextmanager
    def applied(self) -> Iterator[dict[str, torch.Tensor]]:
        """The average in the model's parameters for the block, then the live weights back bit for bit; yields a
        copy of the live weights by name. Before the first update the average is the live weights themselves."""
        live = {name: param.detach().clone() for name, param in zip(self.names, self.params, strict=True)}
        if self.updates:
            _copy_into(self.params, self.average)
        try:
            yield live
        finally:
            _copy_into(self.params, [live[name] for name in self.names])


def restore_live_weights(model: torch.nn.Module, saved: dict[str, Any]) -> None:
    """Where a checkpoint's model is the average (`checkpoint.save_ema`), put the live weights of its training state
    back into the loaded `model`, so the resumed run trains on from them."""
    live = saved.get(LIVE_KEY)
    if live is None:
        return
    named = dict(model.named_parameters())
    try:
        _copy_into(list(named.values()), [live[name] for name in named])
    except (TypeError, KeyError, ValueError) as error:
        raise UserError(
            "checkpoint",
            f"the training state's live weights do not fit the model ({type(error).__name__}); resume from another "
            "checkpoint",
        ) from None


@torch.no_grad()
def _copy_into(targets: list[torch.Tensor], sources: list[Any]) -> None:
    """Copy each source into its target; ValueError where one is not a tensor of the target's shape (copy_ would
    broadcast some)."""
    for target, source in zip(targets, sources, strict=True):
        if not isinstance(source, torch.Tensor) or source.shape != target.shape:
            raise ValueError(f"a tensor of shape {tuple(target.shape)} expected")
        target.copy_(source)
