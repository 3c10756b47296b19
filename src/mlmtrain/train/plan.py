"""How long a run will take: which budget will end it, at which step, and in how many seconds, from the rate the
run has measured so far. Pure arithmetic over the budgets the config sets (`budget_shares` measures what is used).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from mlmtrain.config import Config
from mlmtrain.runtime.progress import duration
from mlmtrain.train.step import TrainState


@dataclass(frozen=True)
class Forecast:
    """Where the run will end, by the rate measured so far."""

    budget: (
        str  # the budget expected to end the run first, as its key: train.max_steps, max_tokens, max_time, max_flops
    )
    final_step: int  # the step the run will end at
    seconds_left: float

    def line(self, steps_per_s: float, tokens_per_s: float) -> str:
        """The plan line a run prints once it has measured its rate."""
        return (
            f"plan: {self.final_step:,} steps, until {self.budget} ends the run, at {steps_per_s:.2f} steps/s "
            f"({tokens_per_s:,.0f} tokens/s): about {duration(self.seconds_left)} left"
        )


def forecast(cfg: Config, state: TrainState, steps_per_s: float, tokens_per_step: float) -> Optional[Forecast]:
    """The budget that will end the run first and when, at `steps_per_s` steps of `tokens_per_step` tokens (both
    measured); None before there is a rate to go by."""
    if not (steps_per_s > 0 and tokens_per_step > 0):
        return None
    t = cfg.train
    flops_per_step = tokens_per_step * state.flops / state.tokens if state.tokens else 0.0
    steps_left = {
        "train.max_steps": t.max_steps - state.step if t.max_steps else None,
        "train.max_tokens": (t.max_tokens - state.tokens) / tokens_per_step if t.max_tokens else None,
        "train.max_time": (t.max_time_seconds - state.elapsed_s) * steps_per_s if t.max_time_seconds else None,
        "train.max_flops": (t.max_flops - state.flops) / flops_per_step if t.max_flops and flops_per_step else None,
    }
    budget, left = min(((key, value) for key, value in steps_left.items() if value is not None), key=lambda kv: kv[1])
    left = max(math.ceil(left), 0)
    return Forecast(budget, state.step + left, left / steps_per_s)


class RateMeter:
    """Steps and tokens per second once the run's first `skip` steps are behind it (they run slow: allocation,
    compiling, the loader's first batches), for the forecast; `ready` once enough steps or seconds have passed to
    trust it."""

    def __init__(self, min_steps: int = 20, min_seconds: float = 30.0, skip: int = 5) -> None:
        self.min_steps, self.min_seconds, self.skip = min_steps, min_seconds, skip
        self.started: Optional[float] = None
        self.seen, self.steps, self.tokens = 0, 0, 0

    def add(self, now: float, tokens: int) -> None:
        """One step ended at `now` (perf_counter seconds) with `tokens` tokens."""
        self.seen += 1
        if self.seen < self.skip:
            return
        if self.started is None:
            self.started = now  # the clock starts once the slow first steps are done
            return
        self.steps += 1
        self.tokens += tokens
        self.now = now

    def seconds(self) -> float:
        return self.now - self.started if self.steps else 0.0

    def ready(self) -> bool:
        return self.steps >= 2 and (self.steps >= self.min_steps or self.seconds() >= self.min_seconds)

    def steps_per_s(self) -> float:
        return self.steps / self.seconds() if self.seconds() > 0 else 0.0

    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0
