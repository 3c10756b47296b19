"""The settings of one probe run, defined once: `mlmtrain probe` takes its options' defaults and help from here,
`mlmtrain.probe` its keywords, and the live probe (the `probe:` config section) its keys, with the cheaper defaults
beside them. Imports neither torch nor yaml, so the command line can read it at start-up."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the section is only read, never built: start-up loads neither it nor yaml
    from mlmtrain.config import ProbeConfig

MODES = ("finetune", "linear")
POOLINGS = ("mean", "cls")


def _option(default: Any, help: str) -> Any:
    """A setting that `mlmtrain probe` takes as an option (--name, dashes for underscores), with its help line."""
    return field(default=default, metadata={"help": help})


@dataclass
class ProbeSettings:
    """How to probe; the defaults are the command's (the `probe:` section has its own, cheaper ones: LIVE_DEFAULTS)."""

    mode: str = _option("finetune", "finetune, or linear (a probe on frozen features).")
    epochs: int = _option(3, "Fine-tuning epochs (the best on valid is scored on test).")
    lr: float = _option(
        1e-4, "Fine-tuning peak learning rate (10% warm-up, linear decay); small models want more, e.g. 3e-4."
    )
    batch_size: int = _option(32, "Examples per batch.")
    max_length: int = _option(128, "Tokens per example; longer ones are cut.")
    warmup_ratio: float = 0.1  # share of the fine-tuning steps that warm the learning rate up
    weight_decay: float = 0.01
    seed: int = _option(0, "Seed of the new head, dropout and batch order.")
    pooling: str = _option("mean", "Linear mode: mean (over real tokens) or cls.")
    max_train_examples: Optional[int] = _option(None, "Use this many train examples (a fixed sample): for quick looks.")
    max_eval_examples: Optional[int] = _option(None, "Use this many valid and test examples (a fixed sample).")
    progress: bool = False
    lr_key: str = "--lr"  # what sets `lr`, named when fine-tuning diverges: the option, or probe.lr for the live probe

    @classmethod
    def from_section(cls, section: ProbeConfig, seed: int) -> ProbeSettings:
        """The live probe's settings: the section's keys that share a name with a setting, the run's seed, and the
        command's defaults for the rest."""
        shared = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(section)}
        return cls(**{**{name: getattr(section, name) for name in shared}, "seed": seed, "lr_key": "probe.lr"})


# the `probe:` section's defaults where they differ from the command's: probing during pretraining stays cheap
LIVE_DEFAULTS: dict[str, Any] = {"mode": "linear", "epochs": 1, "max_train_examples": 2000, "max_eval_examples": 1000}


def option_help(name: str) -> str:
    """The help line of the option that sets `name`."""
    return next(f.metadata["help"] for f in dataclasses.fields(ProbeSettings) if f.name == name)


def live_default(name: str) -> Any:
    """The `probe:` section's default for the setting `name`: LIVE_DEFAULTS', else the command's."""
    return LIVE_DEFAULTS[name] if name in LIVE_DEFAULTS else getattr(ProbeSettings, name)


# `probe --suite`'s scorecard: the file's name inside a checkpoint, and the mark that says mlmtrain wrote it
SCORECARD_FILE = "scorecard.json"
SCORECARD_GENERATOR = "mlmtrain probe --suite"
