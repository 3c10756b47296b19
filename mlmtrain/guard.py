"""What protects a run: the exclusive lock on RUN_DIR, the claim on a folder that already holds a run,
and the stop signals that end a run between two steps (never in the middle of one)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
from pathlib import Path
from typing import Any, Optional

from mlmtrain import checkpoint as ckpt
from mlmtrain.errors import UserError


class RunLock:
    """An exclusive lock on RUN_DIR held for the whole run; the kernel releases it if the process dies."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
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

    def release(self) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def claim_run_dir(run_dir: Path, resume: Optional[str], overwrite: bool) -> None:
    """Refuse to mix two runs in one folder unless the user said --resume or --overwrite."""
    holds_run = (run_dir / "metrics.jsonl").exists() or ckpt.checkpoints_dir(run_dir).exists()
    if holds_run and overwrite:
        shutil.rmtree(ckpt.checkpoints_dir(run_dir), ignore_errors=True)
        for name in ("metrics.jsonl", "run.json"):
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    elif holds_run and resume is None:
        raise UserError(
            "run",
            f"{run_dir} already holds a run; pass --resume to continue it or --overwrite to "
            "start afresh (or choose another train.run_dir)",
        )


class StopRequested:
    """Turns SIGINT / SIGTERM into a flag checked between steps, so a step is never cut in half."""

    def __init__(self) -> None:
        self.flag = False
        self._previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.flag:  # a second Ctrl-C means "now"
            raise KeyboardInterrupt
        self.flag = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
