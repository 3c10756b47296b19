"""What a run tells the outside world: a progress bar, one JSON line per logged step, optional trackers
(TensorBoard, MLflow, W&B: see `trackers`).

Only rank 0 reports; other ranks get a `Reporter` that does nothing. Metrics are appended to
RUN_DIR/metrics.jsonl with one write each, so a killed run keeps every line it logged; a line a full disk cuts
short is cut back (training goes on), and a resumed run removes a torn last line left by a kill.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from mlmtrain.errors import first_line
from mlmtrain.runtime.files import write_failure
from mlmtrain.runtime.trackers import Tracker, failing, open_trackers


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so every line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class _MetricsFile:
    """metrics.jsonl opened for appending (a resumed run continues it), where every line is whole or absent."""

    def __init__(self, path: Path, tell: Callable[[str], None]) -> None:
        self.path, self.tell = path, tell
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        self.failing = False
        self._drop_torn_tail()

    def _drop_torn_tail(self) -> None:
        """A kill or a full disk amid a write leaves half a line; later lines would follow it on the same line."""
        size = os.lseek(self.fd, 0, os.SEEK_END)
        if size == 0 or os.pread(self.fd, 1, size - 1) == b"\n":
            return
        start = max(0, size - (1 << 20))
        tail = os.pread(self.fd, size - start, start)
        keep = start + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        os.ftruncate(self.fd, keep)
        self.tell(f"{self.path}: removed a torn last line ({size - keep} bytes) left by an interrupted write")

    def append(self, line: str) -> None:
        data = line.encode("utf-8")
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(self.fd, data[written:])
        except OSError as error:
            os.ftruncate(self.fd, start)  # cut the half line back: the file stays valid JSON lines
            if not self.failing:
                self.tell(
                    f"warning: could not append to {self.path}: {write_failure(error, self.path.parent)}; "
                    "training goes on (checkpoints are still written), metrics resume once there is room"
                )
            self.failing = True
            return
        self.failing = False

    def close(self) -> None:
        os.close(self.fd)


class Reporter:
    """Progress bar + metrics.jsonl (+ trackers) for the main process; silent elsewhere."""

    def __init__(
        self,
        run_dir: Optional[Path],
        total_steps: Optional[int],
        *,
        enabled: bool = True,
        show_bar: bool = True,
        trackers: Sequence[str] = (),
        params: Optional[Mapping[str, Any]] = None,
        initial_step: int = 0,
        plain_every_s: float = 30.0,
    ) -> None:
        self.enabled = enabled
        self._metrics: Optional[_MetricsFile] = None
        self._bar: Optional[tqdm] = None
        self._plain: Optional[_PlainProgress] = None
        self._trackers: list[Tracker] = []
        if not enabled:
            return
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            # the trackers first: one that cannot start (a refused store, no login) leaves no metrics.jsonl, so the
            # folder still holds no run and the same command runs once that is fixed
            self._trackers = open_trackers(trackers, run_dir, params or {}) if trackers else []
            self._metrics = _MetricsFile(run_dir / "metrics.jsonl", self.message)
        if show_bar and _is_terminal(sys.stderr):
            self._bar = tqdm(
                total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True, file=sys.stderr, leave=True
            )
        elif show_bar:  # a log file (nohup, a scheduler): a bar redrawn 10 times a second would fill it
            self._plain = _PlainProgress(total_steps, initial_step, plain_every_s)

    def advance(
        self,
        step: int,
        loss: Optional[float],
        lr: float,
        tokens_per_s: float,
        total: Optional[int] = None,
        phase: str = "",
        left: str = "",
    ) -> None:
        """Move the bar to `step` and show the latest figures; `loss` is the last one read from the device (None
        before the first), so the bar costs the device no wait. `total`, when known, is the step the run is expected
        to end at (whichever budget ends it first): the bar counts toward it. `phase` names the phase the run is in;
        `left`, the time left by the run's plan ("12 min left"), shown in place of the bar's own count of it."""
        if total is not None:
            if self._bar is not None and self._bar.total != total:
                self._bar.total = total
            if self._plain is not None:
                self._plain.total = total
        where = {"phase": phase} if phase else {}
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            shown = {"loss": f"{loss:.3f}"} if loss is not None else {}
            plan = {"left": left.removesuffix(" left")} if left else {}
            self._bar.set_postfix(**where, **shown, lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", **plan, refresh=False)
        elif self._plain is not None:
            shown = "".join(f"{key} {value}, " for key, value in where.items())
            shown += f"loss {loss:.3f}, " if loss is not None else ""
            line = self._plain.line(step, f"{shown}lr {lr:.2e}, {tokens_per_s:,.0f} tokens/s", left=left)
            if line:
                print(line, file=sys.stderr, flush=True)

    def log(self, record: dict[str, Any]) -> None:
        """One JSON line in metrics.jsonl (and its numbers, at its step, to every tracker)."""
        if not self.enabled:
            return
        if self._metrics is not None:
            self._metrics.append(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        scalars = {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, (int, float))}
        for tracker in list(self._trackers):
            try:
                tracker.log(int(record.get("step", 0)), scalars)
            except Exception as error:  # a tracker server gone mid-run: the run and metrics.jsonl go on without it
                self._trackers.remove(tracker)
                self.message(
                    f"warning: {tracker.name} stopped taking metrics ({first_line(error)}); metrics.jsonl keeps them"
                )

    def message(self, text: str) -> None:
        """A line for the user that does not break the progress bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        failed = failing()
        for tracker in self._trackers:
            try:
                tracker.close(failed)
            except Exception as error:  # the run's own outcome (or error) matters more than the tracker's
                self.message(f"warning: {tracker.name} could not close its run ({first_line(error)})")
        self._trackers = []


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _PlainProgress:
    """The progress bar's figures as a plain line every `every_s` seconds, for output that goes to a file.

    `what` names the count ("step" gives "step 5/10 (50%): ..."; "encode train" with unit "doc" gives
    "encode train: 1,200 doc: ...").
    """

    def __init__(
        self, total_steps: Optional[int], initial_step: int, every_s: float, what: str = "step", unit: str = ""
    ) -> None:
        self.total, self.every_s = total_steps, every_s
        self.start_step, self.start = initial_step, time.monotonic()
        self.last = self.start
        self.head, self.unit = (f"{what} " if what == "step" else f"{what}: "), (f" {unit}" if unit else "")
        self.count = "{:,}" if unit else "{}"  # pretrain's "step 1200/5000" as before; "1,200 doc" elsewhere

    def line(self, step: int, figures: str, *, now_or_never: bool = False, left: str = "") -> Optional[str]:
        """The line for `step`, or None while `every_s` has not passed since the last one (unless `now_or_never`);
        `left` (the run's plan) in place of the time left at the rate since the start."""
        now = time.monotonic()
        if now - self.last < self.every_s and not now_or_never:
            return None
        self.last = now
        tail = (f": {figures}" if figures else "") + (f", {left}" if left else "")
        if not self.total:
            return f"{self.head}{self.count.format(step)}{self.unit}{tail}"
        done = step - self.start_step
        remaining = (self.total - step) * (now - self.start) / done if done > 0 and not left else math.nan
        eta = f", {remaining / 60:.0f} min left" if math.isfinite(remaining) and step < self.total else ""
        counted = f"{self.count.format(step)}/{self.count.format(self.total)}{self.unit}"
        return f"{self.head}{counted} ({step / self.total:.0%}){tail}{eta}"


