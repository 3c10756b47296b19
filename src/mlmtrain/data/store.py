"""The encoded-token store that `mlmtrain tokenize` writes once and `pretrain` reads many times.

Layout of a store folder: `meta.json` (format, tokenizer fingerprint, per-split counts and shards),
`<split>-NNNNN.bin` (raw token ids, uint16 when the vocabulary fits, else uint32; every document is
followed by [SEP], so a packed block is one contiguous slice), `<split>.docs.npy` (int64 end offset of
each document) and `COMPLETE`, written last. A folder without `COMPLETE` is never read; a store is
built in a temporary folder and renamed into place, so a killed `tokenize` leaves nothing half-done.
"""

from __future__ import annotations

import json
import os
import re
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mlmtrain.config import Config, save_config
from mlmtrain.data.sources import corpus_splits
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
from mlmtrain.errors import UserError, first_line
from mlmtrain.readers import read_json
from mlmtrain.runtime.durable import fsync_dir, fsync_tree, write_marker
from mlmtrain.runtime.files import building, check_apart, check_replaceable, local_inputs, replace_folder
from mlmtrain.runtime.progress import progress_bar, say

STORE_FORMAT = 2  # 2: special tokens written in a document are encoded as its text (1 gave them their ids)
COMPLETE = "COMPLETE"
SPLITS = ("train", "validation")
SHARD_TOKENS = 1 << 28  # 256 Mi tokens a shard: 512 MB as uint16, small enough to copy, large enough to be few
ENCODE_BATCH = 1000  # documents per encode_batch call (the Rust encoder runs them on all cores)
# every name a store folder holds; meta.json is the marker of a folder mlmtrain wrote
STORE_FILES = re.compile(r"meta\.json|COMPLETE|mlmtrain\.yaml|(?:train|validation)(?:-\d{5}\.bin|\.docs\.npy)")


def ids_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


@dataclass
class SplitStats:
    documents: int = 0
    tokens: int = 0
    words: int = 0
    unk_tokens: int = 0
    duplicates: int = 0  # documents whose exact text came earlier in the split
    shards: list[dict[str, Any]] = field(default_factory=list)


class _SplitWriter:
    """Appends encoded documents to shard files, keeping only one batch in memory."""

    def __init__(self, folder: Path, split: str, dtype: np.dtype) -> None:
        self.folder, self.split, self.dtype = folder, split, dtype
        self.stats = SplitStats()
        self.doc_ends: list[np.ndarray] = []
        self._file = None
        self._in_shard = 0

    def _close_shard(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())  # every shard on disk before the store is marked complete
            self._file.close()

    def _open_shard(self) -> None:
        self._close_shard()
        name = f"{self.split}-{len(self.stats.shards):05d}.bin"
        self._file = open(self.folder / name, "wb")
        self.stats.shards.append({"file": name, "tokens": 0})
        self._in_shard = 0

    def write(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """ids: the batch's documents (each ending in [SEP]) concatenated; lengths: their sizes."""
        self.doc_ends.append(self.stats.tokens + np.cumsum(lengths, dtype=np.int64))
        start = 0
        while start < len(ids):
            if self._file is None or self._in_shard >= SHARD_TOKENS:
                self._open_shard()
            take = min(len(ids) - start, SHARD_TOKENS - self._in_shard)
            ids[start : start + take].astype(self.dtype, copy=False).tofile(self._file)
            self._in_shard += take
            self.stats.shards[-1]["tokens"] += take
            start += take
        self.stats.tokens += int(len(ids))
        self.stats.documents += int(len(lengths))

    def close(self) -> None:
        self._close_shard()
        ends = np.concatenate(self.doc_ends) if self.doc_ends else np.zeros(0, dtype=np.int64)
        np.save(self.folder / f"{self.split}.docs.npy", ends)


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def encode_split(
    corpus: Iterable[str], tokenizer: Any, folder: Path, split: str, *, count_words: bool, progress: Any = None
) -> SplitStats:
    """Encode every document of `corpus` into `folder` with a transformers fast tokenizer: no [CLS], the tokenizer's
    separator ([SEP], `</s>`, ...) after each. Special tokens are taken by role, not by name; written in the text,
    they are text (`text_encoder`)."""
    sep_id, unk_id = tokenizer.sep_token_id, tokenizer.unk_token_id
    tokenizer = text_encoder(tokenizer)  # the Rust tokenizer: batch encoding without per-call Python overhead
    vocab_size = tokenizer.get_vocab_size()
    writer = _SplitWriter(folder, split, ids_dtype(vocab_size))
    started = time.perf_counter()
    # 8 bytes a document, as the document index itself; a 64-bit hash collision is ~1e-3 likely at 1e8 documents
    hashes: list[np.ndarray] = []
    for batch in _batches(corpus, ENCODE_BATCH):
        hashes.append(np.fromiter((hash(text) for text in batch), dtype=np.int64, count=len(batch)))
        encodings = tokenizer.encode_batch(batch, add_special_tokens=False)
        pieces = [np.asarray(e.ids + [sep_id], dtype=np.int64) for e in encodings]
        ids = np.concatenate(pieces)
        writer.write(ids, np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces)))
        if count_words:
            writer.stats.words += sum(len(text.split()) for text in batch)
            if unk_id is not None:  # byte-level vocabularies have no unknown token
                writer.stats.unk_tokens += int(np.count_nonzero(ids == unk_id))
        if progress is not None:
            progress.update(len(batch))
            read_mb = getattr(getattr(corpus, "stats", None), "bytes", 0) / 1e6  # a Corpus counts what it read
            speed = read_mb / max(time.perf_counter() - started, 1e-9)
            progress.set_postfix(tokens=f"{writer.stats.tokens:,}", MB_s=f"{speed:.1f}", refresh=False)
    writer.close()
    writer.stats.duplicates = writer.stats.documents - len(np.unique(np.concatenate(hashes))) if hashes else 0
    return writer.stats


