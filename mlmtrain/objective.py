"""What a training step optimises (`train.objective`), behind the one small interface the loop calls: which module
to build (and save, and step), what a step calls, how a micro-batch's loss sums become the loss, and the
training-time evaluation. `mlm`: the masked LM with its sparse head (`model.py`); `electra`: replaced-token
detection (`electra.py`).

A step module returns loss SUMS, one per part ([MLM NLL] or [generator NLL, discriminator BCE]); the loop adds up
each part's count (`counts`) over the whole global batch, all ranks and micro-batches, so `loss` gives the exact
mean however unevenly the counted positions fall.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch

from mlmtrain.config import Config
from mlmtrain.masking import IGNORE_INDEX, VocabInfo, evaluation_masking


@dataclass
class Objective:
    """The loss parts of `cfg.train.objective` and their weights."""

    name: str
    part_names: tuple[str, ...]  # metric names of the parts, beside the weighted total `loss`
    weights: tuple[float, ...]
    is_special: torch.Tensor  # bool over the vocabulary: specials are never scored by the discriminator

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        """Each part's denominator in a micro-batch: selected positions (and, for ELECTRA, scored positions)."""
        labels = batch["labels"]
        selected = float((labels != IGNORE_INDEX).sum())
        if self.name == "mlm":
            return [selected]
        from mlmtrain.electra import scored_positions

        scored = scored_positions(batch["input_ids"], labels, batch.get("attention_mask"), self.is_special)
        return [selected, float(scored.sum())]

    def loss(self, sums: torch.Tensor, counts: Sequence[float]) -> torch.Tensor:
        """sum over parts of weight x (part sum / part count): the step's mean loss (a count of 0 counts as 1)."""
        sums = sums.reshape(-1)
        total = sums[0] * self.weights[0] / max(counts[0], 1.0)
        for index in range(1, len(self.weights)):
            total = total + sums[index] * self.weights[index] / max(counts[index], 1.0)
        return total

    def parts(self, sums: torch.Tensor, counts: Sequence[float]) -> dict[str, float]:
        """Each part's unweighted mean, for the metrics (nothing for a single-part objective)."""
        if len(self.part_names) < 2:
            return {}
        values = sums.reshape(-1).tolist()
        return {name: values[i] / max(counts[i], 1.0) for i, name in enumerate(self.part_names)}


def objective_of(cfg: Config, vocab: VocabInfo) -> Objective:
    is_special = vocab.is_special(torch.arange(vocab.vocab_size))
    if cfg.train.objective == "electra":
        weights = (1.0, cfg.electra.discriminator_weight)
        return Objective("electra", ("generator_loss", "discriminator_loss"), weights, is_special)
    return Objective("mlm", ("loss",), (1.0,), is_special)


def build_trained(cfg: Config, vocab: VocabInfo) -> Any:
    """A freshly initialised model of the objective (or model.init_from's base): what the optimizer steps and
    checkpoints save."""
    if cfg.model.init_from:
        from mlmtrain.init_from import load_base_model

        return load_base_model(cfg)
    if cfg.train.objective == "electra":
        from mlmtrain.electra import build_electra

        return build_electra(cfg, vocab)
    from mlmtrain.model import build_model

    return build_model(cfg.model, vocab_size=vocab.vocab_size, pad_id=vocab.pad_id)


def step_module(cfg: Config, trained: Any) -> torch.nn.Module:
    """The module a step calls (and DDP / torch.compile wrap): forward(input_ids, labels, attention_mask) -> sums."""
    if cfg.train.objective == "electra":
        return trained  # ElectraPretraining's own forward returns both sums
    from mlmtrain.model import MaskedLM

    return MaskedLM(trained, sparse_head=cfg.model.sparse_head)


def evaluate_trained(
    cfg: Config,
    trained: Any,
    vocab: VocabInfo,
    blocks: Union[Sequence[np.ndarray], Mapping[int, np.ndarray]],
    indices: Sequence[int],
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype],
) -> tuple[dict[str, Any], str]:
    """Training-time evaluation with fixed masks (and, for ELECTRA, a fixed sampling seed): the metrics to log,
    `eval_loss` among them, and a one-line summary."""
    seed = cfg.masking.eval_seed
    masking = evaluation_masking(cfg.masking)  # the classic 15 % masks, whatever masking the run trains with
    if cfg.train.objective == "electra":
        from mlmtrain.electra import evaluate_electra

        found = evaluate_electra(trained, blocks, indices, masking, seed, batch_size, device, autocast_dtype)
        metrics = {f"eval_{k}": v for k, v in found.as_dict().items() if k != "seconds"}
        summary = (
            f"validation loss {found.loss:.4f}: generator perplexity {found.generator_perplexity:.2f}, accuracy "
            f"{found.generator_accuracy:.3f}; discriminator accuracy {found.discriminator_accuracy:.3f}, "
            f"AUC {found.auc:.3f}"
        )
        return {**metrics, "eval_seconds": round(found.seconds, 3)}, summary
    from mlmtrain.evaluate import evaluate_blocks

    result = evaluate_blocks(trained, blocks, indices, vocab, masking, seed, batch_size, device, autocast_dtype)
    metrics = {
        "eval_loss": result.loss,
        "eval_ppl": result.perplexity,
        "eval_acc": result.accuracy,
        "eval_masked_tokens": result.masked_tokens,
        "eval_seconds": round(result.seconds, 3),
    }
    summary = f"validation loss {result.loss:.4f}, perplexity {result.perplexity:.2f}, accuracy {result.accuracy:.4f}"
    return metrics, summary
