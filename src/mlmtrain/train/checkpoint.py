"""The checkpoint format: atomic save, the checkpoint --resume names, and loading the training state (RNG states
included) for an exact resume. Which files are mlmtrain's, pruning and the `latest` link are `ownership.py`'s; what
a resume verifies is `resume_checks.py`'s.

A checkpoint is `RUN_DIR/checkpoints/step-N/`: a plain Hugging Face model folder (safetensors, config.json,
tokenizer files, mlmtrain.yaml) plus `training_state.pt` (optimizer, scaler, step, tokens, data position,
RNG states), tensors and plain values only, so that it loads with `weights_only` and can run no code. It is
written to a temporary folder, `COMPLETE` is written last, then the folder is renamed: a folder without `COMPLETE`
is never loaded, so a kill at any moment leaves the previous one usable (the next save clears what the killed one
left behind).
"""

from __future__ import annotations

import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from safetensors import SafetensorError

from mlmtrain.config import Config, records_setting, save_config
from mlmtrain.data.tokenizer import folder_fingerprint, save_tokenizer_files
from mlmtrain.errors import UserError, first_line, refused_pickle
from mlmtrain.model.families import BERT, Family, family_of
from mlmtrain.model.pooler import add_pooler
from mlmtrain.readers import read_json
from mlmtrain.runtime.durable import fsync_dir, fsync_tree, write_marker
from mlmtrain.runtime.files import write_failure
from mlmtrain.runtime.model_folder import ModelFolder, read_model_folder
from mlmtrain.train.model_card import write_model_card
from mlmtrain.train.objectives import saved_objective
from mlmtrain.train.ownership import (
    COMPLETE,
    MANIFEST_FILE,
    checkpoints_dir,
    foreign_files,
    latest_checkpoint,
    point_latest,
    remove_leftovers,
    why_spared,
    write_record,
    written_by_mlmtrain,
)

STATE_FILE = "training_state.pt"
_STATE_KEYS = ("train_state", "optimizer", "scaler", "rng")  # what a resume reads from the training state


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    cfg: Config,
    state: dict[str, Any],
    metrics: Optional[dict[str, Any]] = None,
    pooler: Optional[dict[str, torch.Tensor]] = None,
    facts: Optional[dict[str, Any]] = None,
) -> Path:
    """Write checkpoint step-N atomically, point `latest` at it and return its folder; `pooler` is the one its
    model keeps (`kept_pooler`: a base's), else one is drawn from the run's seed; `facts`, what it records of how
    it was trained beyond its config (`Objective.facts`: a distillation's teacher), go into its checkpoint.json.

    On a write error (disk full, permissions) the temporary folder is removed and a UserError says so;
    the checkpoints written before stay as they were.
    """
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    remove_leftovers(root)
    final = root / f"step-{step}"
    if final.exists() and not written_by_mlmtrain(final):  # checked at the start too; a user's files stay
        raise UserError(
            "checkpoint",
            f"{final} would be replaced, and {why_spared(foreign_files(final))}; move that folder away, "
            "then resume with --resume",
        )
    # named after this process and a random suffix: never the name of something already there
    writer = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging = root / f".tmp-step-{step}-{writer}"
    try:
        staging.mkdir()
        model.save_pretrained(str(staging), safe_serialization=True)
        # every model folder gets the tokenizer, a subfolder too (an ELECTRA generator), so each loads alone
        model_folders = [*(c.parent for c in staging.glob("*/config.json")), staging]
        for model_folder in model_folders:
            save_tokenizer_files(tokenizer, model_folder)
            add_pooler(model_folder, cfg.train.seed, pooler)  # AutoModel then loads no random pooler
        save_config(cfg, staging, published=True)  # a checkpoint is shared: files by name, no paths
        write_model_card(staging, cfg, step, metrics or {}, state, run_dir)
        torch.save(state, staging / STATE_FILE)
        for model_folder in model_folders:  # a subfolder first, then the folder that holds its entry
            fsync_tree(model_folder)
        write_record(
            staging, step, {**(metrics or {}), **(facts or {})}
        )  # after the flush: a file system may stamp a file's time as it flushes
        write_marker(staging / COMPLETE)
        if final.exists():  # saved before (a resumed run ending at the step it resumed from): swap, never half-delete
            replaced = root / f".old-step-{step}-{writer}"
            final.rename(replaced)
            staging.rename(final)
            shutil.rmtree(replaced, ignore_errors=True)
        else:
            staging.rename(final)
        fsync_dir(root)  # the rename itself must reach the disk, or a power loss could forget the checkpoint
    except (OSError, RuntimeError, SafetensorError) as error:  # torch.save and safetensors wrap I/O errors
        shutil.rmtree(staging, ignore_errors=True)
        previous = latest_checkpoint(run_dir)
        kept = f"; the last complete checkpoint {previous} is intact" if previous else ""
        raise UserError(
            "checkpoint",
            f"could not write {final}: {write_failure(error, root)}{kept}; "
            "free disk space or fix permissions, then resume with --resume",
        ) from error
    point_latest(root, final)
    return final


def resolve_resume(run_dir: Path, resume: str) -> Optional[Path]:
    """The checkpoint folder named by --resume ('auto': the newest complete one in run_dir, or None)."""
    if resume == "auto":
        return latest_checkpoint(run_dir)
    if not resume.strip():
        raise UserError("argument", f"--resume {resume!r} names nothing; pass --resume auto or a checkpoint folder")
    folder = Path(resume)
    if not folder.is_dir():
        raise UserError("checkpoint", f"--resume {resume}: no such folder; pass a checkpoint folder or 'auto'")
    if not (folder / COMPLETE).exists() and checkpoints_dir(folder).is_dir():
        newest = latest_checkpoint(folder)
        raise UserError(
            "checkpoint",
            f"--resume {resume} is a run folder, not a checkpoint; pass --resume auto to continue from its newest "
            f"checkpoint" + (f" ({newest})" if newest else "") + " (with train.run_dir set to it)",
        )
    return folder.resolve()


