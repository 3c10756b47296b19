"""Where training text comes from: local or remote files (.txt .jsonl .json .parquet .csv, globs, folders; URLs read
through fsspec), a MosaicML Streaming dataset (`mds:PATH_OR_URL`), Python's own documentation
(`builtin:python-docs`) or a datasets hub name (`hf:NAME[/CONFIG]:SPLIT`), all streamed document by document so
memory stays bounded whatever the corpus size; plus the deterministic train/validation split by document and the
bounded sample a tokenizer trains on.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from mlmtrain.config import MDS_PREFIX, DataConfig, default_cache_dir, is_remote, local_path, mixture_of, train_specs
from mlmtrain.data.mds import mds_size, mds_texts, read_index, remote_identity
from mlmtrain.data.records import Reading, read_lines, read_records
from mlmtrain.data.remote import Cache, RemoteFile, list_files
from mlmtrain.errors import UserError, first_line, redact
from mlmtrain.runtime.hub import hub_unreachable

Spec = Union[str, list[str]]

# suffix -> reader; the text formats may also be gzip-compressed (name.txt.gz, ...)
_KINDS = {".txt": "txt", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_GZIP_KINDS = ("txt", "jsonl", "json", "csv")
SUPPORTED_SUFFIXES = ", ".join([*_KINDS, *(s + ".gz" for s, k in _KINDS.items() if k in _GZIP_KINDS)])
_MIN_PYTHON_DOCS_CHARS = 15  # shorter paragraphs of the Python docs are markup debris ("The break statement" is not)
_BUILTIN_FORMAT = 4  # bump when the builtin corpora's cleaning changes, so their token stores are rebuilt
# The docs mark keywords and names up in quotes ('the "break" statement'), some also in curly quotes around those
# ('a “"def"” statement', 'the “with” statement'): prose keeps the bare word.
_QUOTED_NAME = re.compile(r'“?"([A-Za-z_][A-Za-z0-9_]*)"”?|“([A-Za-z_][A-Za-z0-9_]*)”')
_RULE_LINE = re.compile(r"^\s*[*=\-^~+]{3,}\s*$", re.MULTILINE)  # a heading's underline
# Test suites, demos and vendored packages of the standard library: not documentation prose.
_STDLIB_SKIPPED = frozenset({"test", "tests", "idlelib", "turtledemo", "lib2to3", "site-packages", "__pycache__"})
_BLANK_LINES = re.compile(r"\n\s*\n")
_TEXT_FIELD_FIX = "set data.text_field to one of them"


@dataclass
class CorpusStats:
    """Counts of one pass over a corpus: documents and UTF-8 bytes yielded, lines with undecodable bytes (read with
    U+FFFD in their place), empty or whitespace-only documents skipped, bytes of input read."""

    documents: int = 0
    bytes: int = 0
    invalid_utf8_lines: int = 0
    skipped_empty: int = 0
    input_bytes: int = 0  # of the input read so far, as its files lie (progress against Corpus.input_size)


def _data_error(message: str) -> UserError:
    return UserError("data", message)


def _human_size(size: float) -> str:
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _text_value(value: Any, field: str, where: str) -> str:
    """The document in a record's text field; null counts as an empty document."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _data_error(
            f"{where}: field '{field}' holds {type(value).__name__}, not text; set data.text_field to a text field"
        )
    return value


# ---------------------------------------------------------------------------------------------
# Reading files


