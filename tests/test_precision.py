"""Precision: what `train.precision` resolves to on which processor, and that a run really trains in bf16 on a
CPU when it says so (the auto case only where this CPU has AMX bf16 units; skipped elsewhere)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from mlmtrain.distributed import DistContext
from mlmtrain.precision import cpu_bf16_support, resolve_precision
from mlmtrain.step import build_parts, train_step
from mlmtrain.train import pretrain

CPU = torch.device("cpu")
HAS_AMX = cpu_bf16_support() == "amx"


@pytest.mark.parametrize(
    ("flags", "machine", "support"),
    [
        ({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "x86_64", "amx"),
        ({"avx512f", "avx512_bf16"}, "x86_64", "native"),
        ({"avx512f", "avx2"}, "x86_64", "none"),
        ({"fp", "asimd", "sve", "bf16"}, "aarch64", "native"),
        ({"fp", "asimd"}, "aarch64", "none"),
        (set(), "x86_64", "none"),  # flags unknown (not Linux): assume nothing
    ],
)
def test_cpu_bf16_support_reads_the_feature_flags(flags: set[str], machine: str, support: str) -> None:
    assert cpu_bf16_support(frozenset(flags), machine) == support


@pytest.mark.parametrize(
    ("name", "support", "dtype", "warns"),
    [
        ("auto", "amx", torch.bfloat16, False),
        ("auto", "native", None, False),  # AVX512-BF16 alone: the casts cost more than the products save
        ("auto", "none", None, False),
        ("bf16", "amx", torch.bfloat16, False),
        ("bf16", "native", torch.bfloat16, False),
        ("bf16", "none", torch.bfloat16, True),  # emulated: honoured, but the user hears it is slower
        ("fp32", "amx", None, False),
    ],
)
def test_cpu_precision_choice(name: str, support: str, dtype: torch.dtype | None, warns: bool) -> None:
    precision = resolve_precision(name, CPU, cpu_support=support)
    assert precision.dtype == dtype
    assert (precision.warning is not None) == warns
    assert precision.describe().startswith("bf16" if dtype is not None else "fp32")
    if warns:
        assert "train.precision: auto or fp32" in precision.warning


def _linear_output_dtypes(tiny_config, precision: str, tmp_path: Path) -> tuple[str, set[torch.dtype]]:
    """The resolved precision of a tiny run and the dtypes its Linear layers produced in one real training step."""
    cfg = tiny_config(**{"train.precision": precision, "train.run_dir": str(tmp_path / precision)})
    parts = build_parts(cfg, DistContext(device=CPU))
    seen: set[torch.dtype] = set()
    hooks = [
        module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for module in parts.mlm.modules()
        if isinstance(module, torch.nn.Linear)
    ]
    try:
        result = train_step(parts, [next(parts.batches)], clock=time.perf_counter)
    finally:
        for hook in hooks:
            hook.remove()
    assert not result.skipped
    return parts.precision.name, seen


def test_explicit_bf16_trains_in_bf16_on_any_cpu(tiny_config, tmp_path: Path) -> None:
    name, seen = _linear_output_dtypes(tiny_config, "bf16", tmp_path)
    assert (name, seen) == ("bf16", {torch.bfloat16})
    name, seen = _linear_output_dtypes(tiny_config, "fp32", tmp_path)
    assert (name, seen) == ("fp32", {torch.float32})


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX bf16 units: precision auto stays fp32 here")
def test_auto_picks_bf16_on_a_cpu_with_amx(tiny_config, tmp_path: Path) -> None:
    name, seen = _linear_output_dtypes(tiny_config, "auto", tmp_path)
    assert (name, seen) == ("bf16", {torch.bfloat16})


def test_the_start_line_says_which_precision_and_why(tiny_config, capsys: pytest.CaptureFixture) -> None:
    pretrain(tiny_config(**{"train.precision": "auto", "train.max_steps": 1, "train.eval_every": 0}))
    start = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("pretrain:"))
    expected = "(bf16, auto: this CPU has AMX" if HAS_AMX else "(fp32, auto: no AMX bf16 units on this CPU)"
    assert expected in start
