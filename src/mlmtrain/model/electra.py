"""ELECTRA replaced-token detection (`train.objective: electra`): a small generator (a masked LM) fills the
positions the masking collator selected with samples; the encoder being trained, the discriminator, judges every
real position as original or replaced. Also its checkpoint layout, loading for resume, and its evaluation.

Both are stock transformers ELECTRA models: the discriminator an `ElectraForPreTraining` (its folder loads with
`AutoModel`, `AutoModelForSequenceClassification`, `AutoModelForTokenClassification`), the generator an
`ElectraForMaskedLM` saved in `generator/` (loads with `pipeline("fill-mask")`). They share ONE embedding module
(word, position and token-type embeddings and their LayerNorm, as the original code shares its embedding scope),
of width `model.hidden_size`; a narrower generator projects it to its own width (transformers'
`embeddings_project`), and its decoder is tied to the shared word embedding.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F

from mlmtrain.config import Config, MaskingConfig
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo
from mlmtrain.errors import UserError
from mlmtrain.model.bert import head_autocast, padded_vocab_size
from mlmtrain.model.context import autocast_context, eval_mode
from mlmtrain.readers import read_json
from mlmtrain.runtime.model_folder import ModelFolder, load_model, read_model_folder

GENERATOR_DIR = "generator"  # the generator's folder inside an ELECTRA checkpoint
# The ELECTRA paper replaces 15 % of the tokens (25 % for its large model). At the fast MLM recipe's 40 %, which the
# CPU-sized configs ship, its discriminator stayed at chance in mlmtrain's runs (docs/benchmarks/log.md).
MOST_REPLACED = 0.25


def masking_rate_note(cfg: Config) -> Optional[str]:
    """A start-line note for an ELECTRA run that replaces more than MOST_REPLACED of the tokens; None otherwise."""
    rate = cfg.masking.mlm_probability
    if rate <= MOST_REPLACED:
        return None
    return (
        f"note: this ELECTRA run replaces {rate:.0%} of the tokens (masking.mlm_probability); at 40 % its "
        "discriminator stayed at chance in mlmtrain's measurements, the ELECTRA paper replaces 15 %: set "
        "masking.mlm_probability: 0.15"
    )


def build_electra(cfg: Config, vocab: VocabInfo) -> ElectraPretraining:
    """A freshly initialised generator + discriminator pair (seed torch first for reproducible weights)."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining  # transformers: heavy, loaded on use

    discriminator_config, generator_config = electra_configs(cfg, vocab)
    discriminator = ElectraForPreTraining(discriminator_config)  # built first: the seeded weights depend on the order
    return ElectraPretraining(ElectraForMaskedLM(generator_config), discriminator, vocab, cfg)


def electra_attention() -> str:
    """SDPA where transformers' ELECTRA supports it (5.x), else its eager attention (4.x has no SDPA for ELECTRA)."""
    # transformers: heavy, loaded on use
    from transformers.models.electra.modeling_electra import ElectraPreTrainedModel

    return "sdpa" if getattr(ElectraPreTrainedModel, "_supports_sdpa", True) else "eager"


def electra_configs(cfg: Config, vocab: VocabInfo) -> tuple[Any, Any]:
    """The transformers configs of the discriminator and the generator `build_electra` makes (a resume compares a
    checkpoint's with them)."""
    from transformers import ElectraConfig as HFElectraConfig  # transformers: heavy, loaded on use

    model, generator_shape = cfg.model, cfg.electra.generator_shape(cfg.model)
    common = {
        "vocab_size": padded_vocab_size(vocab.vocab_size, model.pad_vocab_multiple),
        "embedding_size": model.hidden_size,  # the discriminator's width: it needs no projection, the generator one
        "max_position_embeddings": model.max_position_embeddings,
        "hidden_dropout_prob": model.hidden_dropout_prob,  # model.dropout when set, as for a masked LM
        "attention_probs_dropout_prob": model.attention_dropout_prob,
        "pad_token_id": vocab.pad_id,
        "attn_implementation": electra_attention(),
    }
    discriminator = HFElectraConfig(
        hidden_size=model.hidden_size,
        num_hidden_layers=model.num_layers,
        num_attention_heads=model.num_heads,
        intermediate_size=model.intermediate_size,
        **common,
    )
    generator = HFElectraConfig(
        hidden_size=generator_shape["hidden_size"],
        num_hidden_layers=generator_shape["num_layers"],
        num_attention_heads=generator_shape["num_heads"],
        intermediate_size=generator_shape["intermediate_size"],
        tie_word_embeddings=True,
        **common,
    )
    return discriminator, generator


