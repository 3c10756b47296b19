"""Context managers around a transformers model: autocast to a dtype, eval mode for scoring, and quiet loading
(no bars or load reports: problems become mlmtrain's own one-line errors)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Optional

import torch


def autocast_context(device: torch.device, autocast_dtype: Optional[torch.dtype]) -> Any:
    """Autocast to `autocast_dtype` on `device`; no autocast (plain fp32) when it is None."""
    return torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else nullcontext()


@contextmanager
def eval_mode(mlm: Any) -> Iterator[None]:
    """Dropout off while scoring; the caller's mode (training, between steps) comes back afterwards."""
    was_training = mlm.training
    mlm.eval()
    try:
        yield
    finally:
        mlm.train(was_training)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """No loading bars or load reports from transformers: problems become our own one-line errors instead."""
    from transformers.utils import logging as hf_logging  # transformers: heavy, loaded on use

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
