"""Tests of MLM masking: rates and the 80/10/10 split (binomial bounds), what may never be selected or
drawn, whole-word groups, fixed counts, and that a block's mask depends on (seed, epoch, index) only."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from mlmtrain.config import MaskingConfig
from mlmtrain.data.masking import MaskingCollator, VocabInfo, block_seed, evaluation_masking, mask_tokens
from mlmtrain.errors import UserError

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
FIRST_CONTINUATION = 600  # in the synthetic vocabulary, ids 600..999 play '##' pieces
SIGMAS = 6.0  # binomial tolerance: a correct implementation fails about once in 10^9 runs


def synthetic_vocab(vocab_size: int = 1000, specials: tuple[int, ...] = SPECIALS) -> VocabInfo:
    continuation = torch.zeros(vocab_size, dtype=torch.bool)
    continuation[FIRST_CONTINUATION:] = True
    return VocabInfo(vocab_size=vocab_size, mask_id=MASK, pad_id=PAD, special_ids=specials, continuation=continuation)


VOCAB = synthetic_vocab()


def cfg(**overrides) -> MaskingConfig:
    return dataclasses.replace(MaskingConfig(), **overrides)


def make_blocks(rows: int, length: int, seed: int, vocab: VocabInfo = VOCAB) -> torch.Tensor:
    """[CLS] ordinary tokens [SEP], with about 5 % [UNK]/[SEP] inside so specials are not only at the ends."""
    g = torch.Generator().manual_seed(seed)
    ordinary = vocab.ordinary_ids()
    ids = ordinary[torch.randint(len(ordinary), (rows, length), generator=g)]
    inner = torch.rand(rows, length, generator=g)
    ids[inner < 0.025] = UNK
    ids[(inner >= 0.025) & (inner < 0.05)] = SEP
    ids[:, 0], ids[:, -1] = CLS, SEP
    return ids


def right_padding(rows: int, length: int, seed: int) -> torch.Tensor:
    """An attention mask with real lengths between length/2 and length."""
    lengths = torch.randint(length // 2, length + 1, (rows, 1), generator=torch.Generator().manual_seed(seed))
    return (torch.arange(length) < lengths).long()


def assert_binomial(count: int, n: int, p: float) -> None:
    sd = math.sqrt(n * p * (1 - p))
    assert abs(count - n * p) <= SIGMAS * sd + 1, f"{count} of {n}: expected {n * p:.0f} +- {SIGMAS} x {sd:.1f}"


def seeds_for(rows: int, epoch: int = 0, seed: int = 7) -> list[int]:
    return [block_seed(seed, epoch, i) for i in range(rows)]


def maskable_of(ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    special = torch.isin(ids, torch.tensor(SPECIALS))
    attended = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    return ~special & attended


# ---------------------------------------------------------------- selection and the 80/10/10 split


@pytest.mark.parametrize("rate", [0.15, 0.4])
def test_selection_rate_and_never_special_or_padding(rate: float) -> None:
    ids = make_blocks(512, 128, seed=1)
    attention_mask = right_padding(512, 128, seed=2)
    ids[attention_mask == 0] = torch.where(torch.arange(128) % 2 == 0, PAD, 500).expand_as(ids)[attention_mask == 0]
    masked, labels = mask_tokens(ids, VOCAB, cfg(mlm_probability=rate), seeds_for(512), attention_mask)

    selected = labels != -100
    maskable = maskable_of(ids, attention_mask)
    assert not (selected & ~maskable).any(), "a special or padding position was selected"
    # padding keeps its id, even the ordinary id 500 under attention_mask 0
    assert torch.equal(masked[attention_mask == 0], ids[attention_mask == 0])
    assert_binomial(int(selected.sum()), int(maskable.sum()), rate)


def test_pad_id_never_selected_without_attention_mask() -> None:
    ids = make_blocks(256, 64, seed=3)
    ids[:, 40:] = PAD
    _, labels = mask_tokens(ids, VOCAB, cfg(mlm_probability=0.9), seeds_for(256))
    assert (labels[:, 40:] == -100).all()
    assert (labels[:, :40] != -100).any()


@pytest.mark.parametrize(("mask_replace", "random_replace"), [(0.8, 0.1), (0.5, 0.3)])
def test_replacement_split(mask_replace: float, random_replace: float) -> None:
    ids = make_blocks(2048, 128, seed=4)
    masked, labels = mask_tokens(
        ids, VOCAB, cfg(mask_replace=mask_replace, random_replace=random_replace), seeds_for(2048)
    )
    selected = labels != -100
    before, after = ids[selected], masked[selected]
    n = len(before)
    # a random draw equals the original token once in n_ordinary times and then looks unchanged
    p_changed = random_replace * (1 - 1 / len(VOCAB.ordinary_ids()))
    assert_binomial(int((after == MASK).sum()), n, mask_replace)
    assert_binomial(int(((after != MASK) & (after != before)).sum()), n, p_changed)
    assert_binomial(int((after == before).sum()), n, 1 - mask_replace - p_changed)


def test_labels_are_the_original_at_selected_positions_only() -> None:
    ids = make_blocks(256, 128, seed=5)
    masked, labels = mask_tokens(ids, VOCAB, cfg(), seeds_for(256))
    selected = labels != -100
    assert masked.dtype == labels.dtype == torch.int64
    assert selected.any()
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(masked[~selected], ids[~selected]), "an unselected position was changed"
    assert ((masked == MASK) <= selected).all()


def test_random_tokens_are_ordinary_and_uniform() -> None:
    # a small vocabulary with specials that are not one contiguous range (17 and 59 too)
    vocab = synthetic_vocab(vocab_size=60, specials=(*SPECIALS, 17, 59))
    ordinary = vocab.ordinary_ids()
    assert ordinary.tolist() == [i for i in range(60) if i not in (*SPECIALS, 17, 59)]
    ids = make_blocks(400, 128, seed=6, vocab=vocab)
    masked, labels = mask_tokens(
        ids, vocab, cfg(mlm_probability=0.9, mask_replace=0.0, random_replace=1.0), seeds_for(400)
    )
    drawn = masked[labels != -100]
    assert torch.isin(drawn, ordinary).all(), "a random replacement was a special token"
    counts = torch.bincount(drawn, minlength=60)[ordinary].double()
    expected = len(drawn) / len(ordinary)
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    df = len(ordinary) - 1
    assert chi2 <= df + SIGMAS * math.sqrt(2 * df), f"chi-square {chi2:.1f} with {df} degrees of freedom"


def test_input_not_modified() -> None:
    for dtype in (torch.int64, torch.int32):
        ids = make_blocks(64, 128, seed=8).to(dtype)
        before = ids.clone()
        masked, _ = mask_tokens(ids, VOCAB, cfg(mlm_probability=0.5), seeds_for(64))
        assert torch.equal(ids, before) and ids.dtype == dtype
        assert not torch.equal(masked, before.long())


# ---------------------------------------------------------------- whole words and fixed counts


def word_groups(row: list[int]) -> list[list[int]]:
    """Reference grouping: a '##' piece joins the word before it unless a special token comes between."""
    groups: list[list[int]] = []
    for pos, token in enumerate(row):
        if token in SPECIALS:
            continue
        joins = token >= FIRST_CONTINUATION and pos > 0 and row[pos - 1] not in SPECIALS
        if joins:
            groups[-1].append(pos)
        else:
            groups.append([pos])
    return groups


def make_word_blocks(rows: int, length: int, seed: int) -> torch.Tensor:
    """Blocks of words of 1-4 pieces; [SEP] between some words; some blocks start mid-word."""
    g = torch.Generator().manual_seed(seed)
    word_start = torch.rand(rows, length, generator=g) < 0.5
    starts = torch.randint(5, FIRST_CONTINUATION, (rows, length), generator=g)
    pieces = torch.randint(FIRST_CONTINUATION, 1000, (rows, length), generator=g)
    ids = torch.where(word_start, starts, pieces)
    ids[torch.rand(rows, length, generator=g) < 0.05] = SEP
    ids[: rows // 2, 0] = CLS  # the other half begins with whatever piece came up, as packed blocks do
    return ids


def test_whole_word_groups_all_or_nothing() -> None:
    ids = make_word_blocks(256, 128, seed=9)
    _, labels = mask_tokens(ids, VOCAB, cfg(whole_word=True), seeds_for(256))
    selected = (labels != -100).tolist()
    chosen = total = multi_piece_chosen = 0
    for row, sel in zip(ids.tolist(), selected, strict=True):
        for group in word_groups(row):
            decisions = {sel[pos] for pos in group}
            assert len(decisions) == 1, f"word {[row[p] for p in group]} only partly selected"
            total += 1
            chosen += decisions.pop()
            multi_piece_chosen += sel[group[0]] and len(group) > 1
    assert multi_piece_chosen > 100
    assert_binomial(chosen, total, 0.15)


def test_whole_word_special_tokens_break_words() -> None:
    # [CLS] w ##a [SEP] ##b ##c [SEP]: {w, ##a} and {##b, ##c} are two words decided independently
    rows = 4000
    ids = torch.tensor([CLS, 10, 700, SEP, 800, 900, SEP]).repeat(rows, 1)
    _, labels = mask_tokens(ids, VOCAB, cfg(mlm_probability=0.5, whole_word=True), seeds_for(rows))
    selected = labels != -100
    assert torch.equal(selected[:, 1], selected[:, 2]) and torch.equal(selected[:, 4], selected[:, 5])
    assert_binomial(int((selected[:, 1] != selected[:, 4]).sum()), rows, 0.5)


def test_whole_word_needs_continuation_table() -> None:
    vocab = VocabInfo(vocab_size=100, mask_id=MASK, pad_id=PAD, special_ids=SPECIALS)
    with pytest.raises(UserError, match="whole_word"):
        mask_tokens(make_blocks(2, 16, seed=0, vocab=vocab), vocab, cfg(whole_word=True), [1, 2])


@pytest.mark.parametrize("rate", [0.15, 0.25, 0.4])
def test_fixed_count_is_exact_and_spread_over_the_block(rate: float) -> None:
    rows, length = 1024, 128
    ids = make_blocks(rows, length, seed=10)
    attention_mask = right_padding(rows, length, seed=11)
    _, labels = mask_tokens(ids, VOCAB, cfg(fixed_count=True, mlm_probability=rate), seeds_for(rows), attention_mask)
    selected = labels != -100
    maskable = maskable_of(ids, attention_mask)
    assert not (selected & ~maskable).any()
    expected = [round(rate * m) for m in maskable.sum(1).tolist()]
    assert selected.sum(1).tolist() == expected
    # the chosen positions are not, say, the first k: the first half of each block gets its share
    first_half = maskable[:, : length // 2].sum() / maskable.sum()
    assert_binomial(int(selected[:, : length // 2].sum()), int(selected.sum()), float(first_half))


def test_fixed_count_whole_word_reaches_the_count_with_whole_words() -> None:
    ids = make_word_blocks(512, 128, seed=12)
    _, labels = mask_tokens(ids, VOCAB, cfg(fixed_count=True, whole_word=True), seeds_for(512))
    selected = (labels != -100).tolist()
    over = 0
    for row, sel in zip(ids.tolist(), selected, strict=True):
        groups = word_groups(row)
        assert all(len({sel[p] for p in group}) == 1 for group in groups)
        target = round(0.15 * sum(len(group) for group in groups))
        count = sum(sel)
        longest_chosen = max(len(group) for group in groups if sel[group[0]])
        assert target <= count < target + longest_chosen, (target, count)
        over += count - target
    assert over > 0, "multi-piece words never overshot: whole words are not being kept whole"


# ---------------------------------------------------------------- determinism and batch independence


def items(blocks: torch.Tensor, epoch: int, indices: list[int]) -> list[dict]:
    return [{"input_ids": blocks[i], "epoch": epoch, "index": i} for i in indices]


def test_block_seed_is_a_fixed_63_bit_mix() -> None:
    # pinned: changing the mix changes every run's masks and breaks resuming older runs
    assert block_seed(0, 0, 0) == 1279368494785126216
    seeds = {block_seed(s, e, i) for s in (0, 1, -1, 2**40) for e in range(3) for i in range(50)}
    assert len(seeds) == 4 * 3 * 50
    assert all(0 <= s < 2**63 for s in seeds)
    assert block_seed(1, 2, 3) != block_seed(3, 2, 1) != block_seed(2, 1, 3)


def test_same_seed_same_masks_new_epoch_new_masks() -> None:
    blocks = make_blocks(16, 128, seed=13)
    collate = MaskingCollator(VOCAB, cfg(), seed=5)
    first = collate(items(blocks, 0, list(range(16))))
    again = MaskingCollator(VOCAB, cfg(), seed=5)(items(blocks, 0, list(range(16))))
    assert all(torch.equal(first[k], again[k]) for k in ("input_ids", "labels"))
    next_epoch = collate(items(blocks, 1, list(range(16))))
    other_seed = MaskingCollator(VOCAB, cfg(), seed=6)(items(blocks, 0, list(range(16))))
    for other in (next_epoch, other_seed):
        differs = (first["labels"] != -100) != (other["labels"] != -100)
        assert differs.any(dim=1).all(), "some block kept its mask"
    # the same tokens served as two different blocks are masked differently too
    twice = collate([{"input_ids": blocks[0], "epoch": 0, "index": i} for i in (0, 1)])
    assert not torch.equal(twice["labels"][0], twice["labels"][1])


def test_mask_depends_on_the_block_not_its_batch() -> None:
    blocks = make_blocks(8, 128, seed=14)
    collate = MaskingCollator(VOCAB, cfg(), seed=3)
    whole = collate(items(blocks, 2, list(range(8))))
    # two ranks of four, and one block alone at the front of a batch
    halves = [collate(items(blocks, 2, [0, 2, 4, 6])), collate(items(blocks, 2, [1, 3, 5, 7]))]
    alone = collate(items(blocks, 2, [5]))
    for key in ("input_ids", "labels"):
        assert torch.equal(torch.cat([h[key] for h in halves]), whole[key][[0, 2, 4, 6, 1, 3, 5, 7]])
        assert torch.equal(alone[key][0], whole[key][5])


def test_padded_block_masked_as_if_alone() -> None:
    blocks = make_blocks(3, 60, seed=15)
    collate = MaskingCollator(VOCAB, cfg(mlm_probability=0.5), seed=4)
    short = {"input_ids": blocks[0, :21].clone(), "epoch": 0, "index": 0}
    alone = collate([short])  # one block: no padding at all
    batched = collate([{"input_ids": blocks[1], "epoch": 0, "index": 1}, short])  # padded to width 64
    assert batched["input_ids"].shape == (2, 64)
    for key in ("input_ids", "labels"):
        assert torch.equal(batched[key][1, :21], alone[key][0])


# ---------------------------------------------------------------- collator


def test_collator_pads_to_a_multiple_and_masks_padding_out() -> None:
    g = torch.Generator().manual_seed(16)
    raw = [VOCAB.ordinary_ids()[torch.randint(995, (n,), generator=g)] for n in (5, 13, 9)]
    batch_items = [
        {"input_ids": raw[0].numpy().astype(np.uint16), "epoch": 0, "index": 0},
        {"input_ids": raw[1].to(torch.int32), "epoch": 0, "index": 1},
        {"input_ids": raw[2], "epoch": 0, "index": 2},
        {"input_ids": np.array([CLS, SEP], dtype=np.int32), "epoch": 0, "index": 3},  # nothing to mask
    ]
    batch = MaskingCollator(VOCAB, cfg(mlm_probability=0.6), seed=1)(batch_items)
    assert set(batch) == {"input_ids", "labels", "attention_mask"}
    assert all(t.dtype == torch.int64 and t.shape == (4, 16) for t in batch.values())
    lengths = torch.tensor([5, 13, 9, 2])
    assert torch.equal(batch["attention_mask"], (torch.arange(16) < lengths[:, None]).long())
    padding = batch["attention_mask"] == 0
    assert (batch["input_ids"][padding] == PAD).all() and (batch["labels"][padding] == -100).all()
    assert (batch["labels"][3] == -100).all()
    for row, block in enumerate(raw):
        selected = batch["labels"][row, : len(block)] != -100
        assert torch.equal(batch["labels"][row, : len(block)][selected], block[selected])
    assert MaskingCollator(VOCAB, cfg(), seed=1, pad_to_multiple_of=1)(batch_items)["input_ids"].shape == (4, 13)


def test_collator_equal_lengths_returns_no_attention_mask() -> None:
    blocks = make_blocks(4, 24, seed=17).numpy().astype(np.uint16)
    batch = MaskingCollator(VOCAB, cfg(), seed=1)(
        [{"input_ids": b, "epoch": 0, "index": i} for i, b in enumerate(blocks)]
    )
    assert set(batch) == {"input_ids", "labels"}
    assert batch["input_ids"].shape == (4, 24) and batch["input_ids"].dtype == torch.int64


def test_with_documents_the_collator_numbers_each_blocks_documents_and_masks_as_without() -> None:
    """data.document_attention within: the batch also says which document of its block each token is in ([CLS] with
    the first, each [SEP] with the document it ends, the closing [SEP] with the last); the masks are unchanged."""
    vocab = dataclasses.replace(VOCAB, sep_id=SEP)
    blocks = make_blocks(6, 40, seed=5)
    items = [{"input_ids": b, "epoch": 0, "index": i} for i, b in enumerate(blocks)]
    plain = MaskingCollator(vocab, cfg(mlm_probability=0.5), seed=1)(items)
    batch = MaskingCollator(vocab, cfg(mlm_probability=0.5), seed=1, documents=True)(items)
    assert torch.equal(batch["input_ids"], plain["input_ids"]) and torch.equal(batch["labels"], plain["labels"])
    for block, numbers in zip(blocks.tolist(), batch["document_ids"].tolist(), strict=True):
        expected, document = [], 0
        for position, token in enumerate(block):
            expected.append(document)
            document += token == SEP and position < len(block) - 2  # the next token starts a new document
        assert numbers == expected
    with pytest.raises(UserError, match="no \\[SEP\\] token"):
        MaskingCollator(VOCAB, cfg(), seed=1, documents=True)


# ---------------------------------------------------------------- a real WordPiece tokenizer

SENTENCES = [
    "the unbelievable internationalization of tokenization happened repeatedly",
    "researchers reconsidered misunderstandings about counterintuitive measurements",
    "quick brown foxes jumped over extraordinarily lazy dogs",
    "pretraining bidirectional encoders requires masked language modelling",
]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    # a vocabulary too small for whole words, so most words split into '##' pieces
    trainer = trainers.WordPieceTrainer(vocab_size=150, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    backend.train_from_iterator(SENTENCES, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    # added after training: a special token that `all_special_ids` does not list, and an ordinary one
    wrapped.add_tokens(["[EXTRA]"], special_tokens=True)
    wrapped.add_tokens(["plainadded"])
    return wrapped


def test_vocab_info_from_tokenizer(tokenizer: PreTrainedTokenizerFast) -> None:
    vocab = VocabInfo.from_tokenizer(tokenizer)
    names = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[EXTRA]"]
    assert set(vocab.special_ids) == set(tokenizer.convert_tokens_to_ids(names))
    assert len(tokenizer) > tokenizer.vocab_size, "the fixture should have tokens added after training"
    assert tokenizer.convert_tokens_to_ids("plainadded") in vocab.ordinary_ids().tolist()
    assert (vocab.mask_id, vocab.pad_id, vocab.vocab_size) == (
        tokenizer.mask_token_id,
        tokenizer.pad_token_id,
        len(tokenizer),
    )
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    assert vocab.continuation.tolist() == [p.startswith("##") for p in pieces]
    assert not set(vocab.ordinary_ids().tolist()) & set(vocab.special_ids)


def test_whole_word_with_real_pieces(tokenizer: PreTrainedTokenizerFast) -> None:
    vocab = VocabInfo.from_tokenizer(tokenizer)
    encoded = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    repeats = 300
    ids = encoded["input_ids"].repeat(repeats, 1)
    attention_mask = encoded["attention_mask"].repeat(repeats, 1)
    _, labels = mask_tokens(ids, vocab, cfg(whole_word=True), seeds_for(len(ids)), attention_mask)
    selected = labels != -100
    # the truth about words comes from the tokenizer's own word_ids, not from the '##' table
    chosen = total = 0
    for i in range(len(SENTENCES)):
        word_ids = encoded.word_ids(i)
        words = {w: [p for p, x in enumerate(word_ids) if x == w] for w in set(word_ids) - {None}}
        assert max(len(p) for p in words.values()) >= 3, "the tokenizer did not split words"
        rows = selected[i :: len(SENTENCES)]
        for positions in words.values():
            decisions = rows[:, positions]
            assert (decisions.all(1) | ~decisions.any(1)).all(), "a word was only partly selected"
            chosen += int(decisions[:, 0].sum())
            total += repeats
        assert not rows[:, [p for p, x in enumerate(word_ids) if x is None]].any()
    assert_binomial(chosen, total, 0.15)


def test_vocab_info_needs_a_mask_token(tokenizer: PreTrainedTokenizerFast) -> None:
    no_mask = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer, unk_token="[UNK]", pad_token="[PAD]"
    )
    with pytest.raises(UserError, match="mask token"):
        VocabInfo.from_tokenizer(no_mask)


def test_evaluation_masks_are_classic_whatever_the_training_recipe() -> None:
    recipe = cfg(mlm_probability=0.4, fixed_count=True, whole_word=True, mask_replace=1.0, random_replace=0.0)
    recipe = dataclasses.replace(recipe, eval_seed=99)
    evaluation = evaluation_masking(recipe)
    assert (evaluation.mlm_probability, evaluation.mask_replace, evaluation.random_replace) == (0.15, 0.8, 0.1)
    assert not evaluation.fixed_count and not evaluation.whole_word
    assert evaluation.eval_seed == 99
    assert evaluation_masking(dataclasses.replace(recipe, eval_mlm_probability=0.3)).mlm_probability == 0.3
