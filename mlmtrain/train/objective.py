"""What a training step optimises (`train.objective`), behind the one small interface the loop calls: which module
to build (and save, and step), what a step calls, how a micro-batch's loss sums become the loss, and the
training-time evaluation. `mlm`: the masked LM with its sparse head (`model/bert.py`); `electra`: replaced-token
detection (`model/electra.py`); `mlm+nsp`, `mlm+sop`: MLM on sentence pairs plus the pair head (`model/pairs.py`).

A step module returns loss SUMS, one per loss term ([MLM NLL], [generator NLL, discriminator BCE] or [MLM NLL, pair
cross-entropy, correct pairs]); the loop adds up
each term's count (`counts`) over the whole global batch, all ranks and micro-batches, so `loss` gives the exact
mean however unevenly the counted positions fall.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch

from mlmtrain.config import PAIR_OBJECTIVES, Config
from mlmtrain.data.masking import IGNORE_INDEX, VocabInfo, evaluation_masking
from mlmtrain.model.bert import flops_per_token, padded_vocab_size


@dataclass
class Objective:
    """The loss terms of `cfg.train.objective` and their weights."""

    name: str
    term_names: tuple[str, ...]  # metric names of the loss terms, beside the weighted total `loss`
    weights: tuple[float, ...]
    is_special: torch.Tensor  # bool over the vocabulary: specials are never scored by the discriminator
    flops_per_token: int = 0  # training FLOPs per input token of the trained module(s): train.max_flops counts them

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        """Each term's denominator in a micro-batch: selected positions (and, for ELECTRA, scored positions)."""
        labels = batch["labels"]
        selected = float((labels != IGNORE_INDEX).sum())
        if self.name == "mlm":
            return [selected]
        if self.name in PAIR_OBJECTIVES:  # the pair loss and accuracy are means over blocks
            blocks = float(labels.shape[0])
            return [selected, blocks, blocks]
        from mlmtrain.model.electra import scored_positions

        scored = scored_positions(batch["input_ids"], labels, batch.get("attention_mask"), self.is_special)
        return [selected, float(scored.sum())]

    def loss(self, sums: torch.Tensor, counts: Sequence[float]) -> torch.Tensor:
        """sum over terms of weight x (term sum / term count): the step's mean loss (a count of 0 counts as 1)."""
        sums = sums.reshape(-1)
        total = sums[0] * self.weights[0] / max(counts[0], 1.0)
        for index in range(1, len(self.weights)):
            total = total + sums[index] * self.weights[index] / max(counts[index], 1.0)
        return total

    def loss_terms(self, sums: torch.Tensor, counts: Sequence[float]) -> dict[str, float]:
        """Each term's unweighted mean, for the metrics (nothing for a single-term objective)."""
        if len(self.term_names) < 2:
            return {}
        values = sums.reshape(-1).tolist()
        return {name: values[i] / max(counts[i], 1.0) for i, name in enumerate(self.term_names)}


def objective_of(cfg: Config, vocab: VocabInfo) -> Objective:
    is_special = vocab.is_special(torch.arange(vocab.vocab_size))
    flops = round(training_flops_per_token(cfg, vocab.vocab_size))
    if cfg.train.objective == "electra":
        weights = (1.0, cfg.electra.discriminator_weight)
        return Objective("electra", ("generator_loss", "discriminator_loss"), weights, is_special, flops)
    if cfg.train.objective in PAIR_OBJECTIVES:  # MLM + pair loss, summed; the accuracy rides along unweighted
        terms = ("mlm_loss", "pair_loss", "pair_accuracy")
        return Objective(cfg.train.objective, terms, (1.0, 1.0, 0.0), is_special, flops)
    return Objective("mlm", ("loss",), (1.0,), is_special, flops)


