"""`average`: the uniform mean of the weights of several checkpoints (a run's last ones, `--last K RUN`) written as a
new Hugging Face model folder with the newest one's config and tokenizer. The weights are read from safetensors only
(one file, or a save_pretrained folder's shards); the checkpoints must be models of one shape and family with one
tokenizer. The output folder is built beside its place and swapped in: it must not exist, be empty, or be a folder
`average` wrote (its `average.json` and nothing but the files it writes)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mlmtrain.data.tokenizer import TOKENIZER_FILES, load_tokenizer, tokenizer_fingerprint
from mlmtrain.errors import UserError, first_line
from mlmtrain.runtime.files import check_apart, check_replaceable, replace_folder
from mlmtrain.runtime.model_folder import WEIGHTS, WEIGHTS_INDEX, model_config, weight_files
from mlmtrain.tools.arguments import check_count
from mlmtrain.train.ownership import COMPLETE, checkpoints_dir, complete_checkpoints

TOPIC = "average"
MARKER = "average.json"  # which checkpoints were averaged; also the mark of a folder `average` wrote
_COPIED = ("config.json", "generation_config.json", "mlmtrain.yaml")  # from the newest checkpoint, beside its tokenizer
OURS = re.compile("|".join([re.escape(MARKER), re.escape(WEIGHTS), *map(re.escape, _COPIED), TOKENIZER_FILES.pattern]))
_CHECKPOINT_MARKS = ("training_state.pt", "checkpoint.json")  # what tells a checkpoint from a plain model folder
_STEP = re.compile(r"step-(\d+)")


@dataclass
class Averaged:
    """What `average_checkpoints` wrote: the folder and the checkpoints whose mean it holds, oldest first."""

    folder: Path
    checkpoints: list[Path]


def average_checkpoints(sources: list[Path], out: Path, last: Optional[int] = None) -> Averaged:
    """Write the mean of the checkpoints `sources` (with `last`: the `last` newest complete checkpoints of the one run
    folder `sources` names) into `out`; UserError, with nothing written, for checkpoints that cannot be averaged or an
    `out` that is not new or not `average`'s own, or that is, holds or lies inside a checkpoint averaged."""
    folders = _chosen(sources, last)
    check_apart(out, "--out", [("checkpoint", folder) for folder in folders], "set --out to a new folder outside them")
    shapes = {folder: _tensor_shapes(folder) for folder in folders}
    first, newest = folders[0], folders[-1]
    family = _family(first)
    fingerprint = tokenizer_fingerprint(load_tokenizer(first))
    for folder in folders[1:]:
        if _family(folder) != family:
            raise UserError(
                TOPIC, f"{folder} is a {_family(folder)[0]} model and {first} a {family[0]}; average one run's models"
            )
        _same_shapes(first, shapes[first], folder, shapes[folder])
        if tokenizer_fingerprint(load_tokenizer(folder)) != fingerprint:
            raise UserError(TOPIC, f"{folder} has another tokenizer than {first}; average checkpoints of one run")
    check_replaceable(out, MARKER, OURS, TOPIC, "--out")  # before the weights are read: a refusal costs nothing

    def write(staging: Path) -> None:

        save_file(_mean(folders), str(staging / WEIGHTS), metadata={"format": "pt"})
        for name in _COPIED:
            if (newest / name).is_file():
                shutil.copyfile(newest / name, staging / name)
        for entry in newest.iterdir():
            if TOKENIZER_FILES.fullmatch(entry.name) and entry.is_file():
                shutil.copyfile(entry, staging / entry.name)
        record = {"averaged": [_published_name(folder) for folder in folders], "weighting": "uniform"}
        (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    replace_folder(out, write, marker=MARKER, ours=OURS, topic=TOPIC, key="--out", what="the averaged model")
    return Averaged(Path(out), folders)


def _chosen(sources: list[Path], last: Optional[int]) -> list[Path]:
    """The checkpoint folders to average, oldest first (by step where all are step-N folders), each checked."""
    if last is not None:
        check_count(last, "--last")
        if len(sources) != 1:
            raise UserError("argument", f"--last K takes one run folder, not {len(sources)} folders; pass RUN_DIR")
        run_dir = Path(sources[0])
        if not checkpoints_dir(run_dir).is_dir():
            raise UserError("argument", f"--last: {run_dir} is not a run folder (it has no checkpoints/); pass one")
        found = [folder for _, folder in complete_checkpoints(run_dir)]
        if len(found) < max(last, 2):
            raise UserError(
                TOPIC,
                f"{run_dir} has {len(found)} complete checkpoint(s), and --last {last} asks for "
                f"{last}{'' if last >= 2 else ' (averaging needs two or more)'}; pass --last {len(found)} or fewer",
            )
        sources = found[-last:]
    folders = [_checked(Path(source)) for source in sources]
    if len(folders) < 2:
        raise UserError("argument", "averaging needs two or more checkpoints; name them, or --last K RUN_DIR")
    seen: dict[Path, Path] = {}
    for folder in folders:
        if folder.resolve() in seen:
            raise UserError("argument", f"{folder} and {seen[folder.resolve()]} are one checkpoint; name each once")
        seen[folder.resolve()] = folder
    steps = [_STEP.fullmatch(folder.resolve().name) for folder in folders]
    if all(steps):
        folders = [folder for _, folder in sorted(zip(steps, folders, strict=True), key=lambda pair: int(pair[0][1]))]
    return folders


def _checked(folder: Path) -> Path:
    """`folder`, when it is a finished model folder with its weights in safetensors (one file, or the shards of a
    save_pretrained index) and a tokenizer."""
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise UserError(TOPIC, f"{folder} {what}; pass checkpoint folders such as RUN_DIR/checkpoints/step-N")
    if checkpoints_dir(folder).is_dir() and not (folder / "config.json").exists():
        raise UserError(TOPIC, f"{folder} is a run folder; pass its checkpoints, or --last K {folder}")
    if any((folder / mark).exists() for mark in _CHECKPOINT_MARKS) and not (folder / COMPLETE).exists():
        raise UserError(TOPIC, f"{folder} is not a complete checkpoint (no {COMPLETE} marker); average complete ones")
    if not weight_files(folder):
        raise UserError(
            TOPIC,
            f"{folder} has no {WEIGHTS} (nor a sharded {WEIGHTS_INDEX}); average folders that mlmtrain or "
            "save_pretrained wrote",
        )
    return folder


def _family(folder: Path) -> tuple[str, tuple[str, ...]]:
    """(model_type, architectures) of a model folder's config.json."""
    config = model_config(folder, topic=TOPIC, fix="average folders that mlmtrain or save_pretrained wrote")
    return str(config["model_type"]), tuple(config.get("architectures") or ())


def _tensor_shapes(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype, shape)} of a folder's weights, read from the safetensors headers alone."""
    shapes = {}
    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt") as weights:
                shapes.update({name: (weights.get_slice(name).get_dtype(), tuple(weights.get_slice(name).get_shape()))
                               for name in weights.keys()})  # fmt: skip
        except Exception as error:  # a truncated or foreign file: safetensors raises its own errors and OSErrors
            raise UserError(TOPIC, f"{path} is damaged ({first_line(error)[:160]}); leave it out") from None
    return shapes


