"""A config resolved against the models it names (`resolve_init_from`), on a copy: the objective's own (a
distillation's teacher), then `model.init_from`'s base, whose shape, weights and tokenizer win: shape keys the user
did not set take the base's, a shape key set to another value (even its default) is refused, dropout keys may be set;
optimizer and schedule start fresh. A resumed run of a base reads the checkpoint it resumes instead (`resumed`), so
the base may have moved or the Hub be out of reach. Also: the note for a longer data.seq_len than the model was trained
with (`second_phase_note`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional, Union

from mlmtrain.config import Config, phase_configs
from mlmtrain.data.masking import check_whole_words
from mlmtrain.data.tokenizer import extendable_vocab, load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.model.architectures import architecture_of
from mlmtrain.model.families import Family, check_rotary_bases, check_within_documents, model_positions
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train.base_model import KEY, Base, base_of, check_base, read_base, refuse, take_shape, take_tokenizer
from mlmtrain.train.objectives import REGISTRY, check_config, objective_class


@dataclass(frozen=True)
class Resolution:
    """A config resolved against the models it names: a copy of the caller's, and those models read, by config key."""

    cfg: Config
    bases: dict[str, Base]


def resolve_init_from(cfg: Config, check_weights: bool = True, resumed: Optional[ModelFolder] = None) -> Resolution:
    """A copy of `cfg` (the caller's is never changed) resolved against the models it names, each read once: the
    objective's own (`Objective.resolve_models`), then the base named by model.init_from (none when it is null): the
    model's shape and the tokenizer are the base's, a conflicting key is refused; so is data.document_attention within
    where the objective or the model cannot keep a token to its document, and whatever the objective tables refuse.
    `check_weights` false reads the bases' config.json only; `resumed` (a checkpoint of this run that stands in for
    the base) is read instead of the base, which is not opened."""
    cfg = copy.deepcopy(cfg)
    check_config(cfg)
    bases = objective_class(cfg).resolve_models(cfg, check_weights)  # a distillation's teacher
    name = cfg.model.init_from
    if not name:  # the architecture built from scratch is a model of its family (architectures.py)
        family, what = architecture_of(cfg.model).family, f"model.architecture {cfg.model.architecture}"
        _check_document_attention(cfg, family, what)
        _check_phases(cfg, family, what, cfg.model.max_position_embeddings)
        return Resolution(cfg, bases)
    if resumed is not None:
        base = _resumed_base(resumed, name)
    else:
        base = check_base(name) if check_weights else read_base(name)
    if not objective_class(cfg).continues_a_model:
        able = " or ".join(objective for objective, other in REGISTRY.items() if other.continues_a_model)
        raise refuse(
            f"is set with train.objective {cfg.train.objective}; starting {cfg.train.objective} from an existing "
            f"model is not supported (a {base.family.name} base continues with {able}): drop model.init_from or use "
            f"train.objective: {able}"
        )
    _check_document_attention(cfg, base.family, f"{KEY} {name} (a {base.family.name} model)")
    check_rotary_bases(base.family, cfg.model, f"{KEY} {name}")
    take_shape(cfg, base)
    take_tokenizer(cfg.tokenizer, base)
    _check_tokenizer_use(cfg, name, resumed)
    positions = base.positions()
    lengths = [("data.seq_len", cfg.data.seq_len)] + (
        [("probe.max_length", cfg.probe.max_length)] if cfg.probe.task else []
    )
    for key, length in lengths:
        if length > positions:
            raise UserError(
                "config",
                f"{key} ({length}) is beyond the {positions} positions of {KEY} {name}; set {key} to {positions} "
                "or less",
            )
    cfg.validate()
    _check_phases(cfg, base.family, f"{KEY} {name}", positions)
    return Resolution(cfg, {**bases, KEY: base})


