"""The curves a report draws: the ones every run logs (`CURVES`), and those an objective declares for the metrics only
it logs, which a run records in its run.json (`curves_from_record`), so the report draws them without knowing the
objective. A key ending in `*` is a prefix (`probe_*`), one starting with `*` a suffix (`*_loss`: every loss term).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Curve:
    slug: str
    title: str
    keys: tuple[str, ...]  # metric keys drawn; "probe_*" a prefix, "*_loss" a suffix
    ylabel: str
    log_y: bool = False
    smoothed: bool = False

    def record(self) -> dict[str, Any]:
        """As run.json keeps it."""
        return {**asdict(self), "keys": list(self.keys)}


CURVES = (
    Curve("train-loss", "Training loss (raw and smoothed)", ("loss",), "loss (nats)", smoothed=True),
    # every term of a loss of several (ELECTRA's generator and discriminator, distillation's, a new objective's)
    Curve("train-loss-terms", "Training loss terms", ("*_loss",), "loss (nats)"),
    Curve("eval-loss", "Validation loss", ("eval_loss",), "loss (nats)"),
    Curve("eval-perplexity", "Validation perplexity", ("eval_ppl",), "perplexity", log_y=True),
    Curve("eval-accuracy", "MLM accuracy (validation)", ("eval_acc",), "accuracy"),
    Curve("probe", "Probe scores", ("probe_*",), "score"),
    Curve("learning-rate", "Learning rate", ("lr",), "lr"),
    Curve("grad-norm", "Gradient norm (before clipping)", ("grad_norm",), "norm"),
    Curve("tokens-per-second", "Training tokens per second", ("tokens_per_s",), "tokens/s"),
    Curve("data-wait", "Share of time waiting for data", ("data_wait_share",), "share of wall time"),
)


def curves_from_record(found: Any) -> list[Curve]:
    """The curves a run's run.json declares (its objective's), each kept only when well formed: a damaged or foreign
    run.json costs its curves, never the report."""
    curves = []
    for entry in found if isinstance(found, list) else []:
        try:
            curve = Curve(**{**entry, "keys": tuple(entry["keys"])})
        except (TypeError, KeyError):
            continue
        texts = [curve.slug, curve.title, curve.ylabel, *curve.keys]
        if all(isinstance(text, str) for text in texts) and isinstance(curve.log_y, bool) and curve.keys:
            curves.append(curve)
    return curves


def matches(pattern: str, key: str) -> bool:
    """Whether metric `key` is drawn by a curve key `pattern` (an exact key, a prefix `a_*` or a suffix `*_b`); a
    suffix leaves out the keys other curves own: the total, evaluations and their moving averages, timings."""
    if pattern.endswith("*"):
        return key.startswith(pattern[:-1]) and not key.endswith("_seconds")
    if pattern.startswith("*"):
        return key.endswith(pattern[1:]) and key != "loss" and not key.startswith(("eval_", "ema_"))
    return key == pattern
