"""`mlmtrain mask-demo`: one text through the training collator, to see what MLM masking does to it.

The masks come from `masking.MaskingCollator` itself (the run's masking settings, tokenizer and seed), drawn as the
blocks 0, 1, ... of epoch 0 would be; nothing here decides a mask. `render_text` and `as_json` format the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from mlmtrain.config import MaskingConfig
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo

MASKED, RANDOM, KEPT = "mask", "random", "kept"  # what a selected position became
_DRAWS_PER_BATCH = 1024  # draws collated at once for --samples: bounded memory for any K


@dataclass
class SampleCounts:
    """What K draws of the masks did: per position, how often it was selected; over all, the 80/10/10 split."""

    draws: int
    picked: list[int]  # per position: draws that selected it
    maskable: int  # maskable positions over all draws
    selected: int
    masked: int
    random: int
    kept: int  # selected and unchanged (a random draw that hit the original token counts here too)


@dataclass
class MaskDemo:
    """The first draw of the masks of one text, and (with samples) the counts over many draws."""

    tokens: list[str]
    ids: list[int]
    maskable: list[bool]
    input_ids: list[int]  # what the model sees
    labels: list[int]  # the original id at selected positions, -100 elsewhere
    became: list[Optional[str]]  # MASKED, RANDOM, KEPT at selected positions, None elsewhere
    masking: MaskingConfig
    seed: int
    truncated: bool  # the text was cut to the block length
    samples: Optional[SampleCounts] = None

    @property
    def loss_positions(self) -> int:
        return sum(label != IGNORE_INDEX for label in self.labels)


def draw_masks(
    ids: list[int], vocab: VocabInfo, masking: MaskingConfig, seed: int, first: int, count: int
) -> dict[str, torch.Tensor]:
    """The collator's batch for the same block served `count` times, as blocks first .. first+count-1 of epoch 0."""
    collator = MaskingCollator(vocab, masking, seed=seed)
    block = torch.tensor(ids, dtype=torch.long)
    return collator([{"input_ids": block, "epoch": 0, "index": index} for index in range(first, first + count)])


def outcomes(ids: torch.Tensor, input_ids: torch.Tensor, labels: torch.Tensor, mask_id: int) -> dict[str, torch.Tensor]:
    """Bool tensors of the selected positions and of what they became, read off a collated batch."""
    selected = labels != IGNORE_INDEX
    masked = selected & (input_ids == mask_id)
    kept = selected & (input_ids == ids)
    return {"selected": selected, MASKED: masked, KEPT: kept, RANDOM: selected & ~masked & ~kept}


def count_samples(ids: list[int], vocab: VocabInfo, masking: MaskingConfig, seed: int, draws: int) -> SampleCounts:
    """Counts over `draws` draws of the masks of one block (the draws are blocks 0 .. draws-1 of epoch 0)."""
    original = torch.tensor(ids, dtype=torch.long)
    maskable_per_draw = int((~vocab.is_special(original)).sum())
    picked = torch.zeros(len(ids), dtype=torch.long)
    totals = {MASKED: 0, RANDOM: 0, KEPT: 0}
    for first in range(0, draws, _DRAWS_PER_BATCH):
        batch = draw_masks(ids, vocab, masking, seed, first, min(_DRAWS_PER_BATCH, draws - first))
        found = outcomes(original, batch["input_ids"], batch["labels"], vocab.mask_id)
        picked += found["selected"].sum(0)
        for name in totals:
            totals[name] += int(found[name].sum())
    return SampleCounts(
        draws=draws,
        picked=picked.tolist(),
        maskable=maskable_per_draw * draws,
        selected=int(picked.sum()),
        masked=totals[MASKED],
        random=totals[RANDOM],
        kept=totals[KEPT],
    )