@dataclass(frozen=True)
class SavedCheckpoint:
    """A complete checkpoint a run starts from (--resume, --branch-from), read once: its model folder (config.json,
    tokenizer_config.json, mlmtrain.yaml), the family of its model (BERT's for ELECTRA's, which shares its keys),
    the objective that trained it, its tokenizer's fingerprint and its record (checkpoint.json)."""

    saved: ModelFolder
    family: Family
    objective: str
    tokenizer_fingerprint: str
    record: dict[str, Any]  # its checkpoint.json: the step, its figures, the facts of its training, its files

    @property
    def folder(self) -> Path:
        return self.saved.folder

    def stands_in_for(self, key: str, name: Optional[str]) -> bool:
        """Whether the run that wrote it read the model config key `key` names as `name` (by its name: a checkpoint
        holds no paths): it then stands in for that model, which may have moved since."""
        return bool(name) and records_setting(key, self.saved.setting(*key.split(".")), name)


def read_checkpoint(folder: Path) -> SavedCheckpoint:
    """The complete checkpoint in `folder`, read once; UserError for an unfinished or damaged one."""
    check_complete(folder)
    saved = read_model_folder(folder, topic="checkpoint", fix="resume from another one")
    family = family_of(saved.config.get("model_type")) or BERT
    return SavedCheckpoint(saved, family, saved_objective(saved), folder_fingerprint(folder), _record(folder))


def _record(folder: Path) -> dict[str, Any]:
    """A checkpoint's checkpoint.json ({}: an older mlmtrain's checkpoint without one, or one not readable)."""
    try:
        record = read_json(Path(folder) / MANIFEST_FILE)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def recorded_step(folder: Path) -> Optional[int]:
    """The step a checkpoint's checkpoint.json records (None: no folder, or no readable record)."""
    step = _record(folder).get("step")
    return step if isinstance(step, int) else None


def check_complete(folder: Path) -> None:
    """UserError unless `folder` is a finished checkpoint with the files a resume reads."""
    folder = Path(folder)
    if not (folder / COMPLETE).exists():
        raise UserError(
            "checkpoint",
            f"{folder} is not a complete checkpoint (no {COMPLETE} marker); "
            "pass a folder RUN_DIR/checkpoints/step-N, or --resume auto for the newest complete one",
        )
    for needed in (STATE_FILE, "config.json", "model.safetensors"):
        if not (folder / needed).is_file():
            raise UserError("checkpoint", f"{folder} has no {needed}; it cannot be resumed from")


def load_training_state(folder: Path) -> dict[str, Any]:
    """The training state of a checkpoint, read as tensors and plain values only (`weights_only`), so a file
    someone handed over cannot run code; UserError for an unfinished, truncated, foreign or unsafe one."""
    folder = Path(folder)
    check_complete(folder)
    path = folder / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a truncated or garbled file raises many kinds of errors
        refused = refused_pickle(error)
        if refused:  # a Python object torch will not build from a file: never unpickled, so nothing in it ran
            raise UserError(
                "checkpoint",
                f"{path} holds a Python object ({refused}), not only tensors and plain values (an older "
                "mlmtrain's format, or not mlmtrain's file); it is never unpickled, since that could run code; "
                "resume from a checkpoint this mlmtrain wrote",
            ) from None
        raise UserError(
            "checkpoint", f"{path} is damaged ({type(error).__name__}); resume from an older checkpoint"
        ) from None
    missing = [key for key in _STATE_KEYS if not isinstance(state, dict) or key not in state]
    if missing or not isinstance(state["train_state"], dict):  # a file that loads but is not a training state
        what = f"has no {', '.join(missing)}" if missing else "has a damaged train_state"
        raise UserError("checkpoint", f"{path} {what}; resume from an older checkpoint")
    try:
        if not isinstance(state["rng"], list):
            raise TypeError(f"a {type(state['rng']).__name__}, not a list of one per process")
        for saved in state["rng"]:
            check_rng_state(saved)
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError) as error:
        raise UserError(
            "checkpoint", f"{path} has damaged RNG states ({first_line(error)}); resume from an older checkpoint"
        ) from None
    return state


def rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors and plain values, so that the training state loads with weights_only."""
    algorithm, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "algorithm": algorithm,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state(saved: dict[str, Any]) -> tuple[Any, ...]:
    """`rng_state`'s numpy part as `np.random.set_state` takes it."""
    keys = saved["keys"].numpy().astype(np.uint32)
    return saved["algorithm"], keys, saved["position"], saved["has_gauss"], saved["cached_gaussian"]


def check_rng_state(saved: Any) -> None:
    """TypeError, ValueError, KeyError or RuntimeError unless `saved` is one process's `rng_state` that
    `set_rng_state` can apply; tried on generators of its own, so no global state changes."""
    if not isinstance(saved, dict):
        raise TypeError(f"a {type(saved).__name__}, not a mapping per process")
    tensors = [saved["torch"], *saved.get("cuda", [])]
    if not all(isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8 for tensor in tensors):
        raise TypeError("a torch RNG state that is not a byte tensor")
    torch.Generator().set_state(saved["torch"])
    random.Random().setstate(saved["python"])
    np.random.RandomState().set_state(_numpy_state(saved["numpy"]))


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore this process's RNG states from `rng_state`'s form."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(_numpy_state(state["numpy"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
