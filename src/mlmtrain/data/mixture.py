"""A data mixture's draw: which source each block of a step's global batch comes from.

Each step takes its blocks from the sources in proportion to their shares by systematic sampling: with the shares'
cumulative sums F and one offset u of the step, slot k of a batch of G draws the source i with
G·F[i-1] ≤ k + u < G·F[i]. So every step holds floor or ceil of G·share blocks of each source, and the shares drawn
stay within 1/G of their targets at every step. The offsets are a pure function of (seed, step), so the draw is the
same under any number of processes and loader workers and after a resume, and how many blocks a source gave before
step s is a sum over the offsets of the steps before it, with no state to keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

_OFFSETS = 0x0FF5E7  # the stream of the steps' offsets
_CHUNK = 1 << 14  # offsets drawn (and block counts summed) this many steps at a time


def mixture_shares(weights: Sequence[float], tokens: Sequence[int], temperature: float | None) -> list[float]:
    """Each source's target share of the blocks: its weight's share, or with a temperature t its tokens^t's share
    (mmBERT's rule: t = 1 follows the sizes, a lower t flattens them toward equal)."""
    raw = [float(n) ** temperature for n in tokens] if temperature is not None else [float(w) for w in weights]
    total = sum(raw)
    return [value / total for value in raw]


class MixtureDraw:
    """Which source each slot of a step's global batch draws, and how many blocks each source gave before a step."""

    def __init__(self, shares: Sequence[float], seed: int) -> None:
        cumulative = np.cumsum(np.asarray(shares, dtype=np.float64))
        cumulative[-1] = 1.0  # exactly: the last source takes the batch's last slot whatever the rounding
        self.edges = np.concatenate(([0.0], cumulative))  # F[-1] = 0, F[0], ..., F[n-1] = 1
        self.seed = seed
        self._sums: list[np.ndarray] = []  # blocks of each source before the start of each chunk of steps, so far
        self._drawn: tuple[int, np.ndarray] = (-1, np.zeros(0))  # the last chunk of offsets drawn
        self._last: tuple[int, np.ndarray] = (0, np.zeros(len(self.edges) - 1, dtype=np.int64))  # the last answer

    def offset(self, steps: np.ndarray) -> np.ndarray:
        """The offsets u in [0, 1) of these steps."""
        offsets, chunks = np.empty(len(steps), dtype=np.float64), steps // _CHUNK
        for chunk in np.unique(chunks):
            chosen = chunks == chunk
            offsets[chosen] = self._chunk(int(chunk))[steps[chosen] % _CHUNK]
        return offsets

    def _chunk(self, chunk: int) -> np.ndarray:
        if self._drawn[0] != chunk:  # the chunk a step-by-step reader is in: drawn once
            self._drawn = (chunk, np.random.default_rng([self.seed & 0xFFFFFFFF, _OFFSETS, chunk]).random(_CHUNK))
        return self._drawn[1]

    def step_counts(self, steps: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Blocks of each source (columns) in each of these steps (rows) of these global batch sizes."""
        u = self.offset(steps)[:, None]
        bounds = np.ceil(sizes[:, None] * self.edges[None, :] - u).astype(np.int64)
        return np.diff(bounds, axis=1)

    def slot_sources(self, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, rank among that source's slots of the step) of each slot 0..size-1 of the step's batch, before
        the step's slots are shuffled."""
        u = float(self.offset(np.array([step]))[0])
        starts = np.ceil(size * self.edges - u).astype(np.int64)  # the first slot of each source
        slots = np.arange(size)
        source = np.searchsorted(starts, slots, side="right") - 1
        return source, slots - starts[source]

    def counts_before(self, step: int, sizes_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Blocks each source gave in steps 0..step-1; `sizes_of(steps)` gives those steps' global batch sizes (the
        same function at every call: a run's table of batch sizes). A reader going step by step adds the steps
        since its last call; any other step sums from the start of its chunk of steps."""
        last, counted = self._last
        if last <= step and last // _CHUNK == step // _CHUNK:
            steps = np.arange(last, step)
            counts = counted + self.step_counts(steps, sizes_of(steps)).sum(axis=0) if step > last else counted
        else:
            counts = self._counts_from_chunk(step, sizes_of)
        self._last = (step, counts)
        return counts

    def _counts_from_chunk(self, step: int, sizes_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        chunk, within = divmod(step, _CHUNK)
        while len(self._sums) <= chunk:  # each whole chunk of steps summed once
            done = len(self._sums)
            before = self._sums[-1] if self._sums else np.zeros(len(self.edges) - 1, dtype=np.int64)
            if done == 0:
                self._sums.append(before)
                continue
            steps = np.arange((done - 1) * _CHUNK, done * _CHUNK)
            self._sums.append(before + self.step_counts(steps, sizes_of(steps)).sum(axis=0))
        steps = np.arange(chunk * _CHUNK, chunk * _CHUNK + within)
        tail = self.step_counts(steps, sizes_of(steps)).sum(axis=0) if within else 0
        return self._sums[chunk] + tail
