"""Checkpoints: atomic save, `latest`, pruning, and loading the training state for an exact resume.

A checkpoint is `RUN_DIR/checkpoints/step-N/`: a plain Hugging Face model folder (safetensors, config.json,
tokenizer files, mlmtrain.yaml) plus `training_state.pt` (optimizer, scaler, step, tokens, data position,
RNG states), tensors and plain values only, so that it loads with `weights_only` and can run no code. It is
written to a temporary folder, `COMPLETE` is written last, then the folder is renamed: a folder without `COMPLETE`
is never loaded, so a kill at any moment leaves the previous one usable (the next save clears what the killed one
left behind).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from safetensors import SafetensorError

from mlmtrain.config import TRAINING_KEYS, Config, records_setting, save_config
from mlmtrain.data.tokenizer import TOKENIZER_FILES, load_tokenizer, save_tokenizer_files, tokenizer_fingerprint
from mlmtrain.errors import UserError, first_line, loader_worker_died, shown
from mlmtrain.model.families import BERT, Family, family_of
from mlmtrain.model.pooler import add_pooler
from mlmtrain.readers import read_json, read_saved_yaml
from mlmtrain.runtime.durable import fsync_dir, fsync_tree, write_marker
from mlmtrain.runtime.files import remove_dead_leftovers, write_failure
from mlmtrain.runtime.model_folder import model_config
from mlmtrain.train.model_card import write_model_card
from mlmtrain.train.objectives import Objective, objective_class, objective_of, saved_objective

COMPLETE = "COMPLETE"
STATE_FILE = "training_state.pt"
_STATE_KEYS = ("train_state", "optimizer", "scaler", "rng")  # what a resume reads from the training state
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")  # torch's words for an object weights_only refuses
MANIFEST_FILE = "checkpoint.json"  # the step, its metrics, and the size and time of each file the writer put there
_STEP_DIR = re.compile(r"^step-(\d+)$")
# a killed save's leftover: named after the writer's pid (and, since it has one, a random suffix)
_LEFTOVER = re.compile(r"^\.(?:tmp-step-\d+|old-step-\d+|latest)-(\d+)(?:-[0-9a-f]+)?$")
# every name a save writes (model, tokenizer, run config, training state, model card), in the checkpoint folder or
# in a model folder inside it (an ELECTRA generator): what a leftover killed before its record may hold
CHECKPOINT_FILES = re.compile(
    r"(?:[^/]+/)?(?:COMPLETE|checkpoint\.json|training_state\.pt|mlmtrain\.yaml|README\.md|config\.json"
    r"|generation_config\.json|model(?:-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|"
    + TOKENIZER_FILES.pattern
    + ")"
)
_SUPERSEDED = re.compile(r"^superseded-at-step-\d+(?:-\d+)?$")  # an earlier run's later steps, moved aside


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint, oldest first; temporary and unfinished ones are ignored."""
    folder = checkpoints_dir(run_dir)
    found = []
    if folder.is_dir():
        for child in folder.iterdir():
            match = _STEP_DIR.match(child.name)
            if match and child.is_dir() and not child.is_symlink() and (child / COMPLETE).exists():
                found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    found = complete_checkpoints(run_dir)
    return found[-1][1] if found else None


def _remove_leftovers(root: Path) -> None:
    """Delete what saves killed midway left (temporary folders, links): never a checkpoint, only lost disk space, and
    only what holds nothing but mlmtrain's files (`_leftover_is_ours`); the run's lock says no other process writes
    these checkpoints now."""
    remove_dead_leftovers(root, _LEFTOVER, _leftover_is_ours)


def _leftover_is_ours(entry: Path) -> bool:
    """True for a killed save's leftover that holds nothing but what mlmtrain wrote: the link that was to become
    `latest`, a folder whose files match its record (a checkpoint moved aside, a save killed before the rename), or,
    with no record yet (killed before it wrote one), a folder of files that all bear the names a save writes."""
    if entry.is_symlink():
        return entry.name.startswith(".latest-") and bool(_STEP_DIR.match(os.readlink(entry)))
    if entry.name.startswith(".latest-") or not entry.is_dir():
        return False
    foreign = foreign_files(entry)
    if foreign is not None:
        return not foreign
    found = _entries_under(entry)
    return all(stat.S_ISREG(info.st_mode) and CHECKPOINT_FILES.fullmatch(name) for name, info in found.items())


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    cfg: Config,
    state: dict[str, Any],
    metrics: Optional[dict[str, Any]] = None,
    pooler: Optional[dict[str, torch.Tensor]] = None,
) -> Path:
    """Write checkpoint step-N atomically, point `latest` at it and return its folder; `pooler` is the one its
    model keeps (`kept_pooler`: a base's), else one is drawn from the run's seed.

    On a write error (disk full, permissions) the temporary folder is removed and a UserError says so;
    the checkpoints written before stay as they were.
    """
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(root)
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
        _write_record(staging, step, metrics)  # after the flush: a file system may stamp a file's time as it flushes
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
        if loader_worker_died(error):  # torch's report of a dead DataLoader worker, raised during the write
            raise
        previous = latest_checkpoint(run_dir)
        kept = f"; the last complete checkpoint {previous} is intact" if previous else ""
        raise UserError(
            "checkpoint",
            f"could not write {final}: {write_failure(error, root)}{kept}; "
            "free disk space or fix permissions, then resume with --resume",
        ) from error
    _point_latest(root, final)
    return final


