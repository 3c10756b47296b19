"""Typed configuration: one dataclass per section, loaded from YAML plus `--set` overrides.

Every key has a default and a one-line `help`; `load_config` rejects unknown keys (with a "did you mean"), wrong
types and out-of-range values with a `UserError` that names the key. The package: how a key is declared
(`fields.py`), the sections (`data.py`, `model.py`, `training.py`, `outputs.py`), the whole config and the rules
between its keys (`schema.py`), loading and saving (`loading.py`), and what a checkpoint publishes of it
(`published.py`). Its names are offered here.
"""

from mlmtrain.config.data import DataConfig, MaskingConfig, MixtureSource, TokenizerConfig, mixture_of, train_specs
from mlmtrain.config.fields import (
    RESUME_KINDS,
    Check,
    Source,
    above,
    at_least,
    parse_duration,
    setting,
    within,
)
from mlmtrain.config.loading import (
    LARGEST_INT,
    SAVED_CONFIG_HEADER,
    apply_override,
    config_from_dict,
    config_with,
    load_config,
    phase_configs,
    read_yaml,
    replaceable_config,
    save_config,
    set_value,
    stated_settings,
)
from mlmtrain.config.model import DistillConfig, ElectraConfig, ModelConfig
from mlmtrain.config.outputs import ProbeConfig, ReportConfig
from mlmtrain.config.phases import PHASE_KEYS, PhaseConfig, decaying_phase, describe_phases
from mlmtrain.config.published import (
    MDS_PREFIX,
    PATH_KEYS,
    local_name,
    looks_like_path,
    names_hub_repository,
    published_settings,
    published_value,
    published_yaml,
    records_setting,
)
from mlmtrain.config.schema import (
    SECTIONS,
    TRAINING_KEYS,
    Config,
    describe_fields,
    field_default,
    flatten,
    other_objectives_sections,
    section_fields,
    section_hints,
    yaml_value,
)
from mlmtrain.config.training import CheckpointConfig, OptimConfig, TrainConfig
from mlmtrain.config.urls import cached_copy, default_cache_dir, is_remote, local_path, url_scheme

__all__ = [
    "LARGEST_INT",
    "PATH_KEYS",
    "PHASE_KEYS",
    "RESUME_KINDS",
    "SAVED_CONFIG_HEADER",
    "SECTIONS",
    "TRAINING_KEYS",
    "Check",
    "CheckpointConfig",
    "Config",
    "DataConfig",
    "MixtureSource",
    "mixture_of",
    "train_specs",
    "DistillConfig",
    "ElectraConfig",
    "MaskingConfig",
    "ModelConfig",
    "OptimConfig",
    "PhaseConfig",
    "ProbeConfig",
    "ReportConfig",
    "Source",
    "TokenizerConfig",
    "TrainConfig",
    "above",
    "apply_override",
    "at_least",
    "config_from_dict",
    "config_with",
    "decaying_phase",
    "describe_fields",
    "describe_phases",
    "field_default",
    "flatten",
    "load_config",
    "local_name",
    "looks_like_path",
    "MDS_PREFIX",
    "cached_copy",
    "default_cache_dir",
    "is_remote",
    "local_path",
    "url_scheme",
    "names_hub_repository",
    "other_objectives_sections",
    "phase_configs",
    "parse_duration",
    "published_settings",
    "published_value",
    "published_yaml",
    "read_yaml",
    "records_setting",
    "replaceable_config",
    "save_config",
    "section_fields",
    "section_hints",
    "set_value",
    "setting",
    "stated_settings",
    "within",
    "yaml_value",
]
