"""What a run tells the outside world: a progress bar, one JSON line per logged step, optional TensorBoard.

Only rank 0 reports; other ranks get a `Reporter` that does nothing. Metrics are appended to
RUN_DIR/metrics.jsonl and flushed at once, so a killed run keeps every line it logged.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Optional, TextIO

from tqdm import tqdm


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as strings so every line stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class Reporter:
    """Progress bar + metrics.jsonl (+ TensorBoard) for the main process; silent elsewhere."""

    def __init__(
        self,
        run_dir: Optional[Path],
        total_steps: Optional[int],
        *,
        enabled: bool = True,
        show_bar: bool = True,
        tensorboard: bool = False,
        initial_step: int = 0,
    ) -> None:
        self.enabled = enabled
        self._file: Optional[TextIO] = None
        self._bar: Optional[tqdm] = None
        self._tb = None
        if not enabled:
            return
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")  # append: a resumed run continues it
        if show_bar:
            self._bar = tqdm(
                total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True, file=sys.stderr, leave=True
            )
        if tensorboard and run_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                self.message("tensorboard is not installed (pip install tensorboard); logging to metrics.jsonl only")
            else:
                self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def advance(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        """Move the bar to `step` and show the latest figures (ETA comes from the bar)."""
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)

    def log(self, record: dict[str, Any]) -> None:
        """One JSON line in metrics.jsonl (and scalars to TensorBoard)."""
        if not self.enabled:
            return
        if self._file is not None:
            self._file.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
            self._file.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._tb.add_scalar(key, value, record.get("step", 0))

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
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def say(text: str) -> None:
    """A plain status line on stderr (stdout stays free for --json output)."""
    print(text, file=sys.stderr, flush=True)
