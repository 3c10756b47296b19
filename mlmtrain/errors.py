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
