"""The config and the checks of the arguments that the commands and the Python API share; each message names the option
to change."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Union

import torch

from mlmtrain.config import LARGEST_INT, Config, load_config
from mlmtrain.errors import UserError
from mlmtrain.runtime.distributed import resolve_device
from mlmtrain.train.objectives import check_config

Overrides = Union[list[str], tuple[str, ...], dict[str, Any], None]


def training_config(path: Union[str, Path, None], overrides: Overrides = ()) -> Config:
    """A YAML config with its `--set` overrides (`load_config`), checked against the objective tables as well: a
    train.objective no objective has, or a rule of the objective's own, refused as the file is read."""
    cfg = load_config(path, overrides)
    check_config(cfg)
    return cfg


def check_count(value: Optional[int], flag: str) -> None:
    """A count option (None: unset) must be at least 1 and fit torch's 64-bit integers."""
    if value is not None and value < 1:
        raise UserError("argument", f"{flag} must be >= 1 (got {value})")
    if value is not None and value > LARGEST_INT:
        raise UserError("argument", f"{flag} is out of range (got {value}); it must be at most {LARGEST_INT}")


def device_option(name: str) -> torch.device:
    """The device --device names: auto, cpu, cuda or cuda:N."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise UserError("argument", f"--device must be auto, cpu, cuda or cuda:N (got {name!r})")
    try:
        return resolve_device(name)
    except UserError as error:  # its message speaks of train.device
        raise UserError("argument", error.message.replace("train.device", "--device")) from None
