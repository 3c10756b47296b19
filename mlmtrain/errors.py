"""The one exception type for mistakes a user can fix.

Anything raised as `UserError` reaches the terminal as a single line
(`mlmtrain: <topic>: <message>`) and exit code 2; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class UserError(Exception):
    """A problem in the user's input (config, data, arguments, checkpoint) with a fix to name."""

    def __init__(self, topic: str, message: str) -> None:
        super().__init__(f"{topic}: {message}")
        self.topic = topic
        self.message = message


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colours some libraries put in their messages


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none), without terminal colour codes: what a
    one-line UserError quotes of a library's exception."""
    text = _TERMINAL_CODES.sub("", str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def loader_worker_died(error: BaseException) -> bool:
    """Whether `error` is torch's report of a DataLoader worker that died: torch raises it in the main process
    wherever that process happens to be (a step, an evaluation, a checkpoint's write), from its SIGCHLD handler or
    when the next batch never comes."""
    return isinstance(error, RuntimeError) and str(error).startswith("DataLoader worker")


@contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM (a scheduler, `timeout`, `kill`) acts like Ctrl-C for the block: a KeyboardInterrupt, so temporary
    folders are cleaned up on the way out and the user reads "interrupted" instead of a silent exit 143. `pretrain`'s
    loop replaces it with a handler that finishes the step and saves a checkpoint."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
