"""What protects a run: the exclusive lock on RUN_DIR, the claim on a folder that already holds a run (checked first,
its old run removed by --overwrite only once every check of the new run has passed), the checks that a run can start
before anything is written (a resume's are the resolution's: `resolved.py`), and the stop signals that end a run
between two steps (never in the middle of one)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.config import Config, replaceable_config
from mlmtrain.data.sources import corpus_splits
from mlmtrain.data.store import STORE_FILES, tokenizer_plan
from mlmtrain.data.tokenizer import TOKENIZER_FILES, TOKENIZER_META
from mlmtrain.errors import UserError
from mlmtrain.model.architectures import check_model_fits
from mlmtrain.runtime.files import check_replaceable, check_writable_folder
from mlmtrain.runtime.progress import say
from mlmtrain.train import ownership
from mlmtrain.train.added_words import check_added_words_file
from mlmtrain.train.base_model import KEY as BASE_KEY
from mlmtrain.train.compiling import check_compile_toolchain
from mlmtrain.train.resolved import ResolvedRun

_EVENT_FILE = re.compile(r"^events\.out\.tfevents\.")  # the name TensorBoard's writer gives its log files


class RunLock:
    """An exclusive lock on RUN_DIR held for the whole run; the kernel releases it if the process dies."""

    # A forked child (a DataLoader worker) inherits the descriptor and with it the flock, and outlives a SIGKILLed
    # parent by seconds: a resume started at once would be refused. Children close their copies of held locks.
    held: weakref.WeakSet[RunLock] = weakref.WeakSet()

    def __init__(self, run_dir: Path) -> None:
        check_writable_folder(run_dir, "run", "train.run_dir")
        self.path = run_dir / ".lock"
        if self.path.is_symlink() or self.path.is_dir() or (self.path.exists() and not self.path.is_file()):
            # the lock file is truncated and written: through a link, that would be a file elsewhere
            what = "a link" if self.path.is_symlink() else "a folder"
            raise UserError(
                "run", f"{self.path} is {what}, where mlmtrain keeps its lock file; move it away, then run again"
            )
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            owner = self.handle.read().strip() or "another process"
            self.handle.close()
            raise UserError(
                "run",
                f"{run_dir} is in use by a running mlmtrain ({owner}); wait for it to finish "
                "or choose another train.run_dir",
            ) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"pid {os.getpid()}")
        self.handle.flush()
        RunLock.held.add(self)

    def release(self) -> None:
        RunLock.held.discard(self)
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()

    @staticmethod
    def close_in_child() -> None:
        for lock in list(RunLock.held):
            lock.handle.close()


os.register_at_fork(after_in_child=RunLock.close_in_child)


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold RUN_DIR's lock for the block (`tokenize` writes under RUN_DIR as `pretrain` does)."""
    lock = RunLock(run_dir)
    try:
        yield
    finally:
        lock.release()


def check_run_folder(run_dir: Path, resume: Optional[str], overwrite: bool, cfg: Config) -> bool:
    """Refuse to mix two runs in one folder unless the user said --resume or --overwrite; check that checkpoints
    can be written there before any step is trained; in a folder that holds no run yet, refuse to replace a
    mlmtrain.yaml the user keeps there (pretrain saves the run's resolved config under that name). Changes nothing:
    returns whether --overwrite will remove the run the folder holds (`remove_old_run`, once every check passed)."""
    checkpoints = ownership.checkpoints_dir(run_dir)
    holds_run = (run_dir / "metrics.jsonl").exists() or checkpoints.exists() or checkpoints.is_symlink()
    removes = overwrite and holds_run
    _refuse_blocked_folder(checkpoints, "checkpoints", removed=removes)
    if "tensorboard" in cfg.train.active_trackers:  # its writer would fail on it only after tokenizing
        _refuse_blocked_folder(run_dir / "tensorboard", "TensorBoard's event files", removed=removes)
    check_added_words_file(cfg, run_dir)
    if removes:
        _old_run(run_dir)  # what it would delete, all mlmtrain's: else refused now
    elif not holds_run:
        saved = run_dir / "mlmtrain.yaml"
        if saved.exists() and not replaceable_config(saved, cfg):
            raise UserError(
                "run",
                f"{saved} is not a config mlmtrain wrote, and pretrain saves the run's resolved config under that "
                "name; rename your file (e.g. config.yaml) or choose another train.run_dir",
            )
    elif resume is None:
        raise UserError(
            "run",
            f"{run_dir} already holds a run; pass --resume to continue it or --overwrite to "
            "start afresh (or choose another train.run_dir)",
        )
    if checkpoints.is_dir():
        check_writable_folder(checkpoints, "run", "the checkpoints folder")
    return removes


def _refuse_blocked_folder(folder: Path, what: str, removed: bool) -> None:
    """A UserError when `folder`, where the run writes `what`, is a file, or a link to nothing that --overwrite
    (`removed`) does not remove: the first write would fail there, after tokenizing or training."""
    if folder.exists() and not folder.is_dir():
        raise UserError("run", f"{folder} is a file, where {what} go; move it away, then run again")
    if folder.is_symlink() and not folder.exists() and not removed:
        raise UserError(
            "run",
            f"{folder} is a link to {os.readlink(folder)}, which does not exist, where {what} go; "
            "create that folder or remove the link, then run again",
        )


