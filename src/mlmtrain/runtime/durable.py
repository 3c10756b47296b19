"""Durability on disk: flush files and folders so that a power loss cannot leave a folder that is marked
complete but holds holes, or a rename that the file system forgot. (A kill -9 needs none of this: the kernel
keeps what was written; a crash of the machine does.)"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (files created, renamed or removed in it)."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def fsync_tree(folder: Path) -> None:
    """Flush every file directly in `folder`, then the folder itself."""
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    fsync_dir(folder)


def write_marker(path: Path, text: str = "ok\n") -> None:
    """Write a small completion marker and flush it and its folder: it must never exist without its contents."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    fsync_dir(path.parent)


def json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity: an undefined figure (one block has no interval) is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    return value


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a temporary file beside it, flushed, then renamed over it (a kill or a full
    disk amid the write leaves the old file as it was, and no temporary)."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
