"""The architectures `model.architecture` builds from scratch, one `Architecture` each: its transformers config, the
fresh masked LM, its parameter count and its training FLOPs per token. A base a run continues (model.init_from) is
built as its family builds it (families.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.config import ModelConfig
from mlmtrain.data.masking import VocabInfo
from mlmtrain.errors import UserError
from mlmtrain.model.bert import (
    TRAINING_BYTES_PER_PARAMETER,
    bert_config,
    build_model,
    device_memory_bytes,
    flops_per_token,
    planned_parameter_count,
)
from mlmtrain.model.families import BERT, MODERNBERT, Family, check_rotary_heads
from mlmtrain.model.modernbert import (
    build_modernbert,
    modernbert_config,
    modernbert_flops_per_token,
    modernbert_parameter_count,
)
from mlmtrain.runtime.model_folder import weight_files, weights_parameter_count


@dataclass(frozen=True)
class Architecture:
    family: Family  # the family of the masked LM it builds: how a checkpoint of it is read, continued and resumed
    config: Callable[[ModelConfig, VocabInfo], Any]  # the transformers config `build` makes
    build: Callable[[ModelConfig, VocabInfo], Any]  # a freshly initialised masked LM (seed torch first)
    parameters: Callable[[ModelConfig, int], int]  # (cfg, vocab_size) -> parameters, without building it
    # (cfg, vocab_size, seq_len, mlm_probability, sparse_head) -> training FLOPs per input token
    flops_per_token: Callable[[ModelConfig, int, int, float, bool], float]
    # UserError for a shape it cannot run (ModernBERT's rotary positions need heads of an even size)
    check_shape: Callable[[ModelConfig], None] = lambda cfg: None


ARCHITECTURES = {
    "bert": Architecture(
        family=BERT,
        config=lambda cfg, vocab: bert_config(cfg, vocab.vocab_size, vocab.pad_id),
        build=lambda cfg, vocab: build_model(cfg, vocab.vocab_size, vocab.pad_id),
        parameters=planned_parameter_count,
        flops_per_token=flops_per_token,
    ),
    "modernbert": Architecture(
        family=MODERNBERT,
        config=modernbert_config,
        build=build_modernbert,
        parameters=modernbert_parameter_count,
        flops_per_token=modernbert_flops_per_token,
        check_shape=check_rotary_heads,
    ),
}


def architecture_of(cfg: ModelConfig) -> Architecture:
    """The architecture `cfg` (model.architecture) builds."""
    return ARCHITECTURES[cfg.architecture]


def check_model_fits(cfg: ModelConfig, vocab_size: int, device: torch.device, base: Optional[Path] = None) -> None:
    """UserError, before anything is allocated, for a model whose training state cannot fit on `device`: the model
    `cfg` builds, or the one in `base` (a base or checkpoint the run continues), counted from its weights' headers,
    whatever its family keeps (ModernBERT has no position table to count)."""
    counted = base is not None and bool(weight_files(base))
    parameters = weights_parameter_count(base) if counted else architecture_of(cfg).parameters(cfg, vocab_size)
    needed, available = parameters * TRAINING_BYTES_PER_PARAMETER, device_memory_bytes(device)
    if needed > available:
        what = (
            f"{base} has"
            if counted
            else f"model.hidden_size={cfg.hidden_size}, num_layers={cfg.num_layers}, intermediate_size="
            f"{cfg.intermediate_size} make"
        )
        raise UserError(
            "model",
            f"{what} {parameters / 1e6:,.0f}M parameters, about {needed / 1e9:,.1f} GB to train (weights, gradients, "
            f"AdamW state in float32), more than the {available / 1e9:,.1f} GB of {device}; choose a smaller model",
        )
