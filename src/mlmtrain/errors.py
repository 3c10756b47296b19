"""The one exception type for mistakes a user can fix, and what every error line may quote.

Anything raised as `UserError` reaches the terminal as a single line
(`mlmtrain: <topic>: <message>`) and exit code 2; everything else is a bug and keeps its traceback.
`redact` hides credentials in any text quoted from a library or the environment (and, once
`redact_library_messages` is installed, in whatever a library logs or warns); `shown` quotes a value from a file in a
bounded number of characters.
"""

from __future__ import annotations

import logging
import re
import reprlib
import signal
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional


class UserError(Exception):
    """A problem in the user's input (config, data, arguments, checkpoint) with a fix to name."""

    def __init__(self, topic: str, message: str) -> None:
        super().__init__(f"{topic}: {message}")
        self.topic = topic
        self.message = message


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colours some libraries put in their messages


_SECRET_NAMES = r"(?:[a-z]+_)?token|password|passwd|secret|client_secret|api_?key"
_SECRETS = (
    # user:password@ in a URL (a password may hold / or @ where it was not percent-encoded: up to the last @)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s:/@'\"<>]*):[^\s'\"<>]*@"), r"\1\2:***@"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s:/@'\"<>]+@"), r"\1***@"),  # a token alone as the URL's user
    (re.compile(r"(?<![\w/.:%+-])([\w.%+-]+):[^\s:/@'\"<>]+@(?=[\w.-])"), r"\1:***@"),  # user:password@host, no scheme
    (re.compile(r"\bhf_[A-Za-z0-9]{6,}"), "hf_***"),  # a Hugging Face token
    (re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)((?:bearer|basic|token)\s+)?[^\s\"',;]+"), r"\1\2***"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 ***"),
    (re.compile(rf"(?i)\b({_SECRET_NAMES})(\s*=\s*[\"']?)[^\s\"'&,;)}}\]]+"), r"\1\2***"),  # token=..., ?password=...
    (re.compile(rf"(?i)([\"'])({_SECRET_NAMES})\1(\s*:\s*[\"']?)[^\s\"'&,;)}}\]]+"), r"\1\2\1\3***"),  # "token": ...
    (re.compile(r"(?i)\b(password|passwd|secret)(\s*:\s*)[^\s\"',;]+"), r"\1\2***"),  # password: ...
)


def redact(text: str) -> str:
    """`text` with credentials replaced by ***: a URL's user:password@ (or token@), Hugging Face tokens,
    `Authorization:` and `Bearer` values, `token=`, `password=`, `secret=`, `api_key=` (and their JSON forms).
    Every error line goes through it, since libraries quote the URLs they were given."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def redact_library_messages() -> None:
    """From now on, every log record of any library (its message and traceback) and every warning printed goes through
    `redact`: libraries log the URLs they request (HF_ENDPOINT with its password, in each retry line) and warn with
    them. Installed once a process (the command line at start, the Hub's callers before they reach it)."""
    if getattr(logging.getLogRecordFactory(), "redacts", False):
        return
    make_record, format_warning = logging.getLogRecordFactory(), warnings.formatwarning

    def redacted_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the message: logging says so itself when it emits it
            return record
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    def redacted_warning(*args: Any, **kwargs: Any) -> str:
        return redact(format_warning(*args, **kwargs))

    redacted_record.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacted_record)
    warnings.formatwarning = redacted_warning


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none), without terminal colour codes or
    credentials: what a one-line UserError quotes of a library's exception."""
    text = _TERMINAL_CODES.sub("", str(error)).strip()
    return redact(text.splitlines()[0]) if text else type(error).__name__


_BOUNDED = reprlib.Repr()  # a few items per level, a few levels: the text stays short however large the value
_BOUNDED.maxlevel, _BOUNDED.maxstring, _BOUNDED.maxother = 3, 40, 40
_BOUNDED.maxlist = _BOUNDED.maxtuple = _BOUNDED.maxdict = _BOUNDED.maxset = 4


def shown(value: Any, limit: int = 40) -> str:
    """A value from a file or an argument as an error line quotes it: its repr, cut to about `limit` characters
    (a long string or number says its full length), built without ever writing out the whole of a huge value (a
    string of megabytes, a list of a million items, an integer of 5,000 digits)."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:12]!r}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:  # > `limit` digits
        try:
            text = str(value)
        except ValueError:  # more digits than Python writes out
            return "an integer of thousands of digits"
        return f"{text[:12]}... ({len(text):,} characters)"
    try:
        text = _BOUNDED.repr(value)
    except ValueError:  # an integer of thousands of digits inside a list
        text = f"a {type(value).__name__} holding an integer of thousands of digits"
    return text if len(text) <= limit + 20 else f"{text[:limit]}..."


_UNSAFE_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")  # torch's words for an object weights_only refuses


def refused_pickle(error: BaseException) -> Optional[str]:
    """The Python object (its dotted name) that torch's `weights_only` load refused to build from a pickle: the file
    was never unpickled, so nothing in it ran; None for any other error."""
    found = _UNSAFE_GLOBAL.search(str(error))
    return found.group(1) if found else None


def loader_worker_died(error: BaseException) -> bool:
    """Whether `error` is torch's report of a DataLoader worker that died (from its SIGCHLD handler, or when the
    next batch never comes); `data.blocks.raise_worker_errors` makes it surface at the next batch only."""
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