def _check_phases(cfg: Config, family: Family, what: str, positions: int) -> None:
    """UserError, naming the phase, for a phase's settings that the objective tables refuse or that the model (`what`,
    of `family`, with `positions`) cannot take: rotary bases of learned positions, blocks longer than its positions."""
    for phase, phase_cfg in zip(cfg.phases, phase_configs(cfg), strict=True):
        try:
            check_config(phase_cfg)
            check_rotary_bases(family, phase_cfg.model, what)
            if phase_cfg.data.seq_len > positions:
                raise UserError(
                    "config",
                    f"data.seq_len ({phase_cfg.data.seq_len}) is beyond the {positions} positions of {what}; set "
                    f"data.seq_len to {positions} or less",
                )
        except UserError as error:
            raise UserError(error.topic, f"phases: {phase.name}: {error.message}") from None


def _resumed_base(resumed: ModelFolder, name: str) -> Base:
    """The base as a resumed checkpoint of its run holds it: its model's config, with the base's vocabulary size as
    its mlmtrain.yaml records it (tokenizer.extend_vocab may have added rows since)."""
    rows = resumed.setting("tokenizer", "vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool):
        resumed = ModelFolder(resumed.folder, {**resumed.config, "vocab_size": rows}, resumed.tokenizer_config)
    return base_of(resumed, name)


def _check_document_attention(cfg: Config, family: Optional[Family], model: str) -> None:
    """UserError for data.document_attention within where the objective, or `model` (of `family`), cannot keep a
    token to its own document; auto becomes within unless within would be refused, else packed (in `cfg`, as saved)."""
    if cfg.data.document_attention == "auto":
        cfg.data.document_attention = "within"
        try:  # the rules that refuse within (data.packing's in the config, the objective's and the model's) decide
            cfg.validate_within_documents()
            _check_document_attention(cfg, family, model)
        except UserError:
            cfg.data.document_attention = "packed"
        return
    if cfg.data.document_attention != "within":
        return
    if not objective_class(cfg).within_documents:
        able = " or ".join(name for name, objective in REGISTRY.items() if objective.within_documents)
        raise UserError(
            "config",
            f"data.document_attention is within, which train.objective {able} supports, not {cfg.train.objective}; "
            f"set train.objective: {able} or data.document_attention: packed",
        )
    check_within_documents(family, model)


def _check_tokenizer_use(cfg: Config, name: str, resumed: Optional[ModelFolder]) -> None:
    """UserError now, before anything is written, for what the run would ask of the base's tokenizer and it cannot do:
    extend its vocabulary (tokenizer.extend_vocab), or mark whole words (masking.whole_word). A resumed run's tokenizer
    is checked where it is loaded (the resolution of the run)."""
    extend = bool(cfg.tokenizer.extend_vocab)
    if resumed is not None or not (extend or cfg.masking.whole_word):
        return
    tokenizer = load_tokenizer(name)
    if extend:
        extendable_vocab(tokenizer, name)
    if cfg.masking.whole_word:
        check_whole_words(tokenizer, name)


# ---------------------------------------------------------------------------------------------
# A second phase: a longer data.seq_len than the checkpoint or base was trained with


def second_phase_note(cfg: Config, model: Optional[Union[ModelFolder, Base]]) -> Optional[str]:
    """The note for a run that continues `model`, a checkpoint (--resume) or a base (model.init_from), at a longer
    data.seq_len than it was trained with (None otherwise, and for a model from scratch: no model); UserError for a
    seq_len beyond its positions."""
    if model is None:
        return None
    saved = model.saved if isinstance(model, Base) else model
    seq_len, positions = cfg.data.seq_len, model_positions(saved.config)
    if positions is not None and seq_len > positions:
        raise UserError(
            "config",
            f"data.seq_len ({seq_len}) is beyond the {positions} positions of {saved.folder}; set data.seq_len to "
            f"{positions} or less",
        )
    before = _trained_seq_len(saved)
    if before is None or seq_len <= before:
        return None
    return (
        f"note: second phase: data.seq_len {seq_len}, up from the {before} that {saved.folder} was trained with (the "
        f"model has {positions} positions); positions past {before} start barely trained, as in BERT's second "
        "phase (90 % of the steps at 128 tokens, the rest at 512), and evaluations at the new length are not "
        "comparable with the earlier ones"
    )


def _trained_seq_len(saved: ModelFolder) -> Optional[int]:
    """data.seq_len of the mlmtrain.yaml beside a model (None: no such file, or not one mlmtrain wrote)."""
    value: Any = saved.setting("data", "seq_len")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
