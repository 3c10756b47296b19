"""Durability on disk: flush files and folders so that a power loss cannot leave a folder that is marked
complete but holds holes, or a rename that the file system forgot. (A kill -9 needs none of this: the kernel
keeps what was written; a crash of the machine does.)"""

from __future__ import annotations

import os
from pathlib import Path


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
