"""mlmtrain: pretrain small BERT encoders with masked language modeling, from a YAML config.

The Python API (`mlmtrain.api`) is imported on first use, so `mlmtrain --help` does not load torch. Its names
are none of the sub-packages' (a sub-package, once imported, would replace a function of the same name)."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = (
    "load_config",
    "tokenize",
    "pretrain",
    "evaluate_perplexity",
    "fill_mask",
    "probe",
    "scorecard",
    "write_report",
    "average_checkpoints",
)
__all__ = [*_API, "UserError", "Config", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from mlmtrain import api

        return getattr(api, name)
    if name == "UserError":
        from mlmtrain.errors import UserError

        return UserError
    if name == "Config":
        from mlmtrain.config import Config

        return Config
    raise AttributeError(f"module 'mlmtrain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