def mask_demo(
    text: str, tokenizer: Any, masking: MaskingConfig, seed: int, seq_len: int, samples: Optional[int] = None
) -> MaskDemo:
    """The masks the collator draws for `text` (encoded with [CLS]/[SEP], cut to `seq_len`) under `masking`."""
    vocab = VocabInfo.from_tokenizer(tokenizer)
    full = tokenizer(text, add_special_tokens=True)["input_ids"]
    ids = tokenizer(text, add_special_tokens=True, truncation=True, max_length=seq_len)["input_ids"]
    batch = draw_masks(ids, vocab, masking, seed, 0, 1)
    original = torch.tensor([ids], dtype=torch.long)
    found = outcomes(original, batch["input_ids"], batch["labels"], vocab.mask_id)
    became = [next((name for name in (MASKED, RANDOM, KEPT) if found[name][0, i]), None) for i in range(len(ids))]
    return MaskDemo(
        tokens=tokenizer.convert_ids_to_tokens(ids),
        ids=ids,
        maskable=(~vocab.is_special(original[0])).tolist(),
        input_ids=batch["input_ids"][0].tolist(),
        labels=batch["labels"][0].tolist(),
        became=became,
        masking=masking,
        seed=seed,
        truncated=len(full) > len(ids),
        samples=count_samples(ids, vocab, masking, seed, samples) if samples else None,
    )


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def describe_masking(masking: MaskingConfig) -> str:
    """The masking settings in words."""
    how = "a fixed count per block" if masking.fixed_count else "a coin per token"
    words = ", whole words" if masking.whole_word else ""
    keep = 1.0 - masking.mask_replace - masking.random_replace
    return (
        f"{masking.mlm_probability:.0%} of ordinary tokens selected ({how}{words}); of them "
        f"{masking.mask_replace:.0%} [MASK], {masking.random_replace:.0%} random, {keep:.0%} unchanged"
    )


def render_text(demo: MaskDemo, convert_ids_to_tokens: Any) -> str:
    """The demo as aligned lines: one row per position, then the counts."""
    picked = demo.samples.picked if demo.samples else None
    header = ["pos", "token", "selected", "model sees", "label"] + (["picked"] if picked else [])
    rows = [header]
    for i, token in enumerate(demo.tokens):
        selected = f"yes: {demo.became[i]}" if demo.became[i] else ("no" if demo.maskable[i] else "special")
        label = str(IGNORE_INDEX) if demo.labels[i] == IGNORE_INDEX else f"{demo.labels[i]} ({token})"
        seen = convert_ids_to_tokens(demo.input_ids[i])
        row = [str(i), token, selected, seen, label]
        if picked:
            row.append(f"{_share(picked[i], demo.samples.draws):.1%}" if demo.maskable[i] else "-")
        rows.append(row)
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = [
        f"masking: {describe_masking(demo.masking)}",
        f"seed {demo.seed}: the masks of block 0, epoch 0" + (" (text cut to data.seq_len)" if demo.truncated else ""),
    ]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    maskable = sum(demo.maskable)
    lines.append(f"{demo.loss_positions} of {len(demo.ids)} positions carry loss ({maskable} maskable)")
    if demo.samples:
        s = demo.samples
        lines.append(
            f"over {s.draws:,} draws: {s.selected:,} of {s.maskable:,} maskable positions selected "
            f"({_share(s.selected, s.maskable):.1%}); of them {_share(s.masked, s.selected):.1%} [MASK], "
            f"{_share(s.random, s.selected):.1%} random, {_share(s.kept, s.selected):.1%} unchanged "
            "(a random draw of the original token counts as unchanged)"
        )
    return "\n".join(lines)


def as_json(demo: MaskDemo) -> dict[str, Any]:
    """The demo as one JSON-ready object."""
    positions = [
        {
            "token": demo.tokens[i],
            "id": demo.ids[i],
            "maskable": demo.maskable[i],
            "selected": demo.became[i] is not None,
            "became": demo.became[i],
            "input_id": demo.input_ids[i],
            "label": demo.labels[i],
        }
        for i in range(len(demo.ids))
    ]
    masking = demo.masking
    out: dict[str, Any] = {
        "seed": demo.seed,
        "masking": {
            "mlm_probability": masking.mlm_probability,
            "mask_replace": masking.mask_replace,
            "random_replace": masking.random_replace,
            "whole_word": masking.whole_word,
            "fixed_count": masking.fixed_count,
        },
        "truncated": demo.truncated,
        "positions": positions,
        "loss_positions": demo.loss_positions,
        "maskable": sum(demo.maskable),
    }
    if demo.samples:
        s = demo.samples
        out["samples"] = {
            "draws": s.draws,
            "maskable": s.maskable,
            "selected": s.selected,
            "masked": s.masked,
            "random": s.random,
            "kept": s.kept,
            "picked": s.picked,
        }
    return out
