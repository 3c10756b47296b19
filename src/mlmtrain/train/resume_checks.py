"""What a resume or a branch verifies before anything is written, on the checkpoint it starts from read once
(`checkpoint.SavedCheckpoint`): the objective that trained it and its model's shape against the model the config
makes (`check_model_shape`), its tokenizer against the run's (`check_tokenizer`); the notes a resume prints for the
settings the config changes (`resume_notes`); and its model, loaded once all of that holds (`load_start_model`).
"""

from __future__ import annotations

import json
from typing import Any

from mlmtrain.config import TRAINING_KEYS, Config, published_settings, records_setting
from mlmtrain.errors import UserError, first_line, shown
from mlmtrain.model.context import quiet_transformers
from mlmtrain.runtime.model_folder import ModelFolder, read_model_folder, transformers_config
from mlmtrain.train.budget import check_phase_name
from mlmtrain.train.checkpoint import SavedCheckpoint
from mlmtrain.train.objectives import Objective


def _way_out(branched: bool) -> str:
    """What a user can do instead when the checkpoint is not one the config continues: a resume may start afresh
    in its folder; a branch starts a new folder, so --overwrite would change nothing."""
    if branched:
        return "or --branch-from a checkpoint of this config's model"
    return "or start afresh with --overwrite"


def check_objective(start: SavedCheckpoint, cfg: Config, branched: bool) -> None:
    """UserError when the checkpoint was trained with another train.objective than the config's."""
    if start.objective != cfg.train.objective:
        raise UserError(
            "checkpoint",
            f"{start.folder} was trained with train.objective {start.objective}, the config says "
            f"{cfg.train.objective}; {'branch' if branched else 'resume'} with train.objective: {start.objective}, "
            + _way_out(branched),
        )


def check_phase(start: SavedCheckpoint, cfg: Config, branched: bool) -> None:
    """UserError for a resume into phases that lack the one the checkpoint is in (its record names it)."""
    phase = start.record.get("phase")
    if isinstance(phase, str) and cfg.phases:
        check_phase_name(phase, [p.name for p in cfg.phases], branched)


def check_model_shape(start: SavedCheckpoint, cfg: Config, objective: Objective, branched: bool = False) -> None:
    """UserError unless the checkpoint's model (and an ELECTRA generator in its subfolder) is of the model type and has
    every architecture key the objective builds from the config and the run's tokenizer: a resume continues that
    model as it is, so a key the config changed would be ignored while the run's mlmtrain.yaml recorded it."""
    check_objective(start, cfg, branched)
    decided = {name: f"model.{key}" for key, name in start.family.shape.items()}  # the keys the config sets
    decided["embedding_size"] = "model.hidden_size"  # ELECTRA's
    rows = objective.vocab.vocab_size
    decided["vocab_size"] = f"the tokenizer's {rows} tokens rounded up to model.pad_vocab_multiple"
    for subfolder, (planned, by) in objective.planned_models(decided).items():
        saved = start.saved if not subfolder else read_model_folder(start.folder / subfolder, topic="checkpoint")
        if saved.config.get("model_type") != planned.model_type:  # a model of another model.architecture or family
            raise UserError(
                "checkpoint",
                f"{saved.folder} holds a {saved.config.get('model_type')} model, the config builds "
                f"{planned.model_type} (model.architecture {cfg.model.architecture}); use the config of that run "
                f"(its mlmtrain.yaml), {_way_out(branched)}",
            )
        _compare_shape(saved.folder, saved.config, planned, by, start.family.architecture_keys, _way_out(branched))


def _compare_shape(
    where: Any, saved: dict[str, Any], planned: Any, decided: dict[str, str], keys: tuple[str, ...], way_out: str
) -> None:
    """UserError naming the first of `keys` (transformers config attributes) whose value in the saved config.json
    is not the `planned` config's."""
    try:
        there = transformers_config(saved)  # keys a file lacks get this transformers' defaults
    except Exception as error:  # transformers 5 validates the values' types, each kind of error its own way
        raise UserError(
            "checkpoint",
            f"{where}/config.json is damaged ({str(error).splitlines()[-1].strip()[:160]}); "
            "resume from another checkpoint",
        ) from None
    for key in keys:
        if not hasattr(planned, key) or getattr(there, key, None) == getattr(planned, key):
            continue
        # as JSON writes them: a saved "64" (text) reads as such beside the config's 64
        was, wanted = (json.dumps(value, default=str) for value in (getattr(there, key, None), getattr(planned, key)))
        if key in decided:
            problem = f"the config says {wanted} ({decided[key]}); use the config of that run (its mlmtrain.yaml)"
        else:
            problem = f"mlmtrain builds {wanted}; it is not a checkpoint of mlmtrain's model, use another"
        raise UserError("checkpoint", f"{where} was trained with {key}={was}, {problem}, {way_out}")


