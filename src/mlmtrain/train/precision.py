"""Which autocast dtype a run uses (`train.precision`), decided in one place for training, evaluation and the
benchmark: bf16 on GPUs that support it and on CPUs with bf16 matrix units (Intel AMX); on AMD CPUs with
AVX512-BF16, bf16 for the masked-LM head alone (`bf16-head`); fp32 elsewhere, Intel CPUs with AVX512-BF16 but no
AMX included (there bf16 products measured slower than fp32 ones).

A CPU without native bf16 arithmetic emulates it (slower than fp32), so an explicit `bf16` or `bf16-head` there gets
a warning.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

# the dtype of autocast around the whole forward; bf16-head autocasts only the masked-LM head (HEAD_DTYPES)
DTYPES: dict[str, Optional[torch.dtype]] = {
    "bf16": torch.bfloat16,
    "bf16-head": None,
    "fp16": torch.float16,
    "fp32": None,
}
HEAD_DTYPES: dict[str, torch.dtype] = {"bf16-head": torch.bfloat16}


@dataclass(frozen=True)
class Precision:
    """The resolved choice: `dtype` for torch.autocast (None: plain fp32), and why, for the start line."""

    name: str  # "bf16", "bf16-head", "fp16" or "fp32"
    reason: str
    warning: Optional[str] = None

    @property
    def dtype(self) -> Optional[torch.dtype]:
        return DTYPES[self.name]

    @property
    def head_dtype(self) -> Optional[torch.dtype]:
        """Autocast for the masked-LM head alone (None: the head runs as the rest of the model does)."""
        return HEAD_DTYPES.get(self.name)

    def describe(self) -> str:
        return f"{self.name}, {self.reason}"


def cpuinfo_field(*names: str) -> Optional[str]:
    """The first /proc/cpuinfo line's value for one of `names` (None where there is no such file or line)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(names):
            return line.split(":", 1)[1].strip()
    return None


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo (empty elsewhere: then we know nothing)."""
    return frozenset((cpuinfo_field("flags", "Features") or "").split())  # x86 says flags, ARM says Features


def cpu_vendor() -> str:
    """The x86 vendor string of /proc/cpuinfo ('AuthenticAMD', 'GenuineIntel'), '' where unknown."""
    return cpuinfo_field("vendor_id") or ""


def cpu_bf16_support(flags: Optional[frozenset[str]] = None, machine: Optional[str] = None) -> str:
    """How this CPU does bf16 matrix products: 'amx' (AMX-BF16 tile units), 'avx512' (AVX512-BF16 dot-product
    instructions, x86), 'native' (BF16 instructions on ARM) or 'none' (torch emulates bf16, slower than fp32)."""
    flags = cpu_flags() if flags is None else flags
    machine = (platform.machine() if machine is None else machine).lower()
    if "amx_bf16" in flags:
        return "amx"
    if "avx512_bf16" in flags:
        return "avx512"
    if machine in ("aarch64", "arm64") and "bf16" in flags:
        return "native"
    return "none"


def resolve_precision(
    name: str, device: torch.device, cpu_support: Optional[str] = None, vendor: Optional[str] = None
) -> Precision:
    """`train.precision` (auto, bf16, bf16-head, fp16, fp32) on `device` -> what to autocast, with the reason.

    auto: bf16 on a CUDA device that supports it; on the CPU, bf16 with AMX tile units (bf16 products there are fast
    enough to pay for autocast's casts). On AMD CPUs with AVX512-BF16 alone, bf16-head: the casts around the
    encoder's many small products cost more than they save, but the head's hidden x vocabulary decoder is about
    half a small model's work in a few large products. On Intel CPUs with AVX512-BF16 but no AMX, and on ARM,
    fp32 (bf16 products ran slower than fp32 ones there, or were not measured; docs/benchmarks/log.md).
    `cpu_support` and `vendor` override the detection (`cpu_bf16_support()`, `cpu_vendor()`), for tests.
    """
    if name not in ("auto", *DTYPES):
        raise ValueError(f"unknown precision {name!r}")  # config validation makes this unreachable
    if device.type == "cuda":
        if name == "auto":
            if torch.cuda.is_bf16_supported():
                return Precision("bf16", "auto: this GPU supports bf16")
            return Precision("fp32", "auto: this GPU has no bf16")
        return Precision(name, "train.precision")
    support = cpu_bf16_support() if cpu_support is None else cpu_support
    if name == "auto":
        if support == "amx":
            return Precision("bf16", "auto: this CPU has AMX bf16 matrix units")
        if support == "avx512":
            if (cpu_vendor() if vendor is None else vendor) == "AuthenticAMD":
                return Precision("bf16-head", "auto: an AMD CPU with AVX512-BF16, so bf16 for the MLM head only")
            return Precision("fp32", "auto: AVX512-BF16 without AMX, measured slower than fp32 on Intel CPUs")
        return Precision("fp32", "auto: no AMX or AVX512-BF16 on this CPU")
    if name in ("bf16", "bf16-head") and support == "none":
        return Precision(
            name,
            "train.precision",
            warning=f"warning: train.precision is {name} but this CPU has no native bf16 arithmetic; torch emulates "
            "it, which is slower than fp32 (set train.precision: auto or fp32)",
        )
    return Precision(name, "train.precision")
