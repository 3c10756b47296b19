"""The encoded-token store that `mlmtrain tokenize` writes once and `pretrain` reads many times.

Layout of a store folder: each source's tokens are a unit named after the source's fingerprint, `src-<16 hex>`:
`<unit>-NNNNN.bin` (raw token ids, uint16 when the vocabulary fits, else uint32; every document is followed by
[SEP], so a packed block is one contiguous slice), `<unit>.docs.npy` (int64 end offset of each document) and
`<unit>.json` (its source, tokenizer, counts and shards). `meta.json` names every unit (the validation text, and
each source data.train draws from in the run and in its phases) and the units each split reads, in order, with the
split's counts; `COMPLETE` is written last. A folder without `COMPLETE` is never read; a store is built in
a temporary folder and renamed into place, so a killed `tokenize` leaves nothing half-done, and a source already
encoded by the same tokenizer is linked into the new store instead of being encoded again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mlmtrain.config import Config, field_default, is_remote, phase_configs, save_config, train_specs
from mlmtrain.data.encoding import EncodedChunk, EncoderSpec, worker_count
from mlmtrain.data.remote import join, push_folder, read_remote_text, remote_folder_of_ours, same_files
from mlmtrain.data.shares import Share
from mlmtrain.data.sources import corpus_splits, data_cache, train_corpora
from mlmtrain.data.tokenizer import (
    TOKENIZER_FILES,
    TOKENIZER_KINDS,
    TOKENIZER_META,
    copy_tokenizer,
    extend_tokenizer,
    frequent_split_words,
    is_tokenizer_folder,
    load_tokenizer,
    same_tokenizer,
    save_tokenizer,
    text_encoder,
    tokenizer_fingerprint,
    tokenizer_record,
    train_tokenizer,
)
from mlmtrain.errors import UserError, first_line, redact
from mlmtrain.readers import read_json
from mlmtrain.runtime.distributed import DistContext, on_main
from mlmtrain.runtime.durable import fsync_dir, fsync_tree, write_marker
from mlmtrain.runtime.files import building, check_apart, check_replaceable, local_inputs, replace_folder
from mlmtrain.runtime.progress import progress_bar, say

STORE_FORMAT = 3  # 3: each source's tokens a unit of their own (2: one set of files per split)
COMPLETE = "COMPLETE"
SHARD_TOKENS = 1 << 28  # 256 Mi tokens a shard: 512 MB as uint16, small enough to copy, large enough to be few
DUPLICATE_BUCKET = 1 << 22  # document digests counted at a time for exact duplicates: 32 MB of them at most
_NPY_HEADER_BYTES = 128  # a document index's .npy header, written first with room for any count, then filled in
# every name a store folder holds; meta.json is the marker of a folder mlmtrain wrote (format 2's names too, so an
# older store is still recognised as mlmtrain's and replaced)
STORE_FILES = re.compile(
    r"meta\.json|COMPLETE|mlmtrain\.yaml|src-[0-9a-f]{16}(?:\.json|-\d{5}\.bin|\.docs\.npy|\.hashes)"
    r"|(?:train|validation)(?:-\d{5}\.bin|\.docs\.npy)"
)


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


def unit_name(fingerprint: str) -> str:
    """The files of one source's tokens are named after its fingerprint: `src-<16 hex>`."""
    return f"src-{fingerprint}"


