"""How mlmtrain touches the file system: it replaces or deletes only what it can prove it wrote, and a failed
write becomes one line that says what could not be written, why, and how much room is left.

A folder counts as mlmtrain's when it holds mlmtrain's own marker file AND every entry in it is a name mlmtrain
writes there; anything else in it (a corpus, notes, a run) makes the folder the user's, and it is left alone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from mlmtrain.errors import UserError, first_line


def process_alive(pid: int) -> bool:
    """True while process `pid` exists (a temporary folder named after it may still be in use)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def foreign_entries(folder: Path, ours: re.Pattern) -> list[str]:
    """Names in `folder` that mlmtrain does not write there (sorted)."""
    return sorted(child.name for child in Path(folder).iterdir() if not ours.fullmatch(child.name))


def owned_folder(folder: Path, marker: str, ours: re.Pattern) -> bool:
    """True when `folder` is a real folder (not a link) with mlmtrain's `marker` and nothing but `ours` in it."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir() or not (folder / marker).is_file():
        return False
    return not foreign_entries(folder, ours)


def check_replaceable(folder: Path, marker: str, ours: re.Pattern, topic: str, key: str) -> None:
    """UserError unless `folder` is absent, empty, or provably mlmtrain's (so replacing it loses nothing else)."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    if folder.is_symlink() or not folder.is_dir():
        raise UserError(topic, f"{key} {folder} is not a folder; set {key} to a new folder")
    if not any(folder.iterdir()) or owned_folder(folder, marker, ours):
        return
    foreign = foreign_entries(folder, ours)
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    why = f"it holds {shown}" if (folder / marker).is_file() else f"it has no {marker} (it holds {shown})"
    raise UserError(
        topic,
        f"{key} {folder} is not a folder mlmtrain wrote ({why}), and mlmtrain would replace it; "
        f"set {key} to a new folder",
    )


def check_apart(
    output: Path, key: str, inputs: Iterable[tuple[str, Path]], fix: str, topic: str = "argument", holds: bool = True
) -> None:
    """UserError unless `output` (what `key` names: a folder or file a command writes) lies apart from every one of
    `inputs` ((what the message calls it, its path): what the command reads): it may not be one, lie inside one, or
    (with `holds`: an output replaced whole) hold one. Compared with every link resolved, so a link into an input is
    caught as the input itself. `fix` ends the message ("set --out to a folder outside them")."""
    written = Path(output).expanduser().resolve()
    for name, path in inputs:
        read = Path(path).expanduser().resolve()
        if written == read:
            where = "is"
        elif read in written.parents:
            where = "lies inside"
        elif holds and written in read.parents:
            where = "holds"
        else:
            continue
        link = "" if written == Path(os.path.abspath(Path(output).expanduser())) else f" (it leads to {written})"
        raise UserError(topic, f"{key} {output}{link} {where} {name} {path}, which this command only reads; {fix}")


def local_inputs(named: Iterable[tuple[str, Optional[str]]]) -> list[tuple[str, Path]]:
    """(what, path) of each input a command reads that is a file or folder here, for `check_apart`: hub names (`hf:`
    and `builtin:` sources, Hub model ids) and unset options are left out."""
    paths = [
        (what, Path(value).expanduser())
        for what, value in named
        if isinstance(value, str) and value and not value.startswith(("hf:", "builtin:"))
    ]
    return [(what, path) for what, path in paths if path.exists() or path.is_symlink()]