def _paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line-separated paragraphs, their lines stripped and joined with a space."""
    parts: list[str] = []
    for line in lines:
        text = line.strip()
        if text:
            parts.append(text)
        elif parts:
            yield " ".join(parts)
            parts = []
    if parts:
        yield " ".join(parts)


@dataclass(frozen=True)
class _File:
    path: Union[Path, str]  # a URL for a remote file
    kind: str
    compressed: bool
    text_field: str
    txt_documents: str
    remote: Optional[RemoteFile] = None

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        reading = Reading(
            "data", self.text_field, _TEXT_FIELD_FIX, utf8=stats, compressed=self.compressed, progress=stats
        )
        if self.kind == "txt":
            lines = read_lines(self.path, reading)
            if self.txt_documents == "paragraph":
                yield from _paragraphs(lines)
            else:
                yield from (line.rstrip("\r\n") for line in lines)
            return
        field = self.text_field
        for record in read_records(self.path, self.kind, reading):  # a blank line or row: an empty document
            yield "" if record.fields is None else _text_value(record.fields[field], field, record.where)

    def identity(self) -> dict[str, Any]:
        options = self.txt_documents if self.kind == "txt" else self.text_field
        if self.remote is not None:
            return {"url": redact(self.remote.url), "size": self.remote.size, "version": self.remote.version,
                    "opt": options}  # fmt: skip
        info = Path(self.path).stat()
        return {"file": str(Path(self.path).resolve()), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
                "opt": options}  # fmt: skip

    def size(self) -> int:
        """Its bytes as they lie (compressed for .gz)."""
        return self.remote.size if self.remote is not None else Path(self.path).stat().st_size

    def input_size(self) -> int:
        """The bytes its reader counts: a local .gz file's uncompressed size (from its trailer), else its size."""
        if not self.compressed or self.remote is not None:
            return self.size()
        with open(self.path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return max(int.from_bytes(handle.read(4), "little"), self.size())  # the trailer keeps size mod 4 GiB


# ---------------------------------------------------------------------------------------------
# Builtin and hub sources


def _prose(paragraph: str) -> Union[str, None]:
    """One paragraph of documentation as a line of prose; None for code, grammar and headings' debris."""
    if ">>>" in paragraph or "::=" in paragraph:  # an interactive example or a grammar rule: code, not prose
        return None
    unquoted = _QUOTED_NAME.sub(lambda name: name.group(1) or name.group(2), _RULE_LINE.sub("", paragraph))
    text = " ".join(unquoted.split())
    return text if len(text) >= _MIN_PYTHON_DOCS_CHARS else None


def _python_docs() -> Iterator[str]:
    """The topics of the interactive help (`pydoc_data`): the language reference's chapters, as plain text."""
    try:
        from pydoc_data.topics import topics  # pydoc_data: a large text, loaded for the built-in corpus alone
    except ImportError:
        raise _data_error(
            "builtin:python-docs needs pydoc_data, which this Python lacks; point data.train at your own text"
        ) from None
    for name in sorted(topics):
        for paragraph in _BLANK_LINES.split(topics[name]):
            text = _prose(paragraph)
            if text is not None:
                yield text


def _stdlib_sources() -> list[Path]:

    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in _STDLIB_SKIPPED and not d.startswith("test"))
        files += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    if not files:
        raise _data_error(
            f"builtin:python-docstrings reads the standard library's source, and {root} holds none; "
            "point data.train at your own text"
        )
    return files


def _python_docstrings() -> Iterator[str]:
    """The docstrings of the standard library's Python modules, classes and functions, read with `ast` (nothing is
    imported or run), paragraph by paragraph; examples and other code are left out."""

    for path in _stdlib_sources():
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError, OSError):  # a file for another Python version, or unreadable: not prose
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for paragraph in _BLANK_LINES.split(ast.get_docstring(node) or ""):
                    text = _prose(paragraph)
                    if text is not None:
                        yield text


def _first_occurrences(texts: Iterator[str]) -> Iterator[str]:
    """Each paragraph once: pydoc's topics share whole sections and many docstrings say the same words ("Return
    self==value."), and a corpus we ship should not teach its models to memorise repeats."""
    seen: set[str] = set()
    for text in texts:
        if text not in seen:
            seen.add(text)
            yield text


# builtin:NAME -> (its texts, what they are); the names `_resolve` accepts
_BUILTIN_SOURCES = {
    "python-docs": (_python_docs, "documentation topics"),
    "python-docstrings": (_python_docstrings, "standard library docstrings"),
}


