"""Every `train.objective`, one class each in REGISTRY: what a run of it builds, reads, optimises, evaluates,
saves and says. The rest of the package asks the objective's class and tests no objective's name.

A new objective is one module here and one line in REGISTRY: a subclass of `Objective`
(`base.py`) that sets its `name`, the `architecture` and `model_type` its saved config.json names (how a resume
recognises it), its `model_folders` and `term_names`, and implements `build` and `load` (fresh, and from a
checkpoint), `planned_models` (the configs a resume compares), `step_module` (forward -> one loss sum per term),
`counts` and `weights` (each term's denominator and weight), `training_flops_per_token` and `evaluate`; the blocks,
collator, model card text (`card_*`), `continues_a_model` (model.init_from), `within_documents`
(data.document_attention within) and `start_note` have defaults. Its name goes in the Literal of config's
`train.objective`; its config checks beyond its section's own in config's OBJECTIVE_RULES, and a section only it
reads names it in its field's metadata (config cannot import this package).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlmtrain.config import Config
from mlmtrain.data.masking import VocabInfo
from mlmtrain.model.families import family_of
from mlmtrain.readers import read_saved_yaml
from mlmtrain.train.objectives.base import Evaluation, Objective
from mlmtrain.train.objectives.distill import Distill
from mlmtrain.train.objectives.electra import Electra
from mlmtrain.train.objectives.mlm import MaskedLanguageModel
from mlmtrain.train.objectives.pairs import NextSentence, SentenceOrder

__all__ = ["REGISTRY", "Evaluation", "Objective", "objective_class", "objective_of", "saved_objective"]

REGISTRY: dict[str, type[Objective]] = {
    "mlm": MaskedLanguageModel,
    "electra": Electra,
    "mlm+nsp": NextSentence,
    "mlm+sop": SentenceOrder,
    "distill": Distill,
}


def objective_class(cfg: Config) -> type[Objective]:
    """The class of `cfg.train.objective`: the facts about it that need no run."""
    return REGISTRY[cfg.train.objective]


def objective_of(cfg: Config, vocab: VocabInfo) -> Objective:
    """The objective of a run of `cfg` with the tokenizer's `vocab`."""
    return objective_class(cfg)(cfg, vocab)


def saved_objective(folder: Path, saved: dict[str, Any]) -> str:
    """Which objective trained the checkpoint in `folder`, whose config.json is `saved`: the one whose architecture
    and model type it names, else those of its model type (of any family, for a masked LM of another family); where
    several are left (the pair objectives, a distilled student), the one its mlmtrain.yaml names, else the first; its
    model type, when none has it."""
    model_type, named = saved.get("model_type"), saved.get("architectures") or []
    by_type = [name for name, kind in REGISTRY.items() if kind.model_type == model_type]
    if not by_type and family_of(model_type) is not None:  # a masked LM of another family (model/families.py)
        by_type = [name for name, kind in REGISTRY.items() if kind.saves_any_family]
    candidates = [name for name in by_type if REGISTRY[name].architecture in named] or by_type
    if len(candidates) > 1:
        run = read_saved_yaml(Path(folder) / "mlmtrain.yaml") or {}
        train = run.get("train")
        said = train.get("objective") if isinstance(train, dict) else None
        return said if said in candidates else candidates[0]
    return (candidates or [model_type])[0]
