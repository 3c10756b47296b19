"""Data mixtures and the batch warm-up: the draw by systematic sampling (every step within a block of each source's
share), the same blocks and masks under any split of a step over processes, micro-steps and loader workers, a
source repeated in a new order once spent, and a global batch that grows over tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mlmtrain.config import MaskingConfig
from mlmtrain.data.blocks import BatchRamp, MicroBatches, batch_layout, make_loader
from mlmtrain.data.masking import MaskingCollator, VocabInfo
from mlmtrain.data.mixture import MixtureDraw, mixture_shares
from mlmtrain.data.store import TokenStore
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.train.objectives import objective_of
from mlmtrain.train.step import data_mixture

from ..helpers import mixture_config as config

SHARES = [0.5, 0.3, 0.2]


def test_every_step_holds_each_share_within_one_block() -> None:
    draw = MixtureDraw(SHARES, seed=3)
    steps = np.arange(3000)
    counts = draw.step_counts(steps, np.full(len(steps), 24))
    assert (counts.sum(axis=1) == 24).all()
    assert (np.abs(counts - 24 * np.array(SHARES)) < 1).all()  # floor or ceil of G x share, every step
    # so the drawn share after any number of steps is within 1/G of its target
    drawn = counts.cumsum(axis=0) / (24 * (steps + 1))[:, None]
    assert (np.abs(drawn - np.array(SHARES)) <= 1 / 24).all()
    assert np.abs(drawn[-1] - np.array(SHARES)).max() < 0.002  # and closer the longer it runs (random offsets)
    assert (counts != counts[0]).any()  # the offsets vary: not the same split every step


def test_slots_agree_with_the_counts_and_the_draw_is_a_function_of_seed_and_step() -> None:
    draw, again, other = MixtureDraw(SHARES, seed=3), MixtureDraw(SHARES, seed=3), MixtureDraw(SHARES, seed=4)
    for step in (0, 7, 20_000):
        sources, ranks = draw.slot_sources(step, 10)
        assert (
            np.bincount(sources, minlength=3).tolist() == draw.step_counts(np.array([step]), np.array([10]))[0].tolist()
        )
        for source in range(3):  # each source's slots numbered 0, 1, ... within the step
            assert sorted(ranks[sources == source].tolist()) == list(range(int((sources == source).sum())))
        assert (again.slot_sources(step, 10)[0] == sources).all()
    offsets = [draw.offset(np.arange(50)), other.offset(np.arange(50))]
    assert not np.allclose(*offsets)


def test_blocks_before_a_step_sum_every_step_before_it_across_chunks() -> None:
    draw = MixtureDraw([0.7, 0.3], seed=1)

    def sizes(steps: np.ndarray) -> np.ndarray:  # a batch that grows, then holds
        return np.where(steps < 100, 8, 16)

    steps = np.arange(40_000)
    summed = np.vstack([[0, 0], draw.step_counts(steps, sizes(steps)).cumsum(axis=0)])
    for step in (39_999, 5, 16_384, 16_385, 32_768, 0, 20_000):  # out of order: the cache must not drift
        assert draw.counts_before(step, sizes).tolist() == summed[step].tolist()
    assert MixtureDraw([0.7, 0.3], seed=1).counts_before(33_000, sizes).tolist() == summed[33_000].tolist()
    walker = MixtureDraw([0.7, 0.3], seed=1)
    for step in [*range(16_000, 16_800, 3), 16_800, 16_800, 16_799, 90]:  # on and on across a chunk's end, then back
        assert walker.counts_before(step, sizes).tolist() == summed[step].tolist()


def test_temperature_shares_follow_the_sizes() -> None:
    assert mixture_shares([3, 1], [100, 100], None) == [0.75, 0.25]
    assert mixture_shares([3, 1], [900, 100], 1.0) == pytest.approx([0.9, 0.1])
    assert mixture_shares([3, 1], [900, 100], 0.5) == pytest.approx([0.75, 0.25])  # 30 : 10
    assert mixture_shares([1, 1], [900, 100], 1e-9) == pytest.approx([0.5, 0.5], abs=1e-6)


def test_the_ramp_grows_the_batch_over_tokens_in_whole_micro_batches() -> None:
    ramp = BatchRamp(full=32, unit=8, start=8, warmup_tokens=20_000, tokens_before=0, block_tokens=64)
    sizes = [ramp.size(step) for step in range(40)]
    assert sizes[0] == 8 and sizes[-1] == 32 and sizes == sorted(sizes) and all(s % 8 == 0 for s in sizes)
    tokens = np.cumsum([0, *sizes]) * 64
    for step, size in enumerate(sizes):  # the batch of a step follows the tokens before it, rounded up
        wanted = 8 + 24 * min(tokens[step] / 20_000, 1.0)
        assert size == min(32, -(-wanted // 8) * 8)
    # the position of a micro-batch of 4 blocks x 2 processes, and back
    for micro in range(200):
        step, within = ramp.locate(micro)
        assert ramp.micro_before(step) + within == micro and within < ramp.accum(step)
    assert ramp.blocks_before(40) == sum(sizes)
    later = BatchRamp(full=32, unit=8, start=8, warmup_tokens=20_000, tokens_before=5_000, block_tokens=64)
    assert later.size(0) == 16  # a stream that begins 5,000 tokens in (a phase) starts at 8 + 24 / 4, rounded up
    assert BatchRamp(full=32, unit=8).table == [] and BatchRamp(32, 8, 8, 20_000, 20_000, 64).table == []


def mixture_stream(data, batch: int, micro=None, world: int = 1, rank: int = 0, ramp=None, start: int = 0):
    root, overrides = data
    cfg = config(root, **overrides)
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    objective = objective_of(cfg, VocabInfo.from_tokenizer(tokenizer))
    mixture = data_mixture(cfg, objective, tokenizer)
    layout = batch_layout(batch, micro, world, rank)
    return MicroBatches(None, mixture.collator, layout, 7, start, ramp=ramp, mixture=mixture)


def step_rows(stream: MicroBatches, step: int) -> list:
    accum = stream.layout.accum_steps
    return [row for j in range(step * accum, (step + 1) * accum) for row in stream.rows(j)[1]]


def test_a_step_draws_the_same_blocks_under_any_split_over_processes_and_micro_steps(mixture_data) -> None:
    whole = mixture_stream(mixture_data, 8)
    ranks = [mixture_stream(mixture_data, 8, world=2, rank=rank) for rank in (0, 1)]
    accumulated = mixture_stream(mixture_data, 8, micro=2)
    for step in range(60):  # past the end of b: its second pass included
        together = sorted((r.source, r.epoch, r.block) for r in step_rows(whole, step))
        split = sorted((r.source, r.epoch, r.block) for stream in ranks for r in step_rows(stream, step))
        assert together == split == sorted((r.source, r.epoch, r.block) for r in step_rows(accumulated, step))


def test_shares_drawn_meet_the_weights_and_a_spent_source_repeats_in_a_new_order(mixture_data) -> None:
    stream = mixture_stream(mixture_data, 8)
    rows = [row for step in range(100) for row in step_rows(stream, step)]
    drawn = np.bincount([row.source for row in rows], minlength=2) / len(rows)
    assert np.abs(drawn - [0.75, 0.25]).max() <= 1 / 8  # the bound each step keeps (test above)
    b_blocks = len(stream.mixture.blocks[1])
    passes = [[row.block for row in rows if row.source == 1 and row.epoch == epoch] for epoch in (0, 1)]
    assert sorted(passes[0]) == list(range(b_blocks))  # every block of b once, before any twice
    assert passes[1] and passes[1] != passes[0][: len(passes[1])]  # then again, in another order


def test_loader_workers_give_the_batches_one_process_makes(mixture_data) -> None:
    ramp = BatchRamp(full=8, unit=2, start=2, warmup_tokens=2_000, block_tokens=32)
    direct = mixture_stream(mixture_data, 8, micro=2, ramp=ramp, start=3)
    loaded = iter(make_loader(mixture_stream(mixture_data, 8, micro=2, ramp=ramp, start=3), 2, pin_memory=False))
    for j in range(3, 40):
        batch, other = direct.batch(j), next(loaded)
        assert all(torch.equal(batch[key], other[key]) for key in batch)


def test_a_stream_without_a_warm_up_keeps_its_order(tiny_data: Path) -> None:
    """The generic position (steps of any size) reproduces the order of fixed steps: a run resumed across this
    version sees the blocks it would have seen."""
    cfg = config(tiny_data, **{"train.run_dir": str(tiny_data / "unused")})
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    objective = objective_of(cfg, VocabInfo.from_tokenizer(tokenizer))
    blocks, _ = objective.training_blocks(TokenStore(cfg.store_dir, "train"), tokenizer)
    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), MaskingConfig(), seed=7)
    stream = MicroBatches(blocks, collator, batch_layout(8, 4, 1, 0), 3)
    per_epoch = stream.steps_per_epoch
    for j in range(4 * per_epoch + 3):
        step, accum = divmod(j, 2)
        epoch, within = divmod(step, per_epoch)
        offset = within * 8 + accum * 4
        assert stream.indices(j)[1].tolist() == stream.order(epoch)[offset : offset + 4].tolist()
