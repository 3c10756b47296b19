"""The records of a .jsonl, .json, .csv or .parquet file, read lazily one at a time, and the decoded lines beneath
them (a lone CR ends a line too): the one reader of these formats, for training text (`sources.py`) and labeled
tasks (`evaluate/tasks.py`), with one set of error lines.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Optional, Protocol, Union

from mlmtrain.config import is_remote
from mlmtrain.data.remote import open_remote
from mlmtrain.errors import UserError, first_line

_JSON_READ_CHARS = 1 << 16  # text read at a time into the incremental parser of a .json array
_PARQUET_BATCH_ROWS = 256  # rows per record batch: small, since one row may be a long document
_SPACES = re.compile(r"\s*")
_LONE_RETURN = re.compile(rb"(?<=\r)(?!\n)")  # the point after a CR that no LF follows: a line end of its own


class Utf8Count(Protocol):
    """Where lines with undecodable bytes are counted."""

    invalid_utf8_lines: int


class InputCount(Protocol):
    """Where the bytes of input read so far are counted (a file's bytes as they lie, uncompressed): progress."""

    input_bytes: int


class Record(NamedTuple):
    """One record and where it stands ('a.jsonl:3', 'a.json item 2', 'a.csv:4', 'a.parquet row 7'); `fields` is None
    for a blank line of a .jsonl or an empty row of a .csv, which holds no record."""

    where: str
    fields: Optional[dict[Any, Any]]


@dataclass(frozen=True)
class Reading:
    """How a file is read.

    topic: the UserError topic of every error ('data', 'task'). field: a field every record must hold (a csv
    header or parquet schema without it is refused before any row, and a parquet file is read for it alone); fix:
    what the error about it tells the user to do. utf8: count lines with undecodable bytes there, read with U+FFFD
    in their place; None refuses them. wide_rows: a csv row with more values than its header is read, the extra ones
    under the key None as csv.DictReader files them; False refuses it. compressed: the file is gzip-compressed.
    progress: count the bytes read there.
    """

    topic: str
    field: Optional[str] = None
    fix: str = ""
    utf8: Optional[Utf8Count] = None
    wide_rows: bool = True
    compressed: bool = False
    progress: Optional[InputCount] = None

    def error(self, message: str) -> UserError:
        return UserError(self.topic, message)


def _split_lone_returns(handle: Iterable[bytes]) -> Iterator[bytes]:
    """A binary file's lines, each ending in LF, CR LF or a lone CR (old Mac files end every line in CR alone,
    which binary reading does not split at), line ends kept. A CR byte is never part of a multi-byte UTF-8 character.
    """
    for raw in handle:
        if b"\r" not in raw or raw.find(b"\r") == len(raw) - 2 and raw.endswith(b"\r\n"):  # the usual line: as is
            yield raw
            continue
        yield from (piece for piece in _LONE_RETURN.split(raw) if piece)


def _decoded(raw: bytes, where: str, reading: Reading) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        if reading.utf8 is None:
            raise reading.error(f"{where}: not valid UTF-8 ({first_line(error)}); save the file as UTF-8") from None
        reading.utf8.invalid_utf8_lines += 1
        return raw.decode("utf-8", errors="replace")


def open_input(path: Union[Path, str]) -> BinaryIO:
    """A file opened for reading bytes: a local path, or a remote file's URL through fsspec (remote.py)."""
    if isinstance(path, str) and is_remote(path):
        return open_remote(path)
    return open(path, "rb")


def read_lines(path: Path, reading: Reading) -> Iterator[str]:
    """Decoded lines (line end kept), read one at a time; a byte-order mark at the start is dropped. `path` may be
    a remote file's URL (remote.py)."""
    try:
        with open_input(path) as raw_handle:
            handle = gzip.GzipFile(fileobj=raw_handle) if reading.compressed else raw_handle
            for number, raw in enumerate(_split_lone_returns(handle), 1):
                if reading.progress is not None:
                    reading.progress.input_bytes += len(raw)
                line = _decoded(raw, f"{path}:{number}", reading)
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]  # byte-order mark written by some Windows editors
                yield line
    except (OSError, EOFError, zlib.error) as error:  # permission, vanished file, corrupt or truncated gzip
        raise reading.error(f"cannot read {path}: {first_line(error)}; check the file") from None


def _object(value: Any, where: str, reading: Reading) -> dict[Any, Any]:
    """A JSON value as a record: an object, holding `reading.field` when one is required."""
    field = reading.field
    if not isinstance(value, dict):
        wanted = f" with a '{field}' field" if field is not None else ""
        raise reading.error(f"{where}: expected a JSON object{wanted}, found {type(value).__name__}")
    if field is not None and field not in value:
        fields = ", ".join(map(str, value)) or "none"
        raise reading.error(f"{where}: no field '{field}' (fields: {fields}); {reading.fix}")
    return value


def _jsonl_records(lines: Iterable[str], path: Path, reading: Reading, first_number: int = 1) -> Iterator[Record]:
    for number, line in enumerate(lines, first_number):
        where = f"{path}:{number}"
        if not line.strip():
            yield Record(where, None)
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise reading.error(f"{where}: not valid JSON ({error.msg}); fix or remove that line") from None
        except RecursionError:
            raise reading.error(f"{where}: JSON nested too deeply to read; fix or remove that line") from None
        except ValueError as error:  # an integer of more digits than Python converts
            raise reading.error(
                f"{where}: cannot read this JSON ({first_line(error)}); fix or remove that line"
            ) from None
        yield Record(where, _object(value, where, reading))


