"""Checks of the arguments that the commands and the Python API share; each message names the option to change."""

from __future__ import annotations

import re
from typing import Optional

import torch

from mlmtrain.config import LARGEST_INT
from mlmtrain.errors import UserError


def check_count(value: Optional[int], flag: str) -> None:
    """A count option (None: unset) must be at least 1 and fit torch's 64-bit integers."""
    if value is not None and value < 1:
        raise UserError("argument", f"{flag} must be >= 1 (got {value})")
    if value is not None and value > LARGEST_INT:
        raise UserError("argument", f"{flag} is out of range (got {value}); it must be at most {LARGEST_INT}")


def device_option(name: str) -> torch.device:
    """The device --device names: auto, cpu, cuda or cuda:N."""
    from mlmtrain.runtime.distributed import resolve_device

    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise UserError("argument", f"--device must be auto, cpu, cuda or cuda:N (got {name!r})")
    try:
        return resolve_device(name)
    except UserError as error:  # its message speaks of train.device
        raise UserError("argument", error.message.replace("train.device", "--device")) from None
