"""Checkpoints: atomic save, `latest`, pruning, and loading the training state for an exact resume.

A checkpoint is `RUN_DIR/checkpoints/step-N/`: a plain Hugging Face model folder (safetensors, config.json,
tokenizer files, mlmtrain.yaml) plus `training_state.pt` (optimizer, scaler, step, tokens, data position,
RNG states), tensors and plain values only, so that it loads with `weights_only` and can run no code. It is
written to a temporary folder, `COMPLETE` is written last, then the folder is renamed: a folder without `COMPLETE`
is never loaded, so a kill at any moment leaves the previous one usable (the next save clears what the killed one
left behind).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from safetensors import SafetensorError

from mlmtrain.config import Config, save_config
from mlmtrain.durable import fsync_dir, fsync_tree, write_marker
from mlmtrain.errors import UserError, loader_worker_died
from mlmtrain.files import process_alive, write_failure
from mlmtrain.tokenizer import load_tokenizer, tokenizer_fingerprint

COMPLETE = "COMPLETE"
STATE_FILE = "training_state.pt"
_STATE_KEYS = ("train_state", "optimizer", "scaler", "rng")  # what a resume reads from the training state
_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")  # torch's words for an object weights_only refuses
MANIFEST_FILE = "checkpoint.json"  # the step, its metrics and the files the writer put in the folder
_STEP_DIR = re.compile(r"^step-(\d+)$")
_LEFTOVER = re.compile(r"^\.(?:tmp-step-\d+|old-step-\d+|latest)-(\d+)$")  # ends in the writer's pid
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
    """Delete what saves killed midway left (temporary folders, links): never a checkpoint, only lost disk space.

    One named after this very process is a leftover too: a save starts with none of its own, so an earlier process
    with the same pid left it (a container restarted after a kill runs mlmtrain under the same pid, often 1), and
    the run's lock says no other process writes these checkpoints now."""
    for child in root.iterdir():
        match = _LEFTOVER.match(child.name)
        writer = int(match.group(1)) if match else None
        if writer is not None and (writer == os.getpid() or not process_alive(writer)):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    cfg: Config,
    state: dict[str, Any],
    metrics: Optional[dict[str, Any]] = None,
) -> Path:
    """Write checkpoint step-N atomically, point `latest` at it and return its folder.

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
    staging = root / f".tmp-step-{step}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        model.save_pretrained(str(staging), safe_serialization=True)
        # every model folder gets the tokenizer, a subfolder too (an ELECTRA generator), so each loads alone
        model_folders = [*(c.parent for c in staging.glob("*/config.json")), staging]
        for model_folder in model_folders:
            tokenizer.save_pretrained(str(model_folder))
        save_config(cfg, staging)
        torch.save(state, staging / STATE_FILE)
        # the list of what this writer put in the folder: pruning deletes a checkpoint only if it holds nothing else
        written = sorted([*_files_under(staging), MANIFEST_FILE, COMPLETE])
        (staging / MANIFEST_FILE).write_text(json.dumps({"step": step, **(metrics or {}), "files": written}, indent=1))
        for model_folder in model_folders:  # a subfolder first, then the folder that holds its entry
            fsync_tree(model_folder)
        write_marker(staging / COMPLETE)
        if final.exists():  # saved before (a resumed run ending at the step it resumed from): swap, never half-delete
            replaced = root / f".old-step-{step}-{os.getpid()}"
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


def _files_under(folder: Path) -> list[str]:
    """Every file below `folder`, as relative POSIX paths."""
    return [path.relative_to(folder).as_posix() for path in folder.rglob("*") if not path.is_dir()]


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
    temporary = root / f".latest-{os.getpid()}"
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    os.symlink(target.name, temporary)
    os.replace(temporary, link)


def foreign_files(folder: Path) -> Optional[list[str]]:
    """The files in a checkpoint folder that its writer did not list; None if it kept no list (a checkpoint of an
    older mlmtrain, which cannot prove what it wrote)."""
    try:
        written = set(json.loads((folder / MANIFEST_FILE).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sorted(set(_files_under(folder)) - written)


def written_by_mlmtrain(entry: Path) -> bool:
    """True for what mlmtrain provably wrote in a checkpoints folder: the `latest` link, a killed save's leftover
    and a checkpoint holding only the files its list names. A checkpoint without that list (an older mlmtrain)
    and anything else there may be a user's."""
    if entry.name == "latest" and entry.is_symlink():
        return True
    if _LEFTOVER.match(entry.name):
        return True
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
    A folder of set-aside checkpoints (`set_aside_later`) goes checkpoint by checkpoint, the same way."""
    if _SUPERSEDED.match(folder.name):
        for child in folder.iterdir():
            remove_checkpoint(child, ignore_errors)
    (folder / COMPLETE).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=ignore_errors)


def why_spared(foreign: Optional[list[str]]) -> str:
    """Why pruning left a checkpoint, in words (from `foreign_files`)."""
    if foreign is None:
        return "it has no list of the files mlmtrain wrote (an older mlmtrain saved it)"
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
            "checkpoint", f"{path} has damaged RNG states ({error}); resume from an older checkpoint"
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


def _config_dropout(cfg: Config) -> dict[str, float]:
    """The dropout keys of a model's config.json, as the config sets them."""
    return {
        "hidden_dropout_prob": cfg.model.hidden_dropout_prob,
        "attention_probs_dropout_prob": cfg.model.attention_dropout_prob,
    }