def _json_array(lines: Iterator[str], path: Path, reading: Reading) -> Iterator[Any]:
    """The items of a JSON array, decoded one at a time as lines arrive: memory holds about one item, not the file
    (a minified array on a single line is still read whole; prefer .jsonl for big data)."""
    decoder = json.JSONDecoder()
    buffer, pos, state = "", 0, "open"  # open -> first (item or ']') -> next (',' or ']') -> item -> next ...
    while True:
        pos = _SPACES.match(buffer, pos).end()
        if pos < len(buffer):
            char = buffer[pos]
            if state == "open" and char == "[":
                pos, state = pos + 1, "first"
                continue
            if state in ("first", "next") and char == "]":
                return
            if state == "next" and char == ",":
                pos, state = pos + 1, "item"
                continue
            if state in ("first", "item"):
                try:
                    item, pos = decoder.raw_decode(buffer, pos)
                except json.JSONDecodeError as error:
                    problem = error.msg  # often the item only continues on the next line
                except RecursionError:  # more data cannot help
                    raise reading.error(f"{path}: an item is nested too deeply to read; fix it") from None
                except ValueError as error:  # an integer of more digits than Python converts: nor here
                    raise reading.error(f"{path}: an item cannot be read ({first_line(error)}); fix it") from None
                else:
                    state = "next"
                    yield item
                    continue
            else:
                problem = f"unexpected {char!r}"
        else:
            problem = "the array is not closed with ']'"
        # Read at least as much again as is pending: an item spanning many lines (or one huge line) is retried
        # a logarithmic number of times, not once per line.
        pending = buffer[pos:]
        wanted, more = max(len(pending), _JSON_READ_CHARS), []
        for line in lines:
            more.append(line)
            wanted -= len(line)
            if wanted <= 0:
                break
        if not more:
            raise reading.error(f"{path}: not a valid JSON array ({problem}); fix it or write one object per line")
        buffer, pos = pending + "".join(more), 0


def _json_records(lines: Iterator[str], path: Path, reading: Reading) -> Iterator[Record]:
    """A .json file: one array of objects, or one object per line (sniffed from the first non-blank character)."""
    blank = 0
    for first in lines:
        if first.strip():
            break
        blank += 1
    else:
        return
    rest = itertools.chain([first], lines)
    if first.lstrip().startswith("["):
        for number, item in enumerate(_json_array(rest, path, reading), 1):
            where = f"{path} item {number}"
            yield Record(where, _object(item, where, reading))
    else:
        yield from _jsonl_records(rest, path, reading, first_number=blank + 1)


def _missing_column(path: Path, columns: list[str], reading: Reading) -> UserError:
    named = ", ".join(columns) or "none"
    return reading.error(f"{path}: no column '{reading.field}' (columns: {named}); {reading.fix}")


def _row_fields(header: list[str], row: list[str], where: str, reading: Reading) -> dict[Any, Any]:
    """A csv row by column name, as csv.DictReader makes it: missing values None, extra ones a list under None."""
    fields: dict[Any, Any] = dict(zip(header, row, strict=False))  # a short or long row is allowed here
    if len(row) > len(header):
        if not reading.wide_rows:
            raise reading.error(
                f"{where}: has more fields than the header ({len(header)} named, {len(row)} found); quote a text "
                "holding commas or remove the extra fields"
            )
        fields[None] = row[len(header) :]
    for name in header[len(row) :]:
        fields[name] = None
    return fields


def _csv_records(lines: Iterator[str], path: Path, reading: Reading) -> Iterator[Record]:
    # The csv module caps a field at 128 KiB by default; a document may be far longer.
    csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
    reader = csv.reader(lines)  # lines keep their newline, so quoted fields may span lines
    try:
        header = next(reader, None)
        if header is None:
            return
        if reading.field is not None and reading.field not in header:
            raise _missing_column(path, header, reading)
        for row in reader:
            where = f"{path}:{reader.line_num}"
            yield Record(where, _row_fields(header, row, where, reading) if row else None)
    except csv.Error as error:
        raise reading.error(f"{path}:{reader.line_num}: malformed CSV ({first_line(error)}); fix that line") from None


def _parquet_records(path: Path, reading: Reading) -> Iterator[Record]:
    import pyarrow.parquet as pq  # imported here: only parquet files pay for it

    try:
        with open_input(path) as handle:
            size = handle.seek(0, 2)  # the file's bytes on disk: progress counts a row's share of them
            handle.seek(0)
            yield from _parquet_rows(pq.ParquetFile(handle), size, path, reading)
    except (OSError, ValueError) as error:  # ArrowInvalid is a ValueError: not a parquet file, corrupt pages
        raise reading.error(f"cannot read {path} as parquet: {first_line(error)}; check the file") from None


def _parquet_rows(parquet: Any, size: int, path: Path, reading: Reading) -> Iterator[Record]:
    columns = parquet.schema_arrow.names
    if reading.field is not None and reading.field not in columns:
        raise _missing_column(path, columns, reading)
    wanted = None if reading.field is None else [reading.field]
    rows = itertools.count(1)
    total_rows = max(parquet.metadata.num_rows, 1)
    # One record batch at a time (pyarrow decodes a row group at most), of the wanted columns only.
    for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=wanted):
        if reading.progress is not None:
            reading.progress.input_bytes += size * batch.num_rows // total_rows
        for fields in batch.to_pylist():
            yield Record(f"{path} row {next(rows)}", fields)


def read_records(path: Path, kind: str, reading: Reading) -> Iterator[Record]:
    """The records of a file of `kind` (jsonl, json, csv or parquet), one at a time; nothing is read before the
    first is asked for."""
    if kind == "parquet":
        return _parquet_records(path, reading)
    readers = {"jsonl": _jsonl_records, "json": _json_records, "csv": _csv_records}
    return readers[kind](read_lines(path, reading), path, reading)
