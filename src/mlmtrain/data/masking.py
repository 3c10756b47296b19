"""MLM masking: which positions to predict and what the model sees there, plus the batch collator.

Masks are a pure function of (seed, epoch, block index): each block draws its uniforms from its own
`torch.Generator`, so a resumed run, a run on another number of ranks or workers, and an evaluation
all see the same masks for the same block. No global RNG is touched.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mlmtrain.config import MaskingConfig
from mlmtrain.errors import UserError

IGNORE_INDEX = -100  # label of positions that are not predicted; CrossEntropyLoss skips it
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class VocabInfo:
    """What masking needs to know about a tokenizer's vocabulary."""

    vocab_size: int
    mask_id: int
    pad_id: int
    special_ids: tuple[int, ...]
    # bool [vocab_size]: True for pieces that continue a word (`word_marks`); None when the tokenizer marks no words
    continuation: torch.Tensor | None = field(default=None, compare=False)
    # the ids a model's config names beside pad (ModernBERT's cls/sep/bos/eos); None: the tokenizer has no such token
    cls_id: int | None = None
    sep_id: int | None = None
    # lookup tables built once, so masking a batch is a few gathers
    _special_table: torch.Tensor = field(init=False, repr=False, compare=False)
    _ordinary: torch.Tensor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = (self.mask_id, self.pad_id, *self.special_ids)
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"special ids {ids} must lie in [0, vocab_size={self.vocab_size})")
        if self.continuation is not None and self.continuation.shape != (self.vocab_size,):
            raise ValueError(f"continuation must have shape ({self.vocab_size},), got {tuple(self.continuation.shape)}")
        table = torch.zeros(self.vocab_size, dtype=torch.bool)
        # mask and pad count as special even if a caller forgot them in special_ids
        table[list(ids)] = True
        ordinary = (~table).nonzero().squeeze(1)
        if ordinary.numel() == 0:
            raise ValueError("the vocabulary has no ordinary (non-special) tokens to draw random replacements from")
        object.__setattr__(self, "_special_table", table)
        object.__setattr__(self, "_ordinary", ordinary)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> VocabInfo:
        """Read ids from a `transformers` tokenizer; `UserError` if it lacks a mask or pad token."""
        for role in ("mask", "pad"):
            if getattr(tokenizer, f"{role}_token_id") is None:
                raise UserError(
                    "tokenizer",
                    f"the tokenizer has no {role} token; MLM needs one (train it with a [{role.upper()}] token)",
                )
        # len() counts added tokens too, which `tokenizer.vocab_size` leaves out
        vocab_size = len(tokenizer)
        special = set(tokenizer.all_special_ids)
        special.update(i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special)
        marks = word_marks(tokenizer)
        continuation = None
        if marks is not None:
            pieces = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
            kind, mark = marks  # a continuing piece bears the continuation mark, or lacks the word-start mark
            joins = [p is not None and p.startswith(mark) == (kind == CONTINUES) for p in pieces]
            continuation = torch.tensor(joins, dtype=torch.bool)
        return cls(
            vocab_size=vocab_size,
            mask_id=tokenizer.mask_token_id,
            pad_id=tokenizer.pad_token_id,
            special_ids=tuple(sorted(special)),
            continuation=continuation if continuation is not None and bool(continuation.any()) else None,
            cls_id=tokenizer.cls_token_id,
            sep_id=tokenizer.sep_token_id,
        )

    def ordinary_ids(self) -> torch.Tensor:
        """int64 ids that are not special: the set random replacements are drawn from."""
        return self._ordinary

    def is_special(self, ids: torch.Tensor) -> torch.Tensor:
        """Bool, shaped like `ids`: which of them are special ([MASK] and [PAD] included)."""
        return _lookup(self._special_table, ids)


CONTINUES, STARTS = "continues", "starts"  # what a tokenizer's word mark says of a piece