def remove_dead_staging(parent: Path, prefix: str, ours: re.Pattern) -> None:
    """Delete `<prefix><pid>-...` temporary folders left by killed processes, when they hold only `ours`."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-[0-9a-f]+)?(?:\.old)?")

    def only_ours(folder: Path) -> bool:
        return not folder.is_symlink() and folder.is_dir() and not foreign_entries(folder, ours)

    remove_dead_leftovers(parent, pattern, only_ours)


def remove_dead_leftovers(parent: Path, named: re.Pattern, ours: Callable[[Path], bool]) -> None:
    """Delete what killed processes left in `parent`: each entry whose name `named` matches in full, group 1 being
    its writer's pid, once that writer is gone, and only when `ours(entry)` proves that it holds nothing but what
    mlmtrain writes there. A link is removed as a link; a folder is removed with what is in it, links as links.

    One named after this very process is a leftover too: a writer makes such an entry only while it writes, so an
    earlier process with the same pid left it (a container restarted after a kill, where mlmtrain is often pid 1)."""
    if not Path(parent).is_dir():
        return
    for child in Path(parent).iterdir():
        match = named.fullmatch(child.name)
        if not match:
            continue
        writer = int(match.group(1))
        if (writer != os.getpid() and process_alive(writer)) or not ours(child):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)  # rmtree removes links inside as links
        else:
            child.unlink(missing_ok=True)


def replace_folder(
    folder: Path, write: Callable[[Path], None], *, marker: str, ours: re.Pattern, topic: str, key: str, what: str
) -> None:
    """Build a folder with `write(staging)` beside `folder`, then swap it in; the old one goes only after the swap.

    `folder` must be absent, empty or provably mlmtrain's (`marker` and nothing but `ours`); `write` must create
    `marker`. A write error (full disk, permissions) removes the staging folder, keeps the old folder and becomes
    one UserError; temporary folders that killed processes left beside `folder` are cleared first.
    """
    folder = Path(folder)
    check_replaceable(folder, marker, ours, topic, key)
    prefix = f".{folder.name}.tmp-"
    remove_dead_staging(folder.parent, prefix, ours)
    staging = folder.parent / f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    old = folder.parent / f"{staging.name}.old"
    try:
        # made inside the try whose cleanup removes it: a stop signal (an exception) right after the mkdir must not
        # leave it behind
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            # A plain mkdir, not tempfile.mkdtemp: mkdtemp makes the folder 0700, and the renamed result must be an
            # ordinary folder (0777 less the umask, 0755 usually) that other users and processes can read.
            staging.mkdir()
        except OSError as error:
            reason = write_failure(error, folder)
            raise UserError(topic, f"cannot create {what} {folder}: {reason}; set {key} elsewhere") from None
        write(staging)
        if folder.exists():
            os.replace(folder, old)
        os.replace(staging, folder)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if old.exists() and not folder.exists():
            os.replace(old, folder)  # put the previous folder back
        if isinstance(error, UserError) or not isinstance(error, Exception):
            raise
        # Rust-backed writers (tokenizers) raise plain Exceptions for I/O errors: all of them mean "not written"
        raise UserError(
            topic,
            f"could not write {what} {folder}: {write_failure(error, folder)}; "
            "free disk space or fix permissions, then run again",
        ) from error
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def building(folder: Path, topic: str, key: str, on_wait: Callable[[], None]) -> Iterator[None]:
    """Hold the exclusive right to build `folder` for the block.

    Two mlmtrain processes that share a token store or tokenizer (a sweep of runs on one store) would otherwise
    both build it at once, and the one that renames last replaces the other's. The second one waits here (after
    `on_wait` says so) and then finds the folder built. The lock is `.<name>.lock` beside the folder, held by flock
    (the kernel releases it when a process dies). It is opened for appending and never written, so a file of the
    user's under that name is left as it was; it is not removed afterwards, as a waiter may hold it open.
    """
    folder = Path(folder)
    path = folder.parent / f".{folder.name}.lock"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as error:
        raise UserError(
            topic, f"cannot create the lock file {path} for {key} {folder}: {write_failure(error, path)}"
        ) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        handle.close()  # closing the last descriptor releases the lock


def write_failure(error: BaseException, path: Path) -> str:
    """'No space left on device (12.3 MB free there)': why a write failed, in one line."""
    if isinstance(error, OSError) and error.strerror:
        reason = error.strerror
    else:
        reason = first_line(error)
    free = _free_bytes(Path(path))
    return reason if free is None else f"{reason} ({free / 1e6:,.1f} MB free there)"


def _free_bytes(path: Path) -> Optional[int]:
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def check_writable_folder(folder: Path, topic: str, key: str, create: bool = True) -> None:
    """Create `folder` if needed and prove that a file can be written in it; one clear UserError otherwise.
    With `create` False nothing is created: the nearest folder that exists is proven writable instead (for an
    output written only after a long job, which must not leave empty folders behind if the job fails)."""
    folder = Path(folder)
    blocker = next((p for p in (folder, *folder.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        where = "is a file" if blocker == folder else f"lies under {blocker}, which is a file"
        raise UserError(topic, f"{key} {folder} {where}; set {key} to a folder")
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        probe = (folder if create else blocker or Path(".")) / f".mlmtrain-write-test-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as error:
        hint = "the file system is read-only; " if error.errno == errno.EROFS else ""
        reason = write_failure(error, folder)
        message = f"cannot write in {key} {folder}: {reason}; {hint}set {key} to a writable folder"
        raise UserError(topic, message) from None
