"""Which files in a checkpoints folder are mlmtrain's, and what may therefore be moved or deleted: the checkpoints
(`step-N/`, complete with their `COMPLETE` marker), each one's record of the files its writer put there
(`checkpoint.json`), the `latest` link, what a killed save left, and an earlier run's steps set aside on a resume.
Pruning (checkpoint.keep_last), the setting aside and removal touch only what matches its record, never a link's target.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import uuid
from pathlib import Path
from typing import Any, Optional

from mlmtrain.data.tokenizer import TOKENIZER_FILES
from mlmtrain.errors import UserError
from mlmtrain.readers import read_json
from mlmtrain.runtime.durable import fsync_dir, replace_text, write_marker
from mlmtrain.runtime.files import remove_dead_leftovers

COMPLETE = "COMPLETE"
MANIFEST_FILE = "checkpoint.json"  # the step, its metrics, and the size and time of each file the writer put there
_STEP_DIR = re.compile(r"^step-(\d+)$")
# a killed save's leftover: named after the writer's pid (and, since it has one, a random suffix)
_LEFTOVER = re.compile(r"^\.(?:tmp-step-\d+|old-step-\d+|tmp-phase-.+?|old-phase-.+?|latest)-(\d+)(?:-[0-9a-f]+)?$")
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


def remove_leftovers(root: Path) -> None:
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


def write_record(staging: Path, step: int, metrics: Optional[dict[str, Any]]) -> None:
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


def record_added(folder: Path, names: list[str]) -> None:
    """List files that mlmtrain wrote into a saved checkpoint later (its scorecard, the card that shows it) in its
    record, with their sizes and times: the folder stays provably mlmtrain's, to prune or replace."""
    record = read_json(folder / MANIFEST_FILE)
    for name in names:
        info = (folder / name).stat()
        record["written"][name] = {"size": info.st_size, "mtime_ns": info.st_mtime_ns}
    record["files"] = sorted({*record["files"], *names})
    replace_text(folder / MANIFEST_FILE, json.dumps(record, indent=1))


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


def point_latest(root: Path, target: Path) -> None:
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
            point_latest(root, resumed)
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


def keep_copy(folder: Path, name: str) -> Path:
    """A copy of the checkpoint `folder` as checkpoints/`name` (a phase's end: keep_last never prunes it), its files
    linked where the file system allows (no second copy on disk) and copied where it does not, its record kept: the
    copy is provably mlmtrain's. An earlier copy of that name (a run resumed from before it) is replaced when it is
    mlmtrain's, and refused when it holds a user's file."""
    root, final = folder.parent, folder.parent / name
    if (final.exists() or final.is_symlink()) and not written_by_mlmtrain(final):
        why = why_spared(foreign_files(final))
        raise UserError("checkpoint", f"{final} would be replaced, and {why}; move it away, then resume")
    staging = root / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def link_or_copy(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:  # a file system without hard links
            shutil.copy2(source, target)

    shutil.copytree(folder, staging, copy_function=link_or_copy)
    if final.exists():
        replaced = root / f".old-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        final.rename(replaced)
        staging.rename(final)
        remove_checkpoint(replaced, ignore_errors=True)
    else:
        staging.rename(final)
    fsync_dir(root)
    return final


def why_spared(foreign: Optional[list[str]]) -> str:
    """Why pruning left a checkpoint, in words (from `foreign_files`)."""
    if foreign is None:
        return "it has no record of the sizes and times of the files mlmtrain wrote (an older mlmtrain saved it)"
    named = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    return f"it holds files mlmtrain did not write ({named})"
