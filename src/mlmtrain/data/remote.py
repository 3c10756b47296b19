"""Data in object storage, through fsspec (s3://, gs://, hf://, ... with the `[remote]` extra): a corpus's files are
read as they stream; a remote token store, tokenizer or MDS shard is copied into a local cache folder of bounded size
(data.cache_dir, data.cache_max_gb) and read from there, so each machine fetches each file once.

Credentials come from each filesystem's own environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL,
GOOGLE_APPLICATION_CREDENTIALS, HF_TOKEN, ...) and never appear in a message: every URL a message quotes is redacted.
The cache evicts the least recently used copies not needed now (a copy's time of use is its folder's mtime).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Optional

from mlmtrain.config import cached_copy, url_scheme
from mlmtrain.errors import UserError, first_line, redact

_CONNECTION_ERRORS = {  # by name: botocore, aiohttp and requests are the filesystems' own, and optional
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "ConnectionError",
    "ConnectionRefusedError",
    "ReadTimeoutError",
    "TimeoutError",
}
_CREDENTIAL_ERRORS = {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError"}
_COPY_PREFIX = ".copy-"  # a copy being fetched: .copy-<pid>-<hex>, renamed into place once whole


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__  # type: ignore[assignment]


def remote_error(error: BaseException, url: str, key: str) -> UserError:
    """One line for a failure to reach, list, read or write `url` (named by config key `key`), credentials
    redacted, with the fix."""
    shown = redact(url)
    names = {type(cause).__name__ for cause in _causes(error)}
    if names & _CREDENTIAL_ERRORS:
        return UserError(
            "data",
            f"{key}: no credentials for {shown}; set them as its filesystem reads them (for s3: AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)",
        )
    if names & _CONNECTION_ERRORS:
        return UserError(
            "data",
            f"{key}: cannot reach the endpoint of {shown} ({first_line(error)}); check the address (for s3: "
            "AWS_ENDPOINT_URL) and the network",
        )
    if isinstance(error, FileNotFoundError):
        return UserError("data", f"{key}: {shown} does not exist; check the bucket and the path")
    if isinstance(error, PermissionError):
        return UserError(
            "data", f"{key}: access to {shown} is denied ({first_line(error)}); check the credentials' rights"
        )
    return UserError("data", f"{key}: cannot use {shown}: {first_line(error)}; check the URL and the credentials")


def filesystem(url: str, key: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) for `url`; one line when its filesystem is not installed."""
    import fsspec  # imported here: only remote data needs it

    try:
        return fsspec.core.url_to_fs(url)
    except ImportError as error:
        raise UserError(
            "data",
            f"{key}: reading {redact(url)} needs fsspec's {url_scheme(url)}:// filesystem ({first_line(error)}); "
            "install it with pip install 'mlmtrain[remote]'",
        ) from None
    except Exception as error:  # a malformed URL, an unknown protocol: many types, one meaning
        raise remote_error(error, url, key) from error


@dataclass(frozen=True)
class RemoteFile:
    """A file of a remote corpus: its URL, size and what changes when it does (ETag, or time of change)."""

    url: str
    size: int
    version: str


def _version(info: dict[str, Any]) -> str:
    for name in ("ETag", "etag", "md5Hash", "LastModified", "mtime", "updated", "last_commit"):
        if info.get(name) is not None:
            return str(info[name])
    return ""