def word_marks(tokenizer: Any) -> tuple[str, str] | None:
    """How the tokenizer marks words, by its kind: (CONTINUES, '##') for WordPiece, whose pieces inside a word bear
    the prefix; (STARTS, 'Ġ') for byte-level BPE and (STARTS, '▁') for SentencePiece (Unigram or BPE), whose first
    piece of a word bears it. None for a tokenizer that marks no words (whole-word masks cannot find them)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    saved = json.loads(backend.to_str())
    model = saved.get("model") or {}
    if model.get("type") == "WordPiece":
        return CONTINUES, model.get("continuing_subword_prefix") or "##"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None  # a BPE that marks pieces inside or at the end of words: not a rule masks know
    for part in _parts(saved.get("pre_tokenizer")) + _parts(saved.get("decoder")):
        if part.get("type") == "ByteLevel":
            return STARTS, "Ġ"  # the byte-level spelling of the space before a word
        if part.get("type") == "Metaspace":
            return STARTS, part.get("replacement") or "▁"
    return None


def _parts(component: Any) -> list[dict[str, Any]]:
    """A tokenizer.json pre-tokenizer or decoder as its list of parts (a Sequence's, or itself)."""
    if not isinstance(component, dict):
        return []
    inner = component.get("pretokenizers") or component.get("decoders")
    return [part for part in inner if isinstance(part, dict)] if isinstance(inner, list) else [component]


WHOLE_WORD_KINDS = "a WordPiece ('##'), byte-level BPE ('Ġ') or SentencePiece ('▁') tokenizer"


def check_whole_words(tokenizer: Any, name: str) -> None:
    """UserError when masking.whole_word cannot find the words of the tokenizer of `name` (`word_marks`)."""
    if word_marks(tokenizer) is None:
        raise UserError(
            "masking",
            f"masking.whole_word needs {WHOLE_WORD_KINDS}, which mark where words start, and the tokenizer of {name} "
            "marks none; set masking.whole_word: false (masks then fall on single tokens)",
        )


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def mix_seed(*values: int) -> int:
    """A 63-bit generator seed from several ints (each taken mod 2**64), by chained splitmix64: stable across
    processes and Python versions, unlike hash(). The one seed mixer of the project (masks, block order)."""
    h = 0
    for value in values:
        h = _splitmix64(h ^ (value & _U64))
    return h >> 1


def block_seed(seed: int, epoch: int, block_index: int) -> int:
    """The generator seed of one block's masks."""
    return mix_seed(seed, epoch, block_index)


def _block_uniforms(seeds: Sequence[int], lengths: Sequence[int], width: int) -> torch.Tensor:
    """[B, 3, width] float32 uniforms (selection, 80/10/10, random token), row b drawn from seeds[b] alone.

    Each row draws `torch.rand(3, lengths[b])`'s numbers, its own real length rather than the batch width, so a
    padded block gets the same uniforms whatever it is batched with; the tail stays 1.0 (never selected).
    """
    generator = torch.Generator()
    out = torch.ones(len(seeds), 3, width)
    for row, (seed, length) in enumerate(zip(seeds, lengths, strict=True)):
        generator.manual_seed(int(seed))
        # in place: the same numbers as torch.rand(3, length, generator=generator), without a copy
        out[row, :, :length].uniform_(generator=generator)
    return out


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] for a 1-D table. Not by `table[index]` or `take`: on CPU those split even a small
    batch across threads and stall for milliseconds when the cores are busy; index_select does not."""
    return table.to(index.device).index_select(0, index.reshape(-1)).view(index.shape)


def _word_starts(maskable: torch.Tensor, continuation: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(is_start [B,T] bool, start_index [B,T] int64): the unit a position's selection decision belongs to.

    Without `continuation` every maskable position is its own unit. With it, a continuing piece (WordPiece's '##', a
    BPE or SentencePiece piece without its word-start mark) joins the word of the position before it, unless that one
    is special or padding (those break words), so a block that begins mid-word starts a word of its own at its first
    ordinary piece.
    """
    positions = torch.arange(maskable.shape[1], device=maskable.device).expand_as(maskable)
    if continuation is None:
        return maskable, positions
    prev_maskable = torch.nn.functional.pad(maskable[:, :-1], (1, 0), value=False)
    is_start = maskable & ~(continuation & prev_maskable)
    # the latest start at or before each position; non-maskable positions get a value but are never selected
    start_index = torch.cummax(torch.where(is_start, positions, 0), dim=1).values
    return is_start, start_index


