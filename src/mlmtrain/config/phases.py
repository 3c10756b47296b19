"""Phases: a run in parts (`phases:`), each with one budget of its own and the settings it changes (`set:`, keys as
`--set` takes them), applied in order, each on top of the phases before it: the recipe behind Ettin, ModernBERT and
mmBERT (a stable phase, a context extension, a decay on another mix) as one config. Only what may change between two
steps of one run may be set (`PHASE_KEYS`); the model's shape, the tokenizer, the objective and the folders are the
run's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from mlmtrain.config.fields import DURATION, above, at_least, parse_duration, suggest
from mlmtrain.errors import UserError, shown

BUDGETS = ("max_steps", "max_tokens", "max_time", "max_flops")  # a phase's budget: one of these, as train's mean
# the keys a phase may set: what may change between two steps of one run (every other is fixed for the run)
PHASE_KEYS = frozenset(
    {
        "masking.mlm_probability",
        "masking.mask_replace",
        "masking.random_replace",
        "masking.whole_word",
        "masking.fixed_count",
        "data.train",
        "data.mixture_temperature",
        "data.seq_len",
        "data.shuffle_buffer",
        "model.global_rope_theta",
        "model.local_rope_theta",
        "optim.lr",
        "optim.weight_decay",
        "optim.beta1",
        "optim.beta2",
        "optim.eps",
        "optim.min_lr_ratio",
        "optim.grad_clip",
        "optim.decay",
        "optim.decay_shape",
        "train.batch_size",
        "train.micro_batch_size",
        "train.log_every",
        "train.eval_every",
        "train.eval_max_blocks",
        "checkpoint.save_every",
        "probe.every",
    }
)
_LENGTH = "phases set the run's length, each with a budget of its own"


@dataclass
class PhaseConfig:
    """One phase: its name, one budget (train's keys of the same name mean the same) and the settings it changes."""

    name: str
    max_steps: Optional[int] = None
    max_tokens: Optional[int] = None
    max_time: Union[str, float, None] = None
    max_flops: Optional[float] = None
    set: dict[str, Any] = field(default_factory=dict)

    @property
    def budget(self) -> tuple[str, float]:
        """(its budget's key, the amount it counts to: steps, tokens, seconds or FLOPs)."""
        key = next(key for key in BUDGETS if getattr(self, key) is not None)
        value = parse_duration(self.max_time, f"phases: {self.name}: max_time") if key == "max_time" else None
        return key, float(value if value is not None else getattr(self, key))


_CHECKS = {"max_steps": at_least(1), "max_tokens": at_least(1), "max_time": DURATION, "max_flops": above(0)}  # train's


def read_phases(found: Any) -> list[PhaseConfig]:
    """The `phases:` list of a config file, each phase's own keys checked (its settings are checked against the config
    they change: `loading.phase_configs`); UserError naming the phase and the key otherwise."""
    if found is None:
        return []
    if not isinstance(found, list) or not found:
        raise UserError(
            "config", f"phases must be a list of phases, each a mapping of name, a budget and set (got {shown(found)})"
        )
    phases, names = [], set()
    for index, entry in enumerate(found):
        where = f"phases[{index}]"
        if not isinstance(entry, dict):
            raise UserError("config", f"{where} must be a mapping of name, a budget and set (got {shown(entry)})")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip() or "/" in name or name != name.strip():
            raise UserError("config", f"{where}.name must be a short name such as stable or decay (got {shown(name)})")
        where = f"phases: {name}"
        if name in names:
            raise UserError("config", f"{where}: two phases are named {name}; give each its own name")
        names.add(name)
        known = [f.name for f in dataclasses.fields(PhaseConfig)]
        for key in entry:
            if key not in known:
                raise UserError("config", f"{where}: unknown key {shown(key)}; a phase has {', '.join(known)}")
        budgets = [key for key in BUDGETS if entry.get(key) is not None]
        if len(budgets) != 1:
            said = f"has {' and '.join(budgets)}" if budgets else "has none"
            raise UserError("config", f"{where}: a phase needs exactly one budget of {', '.join(BUDGETS)} ({said})")
        budget, value = budgets[0], entry[budgets[0]]
        if budget == "max_time":
            ok = parse_duration(value, f"{where}: max_time") > 0  # seconds, or '30m', '2h'
        else:
            whole = budget in ("max_steps", "max_tokens")
            number = isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)
            ok = number and _CHECKS[budget].holds(value)
        if not ok:
            raise UserError("config", f"{where}: {budget} {_CHECKS[budget].says} (got {shown(value)})")
        settings = entry.get("set") or {}
        if not isinstance(settings, dict):
            raise UserError("config", f"{where}: set must be a mapping of section.key: value (got {shown(settings)})")
        phases.append(PhaseConfig(name, **{budget: value}, set=dict(settings)))
    return phases


