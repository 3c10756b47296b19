"""The pooler a saved model folder lacks: `BertForMaskedLM` has none, so `AutoModel` and
`AutoModelForSequenceClassification` would initialise `pooler.dense` at random on every load (two loads of one
checkpoint would differ). `add_pooler` writes it into the folder's weights: the base's pooler for a run that
continues a model with one (`model.init_from`, read once by `read_pooler`), else one drawn from the run's seed.

A model that already has a pooler (one an objective trains, a fine-tuned classifier) is left as it is, and so is a
model type whose base model has none (ELECTRA).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mlmtrain.model.context import quiet_transformers
from mlmtrain.readers import read_json
from mlmtrain.runtime.durable import replace_text
from mlmtrain.runtime.model_folder import (
    WEIGHTS,
    WEIGHTS_INDEX,
    ModelFolder,
    from_pretrained,
    transformers_config,
    weight_map,
)

POOLER_SHARD = "model-pooler.safetensors"  # where a sharded folder's pooler goes (listed in its index)
_FLOAT_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def _base_pooler(config: Any) -> Optional[tuple[str, dict[str, torch.Size]]]:
    """(base_model_prefix, {name: shape} of its pooler's tensors) of the base model `AutoModel` builds for `config`,
    or None when that model has no pooler. Built on the meta device: no memory, no random draws."""
    from transformers import AutoModel  # transformers: heavy, loaded on use

    with quiet_transformers(), torch.device("meta"):
        base = AutoModel.from_config(config, trust_remote_code=False)
    pooler = getattr(base, "pooler", None)
    if not isinstance(pooler, torch.nn.Module):
        return None
    return base.base_model_prefix, {f"pooler.{name}": value.shape for name, value in pooler.state_dict().items()}


def _saved_names(folder: Path) -> list[str]:
    """The tensor names in a folder's safetensors weights (one file, or the shards its index lists)."""
    if (folder / WEIGHTS_INDEX).is_file():
        return list(weight_map(folder))
    with safe_open(str(folder / WEIGHTS), "pt") as weights:
        return list(weights.keys())


def _saved_dtype(folder: Path, names: list[str]) -> torch.dtype:
    """The dtype of the saved floating-point weights: the pooler is stored like the rest of them."""
    shards = weight_map(folder)
    for name in names:
        with safe_open(str(folder / shards.get(name, WEIGHTS)), "pt") as weights:
            dtype = weights.get_slice(name).get_dtype()
        if dtype in _FLOAT_DTYPES:
            return _FLOAT_DTYPES[dtype]
    return torch.float32


def pooler_tensors(shapes: dict[str, torch.Size], std: float, seed: int, dtype: torch.dtype) -> dict[str, Any]:
    """Fresh pooler weights as Hugging Face initialises a Linear (normal(0, std) weight, zero bias), from a generator
    of their own seeded with `seed`: the same for every save of a run, and no draw from the training's RNG."""
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(shapes.items()):
        if len(shape) > 1:
            tensors[name] = torch.empty(shape).normal_(0.0, std, generator=generator).to(dtype)
        else:
            tensors[name] = torch.zeros(shape, dtype=dtype)
    return tensors


def add_pooler(folder: Path, seed: int, kept: Optional[dict[str, torch.Tensor]] = None) -> bool:
    """Write pooler weights into the Hugging Face model folder `folder` when its model type has a pooler and its
    weights hold none: `kept` (`read_pooler` of the base a run continues) where it has the shapes wanted, else drawn
    from `seed`; True when it wrote them."""
    from transformers import AutoConfig  # transformers: heavy, loaded on use

    folder = Path(folder)
    if not (folder / WEIGHTS).is_file() and not (folder / WEIGHTS_INDEX).is_file():
        return False  # no safetensors weights to complete (the save wrote none)
    config = from_pretrained(AutoConfig, folder)
    found = _base_pooler(config)
    if found is None:
        return False
    prefix, shapes = found
    names = _saved_names(folder)
    if any(".pooler." in f".{name}" for name in names):
        return False
    # the saved model's keys name the base model by its prefix (bert.encoder...) unless it is the base model itself
    lead = f"{prefix}." if any(name.startswith(f"{prefix}.") for name in names) else ""
    dtype = _saved_dtype(folder, names)
    if kept is None or {name: value.shape for name, value in kept.items()} != shapes:
        kept = pooler_tensors(shapes, getattr(config, "initializer_range", 0.02), seed, dtype)
    _write_tensors(folder, {lead + name: value.to(dtype) for name, value in kept.items()})
    return True


def read_pooler(source: ModelFolder) -> Optional[dict[str, torch.Tensor]]:
    """The pooler tensors of the model folder `source` (read once) by their names in its base model
    (pooler.dense.weight, ...), None when it has none (a model type without one, other weights)."""
    found = _base_pooler(transformers_config(source.config))
    return _source_pooler(source.folder, *found) if found is not None else None


def _source_pooler(source: Path, prefix: str, shapes: dict[str, torch.Size]) -> Optional[dict[str, torch.Tensor]]:
    """The pooler tensors of the model folder `source` (its safetensors weights, under either naming), when it has
    all of them in the shapes wanted; None otherwise (no pooler, other weights, other shapes)."""
    source = Path(source)
    if not (source / WEIGHTS).is_file() and not (source / WEIGHTS_INDEX).is_file():
        return None
    names, shards = set(_saved_names(source)), weight_map(source)
    found = {}
    for name, shape in shapes.items():
        stored = next((n for n in (f"{prefix}.{name}", name) if n in names), None)
        if stored is None:
            return None
        with safe_open(str(source / shards.get(stored, WEIGHTS)), "pt") as weights:
            tensor = weights.get_tensor(stored)
        if tensor.shape != shape:
            return None
        found[name] = tensor
    return found


def _write_tensors(folder: Path, added: dict[str, torch.Tensor]) -> None:
    """Add tensors to a folder's safetensors weights: into model.safetensors, or a shard of their own in the index."""
    index_file = folder / WEIGHTS_INDEX
    if index_file.is_file():
        index = read_json(index_file)
        _replace_file(folder / POOLER_SHARD, added, {"format": "pt"})
        index["weight_map"].update(dict.fromkeys(added, POOLER_SHARD))
        replace_text(index_file, json.dumps(index, indent=2, sort_keys=True) + "\n")
        return
    path = folder / WEIGHTS
    with safe_open(str(path), "pt") as weights:
        metadata = weights.metadata() or {"format": "pt"}
    _replace_file(path, {**load_file(str(path)), **added}, metadata)


def _replace_file(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file(tensors, str(temporary), metadata=metadata)
    if path.exists():
        shutil.copymode(path, temporary)  # the permissions save_pretrained gave the file
    os.replace(temporary, path)
