"""Every `train.objective`, one class each in REGISTRY: what a run of it builds, reads, optimises, evaluates,
saves and says. The rest of the package asks the objective's class and tests no objective's name.

A new objective is one module here and one line in REGISTRY: a subclass of `Objective` (`base.py`) that sets its
`name`, a `summary`, the `architecture` and `model_type` its saved config.json names (how a resume recognises it), its
`model_folders` and `term_names` (the metrics it logs: `report` draws every `*_loss` among them), and implements
`build` and `load` (fresh, and from a checkpoint), `planned_models` (the configs a resume compares), `step_module`
(forward -> one loss sum per term), `counts` and `weights` (each term's denominator and weight),
`training_flops_per_token` and `evaluate`; its config rules (`check_config`), the models its section names
(`resolve_models`), the architectures it builds (`architectures`), whether it continues a base (`continues_a_model`),
the blocks, collator, model card text (`card_*`), `within_documents` (data.document_attention within) and
`start_note` have defaults. A config section only it reads names it in its field's metadata (config/schema.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Optional

from mlmtrain.config import Config
from mlmtrain.data.masking import VocabInfo
from mlmtrain.errors import UserError, shown
from mlmtrain.model.architectures import architecture_of
from mlmtrain.model.families import check_rotary_bases, family_of
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train.base_model import Base
from mlmtrain.train.objectives.base import Evaluation, Objective
from mlmtrain.train.objectives.distill import Distill
from mlmtrain.train.objectives.electra import Electra
from mlmtrain.train.objectives.mlm import MaskedLanguageModel
from mlmtrain.train.objectives.pairs import NextSentence, SentenceOrder

__all__ = [
    "REGISTRY",
    "Evaluation",
    "Objective",
    "check_config",
    "objective_class",
    "objective_of",
    "objectives_described",
    "saved_objective",
]

REGISTRY: dict[str, type[Objective]] = {
    "mlm": MaskedLanguageModel,
    "electra": Electra,
    "mlm+nsp": NextSentence,
    "mlm+sop": SentenceOrder,
    "distill": Distill,
}


def objective_class(cfg: Config) -> type[Objective]:
    """The class of `cfg.train.objective` (a config `check_config` passed): the facts about it that need no run."""
    return REGISTRY[cfg.train.objective]


def objective_of(cfg: Config, vocab: VocabInfo, bases: Optional[Mapping[str, Base]] = None) -> Objective:
    """The objective of a run of `cfg` with the tokenizer's `vocab` (`bases`: the models the config names, read)."""
    return objective_class(cfg)(cfg, vocab, bases)


def objectives_described() -> str:
    """'must be one of mlm (masked language modeling), ...' for `config fields`."""
    return "must be one of " + ", ".join(f"{name} ({kind.summary})" for name, kind in REGISTRY.items())


def check_config(cfg: Config) -> None:
    """UserError for what the objective tables refuse in a config: a train.objective no objective has, a
    model.architecture the objective does not build, and the objective's own rules (`Objective.check_config`)."""
    kind = REGISTRY.get(cfg.train.objective)
    if kind is None:
        close = difflib.get_close_matches(cfg.train.objective, list(REGISTRY), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UserError(
            "config", f"train.objective must be one of {', '.join(REGISTRY)} (got {shown(cfg.train.objective)}){hint}"
        )
    architecture = cfg.model.architecture
    if not cfg.model.init_from and architecture not in kind.architectures:
        able = [name for name, other in REGISTRY.items() if architecture in other.architectures]
        raise UserError(
            "config",
            f"model.architecture ({architecture}) is not one train.objective {kind.name} builds ({kind.builds}); "
            f"drop model.architecture (or set it to {' or '.join(kind.architectures)}), or set train.objective: "
            f"{' or '.join(able)}",
        )
    if not cfg.model.init_from:  # the shape it builds from scratch (a base's is checked as it is read)
        built = architecture_of(cfg.model)
        built.check_shape(cfg.model)
        check_rotary_bases(built.family, cfg.model, f"model.architecture {cfg.model.architecture}")
    kind.check_config(cfg)


def saved_objective(saved: ModelFolder) -> str:
    """Which objective trained the checkpoint `saved` (read once): the one whose architecture and model type its
    config.json names, else those of its model type (of any family, for a masked LM of another family); where several
    are left (the pair objectives, a distilled student), the one its mlmtrain.yaml names, else the first; its model
    type, when none has it."""
    model_type, named = saved.config.get("model_type"), saved.config.get("architectures") or []
    by_type = [name for name, kind in REGISTRY.items() if kind.model_type == model_type]
    if not by_type and family_of(model_type) is not None:  # a masked LM of another family (model/families.py)
        by_type = [name for name, kind in REGISTRY.items() if kind.saves_any_family]
    candidates = [name for name in by_type if REGISTRY[name].architecture in named] or by_type
    if len(candidates) > 1:
        said = saved.setting("train", "objective")
        return said if said in candidates else candidates[0]
    return (candidates or [model_type])[0]
