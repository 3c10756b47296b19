"""Blocks of `seq_len` tokens, their order, and the DataLoader that masks them in worker processes.

Packed (default): the store's stream (each document followed by [SEP]) is cut into slices of seq_len - 2,
each wrapped as [CLS] … [SEP], so no position is padding. Unpacked: one document per block, truncated.

The position of a run is one number, `micro_batches` consumed by this rank. Micro-batch j is a pure
function of (seed, j, rank, world size, sizes): its step s and place in the step (`BatchRamp`: with a
batch warm-up the steps grow), the epoch's seeded permutation of blocks, and a slice of that step's global
batch. With a data mixture each slot of a step draws its source (mixture.py) and the source's next block
in its own seeded order. Masks are a pure function of (seed, epoch, block), so a restart at j sees exactly
the blocks and masks an uninterrupted run sees, and 2 ranks × b blocks see the same blocks and masks as
1 rank × 2b.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import threading
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from mlmtrain.data.masking import MaskingCollator, mix_seed
from mlmtrain.data.mixture import MixtureDraw
from mlmtrain.data.store import TokenStore
from mlmtrain.data.tokenizer import load_tokenizer, text_encoder
from mlmtrain.errors import UserError, loader_worker_died


def pack_blocks(
    encoded_batches: Iterable[list[list[int]]], seq_len: int, cls_id: int, sep_id: int
) -> Iterator[np.ndarray]:
    """Cut documents into blocks exactly as the token store is cut: each document (ids without special tokens)
    is followed by [SEP], the stream is sliced into pieces of seq_len - 2, each wrapped as [CLS] … [SEP]; a tail
    shorter than a piece is dropped. Takes the documents in batches, as a tokenizer encodes them."""
    body = seq_len - 2
    pending = np.zeros(0, dtype=np.int64)
    for batch in encoded_batches:
        pending = np.concatenate([pending, *(np.asarray(ids + [sep_id], dtype=np.int64) for ids in batch)])
        whole = len(pending) // body * body
        for piece in pending[:whole].reshape(-1, body):
            yield np.concatenate(([cls_id], piece, [sep_id]))
        pending = pending[whole:]


class StoreBlocks:
    """Block i of a token-store split, as int64 ids with [CLS] first and [SEP] last."""

    def __init__(self, store: TokenStore, seq_len: int, packing: bool, cls_id: int, sep_id: int) -> None:
        self.store, self.seq_len, self.packing = store, seq_len, packing
        self.cls_id, self.sep_id = cls_id, sep_id
        self.body = seq_len - 2  # room left between [CLS] and [SEP]
        self.count = store.num_tokens // self.body if packing else store.num_documents
        if self.count == 0:
            raise UserError(
                "data",
                f"the {store.split} split has {store.num_tokens} tokens, fewer than one block of "
                f"data.seq_len={seq_len}; add text or lower data.seq_len",
            )

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> np.ndarray:
        if self.packing:
            body = self.store.tokens(index * self.body, (index + 1) * self.body)
        else:
            body = self.store.document(index)[: self.body]
        block = np.empty(len(body) + 2, dtype=np.int64)
        block[0], block[1:-1], block[-1] = self.cls_id, body, self.sep_id
        return block


@dataclass(frozen=True)
class BatchLayout:
    """How a global batch of blocks splits over ranks and accumulation micro-steps."""

    micro_batch_size: int
    accum_steps: int
    world_size: int = 1
    rank: int = 0

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.accum_steps * self.world_size


def batch_layout(
    batch_size: int, micro_batch_size: Optional[int], world_size: int, rank: int, start: Optional[int] = None
) -> BatchLayout:
    """Derive micro-batch and accumulation steps from the global batch, or say why it cannot be done. `start`: the
    global batch a batch warm-up starts from (train.batch_size_start), which sets the micro-batch where
    train.micro_batch_size does not; the accumulation steps are then the full batch's."""
    micro = micro_batch_size if micro_batch_size is not None else (start or batch_size) // world_size
    for key, size in (("train.batch_size", batch_size), ("train.batch_size_start", start)):
        if size is not None and (micro < 1 or size % (micro * world_size) != 0):
            raise UserError(
                "config",
                f"{key}={size} is not a multiple of train.micro_batch_size ({micro_batch_size or micro}) x "
                f"{world_size} process(es); change one of them",
            )
    return BatchLayout(micro, batch_size // (micro * world_size), world_size, rank)


class BatchRamp:
    """The global batch of each step of a stream (a run, or one phase of it): `full` blocks, or with a batch warm-up
    (train.batch_warmup_tokens) growing linearly from `start` toward `full` over the run's first `warmup_tokens`
    tokens, each step's batch rounded up to whole micro-batches of every process (`unit`). The stream begins
    `tokens_before` tokens into the run; a step counts its blocks' positions (block_tokens each)."""

    def __init__(
        self,
        full: int,
        unit: int,
        start: Optional[int] = None,
        warmup_tokens: int = 0,
        tokens_before: int = 0,
        block_tokens: int = 1,
    ) -> None:
        self.full, self.unit, self.block_tokens = full, unit, block_tokens
        self.table: list[int] = []  # the sizes of the steps while the batch grows
        tokens = tokens_before
        while start is not None and tokens < warmup_tokens:
            grown = start + (full - start) * tokens / warmup_tokens
            size = min(math.ceil(grown / unit) * unit, full)
            if size >= full:
                break
            self.table.append(size)
            tokens += size * block_tokens
        self.blocks = np.cumsum([0, *self.table])  # blocks before each step of the table, and after it

    def size(self, step: int) -> int:
        return self.table[step] if step < len(self.table) else self.full

    def sizes(self, steps: np.ndarray) -> np.ndarray:
        table = np.asarray(self.table + [self.full], dtype=np.int64)
        return table[np.minimum(steps, len(self.table))]

    def accum(self, step: int) -> int:
        """Micro-batches each process takes in `step`."""
        return self.size(step) // self.unit

    def blocks_before(self, step: int) -> int:
        grown = len(self.table)
        return int(self.blocks[min(step, grown)]) + max(step - grown, 0) * self.full

    def steps_for(self, step: int, tokens: float) -> float:
        """The steps from `step` on that take `tokens` more tokens: the growing steps' sizes, then full batches."""
        blocks, grown = tokens / self.block_tokens, len(self.table)
        ahead = self.blocks[min(step, grown) :] - self.blocks[min(step, grown)]  # blocks of the growing steps ahead
        if blocks <= ahead[-1]:
            return float(np.searchsorted(ahead, blocks, side="left"))
        return len(ahead) - 1 + (blocks - ahead[-1]) / self.full

    def tokens_of(self, step: int, steps: float) -> float:
        """The tokens of `steps` steps from `step` on."""
        end = step + math.floor(steps)
        blocks = self.blocks_before(end) - self.blocks_before(step) + (steps - math.floor(steps)) * self.size(end)
        return blocks * self.block_tokens

    def micro_before(self, step: int) -> int:
        """Micro-batches each process took in the steps before `step`: the data position of a stream at `step`."""
        return self.blocks_before(step) // self.unit

    def locate(self, micro_batch: int) -> tuple[int, int]:
        """(step, its micro-step) of a process's micro-batch number `micro_batch`."""
        grown = self.micro_before(len(self.table))
        if micro_batch >= grown:
            step, within = divmod(micro_batch - grown, self.full // self.unit)
            return len(self.table) + step, within
        step = bisect_right(self.blocks // self.unit, micro_batch) - 1
        return step, micro_batch - int(self.blocks[step]) // self.unit


@dataclass
class Mixture:
    """The sources of a data mixture by name: each its blocks and its target share of them, the draw that picks
    among them, and the collator that masks their blocks."""

    names: Sequence[str]
    blocks: Sequence[StoreBlocks]
    draw: MixtureDraw
    shares: Sequence[float]
    collator: Any


@dataclass(frozen=True)
class Row:
    """One block of a micro-batch: its source (0 without a mixture), the pass over that source, the block."""

    source: int
    epoch: int
    block: int


class MicroBatches(IterableDataset):
    """An endless, resumable stream of masked micro-batches for one rank, from a token store (or a mixture of its
    sources)."""

    def __init__(
        self,
        blocks: Optional[StoreBlocks],
        collator: MaskingCollator,
        layout: BatchLayout,
        seed: int,
        start: int = 0,
        shuffle: bool = True,
        ramp: Optional[BatchRamp] = None,
        mixture: Optional[Mixture] = None,
    ) -> None:
        self.blocks, self.collator, self.layout = blocks, collator, layout
        self.seed, self.start, self.shuffle, self.mixture = seed, start, shuffle, mixture
        self.ramp = ramp or BatchRamp(layout.global_batch, layout.micro_batch_size * layout.world_size)
        self.steps_per_epoch = len(blocks) // layout.global_batch if mixture is None else 0
        if self.steps_per_epoch == 0 and mixture is None:
            raise UserError(
                "data",
                f"the training split has {len(blocks)} blocks, fewer than one global batch of "
                f"{layout.global_batch}; add text, or lower train.batch_size or data.seq_len",
            )
        self._orders: dict[int, tuple[int, torch.Tensor]] = {}  # each source's order of its current pass

    def order(self, epoch: int, source: int = 0) -> torch.Tensor:
        """A source's block order in a pass over it: a permutation seeded by (seed, epoch), the same on every rank
        (a mixture's second source on: by its number too)."""
        cached = self._orders.get(source)
        if cached is None or cached[0] != epoch:
            count = len(self.mixture.blocks[source]) if self.mixture else len(self.blocks)
            if self.shuffle:
                salt = 0x5EED if source == 0 else mix_seed(0x5EED, source, 0x50C)
                generator = torch.Generator().manual_seed(mix_seed(self.seed, epoch, salt))
                cached = (epoch, torch.randperm(count, generator=generator))
            else:
                cached = (epoch, torch.arange(count))
            self._orders[source] = cached
        return cached[1]

    def rows(self, micro_batch: int) -> tuple[int, list[Row]]:
        """(the optimizer step it feeds, the blocks) of this rank's micro-batch number `micro_batch`."""
        layout = self.layout
        step, accum = self.ramp.locate(micro_batch)
        first = (accum * layout.world_size + layout.rank) * layout.micro_batch_size  # its slots of the step's batch
        slots = range(first, first + layout.micro_batch_size)
        if self.mixture is not None:
            return step, self._mixture_rows(step, slots)
        # one source: epochs of whole global batches of the full size (a batch warm-up's steps may span two)
        per_epoch = self.steps_per_epoch * layout.global_batch
        rows = []
        for place in (self.ramp.blocks_before(step) + slot for slot in slots):
            epoch, index = divmod(place, per_epoch)
            rows.append(Row(0, epoch, int(self.order(epoch)[index])))
        return step, rows

    def _mixture_rows(self, step: int, slots: range) -> list[Row]:
        mixture, size = self.mixture, self.ramp.size(step)
        before = mixture.draw.counts_before(step, self.ramp.sizes)
        sources, ranks = mixture.draw.slot_sources(step, size)
        shuffled = torch.randperm(size, generator=torch.Generator().manual_seed(mix_seed(self.seed, step, 0x5107)))
        rows = []
        for slot in (int(shuffled[place]) for place in slots):
            source = int(sources[slot])
            epoch, index = divmod(int(before[source]) + int(ranks[slot]), len(mixture.blocks[source]))
            rows.append(Row(source, epoch, int(self.order(epoch, source)[index])))
        return rows

    def indices(self, micro_batch: int) -> tuple[int, torch.Tensor]:
        """(epoch, block indices) of this rank's micro-batch number `micro_batch` of one source."""
        rows = self.rows(micro_batch)[1]
        return rows[0].epoch, torch.tensor([row.block for row in rows])

    def batch(self, micro_batch: int) -> dict[str, torch.Tensor]:
        step, rows = self.rows(micro_batch)  # the step: a masking schedule's clock
        sources = self.mixture.blocks if self.mixture is not None else [self.blocks]
        # masks are drawn by (epoch, index): a mixture's sources after the first shift their blocks' numbers apart
        return self.collator(
            [
                {
                    "input_ids": sources[r.source][r.block],
                    "epoch": r.epoch,
                    "index": (r.source << 40) + r.block,
                    "step": step,
                }
                for r in rows
            ]  # fmt: skip
        )

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        # DataLoader takes items from its workers in turn, so worker w serves micro-batches start+w, start+w+W, ...
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for micro_batch in itertools.count(self.start + worker, workers):
            yield self.batch(micro_batch)


class LiveMicroBatches(IterableDataset):
    """Micro-batches from a corpus tokenized on the fly inside the loader workers (no token store).

    Documents are sharded over (rank, worker); each shard packs its own blocks and shuffles them in a
    buffer seeded by (seed, epoch, shard). Resuming replays the shard up to the saved position, so it
    is exact for the same number of processes and workers.
    """

    def __init__(
        self,
        corpus: Any,
        tokenizer_dir: Path,
        collator: MaskingCollator,
        layout: BatchLayout,
        seq_len: int,
        seed: int,
        shuffle_buffer: int,
        num_workers: int,
        start: int = 0,
    ) -> None:
        self.corpus, self.tokenizer_dir, self.collator, self.layout = corpus, tokenizer_dir, collator, layout
        self.seq_len, self.seed, self.shuffle_buffer = seq_len, seed, shuffle_buffer
        self.num_workers, self.start = max(num_workers, 1), start

    def _blocks(self, shard: int, shards: int, epoch: int) -> Iterator[np.ndarray]:
        roles = load_tokenizer(self.tokenizer_dir)  # special tokens by role: [CLS]/[SEP], <s>/</s>, ...
        cls_id, sep_id, tokenizer = roles.cls_token_id, roles.sep_token_id, text_encoder(roles)
        texts = self.corpus.iter_shard(shard, shards)
        encoded = (
            [e.ids for e in tokenizer.encode_batch(batch, add_special_tokens=False)]
            for batch in iter(lambda: list(itertools.islice(texts, 256)), [])
        )
        buffer: list[np.ndarray] = []
        generator = torch.Generator().manual_seed(mix_seed(self.seed, epoch, shard))
        for block in pack_blocks(encoded, self.seq_len, cls_id, sep_id):
            buffer.append(block)
            if len(buffer) >= self.shuffle_buffer:  # emit a random element to shuffle a stream we cannot hold
                yield buffer.pop(int(torch.randint(len(buffer), (1,), generator=generator)))
        order = torch.randperm(len(buffer), generator=generator).tolist()
        yield from (buffer[i] for i in order)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # the corpus is read here, in the workers: a bad file or too little text must reach the user as one line
        return _carrying_user_errors(self._micro_batches())

    def _micro_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        workers = self.num_workers if info is not None else 1
        # After a restart at `start` the loader begins with worker 0 again: worker w plays the role of the
        # original worker (start + w) % workers, whose next micro-batch is number (start + w) // workers.
        role = (self.start + worker) % workers
        skip = (self.start + worker) // workers
        layout = self.layout
        shard = layout.rank * workers + role
        shards = layout.world_size * workers
        produced = 0
        for epoch in itertools.count():
            blocks = self._blocks(shard, shards, epoch)
            counter = 0
            while True:
                chunk = list(itertools.islice(blocks, layout.micro_batch_size))
                if len(chunk) < layout.micro_batch_size:
                    break
                if produced >= skip:
                    # this worker's micro-batch number `produced` is the run's number role + produced x workers
                    step = (role + produced * workers) // layout.accum_steps
                    yield self.collator(
                        [
                            {"input_ids": b, "epoch": epoch, "index": (shard << 40) + counter + i, "step": step}
                            for i, b in enumerate(chunk)
                        ]
                    )
                counter += len(chunk)
                produced += 1
            if counter == 0:
                raise UserError(
                    "data",
                    f"data shard {shard} of {shards} holds fewer tokens than one micro-batch of "
                    f"{layout.micro_batch_size} blocks; add text or use fewer workers",
                )


_WORKER_ERROR = "mlmtrain_user_error"  # the key of an item that carries a loader worker's UserError


def _carrying_user_errors(batches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The micro-batches, and a UserError raised while making them as one last item that holds it: torch would
    re-raise it in the main process as a RuntimeError whose text is a traceback."""
    try:
        yield from batches
    except UserError as error:
        yield {_WORKER_ERROR: (error.topic, error.message)}


def raise_worker_errors(batches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The loader's micro-batches; a UserError carried from a worker is raised again here, as itself, and a worker
    that died is reported here, at the next batch, never in the middle of whatever the run was doing.
    Call it right after `iter(loader)`: that is where torch installs the signal handler it wraps."""
    _defer_worker_deaths()
    return _checked(batches)


def _checked(batches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    while True:
        if _worker_deaths:  # a worker died since the last batch: its report, where the run expects data errors
            raise _worker_deaths.pop()
        try:
            batch = next(batches)
        except StopIteration:
            return
        if _WORKER_ERROR in batch:
            raise UserError(*batch[_WORKER_ERROR])
        yield batch


_worker_deaths: list[RuntimeError] = []  # torch's reports of dead workers, waiting for the next batch


def _defer_worker_deaths() -> None:
    """torch's SIGCHLD handler raises a dead worker's report wherever the main process is: inside a checkpoint's
    write it read as a full disk, inside C code (safetensors) it came out as an unrelated ValueError. Wrap that
    handler so the report is kept for `raise_worker_errors`; a worker that never sends its batch is still caught
    there, by torch's own check of its workers while it waits."""
    _worker_deaths.clear()
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGCHLD"):
        return
    current = signal.getsignal(signal.SIGCHLD)
    if not callable(current) or getattr(current, "defers_worker_deaths", False):
        return  # no worker loader (torch set no handler), or already wrapped

    def deferring(signum: int, frame: Any) -> None:
        try:
            current(signum, frame)
        except RuntimeError as error:
            if not loader_worker_died(error):
                raise
            _worker_deaths.append(error)

    deferring.defers_worker_deaths = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGCHLD, deferring)


def make_loader(dataset: IterableDataset, num_workers: int, pin_memory: bool) -> DataLoader:
    """The DataLoader: collation (masking) runs in the workers; batches arrive pinned and prefetched."""
    return DataLoader(
        dataset,
        batch_size=None,  # the dataset yields whole micro-batches
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=4 if num_workers > 0 else None,
        persistent_workers=False,
        worker_init_fn=_leave_stopping_to_the_main_process,
    )


def _leave_stopping_to_the_main_process(worker_id: int) -> None:
    """A worker leaves the run's process group. Ctrl-C, `timeout` and `kill -- -PGID` signal the whole group: a
    worker that died of it made the main process fail with torch's traceback instead of saving a checkpoint and
    stopping. Out of the group, only the main process gets the signal; it ends its workers when it stops (their
    default SIGTERM stays, which torch uses to end a stuck worker), and if it is killed, they notice and exit."""
    os.setpgid(0, 0)


def evaluation_blocks(blocks: StoreBlocks, max_blocks: Optional[int]) -> list[int]:
    """Indices of the blocks an evaluation uses: all, or `max_blocks` spread evenly over the split."""
    if max_blocks is None or max_blocks >= len(blocks):
        return list(range(len(blocks)))
    return np.linspace(0, len(blocks) - 1, max_blocks).round().astype(int).tolist()
