"""MLM perplexity with fixed masks, used by training-time evaluation and by `mlmtrain eval-perplexity`.

Masks come from the collator seeded with the evaluation seed and each block's index, so two evaluations
of one model agree to the last digit and two models with one tokenizer see the same masked positions.
Perplexity = exp(total NLL over masked tokens / masked tokens), summed in float64 (token-weighted).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mlmtrain.config import MaskingConfig
from mlmtrain.masking import MaskingCollator, VocabInfo


@dataclass
class EvalResult:
    loss: float
    perplexity: float
    tokens: int
    masked_tokens: int
    ci95: tuple[float, float]
    seconds: float
    blocks: int

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ci95"] = list(self.ci95)
        return out


def per_row_nll(mlm: Any, input_ids: torch.Tensor, labels: torch.Tensor,
                attention_mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(NLL sum, masked count) per row, float64. BERT-style models run their head on masked rows only."""
    selected = labels != -100
    rows = selected.nonzero()[:, 0]
    if hasattr(mlm, "bert") and hasattr(mlm, "cls"):
        hidden = mlm.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = mlm.cls(hidden[selected])
    else:  # any other masked LM: full logits, then keep the masked positions
        logits = mlm(input_ids=input_ids, attention_mask=attention_mask).logits[selected]
    nll = F.cross_entropy(logits.float(), labels[selected], reduction="none").double()
    sums = torch.zeros(len(input_ids), dtype=torch.float64, device=nll.device).index_add_(0, rows, nll)
    return sums, selected.sum(dim=1)


def confidence_interval(block_nll: np.ndarray, block_counts: np.ndarray) -> tuple[float, float]:
    """95 % interval of perplexity: normal approximation of the ratio estimator over blocks."""
    keep = block_counts > 0
    nll, counts = block_nll[keep], block_counts[keep].astype(np.float64)
    k = len(nll)
    if k < 2:
        return (float("nan"), float("nan"))
    loss = nll.sum() / counts.sum()
    residuals = (nll - loss * counts) / counts.mean()
    stderr = math.sqrt(float((residuals**2).sum()) / (k * (k - 1)))
    return (math.exp(loss - 1.96 * stderr), math.exp(loss + 1.96 * stderr))


@torch.no_grad()
def evaluate_blocks(mlm: Any, blocks: Sequence[np.ndarray], indices: Sequence[int], vocab: VocabInfo,
                    masking: MaskingConfig, seed: int, batch_size: int, device: torch.device,
                    autocast_dtype: Optional[torch.dtype] = None, progress: Any = None) -> EvalResult:
    """Masked-LM loss and perplexity of `mlm` on blocks[i] for i in `indices`, with fixed masks."""
    started = time.perf_counter()
    collator = MaskingCollator(vocab, masking, seed=seed)
    was_training = mlm.training
    mlm.eval()
    block_nll, block_counts, tokens = [], [], 0
    autocast = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else nullcontext()
    try:
        for start in range(0, len(indices), batch_size):
            chunk = indices[start:start + batch_size]
            batch = collator([{"input_ids": blocks[i], "epoch": 0, "index": int(i)} for i in chunk])
            batch = {k: v.to(device) for k, v in batch.items()}
            with autocast:
                nll, counts = per_row_nll(mlm, batch["input_ids"], batch["labels"], batch.get("attention_mask"))
            block_nll.append(nll.cpu().numpy())
            block_counts.append(counts.cpu().numpy())
            mask = batch.get("attention_mask")
            tokens += int(mask.sum()) if mask is not None else batch["input_ids"].numel()
            if progress is not None:
                progress.update(len(chunk))
    finally:
        mlm.train(was_training)
    nll_all = np.concatenate(block_nll) if block_nll else np.zeros(0)
    counts_all = np.concatenate(block_counts) if block_counts else np.zeros(0, dtype=np.int64)
    masked = int(counts_all.sum())
    loss = float(nll_all.sum() / masked) if masked else float("nan")
    return EvalResult(loss=loss, perplexity=math.exp(loss) if masked else float("nan"), tokens=tokens,
                      masked_tokens=masked, ci95=confidence_interval(nll_all, counts_all),
                      seconds=time.perf_counter() - started, blocks=len(indices))
