"""How long a run will take: which budget will end it (or its phase), at which step, and in how many seconds, from the
rate the run has measured so far. Pure arithmetic over the budgets the config sets (`Budget` measures what is used);
a later phase of other blocks or batches is counted at the time a token takes now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from mlmtrain.data.blocks import BatchRamp
from mlmtrain.runtime.progress import duration
from mlmtrain.train.budget import Budget
from mlmtrain.train.step import TrainState, stream_step


@dataclass(frozen=True)
class Forecast:
    """Where the run (and its phase) will end, by the rate measured so far."""

    budget: str  # the budget expected to end the run (or its phase) first, as its key
    final_step: int  # the step the run will end at
    seconds_left: float  # in the run
    phase: Optional[str] = None  # the phase the run is in (config phases:)
    phase_final_step: int = 0
    phase_seconds_left: float = 0.0
    phases: tuple[str, ...] = ()  # the names of the run's phases, in order

    def line(self, steps_per_s: float, tokens_per_s: float) -> str:
        """The plan line a run (or a phase of it) prints once it has measured its rate."""
        if self.phase is None:
            return (
                f"plan: {self.final_step:,} steps, until {self.budget} ends the run, at {steps_per_s:.2f} steps/s "
                f"({tokens_per_s:,.0f} tokens/s): about {duration(self.seconds_left)} left"
            )
        number = self.phases.index(self.phase) + 1
        this = f"plan: phase {self.phase} ({number} of {len(self.phases)})"
        by = f"by its {self.budget.rsplit(': ', 1)[-1]}"  # the key is phases: NAME: max_steps
        rate = f"at {steps_per_s:.2f} steps/s, {tokens_per_s:,.0f} tokens/s"
        later = self.phases[number:]
        if not later:
            return (
                f"{this} ends the run at step {self.final_step:,} {by} in about {duration(self.seconds_left)}, {rate}"
            )
        return (
            f"{this} ends at step {self.phase_final_step:,} {by} in about {duration(self.phase_seconds_left)}; the run "
            f"ends at step {self.final_step:,}, after {_listed(later)}, in about {duration(self.seconds_left)}; {rate} "
            "(later phases counted at this one's time per token)"
        )

    def left(self) -> str:
        """The time left, for the progress line: in the run, and in the phase when another follows."""
        if self.phase is None or self.phase == self.phases[-1]:
            return f"{duration(self.seconds_left)} left"
        return f"{duration(self.phase_seconds_left)} left in the phase, {duration(self.seconds_left)} in the run"


def _listed(names: tuple[str, ...]) -> str:
    """'long', 'long and decay', 'a, b and c'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def forecast(
    budget: Budget,
    state: TrainState,
    steps_per_s: float,
    tokens_per_step: float,
    ramp: Optional[BatchRamp] = None,
) -> Optional[Forecast]:
    """The budget that will end the run (or its phase) first and when, at `steps_per_s` steps of `tokens_per_step`
    tokens (both measured); None before there is a rate to go by. While a batch warm-up (`ramp`, the stream's batch
    sizes) still grows the batch, the steps ahead are counted at their own sizes and the time at the measured time
    per token, not at the small steps' measured rate."""
    if not (steps_per_s > 0 and tokens_per_step > 0):
        return None
    flops_per_token = state.flops / state.tokens if state.tokens else 0.0
    step = stream_step(state)
    growing = ramp is not None and step < len(ramp.table)
    steps_left, seconds_left = {}, {}
    for key, (name, amount) in budget.limits(state).items():
        left = amount - budget.used(state, name)
        if growing:
            ramped = _ramped(name, left, steps_per_s * tokens_per_step, flops_per_token, ramp, step)
        else:
            steps = _steps(name, left, steps_per_s, tokens_per_step, flops_per_token)
            ramped = None if steps is None else (steps, steps / steps_per_s)
        if ramped is not None:
            steps_left[key], seconds_left[key] = ramped
    if not seconds_left:
        return None
    key = min(seconds_left, key=lambda name: seconds_left[name])
    left = max(math.ceil(steps_left[key]), 0)
    seconds = max(seconds_left[key], 0.0) if growing else left / steps_per_s
    if not budget.phases:
        return Forecast(key, state.step + left, seconds)
    seconds_per_token = 1.0 / (steps_per_s * tokens_per_step)
    later_steps, later_seconds = 0, 0.0
    for phase, phase_cfg in zip(budget.phases[state.phase + 1 :], budget.configs[state.phase + 1 :], strict=True):
        tokens = phase_cfg.train.batch_size * phase_cfg.data.seq_len  # a step of that phase
        name, amount = phase.budget
        steps = _steps(name, amount, 1.0 / (tokens * seconds_per_token), tokens, flops_per_token) or 0.0
        later_steps += math.ceil(steps)
        later_seconds += steps * tokens * seconds_per_token
    names = tuple(phase.name for phase in budget.phases)
    run_end = state.step + left + later_steps
    return Forecast(key, run_end, seconds + later_seconds, budget.name_of(state), state.step + left, seconds, names)


def _ramped(
    name: str, amount: float, tokens_per_s: float, flops_per_token: float, ramp: BatchRamp, step: int
) -> Optional[tuple[float, float]]:
    """(steps, seconds) that `amount` of budget `name` takes from stream step `step` of a growing batch, at
    `tokens_per_s` (None: no FLOPs counted yet)."""
    if name == "max_steps":
        return amount, ramp.tokens_of(step, amount) / tokens_per_s
    if name == "max_time":
        tokens = amount * tokens_per_s
    elif name == "max_tokens":
        tokens = amount
    elif flops_per_token:
        tokens = amount / flops_per_token
    else:
        return None
    return ramp.steps_for(step, tokens), tokens / tokens_per_s


def _steps(
    name: str, amount: float, steps_per_s: float, tokens_per_step: float, flops_per_token: float
) -> Optional[float]:
    """Steps that `amount` of budget `name` (max_steps, ...) takes at the rates given (None: no FLOPs counted yet)."""
    if name == "max_steps":
        return amount
    if name == "max_tokens":
        return amount / tokens_per_step
    if name == "max_time":
        return amount * steps_per_s
    return amount / (flops_per_token * tokens_per_step) if flops_per_token else None


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
