"""Encoding a stream of documents on every core: the stream is cut into chunks, each chunk is encoded by one of N
worker processes that hold one tokenizer each (the Rust encoder on one thread: `encode_batch`'s own threads scale
badly on many cores, `tokenizers` issues 1900 and 1929), and the results come back in stream order, so what is
written is the same whatever the number of workers. At most `IN_FLIGHT_PER_WORKER x workers` chunks are in flight.

This module imports no torch and no other mlmtrain module than `errors`: each worker process imports it alone.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Optional, TypeVar

import numpy as np
import tokenizers

from mlmtrain.errors import UserError

Tag = TypeVar("Tag")

CHUNK_DOCUMENTS = 1000  # a chunk closes at this many documents ...
CHUNK_BYTES = 1 << 20  # ... or this many bytes of text, whichever comes first (a longer document is a chunk alone)
GROUP_CHUNKS = 8  # under torchrun, process r encodes groups r, r + n, r + 2n, ... of this many chunks
IN_FLIGHT_PER_WORKER = 2  # chunks queued or being encoded per worker: a worker never waits, memory stays bounded
POOL_AFTER_BYTES = 4 << 20  # the first 4 MB are encoded here: a small corpus starts no worker process


@dataclass(frozen=True)
class EncoderSpec:
    """What a worker needs to encode as the store does: the tokenizer (its tokenizer.json text), the id written
    after each document, the unknown token's id (counted) and the store's id type."""

    tokenizer_json: str
    sep_id: int
    unk_id: Optional[int]
    dtype: str


@dataclass
class EncodedChunk:
    """One chunk's documents encoded: `ids` holds each document's ids and the separator after it, concatenated, in
    the store's id type; `lengths` their sizes; `hashes` a 64-bit digest of each text (exact duplicates)."""

    ids: np.ndarray
    lengths: np.ndarray
    hashes: np.ndarray
    text_bytes: int
    words: int
    unk_tokens: int


def text_hash(encoded: bytes) -> int:
    """64 bits of BLAKE2b: the same in every process and on every machine (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "little")


class Encoder:
    """One tokenizer that encodes chunks of documents as text: special tokens written in a document are its
    characters, never their ids; no truncation or padding, whatever tokenizer.json says. `serial`: the process
    has turned the Rust encoder's threads off (a worker), so a chunk is encoded in one call."""

    def __init__(self, spec: EncoderSpec, serial: bool = False) -> None:
        self.spec = spec
        self.serial = serial
        self.backend = tokenizers.Tokenizer.from_str(spec.tokenizer_json)
        self.backend.encode_special_tokens = True  # not kept by tokenizer.json: set in every process
        self.backend.no_truncation()
        self.backend.no_padding()

    def _encoded(self, texts: list[str]) -> Iterator[list[int]]:
        """Each text's ids. In a worker, one batch call without offsets (about 20 % faster than a call per text);
        elsewhere one call per text, which keeps the encoder on this thread."""
        if not self.serial:
            return (self.backend.encode(text, add_special_tokens=False).ids for text in texts)
        return (encoding.ids for encoding in self.backend.encode_batch_fast(texts, add_special_tokens=False))

    def __call__(self, texts: list[str]) -> EncodedChunk:
        spec, flat, lengths, hashes, size, words = self.spec, [], [], [], 0, 0
        for text, ids in zip(texts, self._encoded(texts), strict=True):
            ids.append(spec.sep_id)
            flat.extend(ids)
            lengths.append(len(ids))
            encoded = text.encode("utf-8")
            size += len(encoded)
            hashes.append(text_hash(encoded))
            words += len(text.split())
        ids_array = np.array(flat, dtype=spec.dtype)
        # byte-level vocabularies have no unknown token
        unknown = 0 if spec.unk_id is None else int(np.count_nonzero(ids_array == spec.unk_id))
        return EncodedChunk(
            ids_array, np.array(lengths, dtype=np.int64), np.array(hashes, dtype=np.uint64), size, words, unknown
        )


