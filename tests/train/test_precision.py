"""Precision: what `train.precision` resolves to on which processor, and that a run really trains in bf16 on a
CPU when it says so (the auto case only where this CPU has AMX bf16 units; skipped elsewhere), and in bf16 for the
masked-LM head alone with bf16-head, learning as fp32 does; every trained model runs the training attention (float32
attention under CPU autocast)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

from mlmtrain.model.bert import TRAINING_ATTENTION
from mlmtrain.runtime.distributed import DistContext
from mlmtrain.train.loop import pretrain
from mlmtrain.train.precision import cpu_bf16_support, cpu_vendor, resolve_precision
from mlmtrain.train.step import build_setup, train_step

CPU = torch.device("cpu")
HAS_AMX = cpu_bf16_support() == "amx"
AUTO = resolve_precision("auto", torch.device("cpu")).name  # what auto picks on this CPU


@pytest.mark.parametrize(
    ("flags", "machine", "support"),
    [
        ({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "x86_64", "amx"),
        ({"avx512f", "avx512_bf16"}, "x86_64", "avx512"),
        ({"avx512f", "avx2"}, "x86_64", "none"),
        ({"fp", "asimd", "sve", "bf16"}, "aarch64", "native"),
        ({"fp", "asimd"}, "aarch64", "none"),
        (set(), "x86_64", "none"),  # flags unknown (not Linux): assume nothing
    ],
)
def test_cpu_bf16_support_reads_the_feature_flags(flags: set[str], machine: str, support: str) -> None:
    assert cpu_bf16_support(frozenset(flags), machine) == support


def test_cpu_vendor_and_flags_come_from_cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import mlmtrain.train.precision as precision

    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx512f avx512_bf16\n\n")
    monkeypatch.setattr(precision, "Path", lambda _: fake)
    assert (cpu_vendor(), cpu_bf16_support(machine="x86_64")) == ("AuthenticAMD", "avx512")
    monkeypatch.setattr(precision, "Path", lambda _: tmp_path / "missing")  # not Linux: nothing known
    assert (cpu_vendor(), cpu_bf16_support(machine="x86_64")) == ("", "none")


@pytest.mark.parametrize(
    ("name", "support", "vendor", "dtype", "head", "warns"),
    [
        ("auto", "amx", "GenuineIntel", torch.bfloat16, False, False),
        # AVX512-BF16 alone on AMD: only the head's products pay for their casts
        ("auto", "avx512", "AuthenticAMD", None, True, False),
        ("auto", "avx512", "GenuineIntel", None, False, False),  # Intel without AMX: bf16 products ran slower
        ("auto", "avx512", "", None, False, False),  # vendor unknown: unmeasured, fp32
        ("auto", "native", "", None, False, False),  # ARM BF16: unmeasured
        ("bf16-head", "none", "GenuineIntel", None, True, True),
        ("bf16-head", "avx512", "GenuineIntel", None, True, False),  # asked for: honoured, native bf16
        ("auto", "none", "AuthenticAMD", None, False, False),
        ("bf16", "amx", "GenuineIntel", torch.bfloat16, False, False),
        ("bf16", "native", "", torch.bfloat16, False, False),
        ("bf16", "none", "AuthenticAMD", torch.bfloat16, False, True),  # emulated: honoured, but the user hears
        ("fp32", "amx", "GenuineIntel", None, False, False),
    ],
)
def test_cpu_precision_choice(
    name: str, support: str, vendor: str, dtype: torch.dtype | None, head: bool, warns: bool
) -> None:
    precision = resolve_precision(name, CPU, cpu_support=support, vendor=vendor)
    assert precision.dtype == dtype
    assert (precision.warning is not None) == warns
    assert precision.head_dtype == (torch.bfloat16 if head else None)
    assert precision.describe().startswith("bf16-head" if head else "bf16" if dtype is not None else "fp32")
    if warns:
        assert "train.precision: auto or fp32" in precision.warning


def _linear_output_dtypes(
    tiny_config, precision: str, tmp_path: Path, within: str = ""
) -> tuple[str, set[torch.dtype]]:
    """The resolved precision of a tiny run and the dtypes its Linear layers (those whose name starts with `within`)
    produced in one real training step."""
    cfg = tiny_config(**{"train.precision": precision, "train.run_dir": str(tmp_path / precision)})
    setup = build_setup(cfg, DistContext(device=CPU))
    seen: set[torch.dtype] = set()
    hooks = [
        module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        for name, module in setup.mlm.named_modules()
        if isinstance(module, torch.nn.Linear) and name.startswith(within)
    ]
    try:
        result = train_step(setup, [next(setup.batches)], clock=time.perf_counter)
    finally:
        for hook in hooks:
            hook.remove()
    assert not result.skipped
    return setup.precision.name, seen


def test_explicit_bf16_trains_in_bf16_on_any_cpu(tiny_config, tmp_path: Path) -> None:
    name, seen = _linear_output_dtypes(tiny_config, "bf16", tmp_path)
    assert (name, seen) == ("bf16", {torch.bfloat16})
    name, seen = _linear_output_dtypes(tiny_config, "fp32", tmp_path)
    assert (name, seen) == ("fp32", {torch.float32})


def test_bf16_head_runs_the_head_alone_in_bf16(tiny_config, tmp_path: Path) -> None:
    assert _linear_output_dtypes(tiny_config, "bf16-head", tmp_path, within="cls.") == ("bf16-head", {torch.bfloat16})
    assert _linear_output_dtypes(tiny_config, "bf16-head", tmp_path, within="bert.") == ("bf16-head", {torch.float32})


def test_bf16_head_learns_as_fp32_does(tiny_config, tmp_path: Path) -> None:
    """Same seed, same steps: the training losses and the (fp32) validation perplexity stay within 1 % of fp32's."""
    runs = {}
    for name in ("fp32", "bf16-head"):
        run_dir = tmp_path / name
        cfg = tiny_config(**{"train.precision": name, "train.run_dir": str(run_dir), "train.max_steps": 30})
        pretrain(cfg)
        runs[name] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    fp32, head = runs["fp32"], runs["bf16-head"]
    assert [m["step"] for m in fp32] == [m["step"] for m in head]
    for a, b in zip(fp32, head, strict=True):
        key = "loss" if "loss" in a else "eval_ppl"
        assert b[key] == pytest.approx(a[key], rel=0.01), (a["step"], key)
    assert [m.get("loss") for m in fp32] != [m.get("loss") for m in head]  # the head really ran in bf16