def check_tokenizer(start: SavedCheckpoint, cfg: Config, fingerprint: str) -> None:
    """UserError when the run's tokenizer (its `fingerprint`) is not the one the checkpoint was trained with, naming
    where the run's tokenizer comes from and the way back to the checkpoint's."""
    if fingerprint == start.tokenizer_fingerprint:
        return
    if cfg.distill.teacher and cfg.tokenizer.pretrained == cfg.distill.teacher:  # a distillation's is its teacher's
        was = start.saved.setting("distill", "teacher")
        raise UserError(
            "checkpoint",
            f"{start.folder} was trained with another tokenizer than the one distill.teacher {cfg.distill.teacher} "
            f"brings, so that teacher is not the one it learned from; use that run's teacher"
            + (f" (distill.teacher: {was})" if was else "")
            + ", or start a new run with this teacher",
        )
    if cfg.model.init_from:  # the tokenizer is the base's (extended or not): the run's own settings make it again
        raise UserError(
            "checkpoint",
            f"{start.folder} was trained with another tokenizer than the one {cfg.model.init_from} (model.init_from) "
            "and these tokenizer settings make; use that run's config: --config RUN_DIR/mlmtrain.yaml",
        )
    raise UserError(
        "checkpoint",
        f"{start.folder} was trained with another tokenizer than {cfg.tokenizer_dir} (tokenizer.path); use the "
        f"tokenizer of that run: --set tokenizer.pretrained={start.folder}",
    )


def resume_notes(start: SavedCheckpoint, cfg: Config) -> list[str]:
    """The notes a resume prints for the config's settings that differ from the checkpoint's: its dropout, which
    applies (`load_start_model`), and the training settings, which then no longer reproduce an uninterrupted run."""
    notes = []
    if dropout_changed := dropout_changes(start, cfg):
        notes.append(f"note: dropout from the config replaces the checkpoint's ({'; '.join(dropout_changed)})")
    if setting_changed := setting_changes(start.saved, cfg):
        notes.append(
            f"note: resuming with training settings other than the checkpoint's ({'; '.join(setting_changed)}); "
            "the run goes on under the config's, so it will not reproduce an uninterrupted run"
        )
    return notes


def dropout_changes(start: SavedCheckpoint, cfg: Config) -> list[str]:
    """The dropout settings of the config that differ from the checkpoint's, as 'key: saved -> config' (a resume
    applies the config's: dropout only changes training)."""
    saved, wanted = start.saved.config, start.family.dropout_settings(cfg.model)
    return [f"{key}: {saved.get(key)} -> {value}" for key, value in wanted.items() if saved.get(key) != value]


def setting_changes(start: ModelFolder, cfg: Config) -> list[str]:
    """The training settings of the config that differ from the ones the run that wrote the checkpoint `start` used
    (its mlmtrain.yaml), as 'key: saved -> config', its phases among them: a resume applies the config's, so the run
    no longer reproduces an uninterrupted one. Empty for a checkpoint without a readable mlmtrain.yaml (nothing to
    compare)."""
    saved, wanted = start.settings, cfg.to_dict()
    changes = []
    for dotted in TRAINING_KEYS:  # each field of the config says whether it is one (its `resume`)
        section, key = dotted.split(".")
        saved_section = saved.get(section)
        if not isinstance(saved_section, dict) or key not in saved_section or section not in wanted:
            continue  # an older mlmtrain's file without the key, or a section this objective lacks: nothing to compare
        if not records_setting(dotted, saved_section[key], wanted[section][key]):
            changes.append(f"{dotted}: {shown(saved_section[key])} -> {wanted[section][key]}")
    phases = published_settings(cfg).get("phases", [])  # as the checkpoint's file holds them: paths by name
    if saved and saved.get("phases", []) != phases:
        before = [str(p.get("name")) for p in saved.get("phases") or [] if isinstance(p, dict)]
        now = [str(p["name"]) for p in phases]
        changes.append(f"phases: {', '.join(before) or 'none'} -> {', '.join(now) or 'none'} (names, budgets or set:)")
    return changes


def load_start_model(start: SavedCheckpoint, objective: Objective) -> Any:
    """The checkpoint's model, loaded as its family loads (the resolution checked it belongs to this config and
    tokenizer); the config's dropout applies (`dropout_changes` says which differ)."""
    try:
        with quiet_transformers():  # no load report for the pooler the checkpoint holds beside the masked-LM model
            return objective.load(start.saved, start.family)
    except UserError:
        raise
    except Exception as error:  # truncated safetensors and friends
        raise UserError(
            "checkpoint",
            f"cannot load the weights in {start.folder} ({type(error).__name__}: "
            f"{first_line(error)[:160]}); resume from an older checkpoint",
        ) from None
