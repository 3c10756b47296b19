"""The CPU limit: the matrix-product FLOP/s these cores reach on the model's own shapes, in fp32 and (where the CPU
has bf16 instructions) in bf16, measured in the benchmark's process on the threads the runs use; and each
contestant's model FLOPs per second as a share of it (CPU MFU)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import torch

from mlmtrain.config import ModelConfig
from mlmtrain.model.bert import padded_vocab_size
from mlmtrain.train.precision import cpu_bf16_support

# Repetitions of each product; the fastest counts (a limit is what the cores can do, not what a busy moment left)
REPEATS = 5


@dataclass(frozen=True)
class Product:
    """One matrix product of a training step, [rows, inner] x [inner, columns], and how often a forward runs it."""

    name: str
    rows: int
    inner: int
    columns: int
    per_forward: int

    @property
    def flops(self) -> float:
        return 2.0 * self.rows * self.inner * self.columns


def model_products(model: ModelConfig, vocab_size: int, tokens: int, mlm_probability: float) -> list[Product]:
    """The model's products on one batch of `tokens`: attention's four projections and the feed-forward pair per
    layer, and the sparse head's decoder on the selected share of the tokens."""
    hidden, inner = model.hidden_size, model.intermediate_size
    vocab = padded_vocab_size(vocab_size, model.pad_vocab_multiple)
    selected = max(1, round(tokens * mlm_probability))
    return [
        Product("attention projection", tokens, hidden, hidden, 4 * model.num_layers),
        Product("feed-forward in", tokens, hidden, inner, model.num_layers),
        Product("feed-forward out", tokens, inner, hidden, model.num_layers),
        Product("decoder", selected, hidden, vocab, 1),
    ]


def limit_flops_per_s(products: list[Product], seconds: dict[str, float]) -> float:
    """FLOP/s of the products in the step's proportions: their FLOPs as a forward runs them over the time that
    takes, each product timed once (`seconds`: its fastest run)."""
    flops = sum(p.flops * p.per_forward for p in products)
    return flops / sum(seconds[p.name] * p.per_forward for p in products)


def time_products(products: list[Product], dtype: torch.dtype, repeats: int = REPEATS) -> dict[str, float]:
    """Each product's fastest time of `repeats` (after one untimed run), written into a buffer made beforehand."""
    seconds = {}
    for p in products:
        left = torch.randn(p.rows, p.inner).to(dtype)
        right = torch.randn(p.inner, p.columns).to(dtype)
        out = torch.empty(p.rows, p.columns, dtype=dtype)
        torch.mm(left, right, out=out)
        runs = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(left, right, out=out)
            runs.append(time.perf_counter() - start)
        seconds[p.name] = min(runs)
    return seconds


def measure_cpu_limit(products: list[Product]) -> dict[str, Any]:
    """GFLOP/s of `products` in fp32 and, where this CPU has bf16 instructions, in bf16; on torch's threads."""
    dtypes = {"fp32": torch.float32}
    if cpu_bf16_support() != "none":
        dtypes["bf16"] = torch.bfloat16
    gflops: dict[str, Optional[float]] = {"fp32": None, "bf16": None}
    for name, dtype in dtypes.items():
        gflops[name] = limit_flops_per_s(products, time_products(products, dtype)) / 1e9
    return {
        "gflops": gflops,
        "threads": torch.get_num_threads(),
        "products": [f"{p.name} [{p.rows}, {p.inner}] x [{p.inner}, {p.columns}] x{p.per_forward}" for p in products],
    }


def best_limit(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The limit of several measurements (one after each round): each precision's best, as a quiet moment of a
    shared machine allowed; how many were taken."""
    gflops = {
        name: max((m["gflops"][name] for m in measured if m["gflops"][name] is not None), default=None)
        for name in ("fp32", "bf16")
    }
    return dict(measured[0], gflops=gflops, measurements=len(measured))


def limit_dtype(precision: str) -> str:
    """Which limit a contestant's share is of: bf16 where its whole forward autocasts to bf16, else fp32 (fp32, and
    bf16-head, whose encoder runs in fp32)."""
    return "bf16" if precision == "bf16" else "fp32"


def cpu_mfu(flops_per_token: float, tokens_per_s: float, limit_gflops: Optional[float]) -> Optional[float]:
    """Model FLOPs per second as a share of the CPU limit (None where that limit was not measured)."""
    return None if not limit_gflops else flops_per_token * tokens_per_s / (limit_gflops * 1e9)
