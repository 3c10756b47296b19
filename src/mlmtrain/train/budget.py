"""How far a run has come and what ends it (`Budget`): the train section's budgets (steps, tokens, wall time, FLOPs,
whichever runs out first) or, with phases, each phase's own budget in turn; the config each phase trains under; and
the share of the run the learning-rate schedule follows (with optim.schedule wsd, the decay is the decay phase's).
Pure arithmetic over the config and the `TrainState`'s counters.
"""

from __future__ import annotations

from typing import Any, Optional

from mlmtrain.config import Config, decaying_phase, phase_configs
from mlmtrain.data.masking import mix_seed
from mlmtrain.errors import UserError

# each budget's counter in the TrainState: what it counts, from the run's start
COUNTERS = {"max_steps": "step", "max_tokens": "tokens", "max_time": "elapsed_s", "max_flops": "flops"}
PHASE_STREAM = 0x9A5E  # mixed into the seed of phase k > 0: its blocks come in an order, and masks, of its own


def counters(state: Any) -> dict[str, float]:
    """The state's counters by name (step, tokens, elapsed_s, flops): where a phase starts."""
    return {name: float(getattr(state, name)) for name in COUNTERS.values()}


class Budget:
    """What ends a run of `cfg`, and how far a state has come."""

    def __init__(self, cfg: Config) -> None:
        self.cfg, self.phases = cfg, cfg.phases
        self.configs = phase_configs(cfg) if cfg.phases else [cfg]
        for index, phase in enumerate(self.configs[1:], start=1):  # each phase draws its own data order and masks
            phase.train.seed = mix_seed(cfg.train.seed, index, PHASE_STREAM)
        self.decaying = decaying_phase(cfg.phases)  # the phase optim.schedule wsd decays over

    # --- the phase a state is in

    def config_of(self, state: Any) -> Config:
        """The config the state's phase trains under (the run's, without phases)."""
        return self.configs[state.phase]

    def name_of(self, state: Any) -> str:
        return self.name_of_phase(state.phase)

    def name_of_phase(self, index: int) -> str:
        """Phase `index`'s name; "" for a run without phases."""
        return self.phases[index].name if self.phases else ""

    def limits(self, state: Any) -> dict[str, tuple[str, float]]:
        """{key: (budget, amount)} of each budget that ends the current phase (the run's, without phases): train.max_*
        keys, or the phase's one budget; a budget counts from the phase's start (`used`)."""
        if self.phases:
            phase = self.phases[state.phase]
            key, amount = phase.budget
            return {f"phases: {phase.name}: {key}": (key, amount)}
        t = self.cfg.train
        limits = {"max_steps": t.max_steps, "max_tokens": t.max_tokens, "max_time": t.max_time_seconds}
        limits["max_flops"] = t.max_flops
        return {f"train.{key}": (key, float(amount)) for key, amount in limits.items() if amount}

    def used(self, state: Any, budget: str) -> float:
        """How much of `budget` (max_steps, ...) the current phase (or the run) has used."""
        counter = COUNTERS[budget]
        return float(getattr(state, counter)) - state.phase_start.get(counter, 0.0)

    def phase_shares(self, state: Any) -> dict[str, float]:
        """Share used of each budget that ends the current phase (the run's, without phases), by its key."""
        return {key: self.used(state, budget) / amount for key, (budget, amount) in self.limits(state).items()}

    def phase_progress(self, state: Any) -> float:
        """Share of the current phase's budget used (the largest, where several are set)."""
        return max(self.phase_shares(state).values(), default=0.0)

    def phase_ended(self, state: Any) -> bool:
        """The current phase's budget is spent and another phase follows: the run moves on to it."""
        return bool(self.phases) and state.phase < len(self.phases) - 1 and self.phase_progress(state) >= 1.0

    def finished(self, state: Any) -> bool:
        """The run's budget is spent: the last phase's (or the run's) is."""
        return state.phase >= len(self.configs) - 1 and self.phase_progress(state) >= 1.0

    def spent(self, state: Any) -> list[str]:
        """The budgets used up, by their keys: what ended (or would end) the run or its phase."""
        return [key for key, share in self.phase_shares(state).items() if share >= 1.0]

    def known_steps(self) -> Optional[int]:
        """The step the run ends at when steps alone can end it (max_steps, or phases of max_steps), else None: no
        count is shown against a budget that may not be the one that ends the run."""
        if self.phases:
            kinds = {phase.budget[0] for phase in self.phases}
            return int(sum(phase.budget[1] for phase in self.phases)) if kinds == {"max_steps"} else None
        t = self.cfg.train
        return t.max_steps if not (t.max_tokens or t.max_time or t.max_flops) else None

    def place(self, state: Any, branched: bool = False) -> None:
        """Put a restored state in this config's phases, by the name of the phase it was in: a state of a run without
        phases, or one a branch brings from a phase this config has not (`branched`), begins the first phase where it
        is; a resume in a phase this config has not is refused (`check_phase_name`). A config without phases runs on
        its train budgets."""
        if not self.phases:
            state.phase, state.phase_start, state.phase_name = 0, {}, ""
            return
        names = [phase.name for phase in self.phases]
        if not state.phase_name or not check_phase_name(state.phase_name, names, branched):
            state.phase, state.phase_start, state.phase_name = 0, counters(state), names[0]
            return
        state.phase = names.index(state.phase_name)

    # --- what the learning-rate schedule follows

    def lr_step(self, state: Any) -> float:
        """The step the learning rate's warm-up counts: the step, or with a batch warm-up the tokens so far in full
        batches (train.batch_size x data.seq_len), so that the learning rate follows tokens while the batch grows."""
        t = self.cfg.train
        return state.step if not t.batch_warmup_tokens else state.tokens / (t.batch_size * self.cfg.data.seq_len)

    def schedule_progress(self, state: Any) -> float:
        """The share of the run `learning_rate` is given. Without phases, the share of the budget used (wsd with
        optim.decay: a decay over all of it). With phases, wsd holds the peak until the decay phase, decays over its
        budget and stays at the end after it; a schedule over the whole run (linear, cosine, one-cycle) counts the
        phases' budgets, one kind, end to end, from where the first phase began (a branch's, at its checkpoint)."""
        optim = self.config_of(state).optim
        if not self.phases:
            progress = self.phase_progress(state)
            return 1.0 - optim.decay_share * (1.0 - progress) if optim.decay else progress
        if optim.schedule == "wsd":
            if state.phase != self.decaying:
                return 0.0 if state.phase < self.decaying else 1.0
            return 1.0 - optim.decay_share * (1.0 - min(self.phase_progress(state), 1.0))
        key = self.phases[0].budget[0]  # one kind of budget for every phase (config/phases.py)
        before = sum(phase.budget[1] for phase in self.phases[: state.phase])  # a branch's source is not counted
        return (before + self.used(state, key)) / sum(phase.budget[1] for phase in self.phases)


def check_phase_name(phase: str, names: list[str], branched: bool) -> bool:
    """Whether a checkpoint in phase `phase` goes on in that phase of a config of phases `names`; False when a branch
    starts a recipe of other phases from it; UserError for a resume under phases that lack it."""
    if phase in names:
        return True
    if branched:
        return False
    raise UserError(
        "checkpoint",
        f"the checkpoint is in phase {phase}, and this config's phases are {', '.join(names)}; resume with the "
        "run's own config (its mlmtrain.yaml), or start a run of other phases from it with --branch-from",
    )
