"""The one reader of the YAML and JSON that a user may hand mlmtrain (a config, a run's or checkpoint's
mlmtrain.yaml, a model folder's JSON): plain values only, their shape checked before anything uses them.

YAML anchors and aliases (`&a`, `*a`) build a value cheaply that is huge once written out (nine levels of nine
aliases are 9**9 items): a document whose aliases expand beyond MAX_VALUES values is refused, as is one that holds
itself, a key given twice, or nesting deeper than the parsers can follow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from mlmtrain.errors import UserError

MAX_VALUES = 100_000  # values (items, keys, scalars) a YAML document may hold once its aliases are expanded


class RefusedYaml(UserError):
    """A YAML document refused for its shape (it holds itself, expands beyond MAX_VALUES values, or nests too deep
    to read): even a reader that takes a missing or malformed file as "unknown" stops at one, which was made to harm
    (`read_saved_yaml`)."""

    def __init__(self, message: str) -> None:
        super().__init__("config", message)


def _expanded_size(node: yaml.Node, parents: list[str], name: str, open_nodes: set[int], sizes: dict[int, int]) -> int:
    """How many values `node` holds with every alias written out; a UserError for a key given twice in one
    mapping (plain YAML keeps the last one silently, so a second `optim:` section would reset every key the first
    one set) and for a node that holds itself through an alias (`data: &a [*a]`).

    `open_nodes` are the ids of the nodes being walked (the path here); `sizes` those already walked, which an
    alias may name again: each is walked once, so aliases of aliases cannot multiply the work.
    """
    if id(node) in open_nodes:
        where = f"'{'.'.join(parents)}'" if parents else "the value"
        raise RefusedYaml(
            f"{name}: {where} contains itself (a recursive alias to the node at line {node.start_mark.line + 1}); "
            "write the value out instead of the alias",
        )
    if id(node) in sizes:
        return sizes[id(node)]
    if not isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        return 1
    open_nodes.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            size += _expanded_size(item, parents, name, open_nodes, sizes)
    else:
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else f"(a key at line {line})"
            if key in seen:
                where = ".".join([*parents, key])
                raise UserError("config", f"{name}: '{where}' appears twice (lines {seen[key]} and {line}); keep one")
            seen[key] = line
            size += _expanded_size(key_node, parents, name, open_nodes, sizes)
            size += _expanded_size(value_node, [*parents, key], name, open_nodes, sizes)
    open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size


def load_yaml_text(text: str, name: str) -> Any:
    """yaml.safe_load that refuses duplicate keys (UserError), and recursive aliases, aliases that expand beyond
    MAX_VALUES values and nesting too deep to follow (RefusedYaml), each naming `name` (where the text came from).
    Malformed YAML raises yaml.YAMLError, for the caller to say where."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, [], name, set(), {})
        if size > MAX_VALUES:
            raise RefusedYaml(
                f"{name} holds {size:,} values once its YAML aliases (*name) are written out, more than the "
                f"{MAX_VALUES:,} mlmtrain reads; write the values out instead of the aliases",
            )
        return loader.construct_document(node)
    except RecursionError:
        raise RefusedYaml(f"{name}: its YAML is nested too deep to read; write it flatter") from None
    finally:
        loader.dispose()


def read_saved_yaml(path: Union[str, Path]) -> Optional[dict[str, Any]]:
    """The mapping in a saved mlmtrain.yaml (a run's, a checkpoint's), or None when the file is missing, unreadable,
    malformed or not a mapping: what the caller then does not know. A RefusedYaml still stops the caller."""
    try:
        loaded = load_yaml_text(Path(path).read_text(encoding="utf-8"), str(path))
    except RefusedYaml:
        raise
    except (OSError, UnicodeDecodeError, yaml.YAMLError, UserError):
        return None
    return loaded if isinstance(loaded, dict) else None


def load_json_text(text: Union[str, bytes]) -> Any:
    """json.loads whose every failure is a ValueError: malformed text, and nesting deeper than the parser follows
    (a RecursionError from json itself), so a caller's `except ValueError` covers every file a user may hand it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def read_json(path: Union[str, Path]) -> Any:
    """The JSON value in the file at `path`: OSError when it cannot be read, ValueError when it is not JSON
    (UnicodeDecodeError is one)."""
    return load_json_text(Path(path).read_text(encoding="utf-8"))