def training_flops_per_token(cfg: Config, vocab_size: int) -> float:
    """Training FLOPs per input token of what `cfg.train.objective` trains (`model.flops_per_token`'s count:
    6 x the multiply-accumulates of the matrix products). ELECTRA adds its generator to its discriminator.

    ELECTRA, with H the discriminator's width, G the generator's, V the (padded) vocabulary and f the selection
    rate (1 with the dense head): the discriminator's encoder plus its H x H + H x 1 head on every token; the
    generator's encoder, the H x G projection of the shared embedding (when G != H), and its head, G x H then
    H x V, on the selected positions.
    """
    model, seq_len, rate = cfg.model, cfg.data.seq_len, cfg.masking.mlm_probability
    if cfg.train.objective in PAIR_OBJECTIVES:  # plus the pooler and the pair head, once per block
        pair_head = model.hidden_size * model.hidden_size + 2 * model.hidden_size
        return flops_per_token(model, vocab_size, seq_len, rate, model.sparse_head) + 6.0 * pair_head / seq_len
    if cfg.train.objective != "electra":
        return flops_per_token(model, vocab_size, seq_len, rate, model.sparse_head)
    shape = cfg.electra.generator_shape(model)
    generator = dataclasses.replace(
        model,
        hidden_size=shape["hidden_size"],
        num_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_size"],
        num_layers=shape["num_layers"],
    )
    hidden, width = model.hidden_size, shape["hidden_size"]
    vocab = padded_vocab_size(vocab_size, model.pad_vocab_multiple)
    head_share = rate if model.sparse_head else 1.0
    discriminator_head = hidden * hidden + hidden
    projection = hidden * width if width != hidden else 0
    generator_head = head_share * (width * hidden + hidden * vocab)
    encoders = flops_per_token(model, vocab_size, seq_len, 0.0, True) + flops_per_token(
        generator, vocab_size, seq_len, 0.0, True
    )  # a selection rate of 0 with the sparse head: the encoders alone
    return encoders + 6.0 * (discriminator_head + projection + generator_head)


def build_trained(cfg: Config, vocab: VocabInfo) -> Any:
    """A freshly initialised model of the objective (or model.init_from's base): what the optimizer steps and
    checkpoints save."""
    if cfg.model.init_from:
        from mlmtrain.train.init_from import load_base_model

        return load_base_model(cfg)
    if cfg.train.objective == "electra":
        from mlmtrain.model.electra import build_electra

        return build_electra(cfg, vocab)
    if cfg.train.objective in PAIR_OBJECTIVES:
        from mlmtrain.model.pairs import build_pretraining

        return build_pretraining(cfg.model, vocab_size=vocab.vocab_size, pad_id=vocab.pad_id)
    from mlmtrain.model.bert import build_model

    return build_model(cfg.model, vocab_size=vocab.vocab_size, pad_id=vocab.pad_id)


def step_module(cfg: Config, trained: Any) -> torch.nn.Module:
    """The module a step calls (and DDP / torch.compile wrap): forward(input_ids, labels, attention_mask) -> sums."""
    if cfg.train.objective == "electra":
        return trained  # ElectraPretraining's own forward returns both sums
    if cfg.train.objective in PAIR_OBJECTIVES:
        from mlmtrain.model.pairs import PairPretraining

        return PairPretraining(trained, sparse_head=cfg.model.sparse_head)
    from mlmtrain.model.bert import MaskedLM

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
    if cfg.train.objective in PAIR_OBJECTIVES:  # blocks: the validation split's PairWindows; pairs fixed by the seed
        from mlmtrain.model.pairs import evaluate_pairs

        collator = blocks.collator(vocab, masking, seed)
        metrics = evaluate_pairs(trained, blocks, indices, collator, batch_size, device, autocast_dtype)
        summary = (
            f"validation loss {metrics['eval_loss']:.4f}: perplexity {metrics['eval_ppl']:.2f}, pair accuracy "
            f"{metrics['eval_pair_accuracy']:.3f}"
        )
        return metrics, summary
    if cfg.train.objective == "electra":
        from mlmtrain.model.electra import evaluate_electra

        found = evaluate_electra(trained, blocks, indices, masking, seed, batch_size, device, autocast_dtype)
        metrics = {f"eval_{k}": v for k, v in found.as_dict().items() if k != "seconds"}
        summary = (
            f"validation loss {found.loss:.4f}: generator perplexity {found.generator_perplexity:.2f}, accuracy "
            f"{found.generator_accuracy:.3f}; discriminator accuracy {found.discriminator_accuracy:.3f}, "
            f"AUC {found.auc:.3f}"
        )
        return {**metrics, "eval_seconds": round(found.seconds, 3)}, summary
    from mlmtrain.evaluate.perplexity import evaluate_blocks

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