def available_cores() -> int:
    """The cores this process may run on (its affinity, which a scheduler or container may narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def worker_count(configured: Optional[int]) -> int:
    """data.tokenize_workers, checked against the cores; null: the cores, shared among the processes torchrun
    started on this machine (LOCAL_WORLD_SIZE)."""
    cores = available_cores()
    if configured is None:
        return max(1, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    if configured > cores:
        raise UserError(
            "config",
            f"data.tokenize_workers ({configured}) is above the {cores} cores this process may use; set it to "
            f"{cores} or less, or to null (the cores)",
        )
    return configured


def chunked(texts: Iterable[str]) -> Iterator[list[str]]:
    """The documents in chunks of CHUNK_DOCUMENTS documents or CHUNK_BYTES of text: a pure function of the stream,
    so every process of a job cuts it alike."""
    chunk: list[str] = []
    size = 0
    for text in texts:
        chunk.append(text)
        size += len(text)  # characters: a cheap stand-in for bytes that cuts the stream the same way everywhere
        if len(chunk) == CHUNK_DOCUMENTS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def own_groups(chunks: Iterable[list[str]], rank: int, ranks: int) -> Iterator[tuple[int, list[str]]]:
    """(group number, chunk) for the chunks of groups rank, rank + ranks, ...: this process's share of the stream."""
    for index, chunk in enumerate(chunks):
        group = index // GROUP_CHUNKS
        if group % ranks == rank:
            yield group, chunk


# ---------------------------------------------------------------------------------------------
# Worker processes

_WORKER: Optional[Encoder] = None


def _exit_with_parent() -> None:
    """End this worker when the process that started it is gone (killed with -9, it cannot say so)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)


def _start_worker(spec: EncoderSpec) -> None:
    global _WORKER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent alone stops the work
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the Rust encoder's batch calls on this thread alone
    _WORKER = Encoder(spec, serial=True)


def _encode_in_worker(texts: list[str]) -> EncodedChunk:
    assert _WORKER is not None, "the worker's initializer builds its encoder"
    return _WORKER(texts)


def _result(future: Future) -> EncodedChunk:
    try:
        return future.result()
    except BrokenProcessPool:
        raise UserError(
            "data",
            "a tokenize worker process died (the kernel's out-of-memory killer is the usual cause); lower "
            "data.tokenize_workers or free memory, then run again",
        ) from None


def encode_in_order(
    chunks: Iterable[tuple[Tag, list[str]]], spec: EncoderSpec, workers: int
) -> Iterator[tuple[Tag, EncodedChunk]]:
    """(tag, encoded chunk) for each (tag, chunk), in order. The first POOL_AFTER_BYTES of text are encoded in this
    process; past them, `workers` processes (spawned: they inherit no threads or locks) encode the rest, with at
    most IN_FLIGHT_PER_WORKER chunks each queued or under way. One worker too: this process reads and writes while
    it encodes, and a worker encodes a chunk in one call."""
    local = Encoder(spec)
    pool: Optional[ProcessPoolExecutor] = None
    pending: deque[tuple[Tag, Future]] = deque()
    seen = 0
    try:
        for tag, texts in chunks:
            if pool is None and seen >= POOL_AFTER_BYTES:
                context = multiprocessing.get_context("spawn")
                pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(spec,))
            if pool is None:
                encoded = local(texts)
                seen += encoded.text_bytes
                yield tag, encoded
                continue
            pending.append((tag, pool.submit(_encode_in_worker, texts)))
            while len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                done_tag, future = pending.popleft()
                yield done_tag, _result(future)
        while pending:
            done_tag, future = pending.popleft()
            yield done_tag, _result(future)
    finally:
        if pool is not None:
            pool.shutdown(wait=not pending, cancel_futures=True)  # after an error, the workers' current chunks go