def _same_shapes(first: Path, expected: dict, folder: Path, found: dict) -> None:
    """UserError naming the first tensor in which two checkpoints differ."""
    for name in sorted(set(expected) | set(found)):
        if name not in found or name not in expected:
            where, lacking = (folder, first) if name not in found else (first, folder)
            raise UserError(
                TOPIC, f"{lacking} has {name} and {where} has not: models of another shape; average one run's models"
            )
        if expected[name] != found[name]:
            raise UserError(
                TOPIC,
                f"{name} is {found[name][0]} {list(found[name][1])} in {folder} and {expected[name][0]} "
                f"{list(expected[name][1])} in {first}: models of another shape; average one run's models",
            )


def _mean(folders: list[Path]) -> dict[str, torch.Tensor]:
    """The mean of every floating-point tensor over the folders (summed in float64, in the folders' order, then cast
    back to its dtype); a tensor of integers must be equal in all and is kept."""

    sums: dict[str, torch.Tensor] = {}
    kept: dict[str, torch.Tensor] = {}
    for folder in folders:
        tensors = {name: tensor for path in weight_files(folder) for name, tensor in load_file(str(path)).items()}
        for name, tensor in tensors.items():
            if tensor.is_floating_point():
                sums[name] = sums[name] + tensor.double() if name in sums else tensor.double()
                kept.setdefault(name, tensor)
            elif name not in kept:
                kept[name] = tensor
            elif not torch.equal(kept[name], tensor):
                raise UserError(TOPIC, f"{name}, a tensor of integers, differs between {folders[0]} and {folder}")
    return {
        name: (sums[name] / len(folders)).to(tensor.dtype) if name in sums else tensor for name, tensor in kept.items()
    }


def _published_name(folder: Path) -> str:
    """A checkpoint by its run's folder name and its own (`run/step-40`), never a path of this machine."""
    resolved = folder.resolve()
    run = resolved.parent.parent.name if resolved.parent.name == "checkpoints" else resolved.parent.name
    return f"{run}/{resolved.name}"