def _write_record(staging: Path, step: int, metrics: Optional[dict[str, Any]]) -> None:
    """checkpoint.json: the step, its metrics, and every file the writer put in `staging` with its size and
    modification time (whatever is there, so a file added to the save is recorded too). Pruning, --overwrite and a
    resume's setting aside delete or move a checkpoint only while what it holds matches this record.

    Size and time, not a hash: hashing reads every byte again, a model's weights and optimizer state alike, at each
    save and each prune, while a time in nanoseconds changes whenever a file is written again under the same name."""
    written = {
        name: {"size": info.st_size, "mtime_ns": info.st_mtime_ns}
        for name, info in _entries_under(staging).items()
        if stat.S_ISREG(info.st_mode)
    }
    record = {"step": step, **(metrics or {}), "files": sorted([*written, MANIFEST_FILE, COMPLETE]), "written": written}
    write_marker(staging / MANIFEST_FILE, json.dumps(record, indent=1))


def _entries_under(folder: Path) -> dict[str, os.stat_result]:
    """Every file and link below `folder` (a link to a folder is listed, never entered), by relative POSIX path,
    with its own status (of the link, not its target). A folder that cannot be listed is listed as an entry."""
    found: dict[str, os.stat_result] = {}

    def unreadable(error: OSError) -> None:
        with contextlib.suppress(OSError):  # gone meanwhile: nothing there to keep
            found[Path(error.filename).relative_to(folder).as_posix()] = os.lstat(error.filename)

    for parent, folders, files in os.walk(folder, onerror=unreadable):  # os.walk does not follow links
        for name in [*files, *(name for name in folders if os.path.islink(os.path.join(parent, name)))]:
            path = Path(parent, name)
            found[path.relative_to(folder).as_posix()] = path.lstat()
    return found


def check_latest_link(run_dir: Path) -> None:
    """UserError if `checkpoints/latest` is something other than the link mlmtrain keeps there (a user's folder
    or file): saving would have to replace it. Checked before a run starts, and again at each save."""
    link = checkpoints_dir(run_dir) / "latest"
    if link.exists() and not link.is_symlink():
        raise UserError(
            "checkpoint",
            f"{link} is a {'folder' if link.is_dir() else 'file'}, not the link mlmtrain keeps there to the newest "
            "checkpoint; move or rename it, then run again",
        )


def _point_latest(root: Path, target: Path) -> None:
    """`checkpoints/latest` -> step-N, replaced atomically (a symlink, so any tool can load it as a folder)."""
    check_latest_link(root.parent)
    link = root / "latest"
    temporary = root / f".latest-{os.getpid()}-{uuid.uuid4().hex[:8]}"  # never the name of something already there
    os.symlink(target.name, temporary)
    os.replace(temporary, link)