def discriminator_inputs(
    input_ids: torch.Tensor, labels: torch.Tensor, sampled: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(discriminator input ids, replaced bool [B,T]) from a masked batch and the samples at its selected positions.

    The original text is `labels` at selected positions and `input_ids` elsewhere; the samples go in at the
    selected positions (row-major order, as `x[selected]` yields them). A position is replaced only where the
    sample differs from the original token: a sample that happens to be the original counts as original.
    """
    selected = labels != IGNORE_INDEX
    original = torch.where(selected, labels, input_ids)
    corrupted = original.masked_scatter(selected, sampled)
    return corrupted, corrupted != original


def scored_positions(
    input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: Optional[torch.Tensor], is_special: torch.Tensor
) -> torch.Tensor:
    """Bool [B,T]: the positions the discriminator is scored on, every real token except specials and padding.

    A selected position always counts (its input may show [MASK]); elsewhere the input is the original token, so
    a special id there is a real special. `is_special` is a bool table over the vocabulary.
    """
    scored = (labels != IGNORE_INDEX) | ~is_special[input_ids]
    if attention_mask is not None:
        scored &= attention_mask.bool()
    return scored


@torch.compiler.disable  # under train.compile a draw sized by the selected rows broke tracing; eager draws as before
def sample_tokens(
    logits: torch.Tensor, temperature: float, banned: torch.Tensor, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """One id per row of `logits` [N,V], drawn from softmax(logits / temperature) without the `banned` ids
    (special tokens and the padding rows of the embedding: the discriminator should see text, not [MASK]).
    No gradient flows through the draw; `generator` None draws from torch's global RNG (saved in checkpoints).

    Drawn by inverting each row's cumulative distribution with one uniform number per row. `torch.multinomial`
    draws an exponential number for every entry of [N,V] instead, which on a CPU cost more than the generator's
    forward pass.
    """
    if logits.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=logits.device)
    scaled = (logits.detach().float() / temperature).masked_fill(banned, float("-inf"))
    cdf = scaled.softmax(dim=-1).cumsum(dim=-1)  # a banned id adds exactly 0, so no uniform number can land on it
    uniform = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    drawn = torch.searchsorted(cdf, uniform, right=True).squeeze(1)  # the first id whose cumulative sum exceeds it
    # rounding can put the uniform number at the total, past every id: take the last allowed id then (found without
    # a host sync, so a CUDA step does not wait here)
    ids = torch.arange(banned.shape[0], device=banned.device)
    return torch.minimum(drawn, torch.where(banned, -1, ids).max())


@dataclass
class ElectraStep:
    """What one forward pass produced, for the loss and for the evaluation."""

    generator_logits: torch.Tensor  # [N, V] at the N selected positions
    targets: torch.Tensor  # [N] original ids there
    replaced: torch.Tensor  # bool [B,T]
    scored: torch.Tensor  # bool [B,T]
    discriminator_logits: torch.Tensor  # [B,T] float32, > 0 means "replaced"


class ElectraPretraining(torch.nn.Module):
    """Generator + discriminator with shared embeddings: the one module the loop wraps (DDP, torch.compile).

    `forward` returns the float32 sums of the two loss terms [generator NLL over selected positions, BCE over scored
    positions]: the loop divides each by its count over the whole global batch and weighs them (`train/objectives/`).
    `save_pretrained` writes the discriminator into a folder and the generator into its `generator/`.
    """

    def __init__(self, generator: Any, discriminator: Any, vocab: VocabInfo, cfg: Config) -> None:
        super().__init__()
        shared = discriminator.electra.embeddings
        generator.electra.embeddings = shared
        # re-tie: the generator's decoder was tied to its own (now dropped) word embedding
        generator.generator_lm_head.weight = shared.word_embeddings.weight
        self.discriminator, self.generator = discriminator, generator  # the encoder being trained registers first
        self.temperature = cfg.electra.temperature
        self.discriminator_weight = cfg.electra.discriminator_weight
        self.sparse_head = cfg.model.sparse_head
        self.head_dtype: Optional[torch.dtype] = None  # train.precision bf16-head: autocast for the generator's head
        self.vocab = vocab
        rows = generator.config.vocab_size
        banned = torch.ones(rows, dtype=torch.bool)
        banned[: vocab.vocab_size] = vocab.is_special(torch.arange(vocab.vocab_size))
        # a buffer, so it follows the module to its device; not persistent: it is not part of the weights
        self.register_buffer("banned", banned, persistent=False)

    @property
    def config(self) -> Any:
        """The discriminator's config: the encoder being trained."""
        return self.discriminator.config

    @property
    def base_model(self) -> Any:
        """The discriminator's encoder (`ElectraModel`): what a downstream probe fine-tunes, as for a masked LM."""
        return self.discriminator.electra

    def step(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        sampler: Optional[torch.Generator] = None,
    ) -> ElectraStep:
        selected = labels != IGNORE_INDEX
        generator = self.generator
        hidden = generator.electra(input_ids, attention_mask=attention_mask).last_hidden_state
        with head_autocast(hidden.device, self.head_dtype):  # train.precision bf16-head, as model.MaskedLM
            if self.sparse_head:  # the head (and its H x V decoder) on the selected rows only, as MaskedLM does
                logits = generator.generator_lm_head(generator.generator_predictions(hidden[selected]))
            else:
                logits = generator.generator_lm_head(generator.generator_predictions(hidden))[selected]
        targets = labels[selected]
        sampled = sample_tokens(logits, self.temperature, self.banned, sampler)
        corrupted, replaced = discriminator_inputs(input_ids, labels, sampled)
        scored = scored_positions(input_ids, labels, attention_mask, self.banned)
        discriminator = self.discriminator
        hidden = discriminator.electra(corrupted, attention_mask=attention_mask).last_hidden_state
        scores = discriminator.discriminator_predictions(hidden).float()
        return ElectraStep(logits, targets, replaced, scored, scores)

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        out = self.step(input_ids, labels, attention_mask)
        generator_nll = F.cross_entropy(out.generator_logits.float(), out.targets, reduction="sum")
        detection = F.binary_cross_entropy_with_logits(
            out.discriminator_logits[out.scored], out.replaced[out.scored].float(), reduction="sum"
        )
        return torch.stack((generator_nll, detection))

    def save_pretrained(self, folder: Union[str, Path], **kwargs: Any) -> None:
        """The discriminator as the checkpoint's model, the generator in `generator/` (its own copy of the shared
        embeddings, so each folder stands alone)."""
        self.discriminator.save_pretrained(str(folder), **kwargs)
        self.generator.save_pretrained(str(Path(folder) / GENERATOR_DIR), **kwargs)


def load_electra(saved: ModelFolder, cfg: Config, vocab: VocabInfo, settings: dict[str, Any]) -> ElectraPretraining:
    """The pair saved in an ELECTRA checkpoint folder (for resume; `saved`: the folder, read once), embeddings shared
    again; `settings` overrides keys of both saved configs (the resume's dropout). The resume checks their shapes
    first."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining  # transformers: heavy, loaded on use

    generator = read_model_folder(saved.folder / GENERATOR_DIR, topic="checkpoint", fix="resume from another one")
    attention = electra_attention()
    discriminator = load_model(ElectraForPreTraining, saved, settings, attn_implementation=attention)
    return ElectraPretraining(
        load_model(ElectraForMaskedLM, generator, settings, attn_implementation=attention), discriminator, vocab, cfg
    )


def generator_folder(folder: Path) -> Optional[Path]:
    """For the masked-LM commands: the `generator/` of an ELECTRA checkpoint folder (its discriminator predicts no
    tokens), None for any other folder; a UserError for a discriminator without its generator."""
    try:
        architectures = read_json(folder / "config.json").get("architectures") or []
    except (OSError, ValueError, AttributeError):  # no or no readable config.json: the loader says what is wrong
        return None
    if "ElectraForPreTraining" not in architectures:
        return None
    if (folder / GENERATOR_DIR / "config.json").is_file():
        return folder / GENERATOR_DIR
    raise UserError(
        "model",
        f"{folder} holds an ELECTRA discriminator, which predicts no tokens, and no {GENERATOR_DIR}/ folder; "
        f"pass the whole ELECTRA checkpoint folder (with {GENERATOR_DIR}/) or a masked-LM folder",
    )


# ---------------------------------------------------------------------------------------------
# Evaluation with fixed masks and a fixed sampling seed


@dataclass
class ElectraEvalResult:
    loss: float  # generator NLL + weight x BCE, the training loss on the evaluation blocks
    generator_loss: float
    generator_perplexity: float
    generator_accuracy: float
    discriminator_loss: float
    discriminator_accuracy: float
    precision: float
    recall: float
    auc: float
    masked_tokens: int
    scored_tokens: int
    replaced_share: float
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: the chance that a random positive scores above a random negative (ties count
    half), from the rank-sum (Mann-Whitney U) statistic. NaN when one class is absent."""
    labels = np.asarray(labels, dtype=bool)
    positives = int(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    _, inverse, counts = np.unique(np.asarray(scores, dtype=np.float64), return_inverse=True, return_counts=True)
    average_rank = np.cumsum(counts) - (counts - 1) / 2.0  # 1-based ranks, ties share their mean rank
    rank_sum = float(average_rank[inverse][labels].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


@torch.no_grad()
def evaluate_electra(
    pair: ElectraPretraining,
    blocks: Union[Sequence[np.ndarray], Mapping[int, np.ndarray]],
    indices: Sequence[int],
    masking: MaskingConfig,
    seed: int,
    batch_size: int,
    device: torch.device,
    autocast_dtype: Optional[torch.dtype] = None,
) -> ElectraEvalResult:
    """Generator perplexity and accuracy, discriminator accuracy, precision, recall and AUC on blocks[i], i in
    `indices`: masks as block i of epoch 0 with `seed`, replacements drawn from a generator seeded with `seed`,
    so two evaluations of one model agree."""
    started = time.perf_counter()
    collator = MaskingCollator(pair.vocab, masking, seed=seed)
    sampler = torch.Generator(device=device).manual_seed(seed)
    nll, correct, masked = 0.0, 0, 0
    scores: list[np.ndarray] = []
    truth: list[np.ndarray] = []
    with eval_mode(pair):
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            batch = collator([{"input_ids": blocks[i], "epoch": 0, "index": int(i)} for i in chunk])
            batch = {k: v.to(device) for k, v in batch.items()}
            with autocast_context(device, autocast_dtype):
                out = pair.step(batch["input_ids"], batch["labels"], batch.get("attention_mask"), sampler)
            logits = out.generator_logits.float()
            nll += float(F.cross_entropy(logits, out.targets, reduction="sum"))
            correct += int((logits.argmax(-1) == out.targets).sum())
            masked += len(out.targets)
            scores.append(out.discriminator_logits[out.scored].cpu().numpy())
            truth.append(out.replaced[out.scored].cpu().numpy())
    score, label = np.concatenate(scores), np.concatenate(truth)
    predicted = score > 0
    true_positives = int((predicted & label).sum())
    bce = float(F.binary_cross_entropy_with_logits(torch.from_numpy(score).double(), torch.from_numpy(label).double()))
    generator_loss = _ratio(nll, masked)
    return ElectraEvalResult(
        loss=generator_loss + pair.discriminator_weight * bce,
        generator_loss=generator_loss,
        generator_perplexity=math.exp(generator_loss) if masked else float("nan"),
        generator_accuracy=_ratio(correct, masked),
        discriminator_loss=bce,
        discriminator_accuracy=_ratio(int((predicted == label).sum()), len(label)),
        precision=_ratio(true_positives, int(predicted.sum())),
        recall=_ratio(true_positives, int(label.sum())),
        auc=roc_auc(score, label),
        masked_tokens=masked,
        scored_tokens=len(label),
        replaced_share=_ratio(int(label.sum()), len(label)),
        seconds=time.perf_counter() - started,
    )