# ---------------------------------------------------------------------------------------------
# Reading


class TokenStore:
    """Read-only view of one split of a complete store: token slices and documents, memory-mapped."""

    def __init__(self, folder: Path, split: str) -> None:
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        if split not in self.meta["splits"]:
            raise UserError("data", f"token store {self.folder} has no '{split}' split; run `mlmtrain tokenize` again")
        info = self.meta["splits"][split]
        self.split = split
        self.dtype = np.dtype(self.meta["dtype"])
        self.num_tokens = int(info["tokens"])
        self.num_documents = int(info["documents"])
        self._shards: list[np.ndarray] = []
        self._starts: list[int] = []
        start = 0
        for shard in info["shards"]:
            path = self.folder / shard["file"]
            expected = int(shard["tokens"]) * self.dtype.itemsize
            actual = path.stat().st_size if path.exists() else -1
            if actual != expected:
                raise UserError(
                    "data",
                    f"token store {self.folder} is damaged: {shard['file']} has {max(actual, 0)} "
                    f"bytes, expected {expected}; run `mlmtrain tokenize` again to rebuild it",
                )
            self._shards.append(
                np.memmap(path, dtype=self.dtype, mode="r") if expected else np.zeros(0, dtype=self.dtype)
            )
            self._starts.append(start)
            start += int(shard["tokens"])
        docs = self.folder / f"{split}.docs.npy"
        try:
            self.doc_ends = np.load(docs, mmap_mode="r", allow_pickle=False)  # a store may come from anyone
        except (OSError, ValueError):
            raise UserError(
                "data", f"token store {self.folder} is damaged: cannot read {docs.name}; run `mlmtrain tokenize` again"
            ) from None
        if len(self.doc_ends) != self.num_documents:
            raise UserError(
                "data",
                f"token store {self.folder} is damaged: {docs.name} lists {len(self.doc_ends)} "
                f"documents, meta.json {self.num_documents}; run `mlmtrain tokenize` again",
            )

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
    if not isinstance(meta.get("splits"), dict) or "dtype" not in meta:  # valid JSON, but not what a store writes
        raise damaged
    return meta


def store_is_current(folder: Path, fingerprint: str, sources: dict[str, str]) -> bool:
    """A complete, undamaged store built by this tokenizer from these sources: nothing to do."""
    try:
        meta = read_meta(folder)
        for split in meta["splits"]:
            TokenStore(folder, split)  # shard sizes and document index: a crash or a bad copy may have cut them
    except UserError as error:
        if Path(folder).exists():
            say(f"{error.message.split('; ')[0]}; encoding it again")
        return False
    return meta.get("tokenizer_fingerprint") == fingerprint and meta.get("sources") == sources


# ---------------------------------------------------------------------------------------------
# The `tokenize` command