def foreign_files(folder: Path) -> Optional[list[str]]:
    """What in a checkpoint folder its writer did not write, described ("notes.txt", "model.safetensors changed since
    saved", "data is a link"); None if it kept no record of sizes and times (a checkpoint of an older mlmtrain, which
    named its files only: a model saved over it under those names would pass, so nothing in it is provably ours)."""
    try:
        record = read_json(folder / MANIFEST_FILE)
        written = {name: (info["size"], info["mtime_ns"]) for name, info in record["written"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    foreign = []
    for name, info in sorted(_entries_under(folder).items()):
        if stat.S_ISLNK(info.st_mode):
            foreign.append(f"{name} is a link")  # mlmtrain writes no links in a checkpoint
        elif name in written and written[name] != (info.st_size, info.st_mtime_ns):
            foreign.append(f"{name} changed since saved")
        elif name not in written and not (name in (MANIFEST_FILE, COMPLETE) and stat.S_ISREG(info.st_mode)):
            foreign.append(name)  # the record and the marker are written after the record's list is made
    return foreign


def written_by_mlmtrain(entry: Path) -> bool:
    """True for what mlmtrain provably wrote in a checkpoints folder: the `latest` link, a killed save's leftover
    that holds only mlmtrain's files, and a checkpoint whose files all match its record (`foreign_files`). A
    checkpoint without that record (an older mlmtrain) and anything else there may be a user's."""
    if entry.name == "latest" and entry.is_symlink():
        return True
    if _LEFTOVER.match(entry.name):
        return _leftover_is_ours(entry)
    if _SUPERSEDED.match(entry.name) and entry.is_dir() and not entry.is_symlink():  # `set_aside_later`'s folder
        return all(_STEP_DIR.match(child.name) and written_by_mlmtrain(child) for child in entry.iterdir())
    return bool(_STEP_DIR.match(entry.name)) and entry.is_dir() and not entry.is_symlink() and not foreign_files(entry)


def check_replaceable_after(run_dir: Path, resume_from: Path) -> None:
    """UserError if resuming `resume_from` would move a later checkpoint of run_dir (`set_aside_later`) that holds
    files mlmtrain did not write: mlmtrain moves only what it provably wrote."""
    resumed = _STEP_DIR.match(Path(resume_from).name)
    after = int(resumed.group(1)) if resumed else -1
    for step, folder in complete_checkpoints(run_dir):
        if step > after and folder.resolve() != Path(resume_from).resolve() and not written_by_mlmtrain(folder):
            raise UserError(
                "checkpoint",
                f"resuming {resume_from} would move {folder} (a later step) aside, and "
                f"{why_spared(foreign_files(folder))}; move that folder out of {checkpoints_dir(run_dir)}, "
                "then run again",
            )


def set_aside_later(run_dir: Path, step: int, resumed: Path) -> Optional[tuple[Path, list[str]]]:
    """Move the complete checkpoints past `step` (an earlier run's, when this run resumed from an older checkpoint)
    whole into checkpoints/superseded-at-step-N/; returns that folder and the names moved, or None.

    Left in place they would pass for this run's newest: `--resume auto` would continue the earlier run, and
    keep_last, which keeps the highest steps, would delete each checkpoint of this run as soon as it is written.
    Moved, the earlier run's steps stay for the user to compare or delete."""
    later = [folder for saved, folder in complete_checkpoints(run_dir) if saved > step]
    if not later:
        return None
    root = checkpoints_dir(run_dir)
    aside, tries = root / f"superseded-at-step-{step}", 1
    while aside.exists() or aside.is_symlink():  # resumed from this step before: a second set, never merged
        tries += 1
        aside = root / f"superseded-at-step-{step}-{tries}"
    try:
        aside.mkdir()
        for folder in later:
            folder.rename(aside / folder.name)
        link, resumed = root / "latest", Path(resumed).resolve()  # resolved: `--resume RUN/checkpoints/latest`
        if resumed.parent == root.resolve():
            _point_latest(root, resumed)
        elif link.is_symlink() and not link.exists():  # it named a moved step, and nothing of this run is saved yet
            link.unlink()
        fsync_dir(aside)
        fsync_dir(root)
    except OSError as error:
        raise UserError(
            "checkpoint",
            f"could not move the checkpoints past step {step} into {aside}: {error.strerror or error}; "
            f"fix permissions on {root}, or move them out yourself, then run again",
        ) from error
    return aside, [folder.name for folder in later]


def prune_checkpoints(
    run_dir: Path, keep_last: int, keep: Optional[Path] = None
) -> list[tuple[Path, Optional[list[str]]]]:
    """Remove all but the newest `keep_last` complete checkpoints (0 keeps all); `keep` is always spared, and so
    is a checkpoint that holds files its writer did not list (a user's notes, a fine-tuned model) or that has no
    list: those are returned as (folder, `foreign_files`), for the caller to say why they stay."""
    spared: list[tuple[Path, Optional[list[str]]]] = []
    if keep_last <= 0:
        return spared
    found = complete_checkpoints(run_dir)
    for _, folder in found[:-keep_last]:
        if keep is not None and folder.resolve() == keep.resolve():
            continue
        foreign = foreign_files(folder)
        if foreign != []:
            spared.append((folder, foreign))
            continue
        remove_checkpoint(folder, ignore_errors=True)
    return spared


def remove_checkpoint(folder: Path, ignore_errors: bool = False) -> None:
    """Delete a checkpoint folder, its COMPLETE marker first: a kill amid the removal leaves no husk that loads.
    A folder of set-aside checkpoints (`set_aside_later`) goes checkpoint by checkpoint, the same way; a link is
    removed as a link, never followed."""
    if folder.is_symlink():
        folder.unlink()
        return
    if _SUPERSEDED.match(folder.name):
        for child in folder.iterdir():
            remove_checkpoint(child, ignore_errors)
    (folder / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=ignore_errors)


def why_spared(foreign: Optional[list[str]]) -> str:
    """Why pruning left a checkpoint, in words (from `foreign_files`)."""
    if foreign is None:
        return "it has no record of the sizes and times of the files mlmtrain wrote (an older mlmtrain saved it)"
    named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    return f"it holds files mlmtrain did not write ({named})"


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
        refused = _UNSAFE_GLOBAL.search(str(error))
        if refused:  # a Python object torch will not build from a file: never unpickled, so nothing in it ran
            raise UserError(
                "checkpoint",
                f"{path} holds a Python object ({refused.group(1)}), not only tensors and plain values (an older "
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
