"""The settings of one probe run: the one definition `mlmtrain probe` reads its option defaults from, the Python API
and the benchmark build, and the live probe builds from the `probe:` config section. Imports no torch, so the
command line can read it at start-up."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # the section is only read, never built: start-up loads neither it nor yaml
    from mlmtrain.config import ProbeConfig

MODES = ("finetune", "linear")
POOLINGS = ("mean", "cls")


@dataclass
class ProbeSettings:
    """How to probe; the defaults are the command's (the `probe:` section has its own, cheaper ones)."""

    mode: str = "finetune"  # or linear: a logistic (ridge) model on frozen pooled features
    epochs: int = 3  # fine-tuning epochs; the best on valid is scored on test
    lr: float = 1e-4  # fine-tuning peak learning rate
    batch_size: int = 32
    max_length: int = 128  # tokens per example, longer ones are cut
    warmup_ratio: float = 0.1  # share of the fine-tuning steps that warm the learning rate up
    weight_decay: float = 0.01
    seed: int = 0  # of the new head, dropout and batch order
    pooling: str = "mean"  # linear mode: mean over real tokens, or cls
    max_train_examples: Optional[int] = None  # a fixed sample of this many; None: all
    max_eval_examples: Optional[int] = None
    progress: bool = False
    lr_key: str = "--lr"  # what sets `lr`, named when fine-tuning diverges: the option, or probe.lr for the live probe

    @classmethod
    def from_section(cls, section: ProbeConfig, seed: int) -> ProbeSettings:
        """The live probe's settings: the section's keys that share a name with a setting, the run's seed, and the
        command's defaults for the rest."""
        shared = {f.name for f in dataclasses.fields(cls)} & {f.name for f in dataclasses.fields(section)}
        return cls(**{**{name: getattr(section, name) for name in shared}, "seed": seed, "lr_key": "probe.lr"})