def _read_model_config(folder: Path) -> dict[str, Any]:
    try:
        saved = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict):  # valid JSON that is not a model's config (a list, a number) is damaged too
        raise UserError("checkpoint", f"{folder}/config.json is missing or damaged; resume from another one") from None
    return saved


def _planned_models(cfg: Config, vocab: Any) -> dict[str, tuple[Any, dict[str, str]]]:
    """The model configs the run would build, by subfolder of a checkpoint, each with the settings that decide its
    keys (to name them in an error)."""
    decided = {
        "hidden_size": "model.hidden_size",
        "num_hidden_layers": "model.num_layers",
        "num_attention_heads": "model.num_heads",
        "intermediate_size": "model.intermediate_size",
        "embedding_size": "model.hidden_size",
        "max_position_embeddings": "model.max_position_embeddings",
        "vocab_size": f"the tokenizer's {vocab.vocab_size} tokens rounded up to model.pad_vocab_multiple",
    }
    if cfg.train.objective != "electra":
        from mlmtrain.model import bert_config

        return {"": (bert_config(cfg.model, vocab.vocab_size, vocab.pad_id), decided)}
    from mlmtrain.electra import GENERATOR_DIR, electra_configs

    discriminator, generator = electra_configs(cfg, vocab)
    layers = "electra.generator_layers" + ("" if cfg.electra.generator_layers else ", null: model.num_layers")
    by_generator = {
        key: "electra.generator_size" for key in ("hidden_size", "num_attention_heads", "intermediate_size")
    }
    return {
        "": (discriminator, decided),
        GENERATOR_DIR: (generator, {**decided, **by_generator, "num_hidden_layers": layers}),
    }


def _saved_model_configs(folder: Path, cfg: Config) -> dict[str, Any]:
    """The config.json of each model in the checkpoint, by subfolder, as transformers configs of the objective's
    kind (keys a file lacks get this transformers' defaults)."""
    from transformers import BertConfig, ElectraConfig

    from mlmtrain.electra import GENERATOR_DIR

    electra = cfg.train.objective == "electra"
    found = {}
    for subfolder in ("", GENERATOR_DIR) if electra else ("",):
        where = Path(folder) / subfolder if subfolder else Path(folder)
        saved = _read_model_config(where)
        try:
            found[subfolder] = (ElectraConfig if electra else BertConfig).from_dict(saved)
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
    from mlmtrain.masking import VocabInfo

    saved = _read_model_config(folder)
    objectives = {"bert": "mlm", "electra": "electra"}  # the model type each objective saves
    saved_objective = objectives.get(saved.get("model_type"), saved.get("model_type"))
    if saved_objective != cfg.train.objective:
        raise UserError(
            "checkpoint",
            f"{folder} was trained with train.objective {saved_objective}, the config says {cfg.train.objective}; "
            f"resume with train.objective: {saved_objective}, or start afresh with --overwrite",
        )
    found = _saved_model_configs(folder, cfg)  # before the tokenizer, whose loading reads config.json too
    for subfolder, (planned, decided) in _planned_models(cfg, VocabInfo.from_tokenizer(load_tokenizer(folder))).items():
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
    wanted = _config_dropout(cfg)
    return [f"{key}: {saved.get(key)} -> {value}" for key, value in wanted.items() if saved.get(key) != value]


def other_tokenizer_message(folder: Path, cfg: Config) -> str:
    """Why a resume with this tokenizer cannot work, and the way back: the checkpoint's own tokenizer."""
    return (
        f"{folder} was trained with another tokenizer than {cfg.tokenizer_dir} (tokenizer.path); resume with the "
        f"tokenizer of that run: --set tokenizer.pretrained={folder}"
    )


def load_resume_model(folder: Path, cfg: Config, fingerprint: str) -> Any:
    """The checkpoint's model, after checking it belongs to this config and tokenizer; the config's dropout
    applies (`dropout_changes` says which differ)."""
    from transformers import BertForMaskedLM

    from mlmtrain.electra import load_electra
    from mlmtrain.masking import VocabInfo

    check_model_shape(folder, cfg)
    tokenizer = load_tokenizer(folder)
    if tokenizer_fingerprint(tokenizer) != fingerprint:
        raise UserError("checkpoint", other_tokenizer_message(folder, cfg))
    dropout = _config_dropout(cfg)
    try:
        if cfg.train.objective == "electra":
            return load_electra(folder, cfg, VocabInfo.from_tokenizer(tokenizer), **dropout)
        return BertForMaskedLM.from_pretrained(str(folder), attn_implementation="sdpa", **dropout)
    except Exception as error:  # truncated safetensors and friends
        raise UserError(
            "checkpoint",
            f"cannot load the weights in {folder} ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:160]}); resume from an older checkpoint",
        ) from None
