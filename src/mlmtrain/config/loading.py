"""Loading a config: the YAML file, the `--set` overrides, each value coerced to its key's type and checked, the keys
the user stated recorded (`load_config`); and saving the resolved config beside an output (`save_config`)."""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mlmtrain.config.fields import suggest
from mlmtrain.config.phases import BUDGETS, check_phase_key, check_whole_run, read_phases
from mlmtrain.config.published import published_yaml
from mlmtrain.config.schema import SECTIONS, Config, other_objectives_sections, section_fields
from mlmtrain.errors import UserError, first_line, shown
from mlmtrain.readers import load_yaml_text


def _yaml_error(path: str, error: yaml.YAMLError) -> UserError:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return UserError("config", f"{path}: malformed YAML{where}: {problem}; fix the syntax there")


def read_yaml(path: Union[str, Path]) -> dict[str, Any]:
    """The mapping in a YAML config file; a clear UserError for a missing or malformed file."""
    path = Path(path)
    if path.is_dir():
        raise UserError("config", f"{path} is a folder, not a file; pass a YAML file to --config")
    if not path.is_file():
        raise UserError("config", f"file {path} does not exist; pass an existing YAML file to --config")
    try:
        loaded = load_yaml_text(path.read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as error:
        raise _yaml_error(str(path), error) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError("config", f"cannot read {path}: {first_line(error)}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(
            "config", f"{path} must hold a mapping of sections (data:, model:, ...), not a {type(loaded).__name__}"
        )
    return loaded


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply one `section.key=value` (value parsed as a YAML scalar) to a nested dict in place."""
    if "=" not in assignment:
        raise UserError("config", f"--set {assignment!r} must look like section.key=value")
    dotted, raw = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise UserError("config", f"--set {dotted!r} must name section.key, e.g. optim.lr=1e-3")
    try:
        value = load_yaml_text(raw, f"--set {dotted}") if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    set_value(tree, dotted.strip(), value)


def set_value(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `section.key` to `value` (a Python value, validated later with the rest) in a nested dict in place."""
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise UserError("config", f"override {dotted!r} must name section.key, e.g. optim.lr")
    if tree.get(parts[0]) is None:  # absent, or an empty `optim:` in the file, which loads as an empty section
        tree[parts[0]] = {}
    section = tree[parts[0]]
    if not isinstance(section, dict):
        raise UserError("config", f"{parts[0]} must be a mapping of keys, not {shown(section)}")
    section[parts[1]] = value


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is list:
        return f"a list of {_type_name(typing.get_args(annotation)[0])}"
    if typing.get_origin(annotation) is dict:
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


LARGEST_INT = 2**63 - 1  # torch, numpy and the tokenizers library take counts and seeds as 64-bit integers


def _coerce(value: Any, annotation: Any) -> tuple[bool, Any]:
    """(matches, value) for a YAML value against a field's type; ints are accepted as floats."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(annotation):
            ok, coerced = _coerce(value, option)
            if ok:
                return True, coerced
        return False, value
    if origin is Literal:
        return value in typing.get_args(annotation), value
    if origin is list:
        (item,) = typing.get_args(annotation)
        if not isinstance(value, list):
            return False, value
        coerced = [_coerce(v, item) for v in value]
        return all(ok for ok, _ in coerced), [v for _, v in coerced]
    if origin is dict:  # its keys are the section's to check (a mixture's entries: config/data.py)
        return isinstance(value, dict), value
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, (int, float)):
            try:
                return True, float(value)
            except OverflowError:  # an integer of hundreds of digits: no float holds it, `_build_section` says so
                return True, math.inf
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    return False, value


def _has_nonfinite(value: Any) -> bool:
    """Whether a coerced value is, or (a list) holds, a float that is nan or infinite."""
    if isinstance(value, list):
        return any(_has_nonfinite(item) for item in value)
    return isinstance(value, float) and not math.isfinite(value)


def _got(value: Any) -> str:
    """What a wrong value was, for a message: a boolean says how YAML made it one (`yes` is true)."""
    if isinstance(value, bool):
        return f"{str(value).lower()}: YAML reads true/false, yes/no and on/off as booleans"
    return shown(value)


def _build_section(name: str, cls: type, values: Any) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError("config", f"section '{name}' must be a mapping of keys, not {shown(values)}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            where = shown(f"{name}.{key}")  # a key may be megabytes long: quoted short
            raise UserError("config", f"unknown key {where}{suggest(str(key)[:100], known, name + '.')}")
        ok, coerced = _coerce(value, hints[key])
        if not ok:
            raise UserError("config", f"{name}.{key} must be {_type_name(hints[key])} (got {_got(value)})")
        if isinstance(coerced, int) and not isinstance(coerced, bool) and not -LARGEST_INT <= coerced <= LARGEST_INT:
            raise UserError("config", f"{name}.{key} is out of range (got {value}); it must lie within ±{LARGEST_INT}")
        if _has_nonfinite(coerced):  # nan passes every `x > 0` check by failing none of them; inf is no setting
            raise UserError("config", f"{name}.{key} must be a finite number (got {shown(value)})")
        kwargs[key] = coerced
    return cls(**kwargs)


def config_from_dict(tree: dict[str, Any]) -> Config:
    """A validated Config from a nested dict of sections (and `phases:`, a list: config/phases.py)."""
    for name in tree:
        if name not in (*SECTIONS, "phases"):
            raise UserError("config", f"unknown section {shown(str(name))}{suggest(str(name)[:100], list(SECTIONS))}")
    hints = typing.get_type_hints(Config)
    config = Config(**{name: _build_section(name, hints[name], tree.get(name)) for name in SECTIONS})
    config.stated = frozenset(f"{name}.{key}" for name in SECTIONS for key in tree.get(name) or {})
    config.phases = read_phases(tree.get("phases"))
    stated_budgets = {key: getattr(config.train, key) for key in BUDGETS if f"train.{key}" in config.stated}
    check_whole_run(stated_budgets, config.optim.schedule, config.optim.decay, config.phases)
    if (config.train.max_flops is not None or config.phases) and "train.max_steps" not in config.stated:
        config.train.max_steps = None  # a FLOP budget, or phases, replace the default step budget
    for section, owner in other_objectives_sections(config.train.objective).items():
        if stated := sorted(tree.get(section) or {}):
            raise UserError(
                "config",
                f"{section}.{stated[0]} is set but train.objective is '{config.train.objective}'; "
                f"set train.objective: {owner}, or drop the {section} section",
            )
    config.validate()
    # each phase's settings are keys a phase may set and make a valid config; each is kept as its key holds it
    for phase, phase_config in zip(config.phases, phase_configs(config), strict=True):
        phase.set = {dotted: phase_config.value(dotted) for dotted in phase.set}
    return config


def config_with(config: Config, settings: dict[str, Any]) -> Config:
    """A copy of `config` with `settings` ({section.key: value}, values as YAML gives them) over it, each coerced and
    checked as `load_config` checks a key, then the whole validated; the settings count as stated."""
    changed = copy.deepcopy(config)
    hints = typing.get_type_hints(Config)
    by_section: dict[str, dict[str, Any]] = {}
    for dotted, value in settings.items():
        section, key = dotted.split(".")
        by_section.setdefault(section, {})[key] = value
    for section, values in by_section.items():
        current = {f.name: getattr(getattr(changed, section), f.name) for f in dataclasses.fields(hints[section])}
        setattr(changed, section, _build_section(section, hints[section], {**current, **values}))
    changed.stated = frozenset({*config.stated, *settings})
    changed.validate()
    return changed


def phase_configs(config: Config) -> list[Config]:
    """The config each phase trains under: `config` with the settings of that phase and of every phase before it over
    it, in order; UserError naming the phase for a key a phase may not set or a setting the config refuses."""
    known = {f"{section}.{f.name}" for section in SECTIONS for f in section_fields(section)}
    configs, settings = [], {}
    for phase in config.phases:
        for dotted in phase.set:
            check_phase_key(phase.name, dotted, known)
        settings = {**settings, **phase.set}
        try:
            configs.append(config_with(config, settings))
        except UserError as error:
            raise UserError(error.topic, f"phases: {phase.name}: {error.message}") from None
    return configs


def load_config(
    path: Union[str, Path, None], overrides: Union[list[str], tuple[str, ...], dict[str, Any], None] = ()
) -> Config:
    """Read a YAML config (or start from defaults when path is None), apply overrides, validate.

    `overrides` are `section.key=value` strings as `--set` takes them (values parsed as YAML), or a dict of
    `{"section.key": value}` with Python values."""
    return config_from_dict(stated_settings(path, overrides))


def stated_settings(
    path: Union[str, Path, None], overrides: Union[list[str], tuple[str, ...], dict[str, Any], None] = ()
) -> dict[str, Any]:
    """The sections and keys the YAML file and the overrides state, before defaults and checks (`load_config`)."""
    tree = read_yaml(path) if path is not None else {}
    if isinstance(overrides, dict):
        for dotted, value in overrides.items():
            set_value(tree, str(dotted), value)
    else:
        for assignment in overrides or ():
            apply_override(tree, assignment)
    return tree


SAVED_CONFIG_HEADER = "# The resolved config of this output, written by mlmtrain.\n"


def save_config(config: Config, folder: Union[str, Path], name: str = "mlmtrain.yaml", published: bool = False) -> Path:
    """Write the resolved config beside an output, so the output says how it was made; `published` (a checkpoint,
    which is shared) names files and folders without the paths of this machine (`published_settings`)."""
    target = Path(folder) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    text = published_yaml(config) if published else config.to_yaml()
    target.write_text(SAVED_CONFIG_HEADER + text, encoding="utf-8")
    return target


def replaceable_config(path: Path, config: Config) -> bool:
    """True if the file at `path` is a config mlmtrain saved, or holds exactly what saving `config` writes (as
    `mlmtrain config show` prints it): replacing it loses nothing. A config the user wrote there is neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text.startswith(SAVED_CONFIG_HEADER) or text == config.to_yaml()