@dataclass(frozen=True)
class _Builtin:
    name: str

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        return _first_occurrences(_BUILTIN_SOURCES[self.name][0]())

    def identity(self) -> dict[str, Any]:
        # The text changes with the Python release.
        return {"builtin": self.name, "python": ".".join(map(str, sys.version_info[:3])), "format": _BUILTIN_FORMAT}

    def input_size(self) -> Optional[int]:
        return None  # known only once read

    def describe(self) -> str:
        what = _BUILTIN_SOURCES[self.name][1]
        return f"builtin:{self.name} ({what} of Python {sys.version_info[0]}.{sys.version_info[1]})"


def _hub_texts(dataset: Iterable[dict[str, Any]], field: str, where: str) -> Iterator[str]:
    """The text field of each row of a (streaming) datasets.IterableDataset."""
    features = getattr(dataset, "features", None)  # None when a streaming dataset does not know them up front
    if features is not None and field not in features:
        raise _data_error(f"{where}: no field '{field}' (fields: {', '.join(features)}); set data.text_field")
    for row in dataset:
        if field not in row:
            raise _data_error(f"{where}: no field '{field}' (fields: {', '.join(row)}); set data.text_field")
        yield _text_value(row[field], field, where)


@dataclass(frozen=True)
class _Hub:
    name: str
    config: Union[str, None]
    split: str
    text_field: str

    @property
    def label(self) -> str:
        return f"hf:{self.name}{'/' + self.config if self.config else ''}:{self.split}"

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        import datasets  # imported here: a slow import that local corpora do not need

        unreachable = hub_unreachable()
        if unreachable:  # streaming reads from the Hub as it goes: no cache to fall back on
            raise _data_error(
                f"cannot load hub dataset {self.label}: the Hugging Face Hub is unreachable ({unreachable}); "
                "connect to the internet, or download the data and point the source at local files"
            )
        try:
            dataset = datasets.load_dataset(self.name, self.config, split=self.split, streaming=True)
        except Exception as error:  # not found, offline, bad split, gated: many types, one meaning for the user
            raise _data_error(f"cannot load hub dataset {self.label}: {first_line(error)}") from error
        yield from _hub_texts(dataset, self.text_field, self.label)

    def identity(self) -> dict[str, Any]:
        return {"hub": self.name, "config": self.config, "split": self.split, "opt": self.text_field}

    def input_size(self) -> Optional[int]:
        return None  # a stream: its size is not known ahead

    def describe(self) -> str:
        return f"hub dataset {self.label}"


@dataclass(frozen=True)
class _Mds:
    """A MosaicML Streaming dataset (mds:PATH_OR_URL): its text column, shard by shard (mds.py)."""

    location: str
    text_field: str
    cache: Cache

    def texts(self, stats: CorpusStats) -> Iterator[str]:
        return mds_texts(self.location, self.text_field, self.cache, stats)

    def identity(self) -> dict[str, Any]:
        if is_remote(self.location):
            return {"mds": redact(self.location), "version": remote_identity(self.location), "opt": self.text_field}
        index = Path(local_path(self.location)).expanduser() / "index.json"
        info = index.stat() if index.is_file() else None
        return {"mds": str(index.parent.resolve()), "mtime_ns": info and info.st_mtime_ns, "opt": self.text_field}

    def input_size(self) -> int:
        return mds_size(self.location, self.text_field)

    def describe(self) -> str:
        return f"MDS dataset {redact(self.location)}"


def parse_hub_spec(spec: str, key: str = "data.train") -> tuple[str, Union[str, None], str]:
    """(name, config, split) from 'hf:NAME[/CONFIG]:SPLIT'. NAME/CONFIG has two parts; three parts read as
    ORG/NAME/CONFIG (write ORG/NAME/default for an organisation's dataset without configs)."""
    path, _, split = spec.removeprefix("hf:").partition(":")  # the split may hold ':' itself (train[:1000])
    parts = path.split("/")
    if not split or not all(parts) or len(parts) > 3:
        raise _data_error(
            f"{key}: {spec!r} must look like hf:NAME:SPLIT, hf:NAME/CONFIG:SPLIT or hf:ORG/NAME/CONFIG:SPLIT"
        )
    if len(parts) == 3:
        return f"{parts[0]}/{parts[1]}", parts[2], split
    return parts[0], (parts[1] if len(parts) == 2 else None), split


