"""Every process of a torchrun job encodes its share of the corpus; process 0 writes the store.

The document stream is cut alike in every process (`encoding.chunked`); groups of GROUP_CHUNKS chunks go to the
processes in turn (group g to process g mod n). In each round every process hands its next encoded group to
process 0 over the job's own connection (gloo, on the CPU), which writes the groups in stream order, then tells all
whether to go on: the store is the same, byte for byte, as one process writes, no shared file system holds parts,
and no process waits longer than a round for another. A failure in any process ends every process with its line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import torch.distributed as dist

from mlmtrain.data.encoding import EncodedChunk, EncoderSpec, chunked, encode_in_order, own_groups
from mlmtrain.errors import UserError, first_line
from mlmtrain.runtime.distributed import DistContext, broadcast_object

Verdict = Optional[tuple[str, Any]]  # None: go on; ("end", None); ("error", (topic, message))


class Share:
    """This process's part in encoding one corpus after another: `announce` the plan (process 0) or `hear` it
    (the others), then `encode` each corpus in rounds."""

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self.announced = False
        self._group: Any = None
        if ctx.distributed and dist.get_backend() != "gloo":  # NCCL moves GPU tensors: the store's data goes by CPU
            self._group = dist.new_group(backend="gloo")

    def announce(self, plan: Any) -> Any:
        """Process 0 hands `plan` (None: nothing to encode, or it failed first) to every process; each returns it.
        Once, before any encoding: `announced` says whether it was."""
        self.announced = True
        return broadcast_object(self.ctx, plan)

    def encode(self, texts: Callable[[], Iterable[str]], spec: EncoderSpec, workers: int, writer: Any = None) -> None:
        """Encode this process's groups of the documents `texts()` gives with `workers` processes; process 0 hands
        every process's chunks in stream order to `writer.write`, then calls `writer.finish()` (its error, like any
        process's, ends every process). `texts` is called inside the first round, so a source this machine cannot
        read is a failure the others hear of."""
        ctx = self.ctx
        documents = (text for opened in _opened(texts) for text in opened)
        groups = _encoded_groups(own_groups(chunked(documents), ctx.rank, ctx.world_size), spec, workers)
        try:
            self._rounds(groups, writer)
        finally:
            groups.close()  # after a failure, the worker processes stop too

    def _rounds(self, groups: Iterator[list[EncodedChunk]], writer: Any) -> None:
        ctx = self.ctx
        while True:
            mine, failure = _next_group(groups, ctx.rank)
            gathered = self._gather(mine)
            verdict: Verdict = None
            if ctx.is_main:
                assert writer is not None, "process 0 writes the store"
                verdict = _verdict(gathered)
                if verdict is None or verdict[0] == "end":
                    try:
                        for kind, chunks in gathered:
                            for chunk in chunks if kind == "group" else ():
                                writer.write(chunk)
                        if verdict is not None:
                            writer.finish()
                    except UserError as error:
                        verdict, failure = ("error", (error.topic, error.message)), error
                    except Exception as error:
                        verdict, failure = ("error", _bug(error, 0)), error
            verdict = broadcast_object(ctx, verdict) if ctx.distributed else verdict
            if failure is not None:
                raise failure
            if verdict is None:
                continue
            if verdict[0] == "error":
                raise UserError(*verdict[1])
            return

    def _gather(self, mine: tuple[str, Any]) -> list[tuple[str, Any]]:
        if not self.ctx.distributed:
            return [mine]
        gathered: Optional[list] = [None] * self.ctx.world_size if self.ctx.is_main else None
        dist.gather_object(mine, gathered, dst=0, group=self._group)
        return gathered or []


def _opened(texts: Callable[[], Iterable[str]]) -> Iterator[Iterable[str]]:
    yield texts()


def _encoded_groups(
    owned: Iterator[tuple[int, list[str]]], spec: EncoderSpec, workers: int
) -> Iterator[list[EncodedChunk]]:
    """This process's groups, each a list of its encoded chunks (the workers run ahead across groups)."""
    encoded = encode_in_order(owned, spec, workers)
    for _, chunks in itertools.groupby(encoded, key=lambda tagged: tagged[0]):
        yield [chunk for _, chunk in chunks]


def _next_group(groups: Iterator[list[EncodedChunk]], rank: int) -> tuple[tuple[str, Any], Optional[Exception]]:
    """("group", chunks), ("end", None) or ("error", (topic, message)), and the exception to raise after the round."""
    try:
        return ("group", next(groups)), None
    except StopIteration:
        return ("end", None), None
    except UserError as error:
        return ("error", (error.topic, error.message)), error
    except Exception as error:  # a bug: every process stops; this one shows its traceback
        return ("error", _bug(error, rank)), error


def _verdict(gathered: list[tuple[str, Any]]) -> Verdict:
    """The first failure, in process order; the end once every process has run out; else None: write and go on."""
    for kind, payload in gathered:
        if kind == "error":
            return ("error", payload)
    if all(kind == "end" for kind, _ in gathered):
        return ("end", None)
    return None


def _bug(error: Exception, rank: int) -> tuple[str, str]:
    return "distributed", f"process {rank} stopped with {type(error).__name__}: {first_line(error)} (see its traceback)"
