"""What names a remote file or folder (an fsspec URL such as s3://bucket/key, gs://, hf://) rather than a local path,
and where the local cache (data.cache_dir) keeps the copy of a remote store or tokenizer: pure functions of the
strings, no I/O."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Optional

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)


def url_scheme(value: str) -> Optional[str]:
    """'s3' for 's3://bucket/key'; None for a local path (a Windows drive 'C:\\' has no '//')."""
    match = _URL.match(value)
    return match.group(1).lower() if match else None


def is_remote(value: str) -> bool:
    """A URL other than file://: read and written through fsspec."""
    scheme = url_scheme(value)
    return scheme is not None and scheme != "file"


def local_path(value: str) -> str:
    """A local path, with a file:// URL's scheme taken off (file:///data/x -> /data/x)."""
    return value[len("file://") :] if url_scheme(value) == "file" else value


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/mlmtrain, else ~/.cache/mlmtrain: on each machine its own, so each reads a shard once."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mlmtrain"


def cached_copy(cache_dir: Path, url: str) -> Path:
    """The folder under `cache_dir` that holds the local copy of the remote folder `url`: its last name and 16 hex
    digits of its URL (credentials included, so two accounts never share a copy)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", url.rstrip("/").rsplit("/", 1)[-1])[:40] or "root"
    digest = hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:16]
    return Path(cache_dir) / "copies" / f"{name}-{digest}"
