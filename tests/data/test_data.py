"""Blocks, packing, order, sharding and the resumable position of the data pipeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mlmtrain.config import MaskingConfig
from mlmtrain.data.blocks import (
    LiveMicroBatches,
    MicroBatches,
    StoreBlocks,
    batch_layout,
    evaluation_blocks,
    make_loader,
)
from mlmtrain.data.masking import MaskingCollator, VocabInfo
from mlmtrain.data.store import TokenStore
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.errors import UserError

SEQ = 32


@pytest.fixture
def tokenized(tiny_data: Path):
    """The tiny corpus's tokenizer and token store, and a masking collator."""
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    store = TokenStore(tiny_data / "tokens", "train")
    vocab = VocabInfo.from_tokenizer(tokenizer)
    collator = MaskingCollator(vocab, MaskingConfig(), seed=7)
    return tokenizer, store, collator


def blocks_of(store: TokenStore, tokenizer, packing: bool = True, seq_len: int = SEQ) -> StoreBlocks:
    return StoreBlocks(store, seq_len, packing, tokenizer.cls_token_id, tokenizer.sep_token_id)


def test_packed_blocks_are_full_slices_of_the_stream(tokenized) -> None:
    tokenizer, store, _ = tokenized
    blocks = blocks_of(store, tokenizer)
    assert len(blocks) == store.num_tokens // (SEQ - 2)
    stream = store.tokens(0, store.num_tokens)
    for i in (0, 1, len(blocks) - 1):
        block = blocks[i]
        assert len(block) == SEQ
        assert block[0] == tokenizer.cls_token_id and block[-1] == tokenizer.sep_token_id
        assert np.array_equal(block[1:-1], stream[i * (SEQ - 2) : (i + 1) * (SEQ - 2)])
    # documents are separated by [SEP] inside the stream
    assert np.count_nonzero(stream == tokenizer.sep_token_id) == store.num_documents


def test_store_documents_match_the_tokenizer(tokenized, tiny_data: Path) -> None:
    tokenizer, store, _ = tokenized
    first_line = (tiny_data / "train.txt").read_text().splitlines()[0]
    expected = tokenizer(first_line, add_special_tokens=False)["input_ids"]
    assert store.document(0).tolist() == expected


def test_unpacked_blocks_pad_to_a_multiple_of_8_with_a_correct_mask(tokenized) -> None:
    tokenizer, store, collator = tokenized
    blocks = blocks_of(store, tokenizer, packing=False, seq_len=64)
    items = [{"input_ids": blocks[i], "epoch": 0, "index": i} for i in range(8)]
    lengths = [len(item["input_ids"]) for item in items]
    batch = collator(items)
    width = batch["input_ids"].shape[1]
    assert width % 8 == 0 and width >= max(lengths) and width - max(lengths) < 8
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    pad = batch["attention_mask"] == 0
    assert (batch["labels"][pad] == -100).all()
    assert (batch["input_ids"][pad] == tokenizer.pad_token_id).all()


def _dataset(
    tokenized, batch_size: int, world: int = 1, rank: int = 0, micro: int | None = None, start: int = 0, seed: int = 3
) -> MicroBatches:
    tokenizer, store, collator = tokenized
    layout = batch_layout(batch_size, micro, world, rank)
    return MicroBatches(blocks_of(store, tokenizer), collator, layout, seed, start=start)


def test_an_epoch_visits_blocks_once_in_a_seeded_order_new_each_epoch(tokenized) -> None:
    data = _dataset(tokenized, 8)
    steps = data.steps_per_epoch
    seen = torch.cat([data.indices(j)[1] for j in range(steps)])
    assert len(set(seen.tolist())) == len(seen) == steps * 8
    assert torch.equal(data.order(0), _dataset(tokenized, 8).order(0))
    assert not torch.equal(data.order(0), data.order(1))
    assert data.indices(steps)[0] == 1  # the next micro-batch opens epoch 1
    assert not torch.equal(_dataset(tokenized, 8, seed=4).order(0), data.order(0))


def test_restart_at_k_sees_the_same_batches_and_masks(tokenized) -> None:
    whole = iter(_dataset(tokenized, 8))
    reference = [next(whole) for _ in range(12)]
    restarted = iter(_dataset(tokenized, 8, start=7))
    for k in range(7, 12):
        batch = next(restarted)
        for key in reference[k]:
            assert torch.equal(batch[key], reference[k][key]), (k, key)


def test_a_block_served_again_next_epoch_gets_new_masks(tokenized) -> None:
    data = _dataset(tokenized, 8)
    block = int(data.indices(0)[1][0])
    first = data.collator([{"input_ids": data.blocks[block], "epoch": 0, "index": block}])
    again = data.collator([{"input_ids": data.blocks[block], "epoch": 1, "index": block}])
    assert not torch.equal(first["labels"], again["labels"])


