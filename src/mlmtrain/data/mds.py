"""The text column of a MosaicML Streaming (MDS) dataset, the format ModernBERT's, Ettin's and mmBERT's data are
published in: `index.json` lists the shards, each shard holds its samples, compressed or not.

A small reader of the documented format (streaming's docs, "MDS"): a shard is [sample count: uint32] [count + 1
offsets: uint32] [samples]; a sample is the uint32 sizes of its variable-size columns, then each column's bytes.
It decodes the one column asked for, never the others: `streaming`'s own reader decodes every column of a sample,
`pkl` ones with pickle, and mlmtrain never unpickles a file a user can be handed. Compressed shards need the
decompressors of the `[mds]` extra (zstd, brotli, snappy; gzip and bz2 come with Python).
"""

from __future__ import annotations

import bz2
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mlmtrain.config import is_remote, local_path
from mlmtrain.data.records import InputCount
from mlmtrain.data.remote import Cache, filesystem, join, read_remote_text, remote_error
from mlmtrain.errors import UserError, first_line, redact

_TEXT_ENCODINGS = ("str",)


def _zstd(data: bytes) -> bytes:
    import zstd  # imported here: the [mds] extra's decompressor, for zstd shards alone

    return zstd.decompress(data)


def _brotli(data: bytes) -> bytes:
    import brotli  # imported here: the [mds] extra's decompressor, for brotli shards alone

    return brotli.decompress(data)


def _snappy(data: bytes) -> bytes:
    import snappy  # imported here: the [mds] extra's decompressor, for snappy shards alone

    return snappy.uncompress(data)


_DECOMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "zstd": _zstd,
    "br": _brotli,
    "bz2": bz2.decompress,
    "gz": gzip.decompress,
    "snappy": _snappy,
}


@dataclass(frozen=True)
class Shard:
    """One shard of an MDS dataset, as index.json describes it."""

    file: str  # its file name in the dataset's folder (the compressed one where it is compressed)
    size: int
    samples: int
    column: int  # the wanted column's place
    sizes: tuple[Optional[int], ...]  # each column's fixed size, or None where each sample gives it
    compression: Optional[str]


def _error(location: str, message: str) -> UserError:
    return UserError("data", f"MDS dataset {redact(location)}: {message}")


def read_index(location: str, column: str) -> list[Shard]:
    """The shards of the MDS dataset at `location` (a folder or URL holding index.json), checked to hold a text
    column named `column`."""
    index_url = join(location, "index.json")
    try:
        if is_remote(location):
            text = read_remote_text(index_url, "data.train")
        else:
            path = Path(local_path(location)).expanduser() / "index.json"
            text = path.read_text(encoding="utf-8") if path.is_file() else None
    except OSError as error:
        raise _error(location, f"cannot read index.json ({first_line(error)})") from None
    if text is None:
        raise _error(location, "no index.json there; point data.train at the folder that holds it (mds:FOLDER)")
    try:
        index = json.loads(text)
        shards = [_shard(entry, column, location) for entry in index["shards"]]
    except (ValueError, KeyError, TypeError) as error:
        raise _error(location, f"index.json is not an MDS index ({first_line(error)})") from None
    return shards


def _shard(entry: dict[str, Any], column: str, location: str) -> Shard:
    if entry.get("format") != "mds":
        raise _error(location, f"a shard has format {entry.get('format')!r}; mlmtrain reads mds shards")
    names, encodings = list(entry["column_names"]), list(entry["column_encodings"])
    if column not in names:
        raise _error(location, f"no column '{column}' (columns: {', '.join(names)}); set data.text_field to one")
    place = names.index(column)
    if encodings[place] not in _TEXT_ENCODINGS:
        raise _error(
            location,
            f"column '{column}' is {encodings[place]}, not text (str); set data.text_field to a text column",
        )
    compression = entry.get("compression")
    data = entry["zip_data"] if compression else entry["raw_data"]
    algorithm = compression.split(":")[0] if compression else None
    if algorithm is not None and algorithm not in _DECOMPRESS:
        raise _error(location, f"shards compressed with {compression}, which mlmtrain cannot read")
    return Shard(data["basename"], int(data["bytes"]), int(entry["samples"]), place,
                 tuple(entry["column_sizes"]), algorithm)  # fmt: skip


def shard_texts(data: bytes, shard: Shard, where: str) -> Iterator[str]:
    """The wanted column of each sample of a shard's (uncompressed) bytes."""
    count = int(np.frombuffer(data, np.uint32, 1)[0])
    offsets = np.frombuffer(data, np.uint32, count + 1, 4)
    variable = [index for index, size in enumerate(shard.sizes) if size is None]
    for begin, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        prefix = np.frombuffer(data, np.uint32, len(variable), begin).tolist()
        given = dict(zip(variable, prefix, strict=True))
        sizes = [given.get(index, size) for index, size in enumerate(shard.sizes)]
        start = begin + 4 * len(variable) + sum(sizes[: shard.column])
        stop = start + sizes[shard.column]
        if stop > end:
            raise UserError("data", f"{where}: a sample is cut short; the shard is damaged, fetch it again")
        yield data[start:stop].decode("utf-8", errors="replace")


def mds_texts(location: str, column: str, cache: Cache, progress: InputCount) -> Iterator[str]:
    """Every sample's `column` of the MDS dataset at `location`, shard by shard (a remote shard is read through
    the cache); each shard's bytes are counted in `progress` once read."""
    for shard in read_index(location, column):
        where = f"MDS shard {redact(join(location, shard.file))}"
        if is_remote(location):
            path = cache.fetch_file(join(location, shard.file), shard.size, set())
        else:
            path = Path(local_path(location)).expanduser() / shard.file
        try:
            data = path.read_bytes()
        except OSError as error:
            raise UserError("data", f"{where}: cannot read it ({first_line(error)}); check the dataset") from None
        if shard.compression is not None:
            try:
                data = _DECOMPRESS[shard.compression](data)
            except ImportError:
                raise UserError(
                    "data", f"{where} is {shard.compression}-compressed: pip install 'mlmtrain[mds]' to read it"
                ) from None
            except Exception as error:  # each decompressor has its own error type
                raise UserError("data", f"{where}: cannot decompress it ({first_line(error)})") from None
        yield from shard_texts(data, shard, where)
        progress.input_bytes += shard.size


def mds_size(location: str, column: str) -> int:
    """The bytes of the dataset's shards as they lie (progress)."""
    return sum(shard.size for shard in read_index(location, column))


def remote_identity(location: str) -> str:
    """What changes when a remote dataset does: its index.json's version, as the filesystem tells it."""
    fs, path = filesystem(join(location, "index.json"), "data.train")
    try:
        info = fs.info(path)
    except Exception as error:
        raise remote_error(error, join(location, "index.json"), "data.train") from error
    return str(info.get("ETag") or info.get("mtime") or info.get("LastModified") or info.get("size"))