def _tokenizer_settings(cfg: Config, train_fingerprint: str) -> dict[str, Any]:
    settings = asdict(cfg.tokenizer)
    settings.pop("path")
    if settings["kind"] == "wordpiece":  # the default, unstated: the record of a folder made before tokenizer.kind
        settings.pop("kind")
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
    with building(folder, "tokenizer", "tokenizer.path", _waiting_for("the tokenizer", folder)):
        return _prepare_tokenizer(cfg, train_corpus, tokenizer_source)


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
        words = frequent_split_words(base, train_corpus, cfg.tokenizer.extend_vocab, name)
        extend_tokenizer(base, words, folder, {**record, "added_words": words}, name)
        say(
            f"tokenizer: {name} with {len(words):,} words of the corpus added ({', '.join(words[:5])}, ...) -> {folder}"
        )
        return load_tokenizer(folder)
    if (folder / TOKENIZER_META).is_file():
        say(f"tokenizer: the corpus or tokenizer settings changed; training a new one in {folder}")
    started = time.perf_counter()
    trained = train_tokenizer(train_corpus, cfg.tokenizer, report=say)
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
    sources = [[spec] if isinstance(spec, str) else spec or [] for spec in (cfg.data.train, cfg.data.validation)]
    data = local_inputs((f"data.{split}", entry) for split, spec in zip(SPLITS, sources, strict=True) for entry in spec)
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


def tokenize_corpus(cfg: Config, quiet: bool = False, tokenizer_source: Optional[Path] = None) -> Path:
    """`mlmtrain tokenize`: train (or reuse) the tokenizer, then encode train and validation into the store
    (`tokenizer_source`: as for `prepare_tokenizer`)."""
    target = cfg.store_dir
    # a store folder that is not ours is refused before the tokenizer is trained, and never replaced
    check_replaceable(target, "meta.json", STORE_FILES, "data", "data.store")
    # two runs sharing one store (a sweep) build it once: the second waits, then finds it up to date
    with building(target, "data", "data.store", _waiting_for("the token store", target)):
        return _tokenize_corpus(cfg, target, quiet, tokenizer_source)


def _tokenize_corpus(cfg: Config, target: Path, quiet: bool, tokenizer_source: Optional[Path]) -> Path:
    started = time.perf_counter()
    train_corpus, valid_corpus = corpus_splits(cfg.data)
    tokenizer = prepare_tokenizer(cfg, train_corpus, tokenizer_source)
    fingerprint = tokenizer_fingerprint(tokenizer)
    sources = {"train": train_corpus.fingerprint(), "validation": valid_corpus.fingerprint()}
    if store_is_current(target, fingerprint, sources):
        say(f"token store {target} is up to date; nothing to do")
        return target

    backend = tokenizer.backend_tokenizer
    stats: dict[str, SplitStats] = {}
    total_bytes = 0

    def write(staging: Path) -> None:
        nonlocal total_bytes
        for split, corpus in (("train", train_corpus), ("validation", valid_corpus)):
            with progress_bar(None, "doc", f"encode {split}", disable=quiet) as bar:
                stats[split] = encode_split(
                    corpus, tokenizer, staging, split, count_words=split == "validation", progress=bar
                )
            total_bytes += corpus.stats.bytes
            if corpus.stats.invalid_utf8_lines:
                say(f"{split}: {corpus.stats.invalid_utf8_lines:,} lines had invalid UTF-8 bytes (replaced by U+FFFD)")
            if corpus.stats.skipped_empty:
                say(f"{split}: {corpus.stats.skipped_empty:,} empty or whitespace-only documents skipped")
            if stats[split].tokens == 0:
                raise UserError("data", f"the {split} split is empty ({corpus.describe()}); point data.{split} at text")
        meta = {
            "format": STORE_FORMAT,
            "tokenizer_fingerprint": fingerprint,
            "vocab_size": backend.get_vocab_size(),
            "dtype": ids_dtype(backend.get_vocab_size()).name,
            "sep_id": tokenizer.sep_token_id,
            "sources": sources,
            "source_descriptions": {"train": train_corpus.describe(), "validation": valid_corpus.describe()},
            "splits": {
                split: {
                    "documents": s.documents,
                    "tokens": s.tokens,
                    "duplicates": s.duplicates,
                    **({"words": s.words, "unk_tokens": s.unk_tokens} if s.words else {}),  # counted on validation
                    "shards": s.shards,
                }
                for split, s in stats.items()
            },
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
    valid = stats["validation"]
    say(
        f"tokenize: {stats['train'].documents:,} train / {valid.documents:,} validation documents, "
        f"{stats['train'].tokens:,} / {valid.tokens:,} tokens, vocabulary {backend.get_vocab_size():,}, "
        f"validation UNK rate {valid.unk_tokens / max(valid.tokens, 1):.4%}, "
        f"{(valid.tokens - valid.documents) / max(valid.words, 1):.3f} tokens per word, "
        f"{stats['train'].duplicates:,} exact duplicate train documents, "
        f"{seconds:.1f}s ({total_bytes / 1e6 / max(seconds, 1e-9):.1f} MB/s) -> {target}"
    )
    return target
