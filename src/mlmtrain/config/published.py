"""What a checkpoint publishes of its config: files and folders by their names, never the paths of the machine that
trained it; `builtin:` and `hf:` sources and Hub ids as they are."""

from __future__ import annotations

import glob
from pathlib import Path, PurePath
from typing import Any, Union

import yaml

from mlmtrain.config.schema import SECTIONS, Config, section_fields
from mlmtrain.config.urls import is_remote
from mlmtrain.errors import redact

# the keys that may name a local file, folder or glob (each field's `path`); True for those that may name a Hub
# repository instead
PATH_KEYS: dict[str, bool] = {
    f"{section}.{found.name}": found.metadata["path"] == "hub"
    for section in SECTIONS
    for found in section_fields(section)
    if found.metadata["path"]
}
_NAMED_SOURCES = ("builtin:", "hf:")  # sources named by mlmtrain or the Hub, not by a path
MDS_PREFIX = "mds:"  # data.train: mds:PATH_OR_URL, a MosaicML Streaming dataset


def looks_like_path(name: str) -> bool:
    # Hub ids are NAME or ORG/NAME; anything else that is not on disk is a mistyped local path.
    return name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or "\\" in name


def names_hub_repository(name: str) -> bool:
    """True when a value that may name a folder or a Hub repository (model.init_from, tokenizer.pretrained) names
    a Hub repository id: NAME or ORG/NAME, not on disk here."""
    return not (Path(name).expanduser().exists() or looks_like_path(name))


def local_name(path: str) -> str:
    """A local path by the name of its file or folder; a glob keeps its folder's name too (`books/*.txt`), since
    the pattern alone names nothing."""
    pure = PurePath(path)
    name = pure.name or path
    return f"{pure.parent.name}/{name}" if glob.has_magic(name) and pure.parent.name else name


def published_value(key: str, value: Any, hub: Union[bool, None] = None) -> Any:
    """`value` of config key `key` as a published config holds it: a local path by its name (`local_name`);
    `builtin:`, `hf:` sources and Hub ids unchanged. `hub` False takes a value as local whether on disk or not."""
    if key not in PATH_KEYS or value is None:
        return value
    if isinstance(value, list):
        return [published_value(key, entry, hub) for entry in value]
    if isinstance(value, dict):  # a mixture's entry: its source published, its weight and name as they are
        return {**value, "source": published_value(key, value.get("source"), hub)}
    if not isinstance(value, str) or value.startswith(_NAMED_SOURCES):
        return value
    if value.startswith(MDS_PREFIX):  # a MosaicML Streaming dataset: its folder or URL, published as either is
        return MDS_PREFIX + published_value(key, value.removeprefix(MDS_PREFIX), hub=False)
    if is_remote(value):  # a URL names the same data on every machine: kept, its credentials never
        return redact(value)
    on_hub = PATH_KEYS[key] and (names_hub_repository(value) if hub is None else hub)
    return value if on_hub else local_name(value)


def records_setting(key: str, saved: Any, value: Any) -> bool:
    """True when `saved`, from a checkpoint's mlmtrain.yaml, records `value` of config key `key`: as given (an
    older mlmtrain saved paths) or by name, whether or not the folder it names is still there."""
    return saved in (value, published_value(key, value), published_value(key, value, hub=False))


def published_settings(config: Config) -> dict[str, Any]:
    """`config.to_dict()` with every local path by its name (`published_value`), a phase's settings' too: what a
    checkpoint holds."""
    tree = config.to_dict()
    for dotted in PATH_KEYS:
        section, key = dotted.split(".")
        if section in tree:
            tree[section][key] = published_value(dotted, tree[section][key])
    for phase in tree.get("phases", []):
        if "set" in phase:
            phase["set"] = {dotted: published_value(dotted, value) for dotted, value in phase["set"].items()}
    return tree


def published_yaml(config: Config) -> str:
    return yaml.safe_dump(published_settings(config), sort_keys=False)