# ---------------------------------------------------------------------------------------------
# Resolving a spec


def _kind(path: Path) -> Union[tuple[str, bool], None]:
    """(reader kind, gzip-compressed) from a file name, or None when the name is not a supported one."""
    name = path.name.lower()
    compressed = name.endswith(".gz")
    kind = _KINDS.get(Path(name[:-3] if compressed else name).suffix)
    if kind is None or (compressed and kind not in _GZIP_KINDS):
        return None
    return kind, compressed


def _file_source(path: Path, key: str, text_field: str, txt_documents: str) -> _File:
    kind = _kind(path)
    if kind is None:
        raise _data_error(f"{key}: {path} has an unsupported extension; use one of {SUPPORTED_SUFFIXES}")
    if not os.access(path, os.R_OK):
        raise _data_error(f"{key}: cannot read {path} (permission denied); fix its permissions")
    return _File(path, *kind, text_field, txt_documents)


_SUPPORTED_NAME = re.compile(r"\.(?:txt|jsonl|json|parquet|csv)(?:\.gz)?$")


def _remote_sources(entry: str, key: str, text_field: str, txt_documents: str) -> list[_File]:
    """The files a URL names (a file, a glob, or a folder's supported files), read through fsspec."""
    sources = []
    for found in list_files(entry, key, _SUPPORTED_NAME):
        kind = _kind(Path(found.url.rsplit("/", 1)[-1]))
        if kind is None:
            raise _data_error(
                f"{key}: {redact(found.url)} has an unsupported extension; use one of {SUPPORTED_SUFFIXES}"
            )
        sources.append(_File(found.url, *kind, text_field, txt_documents, remote=found))
    return sources


def _folder_files(folder: Path, key: str) -> list[Path]:
    """The supported files in a folder and its subfolders, sorted; hidden files and folders are left out."""
    files = []
    for path in sorted(folder.rglob("*")):
        hidden = any(part.startswith(".") for part in path.relative_to(folder).parts)
        if path.is_file() and not hidden and _kind(path) is not None:
            files.append(path)
    if not files:
        raise _data_error(f"{key}: folder {folder} holds no {SUPPORTED_SUFFIXES} files; check the path")
    return files


Source = Union["_File", "_Builtin", "_Hub", "_Mds"]


def _entry_paths(entry: str, key: str) -> list[Path]:
    path = Path(entry).expanduser()
    if path.is_dir():
        return _folder_files(path, key)
    if path.exists():
        return [path]
    if any(char in entry for char in "*?["):
        matches = [Path(m) for m in sorted(glob.glob(str(path), recursive=True)) if os.path.isfile(m)]
        if not matches:
            raise _data_error(f"{key}: no file matches '{entry}'; check the path or glob")
        return matches
    raise _data_error(f"{key}: file {entry} does not exist; check the path")


def _resolve(spec: Spec, key: str, text_field: str, txt_documents: str, cache: Cache) -> list[Source]:
    entries = [spec] if isinstance(spec, str) else list(spec)
    if not entries or not all(isinstance(entry, str) and entry.strip() for entry in entries):
        raise _data_error(f"{key} names no source; give a path, glob, builtin:python-docs or hf:NAME:SPLIT")
    sources: list[Source] = []
    for entry in entries:
        if entry.startswith(MDS_PREFIX):
            location = entry.removeprefix(MDS_PREFIX)
            read_index(location, text_field)  # a dataset without index.json or a text column fails now
            sources.append(_Mds(location, text_field, cache))
        elif is_remote(entry):
            sources.extend(_remote_sources(entry, key, text_field, txt_documents))
        elif entry.startswith("builtin:"):
            name = entry.removeprefix("builtin:")
            if name not in _BUILTIN_SOURCES:
                known = ", ".join(_BUILTIN_SOURCES)
                raise _data_error(f"{key}: unknown {entry!r}; the builtin corpora are {known}")
            sources.append(_Builtin(name))
        elif entry.startswith("hf:"):
            sources.append(_Hub(*parse_hub_spec(entry, key), text_field))
        else:
            paths = _entry_paths(local_path(entry), key)
            sources.extend(_file_source(p, key, text_field, txt_documents) for p in paths)
    return sources