def check_phase_key(phase: str, dotted: Any, known: set[str]) -> None:
    """UserError unless `dotted` is a config key (`known`: every section.key) that may change within a run."""
    where = f"phases: {phase}: set"
    if not isinstance(dotted, str) or dotted not in known:
        close = suggest(str(dotted)[:100], sorted(PHASE_KEYS), listing="a phase sets")
        raise UserError("config", f"{where}: unknown key {shown(dotted)}{close}")
    section, key = dotted.split(".")
    if section == "train" and key in BUDGETS:
        raise UserError(
            "config",
            f"{where}: {dotted} is a budget, and a phase has one of its own: write {key}: beside the phase's name "
            "and set:, not in set:",
        )
    if dotted not in PHASE_KEYS:
        raise UserError(
            "config",
            f"{where}: {dotted} cannot change within a run (the model, its dropout, the tokenizer, the objective and "
            "the folders are the run's); set it for the whole run, outside phases (`mlmtrain config fields` marks "
            "the keys a phase may set)",
        )


def check_whole_run(budgets: dict[str, Any], schedule: str, decay: bool, phases: list[PhaseConfig]) -> None:
    """UserError for a train budget beside phases (`budgets`: those the config states, by key; one stated null, as a
    saved config states it, passes: phases set the run's length), for optim.decay set for the whole run (`decay`:
    with phases, the decay is one phase's), and for a schedule that needs one budget for the whole run when the
    phases count in different units."""
    if not phases:
        return
    for key, value in budgets.items():
        if value is not None:
            raise UserError("config", f"train.{key} is set beside phases, and {_LENGTH}; drop train.{key}")
    if decay:
        raise UserError(
            "config",
            "optim.decay is true for the whole run, and with phases the decay is one phase's: set optim.decay: true in "
            f"the set: of the phase that decays (without one, the last phase, {phases[-1].name}, does)",
        )
    units = {phase.budget[0] for phase in phases}
    if schedule in ("linear", "cosine", "one-cycle") and len(units) > 1:
        raise UserError(
            "config",
            f"optim.schedule {schedule} spans the whole run, and the phases count it in {', '.join(sorted(units))}; "
            "give every phase the same kind of budget, or set optim.schedule: wsd (its decay is the decay phase's)",
        )


def decaying_phase(phases: list[PhaseConfig]) -> int:
    """The phase optim.schedule wsd decays over: the first whose settings in force (its set: and those before it)
    hold optim.decay: true, else the last."""
    settings: dict[str, Any] = {}
    for index, phase in enumerate(phases):
        settings = {**settings, **phase.set}
        if settings.get("optim.decay"):
            return index
    return len(phases) - 1


def describe_phases() -> list[tuple[str, str, str, str]]:
    """(key, default, help, its check or "") of `phases:` and a phase's own keys, as `describe_fields` gives a
    section's, for `config fields`."""
    budgets = [
        (f"phases[].{key}", "null", f"the phase's budget, counted from its start as train.{key} counts", check.says)
        for key, check in _CHECKS.items()
    ]
    return [
        (
            "phases",
            "null",
            "the run in parts, in order, each with one budget and its settings (train's budgets stay null); each "
            "phase's end is kept as checkpoints/phase-NAME",
            f"each a name, exactly one budget of {', '.join(BUDGETS)}, and set",
        ),
        ("phases[].name", "null", "the phase's name, in metrics.jsonl and its checkpoint's folder", "must be unique"),
        *budgets,
        (
            "phases[].set",
            "{}",
            "section.key: value over the config and the phases before it, for the keys marked 'a phase may set it'; "
            "with optim.schedule wsd the phase that sets optim.decay: true decays (without one, the last)",
            "",
        ),
    ]
