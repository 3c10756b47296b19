"""How a config key is declared: its default, its one-line help, what a resume under another value says, the rule its
value must meet (`Check`), and whether it names a file or folder (`path`). The section dataclasses build their keys
with `setting`, `trains`, `quiet` and `health`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from mlmtrain.errors import UserError, shown

# what a key that names a file or folder may name besides: "local" (nothing), "hub" (a Hub repository)
PathKind = Optional[Literal["local", "hub"]]
# a text source: one path, glob or named source, or a list of them
Source = Union[str, list[str]]
# data.train: a source, or a mixture: a list of {source: SOURCE, weight: W, name: NAME} (config/data.py)
TrainSource = Union[str, list[Union[str, dict[str, Any]]]]


RESUME_KINDS = ("note", "own-note", "silent")
"""What a resume under another value of a key does: `note`, the key changes what or how the run trains and the
resume note of training settings names the change; `own-note`, it changes training and has a note of its own
(dropout, the optimizer's settings); `silent`, it changes no weight (folders, cadences, evaluation, reports)."""


@dataclass(frozen=True)
class Check:
    """The rule one key's value must meet (null passes: a key that may be null says so in its type), and how an
    error line and `config fields` say it: `says` completes "optim.lr ..." ("must be > 0")."""

    holds: Callable[[Any], bool]
    says: str


def at_least(low: float) -> Check:
    return Check(lambda value: value >= low, f"must be >= {low:g}")


def above(low: float) -> Check:
    return Check(lambda value: value > low, f"must be > {low:g}")


def within(low: float, high: float, ends: str) -> Check:
    """low..high, each end closed by [ ] or open by ( )."""
    closed_low, closed_high = ends[0] == "[", ends[1] == "]"

    def holds(value: float) -> bool:
        return (value >= low if closed_low else value > low) and (value <= high if closed_high else value < high)

    return Check(holds, f"must be in {ends[0]}{low:g}, {high:g}{ends[1]}")


def setting(
    default: Any,
    help: str,
    *,
    resume: str,
    check: Optional[Check] = None,
    path: PathKind = None,
) -> Any:
    """A dataclass field with a default, a one-line description, what a resume under another value says
    (`RESUME_KINDS`), the rule its value must meet (`Check`; None: its type is the whole rule) and, for a key that
    names a file, folder or glob, `path`: "local", or "hub" where it may name a Hub repository instead (a published
    config keeps such a value by its name, never this machine's path: published.py)."""
    if resume not in RESUME_KINDS:
        raise ValueError(f"resume must be one of {RESUME_KINDS} (got {resume!r})")
    metadata = {"help": help, "resume": resume, "check": check, "path": path}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def trains(
    default: Any, help: str, check: Optional[Check] = None, path: Optional[Literal["local", "hub"]] = None
) -> Any:
    """A key that changes what or how the run trains: `setting` with resume="note"."""
    return setting(default, help, resume="note", check=check, path=path)


def health(default: Any, help: str, check: Check) -> Any:
    """A threshold of the report's health checks: changes no weight."""
    return quiet(default, f"health: {help}", check)


def quiet(
    default: Any, help: str, check: Optional[Check] = None, path: Optional[Literal["local", "hub"]] = None
) -> Any:
    """A key that changes no weight (a folder, a cadence, an evaluation or report setting): `setting` with
    resume="silent"."""
    return setting(default, help, resume="silent", check=check, path=path)


# The checks of one key each that are not a range
SOME_SOURCE = Check(bool, "must name at least one source")
GENERATOR_SHARE = Check(
    lambda share: 0 < share <= 1, "must be in (0, 1]: the generator may not be larger than the discriminator"
)
DURATION = Check(lambda value: parse_duration(value) > 0, "must be > 0")
DEVICE = Check(lambda name: bool(re.fullmatch(r"auto|cpu|cuda(:\d+)?", name)), "must be auto, cpu, cuda or cuda:N")
DISTINCT = Check(lambda names: len(set(names)) == len(names), "must not name a tracker twice")
LICENSE = Check(
    lambda name: bool(re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", name)),
    "must be a Hub license identifier such as apache-2.0 or mit",
)
LANGUAGES = Check(
    lambda codes: all(
        re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]+)*", code) for code in ([codes] if isinstance(codes, str) else codes)
    ),
    "must be language codes such as en or [en, de]",
)


def check_fields(section: str, values: Any) -> None:
    """Every key of one section against its own `Check` (null passes: the type said whether null may be)."""
    for found in dataclasses.fields(values):
        check, value = found.metadata["check"], getattr(values, found.name)
        if check is not None and value is not None and not check.holds(value):
            raise UserError("config", f"{section}.{found.name} {check.says} (got {shown(value)})")


def suggest(name: str, options: list[str], prefix: str = "", listing: str = "known keys") -> str:
    """The close match among `options` for a mistyped `name`, as a message's tail ("; did you mean ..."), else them
    all (`listing` names them)."""
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    return f"; {listing}: {', '.join(prefix + o for o in options)}"


def require(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError("config", f"{key} {message}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: Union[str, float, int, None], key: str = "train.max_time") -> Union[float, None]:
    """Seconds from a number or a string such as '90s', '10m', '2h', '1d'."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if value is None else float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise UserError("config", f"{key} must be seconds or a duration like '30m' or '2h' (got {shown(value)})")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