def _in_validation(text: str, fraction: float) -> bool:
    """Deterministic by content: a document (and every copy of it) always lands on the same side."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


class Corpus:
    """A re-iterable stream of documents (non-empty str) from one or more sources.

    The spec is a path, glob, folder (its supported files, recursively and sorted, hidden ones left out),
    `builtin:python-docs`, `hf:NAME[/CONFIG]:SPLIT`, or a list of these. It is resolved at construction, so a
    missing file fails at once; the text is read only while iterating. With `holdout_fraction` > 0, `keep` picks
    the training or validation side of a split by document hash.
    """

    def __init__(
        self,
        spec: Spec,
        *,
        text_field: str = "text",
        txt_documents: str = "line",
        holdout_fraction: float = 0.0,
        keep: str = "all",
        key: str = "data.train",
        cache: Optional[Cache] = None,
    ) -> None:
        if keep not in ("all", "train", "validation"):
            raise ValueError(f"keep must be 'all', 'train' or 'validation', not {keep!r}")
        if not 0.0 <= holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in [0, 1), not {holdout_fraction}")
        if txt_documents not in ("line", "paragraph"):
            raise ValueError(f"txt_documents must be 'line' or 'paragraph', not {txt_documents!r}")
        self.key = key
        self.holdout_fraction = holdout_fraction
        self.keep = keep
        self.stats = CorpusStats()
        self._options = {"text_field": text_field, "txt_documents": txt_documents}
        cache = cache or Cache(default_cache_dir(), DataConfig().cache_max_gb * 1e9)
        self._sources = _resolve(spec, key, text_field, txt_documents, cache)

    def _documents(self, stats: CorpusStats, limits: Optional[list[float]] = None) -> Iterator[str]:
        """Every non-empty document of the kept side, in source order; with `limits`, each source's documents until
        their bytes reach its limit."""
        for place, source in enumerate(self._sources):
            taken = 0
            for text in source.texts(stats):
                if not text.strip():
                    stats.skipped_empty += 1
                    continue
                if self.keep != "all" and _in_validation(text, self.holdout_fraction) != (self.keep == "validation"):
                    continue
                yield text
                if limits is not None:
                    taken += len(text.encode("utf-8"))
                    if taken >= limits[place]:
                        break

    def _shard(self, index: int, count: int, limits: Optional[list[float]] = None) -> Iterator[str]:
        stats = self.stats = CorpusStats()  # a fresh count for each pass
        for number, text in enumerate(self._documents(stats, limits)):
            if number % count == index:
                stats.documents += 1
                stats.bytes += len(text.encode("utf-8"))
                yield text

    def sample(self, budget: int) -> Iterator[str]:
        """About `budget` bytes of documents to train a tokenizer on: each source gives its share from its start, a
        share in proportion to its size where every size is known, else an equal share; all of a smaller corpus."""
        sizes = [source.size() if isinstance(source, _File) else None for source in self._sources]
        known = [size for size in sizes if size is not None]
        if len(known) == len(sizes) and sum(known) <= budget:
            return self._shard(0, 1)
        if len(known) == len(sizes):
            total = max(sum(known), 1)
            return self._shard(0, 1, [budget * size / total for size in known])
        return self._shard(0, 1, [budget / len(sizes)] * len(sizes))

    def input_size(self) -> Optional[int]:
        """The bytes of input one pass reads (its files as they lie, a .gz file uncompressed); None where a source's
        size is not known ahead (builtin, hub)."""
        sizes = [source.input_size() for source in self._sources]
        return None if None in sizes else sum(sizes)

    def __iter__(self) -> Iterator[str]:
        return self._shard(0, 1)

    def iter_shard(self, index: int, count: int) -> Iterator[str]:
        """Documents number i (in stream order) with i % count == index: the shards of 0..count-1 are disjoint and
        together are the whole corpus. Each shard reads the whole stream and keeps its share."""
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"shard index {index} of {count} is out of range")
        return self._shard(index, count)

    def describe(self) -> str:
        """A short description for logs and store metadata, e.g. '2 files (4.4 MB): a.txt, b.txt'."""
        parts = []
        files = [s for s in self._sources if isinstance(s, _File)]
        if files:
            size = sum(f.size() for f in files)
            names = ", ".join(redact(str(f.path)) for f in files[:3])
            if len(files) > 3:
                names += f" and {len(files) - 3} more"
            parts.append(f"{len(files)} file{'s' if len(files) > 1 else ''} ({_human_size(size)}): {names}")
        parts.extend(s.describe() for s in self._sources if not isinstance(s, _File))
        text = " + ".join(parts)
        if self.keep != "all":
            share = f"{self.holdout_fraction:.0%}"
            if self.keep == "validation":
                text += f", validation part ({share} of documents, by hash)"
            else:
                text += f", training part ({share} of documents held out)"
        return text

    def fingerprint(self) -> str:
        """16 hex digits that change when an input file (path, size, mtime), hub source or reading option changes."""
        identity = {
            "sources": [source.identity() for source in self._sources],
            "options": self._options,
            "holdout_fraction": self.holdout_fraction,
            "keep": self.keep,
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def data_cache(data: DataConfig) -> Cache:
    """The cache of remote copies that the data section names (data.cache_dir, data.cache_max_gb)."""
    return Cache(data.cache_folder(), data.cache_max_gb * 1e9)


def open_corpus(spec: Spec, data: DataConfig, key: str = "--data") -> Corpus:
    """All documents of a source, read with the data section's text_field, txt_documents and cache."""
    return Corpus(spec, text_field=data.text_field, txt_documents=data.txt_documents, key=key, cache=data_cache(data))