class PlainBar:
    """What `progress_bar` gives when stderr is not a terminal: tqdm's `update` / `set_postfix` / context manager,
    writing a plain line every `every_s` seconds (and one at the end, if any was written) instead of redrawing."""

    def __init__(self, total: Optional[int], what: str, unit: str, every_s: float, disable: bool) -> None:
        self.n, self.disable = 0, disable
        self.said_at: Optional[int] = None  # the count of the last line written
        self._plain = _PlainProgress(total, 0, every_s, what, unit)
        self._figures = ""

    def update(self, n: int = 1) -> None:
        self.n += n
        self._say(self._plain.line(self.n, self._figures))

    def set_postfix(self, refresh: bool = False, **figures: Any) -> None:
        self._figures = ", ".join(f"{key} {value}" for key, value in figures.items())

    def _say(self, line: Optional[str]) -> None:
        if line is not None and not self.disable:
            print(line, file=sys.stderr, flush=True)
            self.said_at = self.n

    def close(self) -> None:
        if self.said_at not in (None, self.n):  # a log that showed the work under way also shows where it ended
            self._say(self._plain.line(self.n, self._figures, now_or_never=True))

    def __enter__(self) -> PlainBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(
    total: Optional[int], unit: str, what: str, *, disable: bool = False, leave: bool = True, every_s: float = 30.0
) -> Any:
    """A tqdm bar on a terminal; a `PlainBar` (a plain line now and then) when stderr goes to a file or a pipe."""
    if _is_terminal(sys.stderr):
        return tqdm(
            total=total, desc=what, unit=unit, file=sys.stderr, dynamic_ncols=True, disable=disable, leave=leave
        )
    return PlainBar(total, what, unit, every_s, disable)


def say(text: str) -> None:
    """A plain status line on stderr (stdout stays free for --json output)."""
    print(text, file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """'45 s', '12 min', '3.5 h': a time left in words fit for a progress line."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