@dataclass
class UnitStats:
    """The counts of one source's tokens, as its record (`<unit>.json`) and meta.json give them."""

    documents: int = 0
    tokens: int = 0
    words: int = 0
    unk_tokens: int = 0
    duplicates: int = 0  # documents whose exact text came earlier in the source
    shards: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: UnitStats) -> None:
        for name in ("documents", "tokens", "words", "unk_tokens", "duplicates"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def figures(self) -> dict[str, int]:
        """The counts a split's entry in meta.json holds (words and unknown tokens where they were counted)."""
        counted = {"words": self.words, "unk_tokens": self.unk_tokens} if self.words else {}
        return {"documents": self.documents, "tokens": self.tokens, "duplicates": self.duplicates, **counted}


def _npy_header(count: int) -> bytes:
    """The .npy (version 1.0) header of `count` int64 values, padded to _NPY_HEADER_BYTES."""
    text = f"{{'descr': '<i8', 'fortran_order': False, 'shape': ({count},), }}"
    text = text.ljust(_NPY_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1")


def count_duplicates(path: Path, count: int) -> int:
    """Documents whose 64-bit digest (in the raw uint64 file `path`) came earlier: counted a bucket of digests at a
    time (by digest modulo the number of buckets), so memory holds DUPLICATE_BUCKET of them, not all."""
    if count == 0:
        return 0
    digests = np.memmap(path, dtype=np.uint64, mode="r", shape=(count,))
    buckets = -(-count // DUPLICATE_BUCKET)
    if buckets == 1:
        return count - len(np.unique(digests))
    repeated = 0
    for bucket in range(buckets):
        parts = [
            block[block % np.uint64(buckets) == bucket]
            for block in (digests[start : start + DUPLICATE_BUCKET] for start in range(0, count, DUPLICATE_BUCKET))
        ]
        members = np.concatenate(parts)
        repeated += len(members) - len(np.unique(members))
    return repeated


class UnitWriter:
    """Appends encoded chunks to one source's shard files; the document index and the digests stream to disk as
    they come, so memory holds one chunk whatever the corpus size."""

    def __init__(self, folder: Path, unit: str, dtype: np.dtype) -> None:
        self.folder, self.unit, self.dtype = folder, unit, np.dtype(dtype)
        self.stats = UnitStats()
        self._shard = None
        self._in_shard = 0
        self._docs = open(folder / f"{unit}.docs.npy", "wb")
        self._docs.write(_npy_header(0))  # rewritten with the count at close
        self._hashes = open(folder / f"{unit}.hashes", "wb")

    def _open_shard(self) -> None:
        self._close_shard()
        name = f"{self.unit}-{len(self.stats.shards):05d}.bin"
        self._shard = open(self.folder / name, "wb")
        self.stats.shards.append({"file": name, "tokens": 0})
        self._in_shard = 0

    def _close_shard(self) -> None:
        if self._shard is not None:
            _flush(self._shard)  # every shard on disk before the store is marked complete

    def write(self, chunk: EncodedChunk) -> None:
        ids = chunk.ids.astype(self.dtype, copy=False)
        (self.stats.tokens + np.cumsum(chunk.lengths, dtype=np.int64)).tofile(self._docs)
        chunk.hashes.astype(np.uint64, copy=False).tofile(self._hashes)
        start = 0
        while start < len(ids):
            if self._shard is None or self._in_shard >= SHARD_TOKENS:
                self._open_shard()
            take = min(len(ids) - start, SHARD_TOKENS - self._in_shard)
            ids[start : start + take].tofile(self._shard)
            self._in_shard += take
            self.stats.shards[-1]["tokens"] += take
            start += take
        self.stats.tokens += len(ids)
        self.stats.documents += len(chunk.lengths)
        self.stats.words += chunk.words
        self.stats.unk_tokens += chunk.unk_tokens

    def close(self, record: dict[str, Any]) -> UnitStats:
        """Finish the files and write the unit's record (`record` plus its counts), the unit's last file."""
        self._close_shard()
        self._docs.seek(0)
        self._docs.write(_npy_header(self.stats.documents))
        _flush(self._docs)
        self._hashes.close()
        hashes = self.folder / f"{self.unit}.hashes"
        self.stats.duplicates = count_duplicates(hashes, self.stats.documents)
        hashes.unlink()
        record = {**record, **self.stats.figures(), "shards": self.stats.shards}
        (self.folder / f"{self.unit}.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        return self.stats


def _flush(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()


# ---------------------------------------------------------------------------------------------
# Reading


def _damaged(folder: Path, what: str) -> UserError:
    return UserError("data", f"token store {folder} is damaged: {what}; run `mlmtrain tokenize` again to rebuild it")


class SourceTokens:
    """One source's tokens in a complete store (`<unit>-NNNNN.bin`, `<unit>.docs.npy`, `<unit>.json`): the unit
    a split concatenates, and that a store built later reuses when the source and the tokenizer are the same."""

    def __init__(self, folder: Path, unit: str, dtype: np.dtype) -> None:
        self.folder, self.unit, self.dtype = Path(folder), unit, np.dtype(dtype)
        try:
            self.record = read_json(self.folder / f"{unit}.json")
        except (OSError, ValueError):
            raise _damaged(self.folder, f"cannot read {unit}.json") from None
        if not isinstance(self.record, dict) or not isinstance(self.record.get("shards"), list):
            raise _damaged(self.folder, f"{unit}.json is not a record of tokens")
        self.num_tokens = int(self.record["tokens"])
        self.num_documents = int(self.record["documents"])
        self.shards = [self._shard(shard) for shard in self.record["shards"]]
        docs = self.folder / f"{unit}.docs.npy"
        try:
            self.doc_ends = np.load(docs, mmap_mode="r", allow_pickle=False)  # a store may come from anyone
        except (OSError, ValueError):
            raise _damaged(self.folder, f"cannot read {docs.name}") from None
        if len(self.doc_ends) != self.num_documents:
            raise _damaged(
                self.folder, f"{docs.name} lists {len(self.doc_ends)} documents, {unit}.json {self.num_documents}"
            )

    def _shard(self, shard: dict[str, Any]) -> np.ndarray:
        path = self.folder / shard["file"]
        expected = int(shard["tokens"]) * self.dtype.itemsize
        actual = path.stat().st_size if path.exists() else -1
        if actual != expected:
            raise _damaged(self.folder, f"{shard['file']} has {max(actual, 0)} bytes, expected {expected}")
        return np.memmap(path, dtype=self.dtype, mode="r") if expected else np.zeros(0, dtype=self.dtype)

    def files(self) -> list[str]:
        return [f"{self.unit}.json", f"{self.unit}.docs.npy", *(shard["file"] for shard in self.record["shards"])]


class TokenStore:
    """Read-only view of one split of a complete store (or of the units named: one source of a mixture): the tokens
    of its sources one after another, memory-mapped; token slices and documents."""

    def __init__(self, folder: Path, split: str, units: Optional[list[str]] = None) -> None:
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        if units is None and split not in self.meta["splits"]:
            raise UserError("data", f"token store {self.folder} has no '{split}' split; run `mlmtrain tokenize` again")
        missing = [unit for unit in units or () if unit not in self.meta.get("units", {})]
        if missing:
            raise UserError(
                "data", f"token store {self.folder} does not hold the source {split}; run `mlmtrain tokenize` again"
            )
        self.split = split
        self.dtype = np.dtype(self.meta["dtype"])
        units = units if units is not None else self.meta["splits"][split]["sources"]
        self.sources = [SourceTokens(self.folder, unit, self.dtype) for unit in units]
        self.num_tokens = sum(source.num_tokens for source in self.sources)
        self.num_documents = sum(source.num_documents for source in self.sources)
        self._shards = [shard for source in self.sources for shard in source.shards]
        self._starts = list(np.cumsum([0] + [len(shard) for shard in self._shards[:-1]]))
        offsets = np.cumsum([0] + [source.num_tokens for source in self.sources[:-1]])
        if len(self.sources) == 1:
            self.doc_ends = self.sources[0].doc_ends
        else:  # several sources: their indexes shifted to the split's stream
            shifted = [source.doc_ends + offset for source, offset in zip(self.sources, offsets, strict=True)]
            self.doc_ends = np.concatenate(shifted).astype(np.int64)

    @property
    def tokenizer_fingerprint(self) -> str:
        return self.meta["tokenizer_fingerprint"]

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """Token ids [start, stop) of the split's concatenated stream (may span shards)."""
        pieces = []
        while start < stop:
            shard = bisect_right(self._starts, start) - 1
            offset = start - self._starts[shard]
            take = min(stop - start, len(self._shards[shard]) - offset)
            pieces.append(self._shards[shard][offset : offset + take])
            start += take
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def document(self, index: int) -> np.ndarray:
        """Document `index` without its trailing [SEP]."""
        start = int(self.doc_ends[index - 1]) if index > 0 else 0
        return self.tokens(start, int(self.doc_ends[index]) - 1)


def read_meta(folder: Path) -> dict[str, Any]:
    """meta.json of a complete store; UserError for a missing, unfinished or foreign folder."""
    folder = Path(folder)
    if not (folder / "meta.json").is_file():
        raise UserError(
            "data",
            f"no token store at {folder}; run `mlmtrain tokenize --config ...` first "
            "(or set data.use_store: false to tokenize on the fly)",
        )
    if not (folder / COMPLETE).exists():
        raise UserError(
            "data", f"token store {folder} is incomplete (tokenize was interrupted); run `mlmtrain tokenize` again"
        )
    try:
        meta = read_json(folder / "meta.json")
    except (OSError, ValueError) as error:
        raise UserError(
            "data", f"token store {folder}: unreadable meta.json ({first_line(error)}); run `mlmtrain tokenize` again"
        ) from None
    damaged = UserError("data", f"token store {folder}: meta.json is damaged; run `mlmtrain tokenize` again")
    if not isinstance(meta, dict):
        raise damaged
    if meta.get("format") != STORE_FORMAT:
        raise UserError(
            "data",
            f"token store {folder} has format {meta.get('format')}, this mlmtrain reads "
            f"{STORE_FORMAT}; run `mlmtrain tokenize` again",
        )
    splits = meta.get("splits")
    if not isinstance(splits, dict) or "dtype" not in meta:  # valid JSON, but not what a store writes
        raise damaged
    named = meta.get("units")
    for units in [*(split.get("sources") if isinstance(split, dict) else None for split in splits.values()), named]:
        if not isinstance(units, (list, dict)) or not all(
            isinstance(u, str) and STORE_FILES.fullmatch(u + ".json") for u in units
        ):
            raise damaged
    return meta


def store_is_current(folder: Path, fingerprint: str, splits: dict[str, list[str]], units: list[str]) -> bool:
    """A complete, undamaged store built by this tokenizer, holding these units, these for each split: nothing to
    do."""
    try:
        meta = read_meta(folder)
        for unit in meta["units"]:  # shard sizes and document index: a crash or a bad copy may have cut them
            SourceTokens(folder, unit, np.dtype(meta["dtype"]))
    except UserError as error:
        if Path(folder).exists():
            say(f"{error.message.split('; ')[0]}; encoding it again")
        return False
    split_units = {split: entry["sources"] for split, entry in meta["splits"].items()}
    same_units = sorted(meta["units"]) == sorted(units)
    return meta.get("tokenizer_fingerprint") == fingerprint and split_units == splits and same_units


def reusable_unit(folder: Path, unit: str, fingerprint: str, dtype: np.dtype) -> Optional[SourceTokens]:
    """The tokens of source `unit` in the complete store at `folder`, when that tokenizer encoded them whole: a new
    store links them in instead of encoding the source again (adding a source leaves the others as they are)."""
    try:
        meta = read_meta(folder)
        source = SourceTokens(folder, unit, np.dtype(meta["dtype"]))
    except UserError:
        return None
    same = source.record.get("tokenizer_fingerprint") == fingerprint and source.dtype == np.dtype(dtype)
    return source if same else None


def link_unit(source: SourceTokens, staging: Path) -> UnitStats:
    """The files of `source` in `staging`, hard-linked (copied where the file system has no links)."""
    for name in source.files():
        try:
            os.link(source.folder / name, staging / name)
        except OSError:
            shutil.copy2(source.folder / name, staging / name)
    record = source.record
    stats = UnitStats(shards=record["shards"])
    for name in ("documents", "tokens", "words", "unk_tokens", "duplicates"):
        setattr(stats, name, int(record.get(name, 0)))
    return stats


# ---------------------------------------------------------------------------------------------
# Remote stores and tokenizers (data.store and tokenizer.path as URLs): copies in data.cache_dir


@dataclass(frozen=True)
class _RemoteFolder:
    key: str
    url: str
    local: Path  # its copy in the cache, where cfg.store_dir or cfg.tokenizer_dir points
    ours: re.Pattern
    marker: str  # the file that says the folder is whole: fetched and uploaded last


def _remote_store(cfg: Config) -> Optional[_RemoteFolder]:
    if not (cfg.data.store and is_remote(cfg.data.store)):
        return None
    return _RemoteFolder("data.store", cfg.data.store, cfg.store_dir, STORE_FILES, COMPLETE)


def _remote_tokenizer(cfg: Config) -> Optional[_RemoteFolder]:
    if not (cfg.tokenizer.path and is_remote(cfg.tokenizer.path)):
        return None
    return _RemoteFolder("tokenizer.path", cfg.tokenizer.path, cfg.tokenizer_dir, TOKENIZER_FILES, TOKENIZER_META)


def _fetch(cfg: Config, remote: Optional[_RemoteFolder], required: bool) -> None:
    """The cache's copy of `remote` made current when the remote folder is whole (for a store: COMPLETE there);
    `required`: a store that is not there is an error (pretrain reads it)."""
    if remote is None:
        return
    names = remote_folder_of_ours(remote.url, remote.ours, remote.key)
    whole = COMPLETE in names if remote.key == "data.store" else bool(names)
    if not whole:
        if required and remote.key == "data.store":
            raise UserError(
                "data",
                f"data.store {redact(remote.url)} holds no complete token store; run `mlmtrain tokenize --config ...`",
            )
        return
    cache = data_cache(cfg.data)
    if remote.key == "data.store":  # its meta.json, which a build dates, names the store
        local_meta = remote.local / "meta.json"
        current = (
            (remote.local / COMPLETE).exists()
            and local_meta.is_file()
            and local_meta.read_text(encoding="utf-8") == read_remote_text(join(remote.url, "meta.json"), remote.key)
        )
    else:
        current = same_files(remote.url, remote.local, names, remote.key)
    if current:
        cache.used(remote.local)
        return
    say(f"{remote.key}: fetching {redact(remote.url)} into the cache ({sum(names.values()) / 1e6:,.1f} MB)")
    cache.fetch_folder(remote.url, remote.local, names, remote.marker, remote.key)


def _push(remote: Optional[_RemoteFolder]) -> None:
    """Upload the local copy to `remote` unless the remote folder already holds it."""
    if remote is None or not remote.local.is_dir():
        return
    local = {path.name: path.stat().st_size for path in remote.local.iterdir() if remote.ours.fullmatch(path.name)}
    if remote.marker not in local:
        return
    present = remote_folder_of_ours(remote.url, remote.ours, remote.key)
    identifying = {"meta.json": local["meta.json"]} if remote.key == "data.store" else local  # a store's is dated
    if present == local and same_files(remote.url, remote.local, identifying, remote.key):
        return
    say(f"{remote.key}: uploading {remote.local} to {redact(remote.url)}")
    push_folder(remote.local, remote.url, sorted(local), remote.marker, remote.ours, remote.key)


def fetch_remote_copies(cfg: Config) -> None:
    """On each machine (every process calls it; the cache's lock lets one fetch): the copies of a remote data.store
    and tokenizer.path that pretrain reads, made current."""
    _fetch(cfg, _remote_tokenizer(cfg), required=False)
    if cfg.data.use_store:
        _fetch(cfg, _remote_store(cfg), required=True)


# ---------------------------------------------------------------------------------------------
# The `tokenize` command


def _tokenizer_settings(cfg: Config, train_fingerprint: str) -> dict[str, Any]:
    settings = asdict(cfg.tokenizer)
    settings.pop("path")
    # the defaults, unstated: the record of a folder made before tokenizer.kind and tokenizer.train_sample_bytes
    for key in ("kind", "train_sample_bytes"):
        if settings[key] == field_default("tokenizer", key):
            settings.pop(key)
    return {"corpus": train_fingerprint, "tokenizer": settings}


def tokenizer_plan(cfg: Config, train_corpus: Any) -> tuple[str, dict[str, Any]]:
    """What `prepare_tokenizer` will do, decided without changing anything: ("copy", record) for
    tokenizer.pretrained, ("reuse", record) when cfg.tokenizer_dir is current (or not trained by mlmtrain),
    ("train", record) otherwise; record is what mlmtrain-tokenizer.json will say. With tokenizer.extend_vocab,
    ("extend", record) unless cfg.tokenizer_dir already holds that extension of that corpus ("reuse")."""
    folder = cfg.tokenizer_dir
    if cfg.tokenizer.pretrained and cfg.tokenizer.extend_vocab:
        wanted = {
            "copied_from": cfg.tokenizer.pretrained,
            "extend_vocab": cfg.tokenizer.extend_vocab,
            "corpus": train_corpus.fingerprint(),
        }
        record = tokenizer_record(folder) or {}
        current = is_tokenizer_folder(folder) and {key: record.get(key) for key in wanted} == wanted
        return ("reuse", record) if current else ("extend", wanted)
    if cfg.tokenizer.pretrained:
        pretrained = cfg.tokenizer.pretrained
        same = Path(pretrained).resolve() == folder.resolve() or _holds_it(folder, pretrained)
        return ("reuse" if same else "copy"), {"copied_from": pretrained}
    settings = _tokenizer_settings(cfg, train_corpus.fingerprint())
    if is_tokenizer_folder(folder) and tokenizer_record(folder) in (None, settings):
        return "reuse", settings
    return "train", settings


def _holds_it(folder: Path, pretrained: str) -> bool:
    """Whether tokenizer.path already holds the tokenizer of `pretrained`, a local folder (the same vocabulary and
    normalizer): it is then kept as it is, record included, so a run that trained it and shares the folder finds it
    still current. A hub name is not looked up here (a resumed run copies it from its checkpoint, offline)."""
    # one that does not load is not the same: copy, which says what is wrong with tokenizer.pretrained
    return Path(pretrained).is_dir() and is_tokenizer_folder(folder) and same_tokenizer(folder, pretrained)


def prepare_tokenizer(cfg: Config, train_corpus: Any, tokenizer_source: Optional[Path] = None) -> Any:
    """The tokenizer for this config: reused when it is already there and current, else trained and saved.
    A copy of tokenizer.pretrained is read from `tokenizer_source` when given (the checkpoint a run of
    model.init_from resumes holds the base's tokenizer; the base may be gone), recorded under the same name.

    Returns a transformers fast tokenizer loaded from `cfg.tokenizer_dir`. Another mlmtrain building the same
    folder is waited for (WordPiece training is not reproducible: two would make two different tokenizers).
    """
    folder = cfg.tokenizer_dir
    remote = _remote_tokenizer(cfg)
    _fetch(cfg, remote, required=False)  # a remote tokenizer.path: its copy in the cache is the folder
    with building(folder, "tokenizer", "tokenizer.path", _waiting_for("the tokenizer", folder)):
        tokenizer = _prepare_tokenizer(cfg, train_corpus, tokenizer_source)
    _push(remote)
    return tokenizer


def _waiting_for(what: str, folder: Path) -> Callable[[], None]:
    return lambda: say(f"another mlmtrain is building {what} in {folder}; waiting for it to finish")


def _prepare_tokenizer(cfg: Config, train_corpus: Any, tokenizer_source: Optional[Path]) -> Any:
    folder = cfg.tokenizer_dir
    action, record = tokenizer_plan(cfg, train_corpus)
    if action == "reuse":
        if tokenizer_record(folder) is None:
            say(f"tokenizer: using the existing tokenizer in {folder} (not trained by mlmtrain)")
        else:
            say(f"tokenizer: {folder} is up to date")
        return load_tokenizer(folder)
    # refuse a folder that is not ours before the slow part, not after it
    check_replaceable(folder, TOKENIZER_META, TOKENIZER_FILES, "tokenizer", "tokenizer.path")
    if action == "copy":
        copy_tokenizer(load_tokenizer(tokenizer_source or cfg.tokenizer.pretrained), folder, record)
        say(f"tokenizer: copied {tokenizer_source or cfg.tokenizer.pretrained} to {folder}")
        return load_tokenizer(folder)
    if action == "extend":
        base, name = load_tokenizer(cfg.tokenizer.pretrained), cfg.tokenizer.pretrained
        sample = train_corpus.sample(cfg.tokenizer.train_sample_bytes)
        words = frequent_split_words(base, sample, cfg.tokenizer.extend_vocab, name)
        extend_tokenizer(base, words, folder, {**record, "added_words": words}, name)
        say(
            f"tokenizer: {name} with {len(words):,} words of the corpus added ({', '.join(words[:5])}, ...) -> {folder}"
        )
        return load_tokenizer(folder)
    if (folder / TOKENIZER_META).is_file():
        say(f"tokenizer: the corpus or tokenizer settings changed; training a new one in {folder}")
    started = time.perf_counter()
    trained = train_tokenizer(train_corpus.sample(cfg.tokenizer.train_sample_bytes), cfg.tokenizer, report=say)
    save_tokenizer(trained, folder, cfg.tokenizer, model_max_length=cfg.model.max_position_embeddings, record=record)
    say(
        f"tokenizer: trained {TOKENIZER_KINDS[cfg.tokenizer.kind]}, {trained.get_vocab_size():,} tokens, in "
        f"{time.perf_counter() - started:.1f}s -> {folder}"
    )
    return load_tokenizer(folder)


def check_outputs_apart(cfg: Config) -> None:
    """UserError when a folder the config writes (train.run_dir, tokenizer.path, data.store) is or lies inside one it
    reads (`runtime.files.check_apart`): a file or folder of data.train or data.validation (the next run would read
    the run's files as text), the folder of model.init_from, distill.teacher or tokenizer.pretrained; nor may the
    tokenizer and store folders, which are replaced whole, hold one. tokenizer.path may be such a model or tokenizer
    folder itself: its tokenizer is then used as it is."""
    validation = [cfg.data.validation] if isinstance(cfg.data.validation, str) else cfg.data.validation or []
    read = [("data.validation", spec) for spec in validation]  # and data.train: the run's and each phase's
    read += [("data.train", spec) for config in (cfg, *phase_configs(cfg)) for spec in train_specs(config.data.train)]
    data = local_inputs(read)
    models = local_inputs(
        [
            ("model.init_from", cfg.model.init_from),
            ("distill.teacher", cfg.distill.teacher),
            ("tokenizer.pretrained", cfg.tokenizer.pretrained),
        ]
    )
    tokenizer = cfg.tokenizer_dir.resolve()
    used_in_place = [(key, path) for key, path in models if path.resolve() != tokenizer]
    for key, folder, inputs in (
        ("tokenizer.path", cfg.tokenizer_dir, data + used_in_place),
        ("data.store", cfg.store_dir, data + models),
    ):
        check_apart(folder, key, inputs, f"set {key} to a folder outside it", topic="config")
    # a run may read what it holds (tokenizer.pretrained: one of its own checkpoints, as a resume's fix names)
    fix = "set train.run_dir to a folder outside it"
    check_apart(Path(cfg.train.run_dir), "train.run_dir", data + models, fix, topic="config", holds=False)


def tokenize_corpus(
    cfg: Config, quiet: bool = False, tokenizer_source: Optional[Path] = None, ctx: Optional[DistContext] = None
) -> Path:
    """`mlmtrain tokenize`: train (or reuse) the tokenizer, then encode train and validation into the store
    (`tokenizer_source`: as for `prepare_tokenizer`) with data.tokenize_workers processes.

    Under torchrun every process calls it with its `ctx`: process 0 prepares the tokenizer, decides what to encode
    and writes the store; every process encodes its share of the documents (shares.py). Each returns the store."""
    ctx = ctx or DistContext()
    workers = worker_count(cfg.data.tokenize_workers)  # each process checks its own machine
    share = Share(ctx)
    target = cfg.store_dir
    if ctx.is_main:
        built = on_main(ctx, lambda: _build_on_main(cfg, target, quiet, tokenizer_source, share, workers))
        return built or target
    try:
        plan = share.announce(None)
        sources = store_corpora(cfg) if plan else {}  # opened once, for every unit to encode
        for unit, spec in plan or ():
            share.encode(lambda unit=unit: sources[unit].corpus, spec, workers)
    except UserError:
        pass  # process 0 stops on the same verdict and shares it next
    on_main(ctx, lambda: None)
    return target


def _build_on_main(
    cfg: Config, target: Path, quiet: bool, tokenizer_source: Optional[Path], share: Share, workers: int
) -> Path:
    try:
        remote = _remote_store(cfg)
        _fetch(cfg, remote, required=False)  # its sources may be reused, and it may be current already
        # a store folder that is not ours is refused before the tokenizer is trained, and never replaced
        check_replaceable(target, "meta.json", STORE_FILES, "data", "data.store")
        # two runs sharing one store (a sweep) build it once: the second waits, then finds it up to date
        with building(target, "data", "data.store", _waiting_for("the token store", target)):
            built = _tokenize_corpus(cfg, target, quiet, tokenizer_source, share, workers)
        _push(remote)
        return built
    finally:
        if not share.announced:  # the other processes wait to hear what to encode: nothing
            share.announce(None)


class _SplitProgress:
    """Process 0's writer of one source's chunks, with its progress: MB read, tokens, MB/s, tokens/s, and the time
    left where the input's size is known."""

    def __init__(self, writer: UnitWriter, corpus: Any, bar: Any, source: StoreSource) -> None:
        self.writer, self.corpus, self.bar, self.source = writer, corpus, bar, source
        self.started, self.shown_mb = time.perf_counter(), 0

    def write(self, chunk: EncodedChunk) -> None:
        self.writer.write(chunk)
        read_mb = self.corpus.stats.input_bytes // 1_000_000
        self.bar.update(read_mb - self.shown_mb)
        self.shown_mb = read_mb
        seconds = max(time.perf_counter() - self.started, 1e-9)
        tokens = self.writer.stats.tokens
        self.bar.set_postfix(
            tokens=f"{tokens:,}",
            MB_s=f"{self.corpus.stats.bytes / 1e6 / seconds:.1f}",
            tok_s=f"{tokens / seconds:,.0f}",
        )

    def finish(self) -> None:
        if self.writer.stats.tokens == 0:
            source = self.source
            what = f"the {source.split} split" if source.name == source.split else f"the source {source.name}"
            raise UserError("data", f"{what} is empty ({self.corpus.describe()}); point data.{source.split} at text")


@dataclass
class StoreSource:
    """One unit a store encodes: the split it belongs to, its name (a mixture source's, else the split's), its
    documents."""

    split: str
    name: str
    corpus: Any

    @property
    def label(self) -> str:
        """How lines name it: the split ("train"), or a mixture's source by split and name ("train books")."""
        return self.name if self.name == self.split else f"{self.split} {self.name}"


def store_corpora(cfg: Config) -> dict[str, StoreSource]:
    """What a store for `cfg` encodes, by unit: the validation text, then every source data.train draws from, in the
    run and in each of its phases, each once (a source another phase adds is encoded beside the others)."""
    validation = corpus_splits(cfg.data)[1]
    units = {unit_name(validation.fingerprint()): StoreSource("validation", "validation", validation)}
    for config in [cfg, *phase_configs(cfg)]:
        for name, corpus in train_corpora(config.data):
            units.setdefault(unit_name(corpus.fingerprint()), StoreSource("train", name, corpus))
    return units


def source_units(cfg: Config) -> list[tuple[str, str]]:
    """(name, unit) of each source data.train of `cfg` (one phase's config) draws from: where its tokens are."""
    return [(name, unit_name(corpus.fingerprint())) for name, corpus in train_corpora(cfg.data)]


def _tokenize_corpus(
    cfg: Config, target: Path, quiet: bool, tokenizer_source: Optional[Path], share: Share, workers: int
) -> Path:
    started = time.perf_counter()
    sources = store_corpora(cfg)
    validation = next(unit for unit, source in sources.items() if source.split == "validation")
    splits = {"train": [unit for _, unit in source_units(cfg)], "validation": [validation]}
    tokenizer = prepare_tokenizer(cfg, corpus_splits(cfg.data)[0], tokenizer_source)
    fingerprint = tokenizer_fingerprint(tokenizer)
    if store_is_current(target, fingerprint, splits, list(sources)):
        say(f"token store {target} is up to date; nothing to do")
        return target

    vocab_size = tokenizer.backend_tokenizer.get_vocab_size()
    dtype = ids_dtype(vocab_size)
    spec = EncoderSpec(text_encoder(tokenizer).to_str(), tokenizer.sep_token_id, tokenizer.unk_token_id, dtype.name)
    # a source already encoded by this tokenizer in the store is linked in, not encoded again
    reused = {unit: reusable_unit(target, unit, fingerprint, dtype) for unit in sources}
    to_encode = [unit for unit in sources if reused[unit] is None]
    stats: dict[str, UnitStats] = {}

    def encode_unit(staging: Path, unit: str) -> UnitStats:
        source = sources[unit]
        corpus, label = source.corpus, source.label
        writer = UnitWriter(staging, unit, dtype)
        size = corpus.input_size()
        total_mb = None if size is None else max(1, size // 1_000_000)
        with progress_bar(total_mb, "MB", f"encode {label}", disable=quiet) as bar:
            share.encode(lambda: corpus, spec, workers, _SplitProgress(writer, corpus, bar, source))
        record = {"format": STORE_FORMAT, "source": unit.removeprefix("src-"), "description": corpus.describe()}
        unit_stats = writer.close({**record, "tokenizer_fingerprint": fingerprint, "dtype": dtype.name})
        if corpus.stats.invalid_utf8_lines:
            say(f"{label}: {corpus.stats.invalid_utf8_lines:,} lines had invalid UTF-8 bytes (replaced by U+FFFD)")
        if corpus.stats.skipped_empty:
            say(f"{label}: {corpus.stats.skipped_empty:,} empty or whitespace-only documents skipped")
        return unit_stats

    def write(staging: Path) -> None:
        share.announce([(unit, spec) for unit in to_encode])
        for unit, source in sources.items():
            kept = reused[unit]
            stats[unit] = encode_unit(staging, unit) if kept is None else link_unit(kept, staging)
            if kept is not None:
                say(f"{source.label}: {source.corpus.describe()} is already encoded in {target}; kept")
        split_stats = {split: _summed(stats[unit] for unit in units) for split, units in splits.items()}
        meta = {
            "format": STORE_FORMAT,
            "tokenizer_fingerprint": fingerprint,
            "vocab_size": vocab_size,
            "dtype": dtype.name,
            "sep_id": tokenizer.sep_token_id,
            "units": {
                unit: {"split": source.split, "name": source.name, "description": source.corpus.describe()}
                for unit, source in sources.items()
            },
            "splits": {split: {"sources": units, **split_stats[split].figures()} for split, units in splits.items()},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (staging / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        save_config(cfg, staging)
        fsync_tree(staging)
        write_marker(staging / COMPLETE)

    replace_folder(
        target, write, marker="meta.json", ours=STORE_FILES, topic="data", key="data.store", what="the token store"
    )
    fsync_dir(target.parent)  # the rename itself must reach the disk

    seconds = time.perf_counter() - started
    # every training unit: the run's and its phases', one that is also the validation source included
    train_units = [unit for unit, source in sources.items() if source.split == "train" or unit in splits["train"]]
    train = _summed(stats[unit] for unit in train_units)
    valid = stats[validation]
    read = sum(sources[unit].corpus.stats.bytes for unit in to_encode)
    mixed = len(train_units)
    say(
        f"tokenize: {train.documents:,} train / {valid.documents:,} validation documents"
        f"{f' ({mixed} training sources)' if mixed > 1 else ''}, "
        f"{train.tokens:,} / {valid.tokens:,} tokens, vocabulary {vocab_size:,}, "
        f"validation UNK rate {valid.unk_tokens / max(valid.tokens, 1):.4%}, "
        f"{(valid.tokens - valid.documents) / max(valid.words, 1):.3f} tokens per word, "
        f"{train.duplicates:,} exact duplicate train documents, {workers} worker"
        f"{'s' if workers > 1 else ''}{f' x {share.ctx.world_size} processes' if share.ctx.distributed else ''}, "
        f"{seconds:.1f}s ({read / 1e6 / max(seconds, 1e-9):.1f} MB/s) -> {target}"
    )
    return target


def _summed(parts: Any) -> UnitStats:
    total = UnitStats()
    for part in parts:
        total.add(part)
    return total
