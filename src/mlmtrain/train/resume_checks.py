"""What a resume verifies before it trains (`check_resume`, reading the resolved run): the checkpoint's model is the
one the config and its tokenizer make (`check_model_shape`), its tokenizer is the run's, and the notes it prints for
the settings the config changes (`resume_notes`); `load_resume_model` loads the model once all of that holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlmtrain.config import TRAINING_KEYS, Config, records_setting
from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError, first_line, shown
from mlmtrain.model.families import BERT, Family, family_of
from mlmtrain.readers import read_saved_yaml
from mlmtrain.runtime.model_folder import model_config
from mlmtrain.train.objectives import Objective, objective_class, objective_of, saved_objective
from mlmtrain.train.ownership import check_replaceable_after
from mlmtrain.train.resolved import ResolvedRun

# The keys of a checkpoint's config.json that fix which modules and tensors its model has, in the order they are
# compared; dropout is not among them: it only changes training, and the config's applies on resume.
_ARCHITECTURE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "embedding_size",
    "max_position_embeddings",
    "vocab_size",
    "type_vocab_size",
    "pad_token_id",
    "hidden_act",
    "layer_norm_eps",
    "position_embedding_type",
    "tie_word_embeddings",
    "is_decoder",
    "add_cross_attention",
)


def _saved_family(saved: dict[str, Any]) -> Family:
    """The family of a checkpoint's config.json (BERT's keys for an ELECTRA one, which shares them)."""
    return family_of(saved.get("model_type")) or BERT


def _config_dropout(cfg: Config, family: Family = BERT) -> dict[str, float]:
    """The dropout keys of a model's config.json (by its family's names), as the config sets them."""
    return family.dropout_settings(cfg.model)


def _read_model_config(folder: Path) -> dict[str, Any]:
    return model_config(folder, topic="checkpoint", fix="resume from another one")


def _planned_models(objective: Objective) -> dict[str, tuple[Any, dict[str, str]]]:
    """The model configs the run would build, by subfolder of a checkpoint, each with the settings that decide its
    keys (to name them in an error)."""
    vocab = objective.vocab
    decided = {
        "hidden_size": "model.hidden_size",
        "num_hidden_layers": "model.num_layers",
        "num_attention_heads": "model.num_heads",
        "intermediate_size": "model.intermediate_size",
        "embedding_size": "model.hidden_size",
        "max_position_embeddings": "model.max_position_embeddings",
        "vocab_size": f"the tokenizer's {vocab.vocab_size} tokens rounded up to model.pad_vocab_multiple",
    }
    return objective.planned_models(decided)


def _saved_model_configs(folder: Path, cfg: Config) -> dict[str, Any]:
    """The config.json of each model in the checkpoint, by subfolder, as transformers configs of the objective's
    kind (keys a file lacks get this transformers' defaults)."""
    kind = objective_class(cfg)
    found = {}
    for subfolder in kind.model_folders:
        where = Path(folder) / subfolder if subfolder else Path(folder)
        saved = _read_model_config(where)
        try:
            found[subfolder] = kind.config_class(cfg).from_dict(saved)
        except Exception as error:  # transformers 5 validates the values' types, each kind of error its own way
            raise UserError(
                "checkpoint",
                f"{where}/config.json is damaged ({str(error).splitlines()[-1].strip()[:160]}); "
                "resume from another checkpoint",
            ) from None
    return found


def check_model_shape(folder: Path, cfg: Config) -> None:
    """UserError unless the checkpoint's model (and an ELECTRA generator in its subfolder) has the objective and
    every architecture key the config and the checkpoint's tokenizer make: a resume continues that model as it is,
    so a key the config changed would be ignored while the run's mlmtrain.yaml recorded it."""
    from mlmtrain.data.masking import VocabInfo

    saved = _read_model_config(folder)
    family = family_of(saved.get("model_type"))  # a continued base of another family trains MLM (families.py)
    trained_with = saved_objective(folder, saved)
    if trained_with != cfg.train.objective:
        raise UserError(
            "checkpoint",
            f"{folder} was trained with train.objective {trained_with}, the config says {cfg.train.objective}; "
            f"resume with train.objective: {trained_with}, or start afresh with --overwrite",
        )
    if family not in (None, BERT) and cfg.model.init_from:  # a continued base's shape is its own (init_from.py)
        return
    builds = objective_class(cfg).config_class(cfg).model_type
    if saved.get("model_type") != builds:  # a model of another model.architecture
        raise UserError(
            "checkpoint",
            f"{folder} holds a {saved.get('model_type')} model, the config builds {builds} (model.architecture "
            f"{cfg.model.architecture}); resume with the config of that run, or start afresh with --overwrite",
        )
    found = _saved_model_configs(folder, cfg)  # before the tokenizer, whose loading reads config.json too
    objective = objective_of(cfg, VocabInfo.from_tokenizer(load_tokenizer(folder)))
    for subfolder, (planned, decided) in _planned_models(objective).items():
        where, there = Path(folder) / subfolder if subfolder else Path(folder), found[subfolder]
        for key in _ARCHITECTURE_KEYS:
            if not hasattr(planned, key) or getattr(there, key, None) == getattr(planned, key):
                continue
            # as JSON writes them: a saved "64" (text) reads as such beside the config's 64
            was, wanted = (
                json.dumps(value, default=str) for value in (getattr(there, key, None), getattr(planned, key))
            )
            if key in decided:
                problem = f"the config says {wanted} ({decided[key]}); resume with the config of that run"
            else:
                problem = f"mlmtrain builds {wanted}; it is not a checkpoint of mlmtrain's model, resume from one"
            raise UserError(
                "checkpoint", f"{where} was trained with {key}={was}, {problem}, or start afresh with --overwrite"
            )


def resume_notes(folder: Path, cfg: Config) -> list[str]:
    """The notes a resume prints for the config's settings that differ from the checkpoint's: its dropout, which
    applies (`load_resume_model`), and the training settings, which then no longer reproduce an uninterrupted run."""
    notes = []
    if dropout_changed := dropout_changes(folder, cfg):
        notes.append(f"note: dropout from the config replaces the checkpoint's ({'; '.join(dropout_changed)})")
    if setting_changed := setting_changes(folder, cfg):
        notes.append(
            f"note: resuming with training settings other than the checkpoint's ({'; '.join(setting_changed)}); "
            "the run goes on under the config's, so it will not reproduce an uninterrupted run"
        )
    return notes


def dropout_changes(folder: Path, cfg: Config) -> list[str]:
    """The dropout settings of the config that differ from the checkpoint's, as 'key: saved -> config' (a resume
    applies the config's: dropout only changes training)."""
    saved = _read_model_config(folder)
    wanted = _config_dropout(cfg, _saved_family(saved))
    return [f"{key}: {saved.get(key)} -> {value}" for key, value in wanted.items() if saved.get(key) != value]


def setting_changes(folder: Path, cfg: Config) -> list[str]:
    """The training settings of the config that differ from the ones the checkpoint's run used (its mlmtrain.yaml),
    as 'key: saved -> config': a resume applies the config's, so the run no longer reproduces an uninterrupted one.
    Empty for a checkpoint without a readable mlmtrain.yaml (nothing to compare)."""
    saved = read_saved_yaml(Path(folder) / "mlmtrain.yaml")
    if saved is None:
        return []
    wanted = cfg.to_dict()
    changes = []
    for dotted in TRAINING_KEYS:  # each field of the config says whether it is one (its `resume`)
        section, key = dotted.split(".")
        saved_section = saved.get(section)
        if not isinstance(saved_section, dict) or key not in saved_section or section not in wanted:
            continue  # an older mlmtrain's file without the key, or a section this objective lacks: nothing to compare
        if not records_setting(dotted, saved_section[key], wanted[section][key]):
            changes.append(f"{dotted}: {shown(saved_section[key])} -> {wanted[section][key]}")
    return changes


def other_tokenizer_message(folder: Path, cfg: Config) -> str:
    """Why a resume with this tokenizer cannot work, and the way back: the checkpoint's own tokenizer."""
    if cfg.model.init_from:  # the tokenizer is the base's (extended or not): the run's own settings make it again
        return (
            f"{folder} was trained with another tokenizer than the one {cfg.model.init_from} (model.init_from) and "
            "these tokenizer settings make; resume with that run's config: --config RUN_DIR/mlmtrain.yaml"
        )
    return (
        f"{folder} was trained with another tokenizer than {cfg.tokenizer_dir} (tokenizer.path); resume with the "
        f"tokenizer of that run: --set tokenizer.pretrained={folder}"
    )


def load_resume_model(folder: Path, cfg: Config, fingerprint: str) -> Any:
    """The checkpoint's model, after checking it belongs to this config and tokenizer; the config's dropout
    applies (`dropout_changes` says which differ)."""
    from mlmtrain.data.masking import VocabInfo
    from mlmtrain.model.context import quiet_transformers

    check_model_shape(folder, cfg)
    tokenizer = load_tokenizer(folder)
    if tokenizer_fingerprint(tokenizer) != fingerprint:
        raise UserError("checkpoint", other_tokenizer_message(folder, cfg))
    family = _saved_family(_read_model_config(folder))
    try:
        with quiet_transformers():  # no load report for the pooler the checkpoint holds beside the masked-LM model
            return objective_of(cfg, VocabInfo.from_tokenizer(tokenizer)).load(folder, family)
    except UserError:
        raise
    except Exception as error:  # truncated safetensors and friends
        raise UserError(
            "checkpoint",
            f"cannot load the weights in {folder} ({type(error).__name__}: "
            f"{first_line(error)[:160]}); resume from an older checkpoint",
        ) from None


_TOKENIZER_MAKERS = ("tokenizer.", "model.init_from", "data.")  # settings that decide an extended tokenizer


def check_resume(run: ResolvedRun) -> None:
    """UserError, before a tokenizer or store is (re)built, for a resume that cannot work: a later checkpoint of a
    user's it would move aside, a checkpoint of another model, or a tokenizer that is not the checkpoint's."""
    cfg, resume_from = run.cfg, run.resume_from
    if resume_from is None:
        return
    check_replaceable_after(run.run_dir, resume_from)
    check_model_shape(resume_from, cfg)
    from mlmtrain.data.sources import corpus_splits
    from mlmtrain.data.store import planned_tokenizer_fingerprint
    from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint

    # WordPiece training is not bit-reproducible: a tokenizer trained again would not be the checkpoint's, so a
    # resume that needs one is refused now, while the run's tokenizer and store are still intact.
    planned = planned_tokenizer_fingerprint(cfg, corpus_splits(cfg.data)[0], run.resumed_base)
    if planned is None and cfg.model.init_from:  # the base's tokenizer would be extended anew: the run's own settings
        changed = [c for c in setting_changes(resume_from, cfg) if c.startswith(_TOKENIZER_MAKERS)]
        raise UserError(
            "checkpoint",
            f"resuming {resume_from} needs the tokenizer it was trained with, and these settings would extend the "
            f"base's tokenizer anew ({'; '.join(changed) or 'the tokenizer folder is missing'}); resume with that "
            f"run's settings: --config {run.run_dir / 'mlmtrain.yaml'}",
        )
    if planned is None:
        raise UserError(
            "checkpoint",
            f"resuming {resume_from} needs the tokenizer it was trained with, and {cfg.tokenizer_dir} "
            "(tokenizer.path) would be trained anew (it is missing, or the corpus or tokenizer settings changed); "
            f"resume with that run's tokenizer: --set tokenizer.pretrained={resume_from}",
        )
    if planned != tokenizer_fingerprint(load_tokenizer(resume_from)):
        raise UserError("checkpoint", other_tokenizer_message(resume_from, cfg))
