"""Who am I in a (possibly) distributed job: rank, world size, device; process-group set-up and teardown.

Reads the environment that `torchrun` sets (RANK, WORLD_SIZE, LOCAL_RANK). A plain `mlmtrain pretrain` is
rank 0 of 1 and never touches torch.distributed. No module-level state: callers hold a `DistContext`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional, TypeVar

import torch
import torch.distributed as dist

from mlmtrain.errors import UserError, first_line

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """'auto' -> the local CUDA device if there is one, else CPU; 'cuda' -> this process's GPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError("config", f"train.device is {name!r} but no CUDA device is available; use auto or cpu")
        if name == "cuda":
            name = f"cuda:{local_rank}"
        index = int(name.split(":")[1])
        if index >= torch.cuda.device_count():
            raise UserError("config", f"train.device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    return torch.device(name)


def _collective_timeout_s() -> float:
    """How long a rank waits in a collective for the others before it gives up (MLMTRAIN_DIST_TIMEOUT, seconds).

    Generous by default: while rank 0 tokenizes, evaluates or writes a checkpoint the others wait in a collective.
    """
    value = os.environ.get("MLMTRAIN_DIST_TIMEOUT", "1800")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise UserError("environment", f"MLMTRAIN_DIST_TIMEOUT must be a number of seconds > 0 (got {value!r})")
    return seconds


def init_distributed(device_name: str = "auto") -> DistContext:
    """Join the torchrun job if there is one (NCCL on CUDA, gloo on CPU); else a single-process context."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)  # pin before NCCL init so each rank owns its own GPU
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=_collective_timeout_s()))
    return DistContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def teardown(ctx: DistContext) -> None:
    """Leave the process group; safe to call twice and after errors.

    destroy_process_group only forgets the group: the DDP wrapper still holds it, and gloo's worker threads live
    until the group object is freed. Left to the interpreter's exit, that free can race a worker thread that
    needs the GIL to release its last tensors, and the process aborts ("terminate called without an active
    exception") after a successful run. Collecting now joins those threads while Python is still alive.
    """
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()
        gc.collect()


# What gloo says on a surviving process when another process of the job is gone (killed, out of memory): the TCP
# connection to it was reset or closed. torch raises it as a plain RuntimeError from the next collective.
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer")


def peer_lost(error: BaseException) -> bool:
    """Whether `error` is a collective's report that another process of the job has gone away."""
    return isinstance(error, RuntimeError) and any(text in str(error) for text in _PEER_GONE)


def all_reduce_sum(ctx: DistContext, values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (identity when single-process). Works on a copy on the collective's device."""
    if not ctx.distributed:
        return values
    reduced = values.detach().clone().to(ctx.device)
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced.to(values.device)


def broadcast_object(ctx: DistContext, value: object) -> object:
    """Rank 0's value on every rank (for decisions such as 'stop now' that all ranks must share)."""
    if not ctx.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(ctx: DistContext, value: T) -> list[T]:
    """Every rank's `value`, in rank order (a list of one when single-process)."""
    if not ctx.distributed:
        return [value]
    out: list = [None] * ctx.world_size
    dist.all_gather_object(out, value)
    return out


def on_main(ctx: DistContext, action: Callable[[], T]) -> Optional[T]:
    """Run `action` on rank 0 while the other ranks wait; returns its result on rank 0, None elsewhere.

    If it fails, every rank raises (rank 0 its own error, the others a UserError with the same message), so no
    rank is left waiting in a collective for a rank that has quit: the decision is shared, not just the work.
    """
    result: Optional[T] = None
    failure: Optional[Exception] = None
    if ctx.is_main:
        try:
            result = action()
        except Exception as error:
            failure = error
    shared = None
    if isinstance(failure, UserError):
        shared = (failure.topic, failure.message)
    elif failure is not None:  # a bug: rank 0 shows its traceback, the others point to it
        shared = (
            "distributed",
            f"rank 0 stopped with {type(failure).__name__}: {first_line(failure)} (see its traceback)",
        )
    verdict = broadcast_object(ctx, shared)  # also the barrier: nobody goes on before rank 0 is done
    if failure is not None:
        raise failure
    if verdict is not None:
        raise UserError(*verdict)
    return result