@pytest.mark.skipif(not HAS_AMX, reason="this CPU has no AMX bf16 units: precision auto picks no whole-model bf16")
def test_auto_picks_bf16_on_a_cpu_with_amx(tiny_config, tmp_path: Path) -> None:
    name, seen = _linear_output_dtypes(tiny_config, "auto", tmp_path)
    assert (name, seen) == ("bf16", {torch.bfloat16})


def test_the_start_line_says_which_precision_and_why(tiny_config, capsys: pytest.CaptureFixture) -> None:
    pretrain(tiny_config(**{"train.precision": "auto", "train.max_steps": 1, "train.eval_every": 0}))
    start = next(line for line in capsys.readouterr().err.splitlines() if line.startswith("pretrain:"))
    expected = {
        "bf16": "(bf16, auto: this CPU has AMX",
        "bf16-head": "(bf16-head, auto: an AMD CPU with AVX512-BF16, so bf16 for the MLM head only)",
        "fp32": "(fp32, auto: AVX512-BF16 without AMX, measured slower than fp32 on Intel CPUs)"
        if cpu_bf16_support() == "avx512"
        else "(fp32, auto: no AMX or AVX512-BF16 on this CPU)",
    }[AUTO]
    assert expected in start


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_every_trained_model_uses_the_training_attention(tiny_config, tmp_path: Path, objective: str) -> None:
    cfg = tiny_config(**{"train.objective": objective, "train.run_dir": str(tmp_path / objective)})
    setup = build_setup(cfg, DistContext(device=CPU))
    models = [module for module in setup.mlm.modules() if isinstance(module, PreTrainedModel)]
    assert len(models) >= (2 if objective == "electra" else 1)  # ELECTRA: the generator and the discriminator
    assert {model.config._attn_implementation for model in models} == {TRAINING_ATTENTION}