_RUN_FILES = ("metrics.jsonl", "run.json")  # the files a run writes directly in RUN_DIR that --overwrite removes


@dataclass(frozen=True)
class _OldRun:
    """What --overwrite removes of the run in a folder: links in place of its checkpoints or TensorBoard folder (as
    links), its checkpoints' entries and TensorBoard's event files."""

    links: list[Path]
    checkpoints: list[Path]
    events: list[Path]


def _old_run(run_dir: Path) -> _OldRun:
    """What --overwrite would delete of the run in `run_dir`: checkpoints whose files match their record, the `latest`
    link, TensorBoard's event files (metrics.jsonl and run.json beside them). A link in place of `checkpoints/` or
    `tensorboard/` is removed as a link: what it points to (another disk, a folder other runs log into) is never
    listed nor deleted. UserError if the checkpoints or tensorboard folder holds anything else (a user's notes, a
    fine-tuned model, a link): nothing is deleted then."""
    checkpoints, board = ownership.checkpoints_dir(run_dir), run_dir / "tensorboard"
    links = [folder for folder in (checkpoints, board) if folder.is_symlink()]
    ours, events = _entries(checkpoints), _entries(board)
    theirs = [entry for entry in ours if not ownership.written_by_mlmtrain(entry)]
    theirs += [entry for entry in events if not (_EVENT_FILE.match(entry.name) and _plain_file(entry))]
    theirs += [run_dir / name for name in _RUN_FILES if _folder(run_dir / name)]  # unlink would fail on it, too late
    if theirs:
        named = ", ".join(str(entry) for entry in theirs[:3]) + (f" and {len(theirs) - 3} more" if theirs[3:] else "")
        raise UserError(
            "run",
            f"--overwrite would delete {named}, which mlmtrain cannot prove it wrote; move it out of {run_dir} "
            "(or choose another train.run_dir), then run again",
        )
    return _OldRun(links, ours, events)


def remove_old_run(run_dir: Path) -> None:
    """Delete what the run in run_dir wrote, for --overwrite (`_old_run`: refused whole if any of it is not
    mlmtrain's), once every check of the new run has passed (the resolution, `check_run_folder`,
    `check_before_start`)."""
    old = _old_run(run_dir)
    checkpoints, board = ownership.checkpoints_dir(run_dir), run_dir / "tensorboard"
    targets = {link: os.readlink(link) for link in old.links}
    try:
        for link in old.links:
            link.unlink()
        for entry in old.checkpoints:
            if entry.is_dir() and not entry.is_symlink():
                ownership.remove_checkpoint(entry)
            else:
                entry.unlink()
        for entry in old.events:
            entry.unlink()
        for folder in (checkpoints, board):
            if folder.is_dir():
                folder.rmdir()
    except OSError as error:  # permissions, a file that appeared meanwhile: say so; what is left stays as it is
        reason = f"{error.filename}: {error.strerror}"
        raise UserError("run", f"--overwrite could not remove the old run's {reason}; fix it, then run again") from None
    for name in _RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for link, target in targets.items():
        say(f"--overwrite removed the link {link} (to {target}) as a link; what it points to is left as it was")


def _entries(folder: Path) -> list[Path]:
    """What a run folder's `folder` holds; nothing for a link (its target is not the run's to list or delete)."""
    return sorted(folder.iterdir()) if _folder(folder) else []


def _folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def check_before_start(run: ResolvedRun, device: torch.device) -> None:
    """Everything that would make the run fail later, checked before anything is written (the resolution refused a
    checkpoint of another model or tokenizer already): a model too big for the device, train.compile without the
    compiler it needs, a user's folder where the run keeps its `latest` link, its tokenizer or its token store."""
    cfg = run.cfg
    base = run.bases.get(BASE_KEY)
    check_model_fits(cfg.model, cfg.tokenizer.vocab_size, device, base.folder if base else None)  # a base: its weights
    if cfg.train.compile is True:  # auto goes without, saying why
        check_compile_toolchain(device)
    ownership.check_latest_link(run.run_dir)  # a user's folder named latest would fail the first save
    action, _ = tokenizer_plan(cfg, corpus_splits(cfg.data)[0])
    if action != "reuse":  # tokenize (or a branch) would write the tokenizer folder
        check_replaceable(cfg.tokenizer_dir, TOKENIZER_META, TOKENIZER_FILES, "tokenizer", "tokenizer.path")
    if cfg.data.use_store:
        check_replaceable(cfg.store_dir, "meta.json", STORE_FILES, "data", "data.store")


class StopRequested:
    """Turns SIGINT / SIGTERM into a flag checked between steps, so a step is never cut in half.

    The first signal promises a checkpoint at the end of the current step; further signals keep that promise
    (the save is what makes stopping safe) and say so, rather than dropping the steps since the last checkpoint.
    """

    def __init__(self) -> None:
        self.flag = False
        self._previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.flag:
            say("already stopping: finishing this step and writing its checkpoint, which can take a moment")
        self.flag = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