def list_files(entry: str, key: str, wanted: re.Pattern) -> list[RemoteFile]:
    """The files `entry` names: one file, a glob, or a folder's files whose names `wanted` matches (recursively,
    sorted, hidden ones left out)."""
    fs, path = filesystem(entry, key)
    try:
        fs.invalidate_cache()  # another process may have written there since this one last listed it
        if any(char in path for char in "*?["):
            found = {name: fs.info(name) for name in sorted(fs.glob(path))}
            found = {name: info for name, info in found.items() if info.get("type") != "directory"}
            if not found:
                raise UserError("data", f"{key}: no file matches '{redact(entry)}'; check the path or glob")
        elif fs.isdir(path):
            listed = fs.find(path, detail=True)
            found = {
                name: info
                for name, info in sorted(listed.items())
                if wanted.search(name.rsplit("/", 1)[-1].lower())
                and not any(part.startswith(".") for part in name[len(path) :].split("/"))
            }
            if not found:
                raise UserError("data", f"{key}: folder {redact(entry)} holds no files mlmtrain reads; check the path")
        else:
            found = {path: fs.info(path)}
    except UserError:
        raise
    except Exception as error:
        raise remote_error(error, entry, key) from error
    return [
        RemoteFile(fs.unstrip_protocol(name), int(info.get("size") or 0), _version(info))
        for name, info in found.items()
    ]


def open_remote(url: str) -> BinaryIO:
    """A remote file opened for reading bytes (read ahead in blocks, so reading line by line stays fast)."""
    fs, path = filesystem(url, "data")
    try:
        return fs.open(path, "rb", block_size=8 << 20)
    except Exception as error:
        raise remote_error(error, url, "data") from error


def remote_names(url: str, key: str) -> dict[str, int]:
    """{name: size} of the files directly in the remote folder `url` ({} when there is none)."""
    fs, path = filesystem(url, key)
    try:
        fs.invalidate_cache()  # another process may have written there since this one last listed it
        if not fs.exists(path):
            return {}
        return {
            entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
            for entry in fs.ls(path, detail=True)
            if entry.get("type") != "directory"
        }
    except Exception as error:
        raise remote_error(error, url, key) from error


def read_remote_text(url: str, key: str) -> Optional[str]:
    """The text of a small remote file; None when it does not exist."""
    fs, path = filesystem(url, key)
    try:
        return fs.cat_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except Exception as error:
        raise remote_error(error, url, key) from error


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


# ---------------------------------------------------------------------------------------------
# The local cache


class Cache:
    """data.cache_dir: copies of remote folders (a store, a tokenizer) and files (MDS shards) under `copies/`,
    evicted least recently used first to keep under `max_bytes`; one process at a time changes it (a lock file)."""

    def __init__(self, folder: Path, max_bytes: float) -> None:
        self.folder, self.max_bytes = Path(folder), max_bytes
        self.copies = self.folder / "copies"

    @contextmanager
    def locked(self) -> Iterator[None]:
        try:
            self.copies.mkdir(parents=True, exist_ok=True)
            handle = open(self.folder / ".lock", "a")
        except OSError as error:
            raise UserError(
                "data", f"cannot use data.cache_dir {self.folder}: {first_line(error)}; set data.cache_dir elsewhere"
            ) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            handle.close()

    def _entries(self) -> list[Path]:
        return [entry for entry in self.copies.iterdir() if not entry.name.startswith(".") and not entry.is_symlink()]

    @staticmethod
    def _size(entry: Path) -> int:
        if entry.is_file():
            return entry.stat().st_size
        return sum(path.stat().st_size for path in entry.rglob("*") if path.is_file() and not path.is_symlink())

    def make_room(self, needed: int, what: str, keep: set[Path]) -> None:
        """Evict the least recently used copies (never those in `keep`) until `needed` more bytes fit."""
        if needed > self.max_bytes:
            raise UserError(
                "data",
                f"{what} ({needed / 1e9:.2f} GB) does not fit in the cache's data.cache_max_gb "
                f"({self.max_bytes / 1e9:g} GB); raise data.cache_max_gb",
            )
        entries = sorted(self._entries(), key=lambda entry: entry.stat().st_mtime)
        used = sum(self._size(entry) for entry in entries)
        for entry in entries:
            if used + needed <= self.max_bytes:
                break
            if entry in keep:
                continue
            used -= self._size(entry)
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def fetch_file(self, url: str, size: int, keep: set[Path]) -> Path:
        """A local copy of the remote file `url` (`size` bytes), fetched unless already whole."""
        local = self.copies / _copy_name(url)
        with self.locked():
            if local.is_file() and local.stat().st_size == size:
                os.utime(local)  # used now: the last to be evicted
                return local
            self.make_room(size, redact(url), keep | {local})
            staging = self.copies / f"{_COPY_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                fs, path = filesystem(url, "data")
                try:
                    fs.get_file(path, str(staging))
                except Exception as error:
                    raise remote_error(error, url, "data") from error
                os.replace(staging, local)
            finally:
                staging.unlink(missing_ok=True)
        return local

    def fetch_folder(self, url: str, local: Path, names: dict[str, int], marker: str, key: str) -> None:
        """`local` as a whole copy of the remote folder's files `names` ({name: size}), `marker` fetched last;
        fetched into a temporary folder and renamed into place, so a killed fetch leaves no half copy."""
        with self.locked():
            for leftover in self.copies.glob(f"{_COPY_PREFIX}*"):  # of a process killed while fetching
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()
            self.make_room(sum(names.values()), redact(url), {local})
            staging = self.copies / f"{_COPY_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
            staging.mkdir()
            try:
                fs, path = filesystem(url, key)
                try:
                    for name in sorted(names, key=lambda name: name == marker):
                        fs.get_file(join(path, name), str(staging / name))
                except Exception as error:
                    raise remote_error(error, join(url, name), key) from error
                old = self.copies / f"{staging.name}.old"
                if local.exists():
                    os.replace(local, old)
                os.replace(staging, local)
                shutil.rmtree(old, ignore_errors=True)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def used(self, local: Path) -> None:
        """Mark a copy as used now."""
        if local.exists():
            os.utime(local)


