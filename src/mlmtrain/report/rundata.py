"""A run folder as the report reads it: metrics.jsonl as series, the resolved config, checkpoints, the token
store's figures and the model size.

Imports no training code (no torch): a report can be made beside a live run, from a copy of its folder.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mlmtrain.errors import UserError
from mlmtrain.probe_settings import SCORECARD_FILE, SCORECARD_GENERATOR
from mlmtrain.readers import load_json_text, read_json, read_saved_yaml
from mlmtrain.report.curves import Curve, curves_from_record

_STEP_DIR = re.compile(r"^step-(\d+)$")
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "infinity": math.inf, "-infinity": -math.inf}


@dataclass
class Series:
    """One metric over a run: the step and token count of each logged value (values may be nan or inf)."""

    step: np.ndarray
    tokens: np.ndarray
    value: np.ndarray

    def finite(self) -> Series:
        keep = np.isfinite(self.value)
        return Series(self.step[keep], self.tokens[keep], self.value[keep])

    def __len__(self) -> int:
        return len(self.value)


@dataclass
class PhaseSpan:
    """One phase of a run as its training lines show it (config phases:; a run without phases is one, named ""):
    the steps after `start_step` up to `end_step`, the tokens counted at both, the block lengths and masking rates
    its lines logged, and the tokens drawn from each source of a data mixture in it (`source_tokens`)."""

    name: str
    start_step: int  # the last step of the phase before (0 for a run's first); a branch's first: its first line's
    end_step: int
    start_tokens: float
    end_tokens: float
    seq_lens: list[int] = field(default_factory=list)
    mlm_probabilities: list[float] = field(default_factory=list)
    drawn: dict[str, float] = field(default_factory=dict)  # source: tokens drawn in the phase

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def tokens(self) -> float:
        return self.end_tokens - self.start_tokens

    def holds(self, steps: np.ndarray) -> np.ndarray:
        """Which of `steps` the phase trained (after its start, up to its end)."""
        return (steps > self.start_step) & (steps <= self.end_step)


@dataclass
class Run:
    """What one run folder holds, with what is missing said in `notes`."""

    path: Path
    name: str
    series: dict[str, Series] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the resolved mlmtrain.yaml, nested ({} when absent)
    checkpoints: list[int] = field(default_factory=list)  # steps of the complete checkpoints
    store: Optional[dict[str, Any]] = None  # the token store's meta.json
    parameters: Optional[int] = None
    notes: list[str] = field(default_factory=list)
    scorecard: Optional[tuple[int, dict[str, Any]]] = None  # (step, record) of the newest checkpoint that has one
    curves: list[Curve] = field(default_factory=list)  # the curves its objective declares (run.json)
    phases: list[PhaseSpan] = field(default_factory=list)  # in order; [] before the first training line
    mixture: dict[str, dict[str, float]] = field(default_factory=dict)  # run.json: phase ("" the run) -> targets

    @property
    def phased(self) -> bool:
        """Whether the run trained in phases (config phases:), as its metrics lines name them."""
        return any(phase.name for phase in self.phases)

    def target_shares(self, phase: str) -> dict[str, float]:
        """The share of each source a data mixture aims at in `phase` (run.json's, the run's own under ""); {} when
        the run has no mixture."""
        return self.mixture.get(phase) or self.mixture.get("") or {}

    def get(self, key: str) -> Optional[Series]:
        found = self.series.get(key)
        return found if found is not None and len(found) else None

    def setting(self, section: str, key: str) -> Any:
        values = self.config.get(section)
        return values.get(key) if isinstance(values, dict) else None

    def number(self, section: str, key: str) -> Optional[float]:
        """A numeric setting as a finite float; None when absent or not one (text, or an integer too large)."""
        value = _number(self.setting(section, key))
        return value if value is not None and math.isfinite(value) else None

    def last_step(self) -> int:
        return max((int(s.step[-1]) for s in self.series.values() if len(s)), default=0)

    def last_tokens(self) -> int:
        ends = [s.tokens[-1] for s in self.series.values() if len(s) and np.isfinite(s.tokens[-1])]
        return int(max(ends, default=0))

    def elapsed_at(self, steps: np.ndarray) -> Optional[np.ndarray]:
        """Wall seconds at these steps, interpolated from the training lines (eval lines carry no time)."""
        return self.interpolated("elapsed_s", steps)

    def interpolated(self, key: str, steps: np.ndarray) -> Optional[np.ndarray]:
        """The logged `key` (elapsed_s, flops) at these steps, interpolated; None when the run never logged it."""
        found = self.get(key)
        if found is None:
            return None
        found = found.finite()
        return np.interp(steps, found.step, found.value) if len(found) else None


def _number(value: Any) -> Optional[float]:
    """A metric value as a float: null and "nan"/"inf" strings are non-finite; anything else (other text, a list, an
    integer too large for a float) is not a number."""
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # JSON integers are unbounded: one of 400 digits fits no float
            return None
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        return _NONFINITE.get(value.strip().lower())
    return None


def _step(record: Any) -> Optional[int]:
    """The line's step: an integer that fits the 64 bits the series hold it in, else None."""
    step = record.get("step") if isinstance(record, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or not -(2**63) <= step < 2**63:
        return None
    return step


def _lines_shown(numbers: list[int]) -> str:
    return ", ".join(str(n) for n in numbers[:5]) + (" ..." if len(numbers) > 5 else "")


def read_metrics(path: Path) -> tuple[dict[str, Series], list[str]]:
    """Series per key from metrics.jsonl, and notes on lines and values that could not be read.

    A resumed run appends lines again from its checkpoint's step: a key's later lines replace the ones
    at the same or later steps, so each series keeps increasing steps and reflects the weights kept.
    """
    series, notes, _ = _parse_metrics(path)
    return series, notes


# what a training line says beside its numbers: its phase's name, and the tokens drawn from each source so far
_PHASE_KEYS = ("phase", "source_tokens")


@dataclass
class _Mark:
    """A training line's step, tokens, phase, block length, masking rate and cumulative tokens per source."""

    step: int
    tokens: float
    phase: str
    seq_len: Any
    mlm_probability: Any
    sources: dict[str, float]


def _mark(step: int, tokens: float, record: dict[str, Any]) -> _Mark:
    sources = record.get("source_tokens") if isinstance(record.get("source_tokens"), dict) else {}
    counts = {str(name): _number(n) for name, n in sources.items()}
    counts = {name: n for name, n in counts.items() if n is not None and math.isfinite(n)}
    phase = record.get("phase") if isinstance(record.get("phase"), str) else ""
    return _Mark(step, tokens, phase, record.get("seq_len"), record.get("mlm_probability"), counts)


def _phase_spans(marks: list[_Mark], first_phase: Optional[str]) -> list[PhaseSpan]:
    """The phases of a run from its training lines' marks, in order; `first_phase`, the config's first (a first
    span of another phase is a branch's, which begins at its first line, not at step 0)."""
    spans: list[PhaseSpan] = []
    start: Optional[_Mark] = None  # the last line of the phase before
    groups: list[list[_Mark]] = []
    for mark in marks:
        if groups and groups[-1][0].phase == mark.phase:
            groups[-1].append(mark)
        else:
            groups.append([mark])
    for group in groups:
        first, last = group[0], group[-1]
        if start is None and first.phase in ("", first_phase):  # a run's first phase: from step 0
            begin = _Mark(0, 0.0, first.phase, None, None, {})
        else:
            begin = start or first
        spans.append(
            PhaseSpan(
                first.phase,
                begin.step,
                last.step,
                begin.tokens,
                last.tokens,
                sorted({m.seq_len for m in group if isinstance(m.seq_len, int) and not isinstance(m.seq_len, bool)}),
                sorted({rate for m in group if math.isfinite(rate := _number(m.mlm_probability) or math.nan)}),
                {name: n - begin.sources.get(name, 0.0) for name, n in last.sources.items()},
            )
        )
        start = last
    return spans


def _parse_metrics(path: Path) -> tuple[dict[str, Series], list[str], list[_Mark]]:
    """`read_metrics`'s series and notes, and the marks of its training lines (`_phase_spans`)."""
    points: dict[str, list[tuple[int, float, float]]] = {}
    marks: list[_Mark] = []
    notes: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        return {}, [f"cannot read {path.name}: {error.strerror or error}"], []
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    unreadable: list[int] = []
    not_numbers: dict[str, list[int]] = {}  # key -> lines whose value is neither a number nor null/nan/inf
    for position, (number, line) in enumerate(numbered):
        try:
            record = load_json_text(line)
        except ValueError:
            record = None
        step = _step(record)
        if step is None:
            if position == len(numbered) - 1 and record is None:  # a run killed mid-write leaves its last line cut
                notes.append(f"the last line of {path.name} is incomplete (the run was stopped mid-write); ignored")
            else:
                unreadable.append(number)
            continue
        tokens = _number(record.get("tokens"))
        if tokens is None:
            not_numbers.setdefault("tokens", []).append(number)
            tokens = math.nan
        if "loss" in record:  # a training line: where its phase is
            while marks and marks[-1].step >= step:
                marks.pop()
            marks.append(_mark(step, tokens, record))
        for key, raw in record.items():
            if key in ("step", "tokens", *_PHASE_KEYS):
                continue
            value = _number(raw)
            if value is None:
                not_numbers.setdefault(key, []).append(number)
                continue
            kept = points.setdefault(key, [])
            while kept and kept[-1][0] >= step:
                kept.pop()
            kept.append((step, tokens, value))
    if unreadable:
        notes.append(f"{len(unreadable)} unreadable line(s) in {path.name} skipped (line {_lines_shown(unreadable)})")
    if not_numbers:
        count = sum(len(found) for found in not_numbers.values())
        keys = sorted(not_numbers.items())
        where = "; ".join(f"{key} (line {_lines_shown(found)})" for key, found in keys[:5])
        where += "; ..." if len(keys) > 5 else ""
        notes.append(f"{count} value(s) in {path.name} that are not numbers (or too large for one) skipped: {where}")
    series = {
        key: Series(
            np.array([p[0] for p in rows], dtype=np.int64),
            np.array([p[1] for p in rows], dtype=np.float64),
            np.array([p[2] for p in rows], dtype=np.float64),
        )
        for key, rows in points.items()
    }
    return series, notes, marks


def complete_checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the checkpoints whose completion marker exists (the rule checkpoint.py writes by)."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    steps = []
    for child in folder.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and not child.is_symlink() and (child / "COMPLETE").exists():
            steps.append(int(match.group(1)))
    return sorted(steps)


def safetensors_parameters(path: Path) -> Optional[int]:
    """Parameter count from a safetensors header (8-byte length, then JSON shapes): no weights are read."""
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100_000_000:
                return None
            header = load_json_text(handle.read(length))
    except (OSError, ValueError, struct.error):
        return None
    if not isinstance(header, dict):
        return None
    total = 0
    for key, entry in header.items():
        shape = entry.get("shape") if isinstance(entry, dict) and key != "__metadata__" else []
        if not isinstance(shape, list) or not all(_is_count(n) for n in shape):
            return None  # a damaged or hand-made header: the size is unknown, not a traceback
        total += math.prod(shape)
    return total if _is_count(total) else None


def _is_count(value: Any) -> bool:
    """A non-negative integer that 64 bits (and so a float, roughly) hold."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _store_meta(run_dir: Path, config: dict[str, Any]) -> Optional[dict[str, Any]]:
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    folder = Path(data["store"]) if isinstance(data.get("store"), str) and data["store"] else run_dir / "tokens"
    try:
        meta = read_json(folder / "meta.json")
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    # the checks read counts per split: keep those that are counts, so a hand-edited figure leaves its check n/a
    splits = meta.get("splits") if isinstance(meta.get("splits"), dict) else {}
    meta["splits"] = {
        name: {key: value for key, value in figures.items() if _is_count(value)}
        for name, figures in splits.items()
        if isinstance(figures, dict)
    }
    return meta


def _read_config(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        notes.append("no mlmtrain.yaml: the configuration is unknown")
        return {}
    loaded = read_saved_yaml(path)
    if loaded is None:
        notes.append("mlmtrain.yaml is unreadable: the configuration is unknown")
    return loaded or {}


def load_run(path: Path, name: Optional[str] = None) -> Run:
    """Read a run folder; UserError when the folder is missing or holds no run."""
    path = Path(path)
    if not path.is_dir():
        raise UserError("report", f"{path} is not a folder; pass a run folder (a train.run_dir)")
    metrics = path / "metrics.jsonl"
    if not metrics.is_file() and not (path / "mlmtrain.yaml").is_file() and not (path / "checkpoints").is_dir():
        raise UserError(
            "report",
            f"{path} is not a run folder (no metrics.jsonl, mlmtrain.yaml or checkpoints); "
            "pass the train.run_dir of a pretrain run",
        )
    run = Run(path=path, name=name or path.name)
    marks: list[_Mark] = []
    if metrics.is_file():
        run.series, notes, marks = _parse_metrics(metrics)
        run.notes.extend(notes)
        if not run.series:
            run.notes.append("metrics.jsonl holds no metric lines yet")
    else:
        run.notes.append("no metrics.jsonl: the run has logged nothing yet")
    run.config = _read_config(path / "mlmtrain.yaml", run.notes)
    run.phases = _phase_spans(marks, _first_phase(run.config))
    facts = _run_facts(path)
    run.curves = curves_from_record(facts.get("curves"))
    run.mixture = _mixture(facts.get("mixture"))
    run.checkpoints = complete_checkpoint_steps(path)
    if run.checkpoints:
        run.parameters = safetensors_parameters(
            path / "checkpoints" / f"step-{run.checkpoints[-1]}" / "model.safetensors"
        )
    run.store = _store_meta(path, run.config)
    for step in reversed(run.checkpoints):
        found = read_scorecard(path / "checkpoints" / f"step-{step}")
        if found is not None:
            run.scorecard = (step, found)
            break
    if not run.get("eval_loss"):
        run.notes.append("no validation evaluation logged (train.eval_every: 0, or none reached yet)")
    return run


def _first_phase(config: dict[str, Any]) -> Optional[str]:
    """The name of the first phase of a run's config (None without phases)."""
    phases = config.get("phases")
    first = phases[0] if isinstance(phases, list) and phases else None
    return first.get("name") if isinstance(first, dict) and isinstance(first.get("name"), str) else None


def _mixture(found: Any) -> dict[str, dict[str, float]]:
    """run.json's data mixture, {phase ("" the run): {source: target share}}, its shares finite numbers; a damaged
    entry costs itself, never the report."""
    mixture: dict[str, dict[str, float]] = {}
    for phase, targets in (found if isinstance(found, dict) else {}).items():
        if isinstance(phase, str) and isinstance(targets, dict):
            shares = {str(k): _number(v) for k, v in targets.items()}
            mixture[phase] = {k: v for k, v in shares.items() if v is not None and math.isfinite(v) and v >= 0}
    return mixture


def _run_facts(path: Path) -> dict[str, Any]:
    """The run.json of a run folder ({}: none, or not readable)."""
    try:
        facts = read_json(path / "run.json")
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def load_runs(paths: list[Path]) -> list[Run]:
    """Runs named by their folder; folders of the same name are told apart by their parent."""
    names = [Path(p).resolve().name for p in paths]
    runs = []
    for path, name in zip(paths, names, strict=True):
        if names.count(name) > 1:
            name = "/".join(Path(path).resolve().parts[-2:])
        runs.append(load_run(Path(path), name))
    return runs


# ---------------------------------------------------------------------------------------------
# A checkpoint's scorecard (`mlmtrain probe --suite`)


def _percent(values: Any) -> str:
    """Figures as GLUE shows them: percent, one decimal, a task's two joined by a slash."""
    if not isinstance(values, list) or not values:
        return "—"
    return "/".join(f"{100 * v:.1f}" if isinstance(v, (int, float)) and math.isfinite(v) else "n/a" for v in values)


def scorecard_table(record: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a scorecard: each task's metric, the median over seeds of each figure, the 95 % interval
    of its score (the mean of its figures) over seeds, its seeds, and the published reference's figures if any."""
    reference = record.get("reference") if isinstance(record.get("reference"), dict) else None
    header = ["task", "metric", "median", "95% interval", "seeds"]
    if reference:
        header.append(f"{reference.get('name')} ({reference.get('split')})")
    rows = []
    tasks = record.get("tasks") if isinstance(record.get("tasks"), dict) else {}
    for name, task in tasks.items():
        task = task if isinstance(task, dict) else {}
        interval = task.get("ci95")
        shown = _percent(interval).replace("/", " to ") if isinstance(interval, list) and len(interval) == 2 else "—"
        runs = task.get("runs") if isinstance(task.get("runs"), list) else []
        row = [str(name), str(task.get("metric", "")), _percent(task.get("figures")), shown, str(len(runs))]
        if reference:
            row.append(_percent((reference.get("tasks") or {}).get(name)))
        rows.append(row)
    average = record.get("average")
    row = ["average", "", _percent([average]) if average is not None else "— (unfinished)", "", ""]
    if reference:
        row.append(_percent([reference.get("average")]))
    return header, [*rows, row]


def read_scorecard(folder: Path) -> Optional[dict[str, Any]]:
    """The scorecard in a checkpoint folder, when `probe --suite` wrote one there (None otherwise)."""
    try:
        record = read_json(folder / SCORECARD_FILE)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("generator") == SCORECARD_GENERATOR else None
