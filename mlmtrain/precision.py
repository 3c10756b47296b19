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

    auto: bf16 on a CUDA device that supports it; on the CPU, bf16 with AMX tile units, where a mini training step
    measured faster in bf16 than in fp32. With AVX512-BF16 alone it depends on the processor. On an AMD EPYC,
    a bf16 product ran about 2.3x as fast as fp32; autocasting the whole model still made the step slower (the
    casts around each small product cost more than the products save), but the head alone, whose hidden x
    vocabulary decoder is about half of a small model's work in a few large products, made a mini step about 1.2x
    faster: bf16-head. On an Intel Xeon without AMX (a virtual machine that hides it) a bf16 product ran at 0.6x
    fp32's speed and a mini step with bf16-head at 0.7x: fp32 there. ARM's BF16 is unmeasured: fp32 there too.
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