def _copy_name(url: str) -> str:
    return cached_copy(Path("."), url).name  # the one naming rule of copies


def remote_folder_of_ours(url: str, ours: re.Pattern, key: str) -> dict[str, int]:
    """{name: size} of the remote folder `url`; refused when it holds a file that `ours` does not name (a folder
    mlmtrain did not write, which it would replace)."""
    present = remote_names(url, key)
    foreign = sorted(name for name in present if not ours.fullmatch(name))
    if foreign:
        raise UserError(
            "data",
            f"{key} {redact(url)} holds {', '.join(foreign[:3])}, which mlmtrain did not write, and mlmtrain would "
            f"replace what is there; set {key} to a new location",
        )
    return present


def same_files(url: str, local: Path, names: dict[str, int], key: str) -> bool:
    """Whether `local` holds the remote folder's files `names` ({name: size}) byte for byte (small folders)."""
    fs, path = filesystem(url, key)
    for name, size in names.items():
        mine = local / name
        if not mine.is_file() or mine.stat().st_size != size:
            return False
        try:
            if fs.cat_file(join(path, name)) != mine.read_bytes():
                return False
        except Exception as error:
            raise remote_error(error, join(url, name), key) from error
    return True


def push_folder(local: Path, url: str, names: list[str], marker: str, ours: re.Pattern, key: str) -> None:
    """Upload the files `names` of `local` to the remote folder `url`: its `marker` is taken away first and put
    back last, so a reader never takes a half upload for whole; its other files that `ours` matches and the new
    folder lacks are removed. A remote folder holding anything else is refused: it is not mlmtrain's."""
    present = remote_folder_of_ours(url, ours, key)
    fs, path = filesystem(url, key)
    try:
        if marker in present:
            fs.rm_file(join(path, marker))
        for name in names:
            if name != marker:
                fs.put_file(str(local / name), join(path, name))
        for name in sorted(set(present) - set(names)):
            fs.rm_file(join(path, name))
        if marker in names:
            fs.put_file(str(local / marker), join(path, marker))
    except Exception as error:
        raise remote_error(error, url, key) from error