def test_two_ranks_split_each_global_batch_disjointly(tokenized) -> None:
    single = _dataset(tokenized, 8)
    ranks = [_dataset(tokenized, 8, world=2, rank=r) for r in range(2)]
    for step in range(5):
        together = set(single.indices(step)[1].tolist())
        halves = [set(r.indices(step)[1].tolist()) for r in ranks]
        assert halves[0].isdisjoint(halves[1])
        assert halves[0] | halves[1] == together


def test_a_block_gets_the_same_masks_on_whichever_rank_serves_it(tokenized) -> None:
    # each dataset has a collator of its own, as each rank's loader does: the rows served for a block must agree
    tokenizer, store, _ = tokenized
    vocab = VocabInfo.from_tokenizer(tokenizer)

    def served(world: int, rank: int) -> MicroBatches:
        layout = batch_layout(8, None, world, rank)
        return MicroBatches(blocks_of(store, tokenizer), MaskingCollator(vocab, MaskingConfig(), seed=7), layout, 3)

    single, ranks = served(1, 0), [served(2, r) for r in range(2)]
    for step in range(3):
        rows = dict(zip(single.indices(step)[1].tolist(), single.batch(step)["labels"], strict=True))
        for data in ranks:
            batch = data.batch(step)
            for row, block in enumerate(data.indices(step)[1].tolist()):
                assert torch.equal(batch["labels"][row], rows[block]), (step, data.layout.rank, block)
                assert bool((rows[block] != -100).any())  # masks were drawn: the comparison is not vacuous


def test_accumulation_covers_the_global_batch(tokenized) -> None:
    single = _dataset(tokenized, 8)
    accum = _dataset(tokenized, 8, micro=2)
    assert accum.layout.accum_steps == 4
    for step in range(3):
        micro = torch.cat([accum.indices(step * 4 + a)[1] for a in range(4)])
        assert sorted(micro.tolist()) == sorted(single.indices(step)[1].tolist())


def test_loader_workers_keep_the_order(tokenized) -> None:
    reference = iter(_dataset(tokenized, 8, start=3))
    expected = [next(reference)["input_ids"] for _ in range(6)]
    loader = iter(make_loader(_dataset(tokenized, 8, start=3), num_workers=2, pin_memory=False))
    got = [next(loader)["input_ids"] for _ in range(6)]
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b)


def test_batch_layout_errors() -> None:
    with pytest.raises(UserError, match="train.batch_size=10 is not a multiple"):
        batch_layout(10, 4, 1, 0)
    with pytest.raises(UserError, match="not a multiple"):
        batch_layout(3, None, 2, 0)
    layout = batch_layout(32, 4, 2, 1)
    assert (layout.micro_batch_size, layout.accum_steps, layout.global_batch) == (4, 4, 32)


def test_too_little_text_for_a_block_or_a_batch(tokenized) -> None:
    tokenizer, store, collator = tokenized
    with pytest.raises(UserError, match="fewer tokens than one block|fewer than one block"):
        blocks_of(store, tokenizer, seq_len=store.num_tokens + 10)
    with pytest.raises(UserError, match="fewer than one global batch"):
        MicroBatches(blocks_of(store, tokenizer), collator, batch_layout(4096, None, 1, 0), 0)


def test_evaluation_blocks_spread_over_the_split() -> None:
    class Fake:
        def __len__(self) -> int:
            return 100

    assert evaluation_blocks(Fake(), None) == list(range(100))
    picked = evaluation_blocks(Fake(), 5)
    assert picked[0] == 0 and picked[-1] == 99 and len(set(picked)) == 5


def test_live_stream_blocks_and_resume(tokenized, tiny_data: Path) -> None:
    from mlmtrain.data.sources import Corpus

    tokenizer, _, collator = tokenized
    corpus = Corpus(str(tiny_data / "train.txt"))

    def live(start: int, workers: int) -> LiveMicroBatches:
        return LiveMicroBatches(
            corpus,
            tiny_data / "tokenizer",
            collator,
            batch_layout(4, None, 1, 0),
            SEQ,
            5,
            shuffle_buffer=16,
            num_workers=workers,
            start=start,
        )

    loader = iter(make_loader(live(0, 2), num_workers=2, pin_memory=False))
    whole = [next(loader) for _ in range(8)]
    for batch in whole:
        ids = batch["input_ids"]
        assert ids.shape == (4, SEQ)
        assert (ids[:, 0] == tokenizer.cls_token_id).all() and (ids[:, -1] == tokenizer.sep_token_id).all()
    resumed = iter(make_loader(live(5, 2), num_workers=2, pin_memory=False))
    for k in range(5, 8):
        assert torch.equal(next(resumed)["labels"], whole[k]["labels"]), k