def _fixed_count_units(
    maskable: torch.Tensor, is_start: torch.Tensor, start_index: torch.Tensor, u_select: torch.Tensor, rate: float
) -> torch.Tensor:
    """Bool [B,T] over unit starts: take units in the order of their uniforms until round(rate x maskable) tokens."""
    target = torch.round(maskable.sum(1, keepdim=True) * rate)  # half-to-even, like Python's round()
    # tokens per unit, stored at the unit's start position
    sizes = torch.zeros(maskable.shape, dtype=torch.long, device=maskable.device)
    sizes.scatter_add_(1, start_index, maskable.long())
    # non-starts sort last (uniforms are < 1); stable, so float32 ties break by position, not by batch width
    order = torch.where(is_start, u_select, 2.0).argsort(dim=1, stable=True)
    sorted_sizes = sizes.gather(1, order)
    taken_before = sorted_sizes.cumsum(1) - sorted_sizes
    take_sorted = (taken_before < target) & is_start.gather(1, order)
    return torch.zeros_like(is_start).scatter_(1, order, take_sorted)


def mask_tokens(
    input_ids: torch.Tensor,
    vocab: VocabInfo,
    cfg: MaskingConfig,
    seeds: torch.Tensor | Sequence[int],
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask a batch for MLM: returns (masked inputs int64 [B,T], labels int64 [B,T]); `input_ids` is not modified.

    `seeds` holds one generator seed per row (normally `block_seed(seed, epoch, block_index)`); a row's
    result depends on its ids, its attention mask and its seed only, never on the rest of the batch
    (nor, with right padding, on the padded width).

    Maskable positions are those whose id is not special and whose attention mask (if given) is 1.
    Selection: each maskable position (with `whole_word`, each word: a '##' piece follows its word
    start) is selected with probability `mlm_probability`. With `fixed_count`, k = round(mlm_probability
    x maskable tokens) per row, and units are taken in a random order until k tokens are selected:
    exactly k; with `whole_word`, words are never split, so the word that reaches k is taken whole and
    the count is k up to k + (that word's length - 1), never fewer than k. k is exact per row, not per batch:
    in packed blocks the [SEP]s between documents are special, so rows with more documents have fewer
    maskable tokens and a slightly smaller k. Of the selected tokens, each
    independently becomes [MASK] (`mask_replace`), a uniform random ordinary token (`random_replace`),
    or stays as it is.
    Labels are the original ids at selected positions, -100 elsewhere. A row, even a whole batch, may
    have no selected position (short rows, low rate): the loss over it is undefined, so callers skip it.
    """
    ids = input_ids.long()
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq_len], got shape {tuple(ids.shape)}")
    seeds = seeds.tolist() if isinstance(seeds, torch.Tensor) else list(seeds)
    if len(seeds) != ids.shape[0]:
        raise ValueError(f"need one seed per row: {len(seeds)} seeds for {ids.shape[0]} rows")
    if cfg.whole_word and vocab.continuation is None:
        raise UserError(
            "masking", f"masking.whole_word needs {WHOLE_WORD_KINDS} (it marks words); set masking.whole_word: false"
        )
    device = ids.device

    maskable = ~_lookup(vocab._special_table, ids)
    width = ids.shape[1]
    lengths = [width] * len(seeds)
    if attention_mask is not None:
        attended = attention_mask.to(device).bool()
        maskable &= attended
        # a row's length is up to its last attended position (right padding leaves the head alone)
        lengths = (attended * torch.arange(1, width + 1, device=device)).amax(1).tolist()
    u_select, u_split, u_token = _block_uniforms(seeds, lengths, width).to(device).unbind(1)
    continuation = _lookup(vocab.continuation, ids) if cfg.whole_word else None

    is_start, start_index = _word_starts(maskable, continuation)
    if cfg.fixed_count:
        chosen_unit = _fixed_count_units(maskable, is_start, start_index, u_select, cfg.mlm_probability)
    else:
        chosen_unit = u_select < cfg.mlm_probability
    if continuation is not None:  # every piece takes the decision of its word's start
        chosen_unit = chosen_unit.gather(1, start_index)
    selected = maskable & chosen_unit

    to_mask = selected & (u_split < cfg.mask_replace)
    to_random = selected & ~to_mask & (u_split < cfg.mask_replace + cfg.random_replace)
    n_ordinary = vocab.ordinary_ids().numel()
    # clamp: float32 rounding of u * n can reach n for u just below 1
    random_ids = _lookup(vocab.ordinary_ids(), (u_token * n_ordinary).long().clamp_max(n_ordinary - 1))

    masked = torch.where(to_mask, vocab.mask_id, torch.where(to_random, random_ids, ids))
    labels = torch.where(selected, ids, IGNORE_INDEX)
    return masked, labels


def scheduled_rate(cfg: MaskingConfig, step: int, total_steps: int | None) -> float:
    """The training selection rate of optimizer step `step` (0-based, the steps already taken) of `total_steps`:
    masking.schedule moves it from mlm_probability (step 0) towards mlm_probability_end (step total_steps), linearly
    or along half a cosine. A pure function of the step, so the loader's workers draw each block at its step's rate
    and a resumed run draws the rates an uninterrupted one does."""
    end = cfg.mlm_probability_end
    if cfg.schedule == "constant" or end is None or not total_steps:
        return cfg.mlm_probability
    t = min(max(step / total_steps, 0.0), 1.0)
    shape = t if cfg.schedule == "linear" else 0.5 * (1.0 - math.cos(math.pi * t))
    return cfg.mlm_probability + (end - cfg.mlm_probability) * shape


def mean_rate(cfg: MaskingConfig) -> float:
    """The training rate averaged over the schedule (both shapes are symmetric about the middle of the run)."""
    end = cfg.mlm_probability_end
    return cfg.mlm_probability if cfg.schedule == "constant" or end is None else (cfg.mlm_probability + end) / 2


def evaluation_masking(cfg: MaskingConfig) -> MaskingConfig:
    """The masking of an evaluation: the classic BERT masks (Devlin et al. 2019: a coin per token, 80/10/10) at
    `eval_mlm_probability` (15 %), whatever rate, fixed count or whole-word choice the training recipe uses, so
    perplexities of models trained with other masking stay comparable."""
    return dataclasses.replace(
        cfg,
        mlm_probability=cfg.eval_mlm_probability,
        schedule="constant",
        mlm_probability_end=None,
        mask_replace=0.8,
        random_replace=0.1,
        whole_word=False,
        fixed_count=False,
    )


POSITION_MULTIPLE = 64  # head capacities are whole multiples of 64 rows: few distinct shapes, aligned products


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def selection_capacity(tokens: int, rate: float) -> int:
    """Rows to reserve for the selected positions of a micro-batch of `tokens` positions selected at `rate`: a coin
    per token's mean plus 6 of its standard deviations (a batch past that has odds about 1e-9; `selected_positions`
    grows for it), rounded up to a multiple of POSITION_MULTIPLE, and never more than all the positions (rounded up
    alike)."""
    bound = tokens * rate + 6.0 * math.sqrt(tokens * rate * (1.0 - rate))
    return min(_round_up(math.ceil(bound), POSITION_MULTIPLE), _round_up(tokens, POSITION_MULTIPLE))


def selected_positions(labels: torch.Tensor, rate: float) -> torch.Tensor:
    """int64 [capacity]: the flat (row-major) positions of `labels`' selected tokens in ascending order, then the
    sentinel `labels.numel()` (one past the last position) to the capacity. The capacity is `selection_capacity`,
    grown (rounded up) to fit a batch that selects more (whole words, fixed counts, chance): none is ever dropped."""
    found = (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)
    capacity = max(selection_capacity(labels.numel(), rate), _round_up(found.numel(), POSITION_MULTIPLE))
    positions = torch.full((capacity,), labels.numel(), dtype=torch.long)
    positions[: found.numel()] = found
    return positions


def document_ids(input_ids: torch.Tensor, sep_id: int) -> torch.Tensor:
    """int64 [B,T]: which document of its packed block each token belongs to (0, 1, ...). A packed block is
    [CLS] … [SEP] with each document of the stream ended by [SEP] (`data/blocks.py`): a document starts after each
    [SEP] but the block's own last one, so [CLS] joins the first document and the closing [SEP] the last."""
    ends = input_ids[:, :-2] == sep_id  # a [SEP] at t ends a document, so one starts at t + 1 (never at the last)
    return torch.nn.functional.pad(ends, (1, 1), value=False).long().cumsum(1)


def _as_int64(x: Any) -> torch.Tensor:
    """A 1-D token block (tensor, numpy array or list, any int dtype) as an int64 tensor."""
    if isinstance(x, torch.Tensor):
        return x.long()
    # via numpy: torch has no conversion for every numpy int dtype (uint32 stores, for one)
    return torch.from_numpy(np.asarray(x).astype(np.int64, copy=False))


class MaskingCollator:
    """DataLoader collate_fn: stacks (or pads) blocks and masks each by `block_seed(seed, epoch, index)`.

    Equal-length blocks (packing) give {"input_ids", "labels"} and no attention mask, so attention
    runs unmasked; blocks of different lengths are padded with `pad_id` to the longest, rounded up to a
    multiple of `pad_to_multiple_of`, and also get "attention_mask" (int64, 1 = real token).
    With `positions`, every batch also gets "selected_positions" (`selected_positions`): the sparse head's rows at
    a fixed capacity, found here in the loader rather than by a data-dependent selection on the device.
    With `total_steps`, a micro-batch's items carry their optimizer "step", and the batch is masked at that step's
    `scheduled_rate` (the head's capacity follows it); without, or for items without a step, at mlm_probability.
    With `documents` (data.document_attention: within), every batch also gets "document_ids" (`document_ids`), from
    which the model keeps each token's attention to its own document.
    """

    def __init__(
        self,
        vocab: VocabInfo,
        cfg: MaskingConfig,
        seed: int,
        pad_to_multiple_of: int = 8,
        positions: bool = False,
        total_steps: int | None = None,
        documents: bool = False,
    ) -> None:
        if pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1 (got {pad_to_multiple_of})")
        self.vocab = vocab
        self.cfg = cfg
        self.seed = seed
        self.pad_to_multiple_of = pad_to_multiple_of
        self.positions = positions
        self.total_steps = total_steps
        if documents and vocab.sep_id is None:
            raise UserError("tokenizer", "the tokenizer has no [SEP] token, which ends each document of a packed block")
        self.documents = documents

    def __call__(self, items: list[dict]) -> dict[str, torch.Tensor]:
        rate = scheduled_rate(self.cfg, int(items[0].get("step", 0)) if items else 0, self.total_steps)
        cfg = self.cfg if rate == self.cfg.mlm_probability else dataclasses.replace(self.cfg, mlm_probability=rate)
        batch = self._masked(items, cfg)
        if self.documents:
            # masks never select [SEP] nor draw it as a random token: the masked ids end documents where the block does
            batch["document_ids"] = document_ids(batch["input_ids"], self.vocab.sep_id)
        if self.positions:
            batch["selected_positions"] = selected_positions(batch["labels"], rate)
        return batch

    def _masked(self, items: list[dict], cfg: MaskingConfig) -> dict[str, torch.Tensor]:
        blocks = [_as_int64(item["input_ids"]) for item in items]
        seeds = [block_seed(self.seed, int(item["epoch"]), int(item["index"])) for item in items]
        lengths = [b.shape[0] for b in blocks]
        if len(set(lengths)) == 1:
            masked, labels = mask_tokens(torch.stack(blocks), self.vocab, cfg, seeds)
            return {"input_ids": masked, "labels": labels}

        multiple = self.pad_to_multiple_of
        width = -(-max(lengths) // multiple) * multiple
        input_ids = torch.full((len(blocks), width), self.vocab.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(blocks), width), dtype=torch.long)
        for row, (block, length) in enumerate(zip(blocks, lengths, strict=True)):
            input_ids[row, :length] = block
            attention_mask[row, :length] = 1
        masked, labels = mask_tokens(input_ids, self.vocab, cfg, seeds, attention_mask)
        return {"input_ids": masked, "labels": labels, "attention_mask": attention_mask}
