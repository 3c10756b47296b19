"""The one exception type for mistakes a user can fix.

Anything raised as `UserError` reaches the terminal as a single line
(`mlmtrain: <topic>: <message>`) and exit code 2; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem in the user's input (config, data, arguments, checkpoint) with a fix to name."""

    def __init__(self, topic: str, message: str) -> None:
        super().__init__(f"{topic}: {message}")
        self.topic = topic
        self.message = message


def loader_worker_died(error: BaseException) -> bool:
    """Whether `error` is torch's report of a DataLoader worker that died: torch raises it in the main process
    wherever that process happens to be (a step, an evaluation, a checkpoint's write), from its SIGCHLD handler or
    when the next batch never comes."""
    return isinstance(error, RuntimeError) and str(error).startswith("DataLoader worker")
