"""`train.compile`: whether a run compiles its model (`choose_compile`: true, false, or auto — on the CPU when a
compiler works here and the budget is long enough to repay compiling), the checks and the one-line failures of a
compiler that is missing or cannot build, and the deterministic kernels that keep a compiled CPU run reproducible.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Optional

import torch

from mlmtrain.config import TrainConfig
from mlmtrain.errors import UserError, first_line

# auto compiles a run only when every budget it sets is at least this long. Compiling mini took 20-45 s on 2 cores,
# and a compiled step saved about a tenth of its time where it paid (docs/benchmarks/log.md): repaid after about
# five minutes, so ten leave a margin. In FLOPs: ten minutes of mini in fp32 on 2 cores (about 2e11 FLOP/s).
COMPILE_MIN_SECONDS = 600.0
COMPILE_MIN_FLOPS = 1e14


@dataclass(frozen=True)
class CompileChoice:
    """Whether the model is compiled, and why (for the start line)."""

    on: bool
    reason: str

    def line(self) -> str:
        return f"compile: {'on' if self.on else 'off'} ({self.reason})"


def check_compile_toolchain(device: torch.device) -> None:
    """UserError, before anything is built, where `train.compile`'s backend (inductor) cannot generate code for
    `device`: it writes C++ for the CPU and Triton kernels for CUDA, and without a compiler or Triton the first step
    would fail with a page of traceback. (A compiler that is found but cannot build, e.g. without Python's headers,
    is caught at the first step instead: `compile_failure`.)"""
    if device.type == "cuda":
        from torch.utils._triton import has_triton  # torch's compiler: loaded where it compiles

        if not has_triton():
            raise UserError(
                "config",
                "train.compile: true needs Triton to compile for CUDA, and it is not installed; install it "
                "(pip install triton) or set train.compile: false",
            )
        return
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler  # torch's compiler: loaded where it compiles
    except ImportError:  # an older torch: a missing compiler shows at the first step (compile_failure)
        return
    try:
        get_cpp_compiler()  # tries $CXX (else g++, or clang++ on macOS) with --version
    except Exception:
        raise UserError(
            "config",
            "train.compile: true needs a C++ compiler on the CPU, and none works here; install one (g++ or clang++, "
            "or point CXX at it) or set train.compile: false",
        ) from None


@functools.cache
def cpu_compiler_works() -> Optional[str]:
    """None where torch.compile builds and runs a tiny function on the CPU here, else why not; asked once a process
    (inductor keeps the built kernel on disk, so a later process asks in about a second)."""
    try:
        check_compile_toolchain(torch.device("cpu"))
        doubled = torch.compile(lambda x: x * 2.0 + 1.0, dynamic=False)(torch.ones(8))
        if not torch.equal(doubled, torch.full((8,), 3.0)):
            return "a compiled test function computed a wrong result"
    except UserError:
        return "no C++ compiler works here"
    except Exception as error:  # a compiler that cannot build: no Python headers, a broken toolchain
        return f"torch.compile cannot build here: {first_line(error)}"
    finally:
        torch._dynamo.reset()  # the test function's graph is no model's
    return None


def planned_flops(train: TrainConfig, tokens_per_step: int, flops_per_token: float) -> Optional[float]:
    """Training FLOPs of the whole run by the budgets counted in work (steps, tokens, FLOPs): the smallest ends it;
    None where only max_time is set."""
    budgets = [
        *([train.max_flops] if train.max_flops else []),
        *([train.max_tokens * flops_per_token] if train.max_tokens else []),
        *([train.max_steps * tokens_per_step * flops_per_token] if train.max_steps else []),
    ]
    return min(budgets) if budgets else None


def choose_compile(
    train: TrainConfig, device: torch.device, tokens_per_step: int, flops_per_token: float
) -> CompileChoice:
    """train.compile resolved: true and false as said; auto on the CPU when a compiler works here and the whole
    budget (not what a resume has left: a resumed run compiles as the run it continues did) is long enough to repay
    compiling. On a GPU auto stays off (measured on CPUs only)."""
    if train.compile is True:
        return CompileChoice(True, "train.compile: true")
    if train.compile is False:
        return CompileChoice(False, "train.compile: false")
    if device.type != "cpu":
        return CompileChoice(False, "auto: chosen on CPUs only; set train.compile: true to compile on a GPU")
    flops = planned_flops(train, tokens_per_step, flops_per_token)
    seconds = train.max_time_seconds
    if flops is not None and flops < COMPILE_MIN_FLOPS:
        return CompileChoice(
            False,
            f"auto: the budget, {flops:.2g} training FLOPs, is under {COMPILE_MIN_FLOPS:.0e}: too short to repay "
            "compiling",
        )
    if seconds is not None and seconds < COMPILE_MIN_SECONDS:
        return CompileChoice(
            False,
            f"auto: train.max_time {seconds:g} s is under {COMPILE_MIN_SECONDS:g} s: too short to repay compiling",
        )
    failed = cpu_compiler_works()
    if failed is not None:
        return CompileChoice(False, f"auto: {failed}")
    return CompileChoice(
        True, "auto: a C++ compiler works here and the budget repays compiling (the first steps compile)"
    )


@contextmanager
def reproducible_compile(compiled: bool, device: torch.device) -> Iterator[None]:
    """With a compiled model on the CPU, torch's deterministic algorithms for the block (then as before). Inductor's
    C++ kernels otherwise sum some gradients with parallel atomic adds (the token-type embedding's, every position
    into one row), so two runs, or a run and its resumed copy, differ in the last bits. Measured on 2 cores: the
    mini step is as fast either way. (Eager CPU kernels are deterministic already; CUDA's are not bit-reproducible
    in any case, and there the switch would refuse some kernels.)"""
    if not (compiled and device.type == "cpu"):
        yield
        return
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn_only: an op without such a kernel still runs
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def compile_failure(error: BaseException) -> Optional[str]:
    """The first line of `error` when it is torch.compile failing to compile the model (a C++ compiler that cannot
    build, a kernel it cannot generate), else None: the fix is the same whatever the cause, train.compile: false."""
    from torch._dynamo.exc import BackendCompilerFailed  # torch's compiler: loaded where it compiles

    if not isinstance(error, BackendCompilerFailed):
        return None
    inner = getattr(error, "inner_exception", None) or error
    first = next((line.strip() for line in str(inner).splitlines() if line.strip()), type(inner).__name__)
    output = getattr(inner, "output", None)  # a C++ compiler's own output: its first error says what is missing
    if isinstance(output, str):
        said = [line.strip() for line in output.splitlines() if "error" in line.lower()]
        first = f"{first}: {said[0]}" if said else first
    return first if len(first) <= 240 else first[:237] + "..."