def corpus_splits(data: DataConfig) -> tuple[Corpus, Corpus]:
    """(train, validation): data.validation when set, else validation_fraction of the training documents held out
    by document hash (deterministic, the same split on every run and every rank). A mixture's train is all its
    sources one after another (what a tokenizer trains on; `train_corpora` gives each alone)."""
    train = _train_corpus(train_specs(data.train), data)
    if data.validation is not None:
        return train, open_corpus(data.validation, data, "data.validation")
    return train, _side(train_specs(data.train), data, "validation")


def train_corpora(data: DataConfig) -> list[tuple[str, Corpus]]:
    """(name, training documents) of each source data.train draws from: a mixture's sources by their names, else
    one source, "train". With data.validation null each keeps its training side (validation_fraction held out)."""
    mixture = mixture_of(data.train)
    if mixture is None:
        return [("train", _train_corpus(train_specs(data.train), data))]
    return [(entry.name, _train_corpus(entry.source, data)) for entry in mixture]


def _train_corpus(spec: Spec, data: DataConfig) -> Corpus:
    """The training documents of `spec`: all of them beside data.validation, else its training side."""
    if data.validation is not None:
        return open_corpus(spec, data, "data.train")
    _check_holdout(data)
    return _side(spec, data, "train")


def _check_holdout(data: DataConfig) -> None:
    if data.validation_fraction <= 0:
        raise _data_error(
            "data.validation is null and data.validation_fraction is 0, so there is no validation text; "
            "set data.validation to a source or data.validation_fraction to e.g. 0.05"
        )


def _side(spec: Spec, data: DataConfig, keep: str) -> Corpus:
    """One side of `spec` split by document hash (validation_fraction to validation)."""
    return Corpus(
        spec,
        holdout_fraction=data.validation_fraction,
        keep=keep,
        text_field=data.text_field,
        txt_documents=data.txt_documents,
        key="data.train",
        cache=data_cache(data),
    )
