"""`mlmtrain report`: one self-contained HTML page (inline SVG plots, no script, no network) for one or more
runs — curves, a summary table, the configuration differences and the health checks — and the
terminal form of the checks (`--check`).

Reads run folders only (see `rundata`); matplotlib draws the plots and is an optional extra.
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import os
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from mlmtrain.config import flatten, local_name
from mlmtrain.errors import UserError, first_line
from mlmtrain.report.curves import CURVES, Curve, matches
from mlmtrain.report.health import FAIL, OK, Verdict, parse_overrides, run_checks, smooth
from mlmtrain.report.rundata import Run, Series, load_runs, scorecard_table
from mlmtrain.runtime.files import check_apart, check_writable_folder, local_inputs, write_failure
from mlmtrain.runtime.progress import say

GENERATOR = '<meta name="generator" content="mlmtrain report">'  # marks a page this tool may replace
PNG_MARK = "mlmtrain report"
AXES = ("steps", "tokens", "time", "flops")
INSTALL_HINT = "pip install 'mlmtrain[report]' (or pip install matplotlib)"
MAX_POINTS = 4000  # per plotted line: a longer raw series is thinned (the smoothed line uses every point)


def curves_of(runs: list[Run]) -> list[Curve]:
    """The curves of a page: every run's (`CURVES`), then those the runs' objectives declare (run.json), once each."""
    found = {curve.slug: curve for curve in CURVES}
    for run in runs:
        for curve in run.curves:
            found.setdefault(curve.slug, curve)
    return list(found.values())


def curve_keys(curve: Curve, runs: list[Run]) -> list[str]:
    """The logged keys a curve draws (probe_* expands to every probe score some run logged, *_loss to every loss
    term)."""
    keys: list[str] = []
    for pattern in curve.keys:
        if "*" in pattern:
            keys.extend(sorted({key for run in runs for key in run.series if matches(pattern, key)}))
        elif any(run.get(pattern) is not None for run in runs):
            keys.append(pattern)
    return keys


def _matplotlib() -> Any:
    try:
        import matplotlib  # matplotlib: the optional [report] extra
    except ImportError:
        raise UserError("report", f"the plots need matplotlib, which is not installed; {INSTALL_HINT}") from None
    return matplotlib


# ---------------------------------------------------------------------------------------------
# Plots


def plain_text(text: str) -> str:
    """`text` as matplotlib draws it literally: a lone `$` would start mathtext (`cost$5-vs$10` drawn as math, and
    `lr$1e-3^$` a parse error), so each is escaped; run names and metric keys are text, never markup."""
    return text.replace("$", r"\$")


def _x_values(run: Run, series: Series, axis: str) -> Optional[np.ndarray]:
    if axis == "steps":
        return series.step.astype(np.float64)
    if axis == "tokens":
        return series.tokens
    if axis == "flops":
        return run.interpolated("flops", series.step)
    return run.elapsed_at(series.step)


def _time_unit(runs: list[Run]) -> tuple[str, float]:
    elapsed = [s.finite().value for r in runs if (s := r.get("elapsed_s")) is not None]
    longest = max((float(v.max()) for v in elapsed if len(v)), default=0.0)
    if longest < 120:
        return "s", 1.0
    return ("min", 60.0) if longest < 7200 else ("h", 3600.0)


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    stride = max(1, math.ceil(len(x) / MAX_POINTS))
    return x[::stride], y[::stride]


def draw_curve(curve: Curve, runs: list[Run], axis: str) -> Optional[Any]:
    """A matplotlib Figure of one curve over all runs (None when no run logged it)."""
    from matplotlib.figure import Figure  # matplotlib: the optional [report] extra

    keys = curve_keys(curve, runs)
    unit, scale = _time_unit(runs)
    figure = Figure(figsize=(7.5, 3.4))
    # fixed margins: a layout engine (constrained, tight) doubles the cost of a page
    figure.subplots_adjust(left=0.12, right=0.98, bottom=0.15, top=0.9)
    ax = figure.add_subplot()
    drawn = 0
    styles = ("-", "--", ":", "-.")
    for index, run in enumerate(runs):
        color = f"C{index % 10}"
        for number, key in enumerate(keys):
            series = run.get(key)
            x = _x_values(run, series, axis) if series is not None else None
            if series is None or x is None:
                continue
            x = x / scale if axis == "time" else x
            y = np.where(np.isfinite(series.value), series.value, np.nan)  # a gap where a value was nan or inf
            label = plain_text(run.name if len(keys) == 1 else f"{run.name}: {key}")
            marker = "o" if len(y) <= 40 else None
            if curve.smoothed:
                ax.plot(*_thin(x, y), color=color, alpha=0.3, linewidth=0.8)
                finite = np.isfinite(y)
                if finite.any():
                    ax.plot(*_thin(x[finite], smooth(y[finite])), color=color, linewidth=1.6, label=label)
            else:
                style = styles[number % len(styles)]  # several keys of one run (probe scores): one style each
                ax.plot(*_thin(x, y), color=color, linestyle=style, marker=marker, markersize=3, label=label)
            drawn += 1
    if not drawn:
        return None
    for index, run in enumerate(runs):
        _draw_phase_boundaries(ax, run, axis, scale, f"C{index % 10}")
    ax.set_title(plain_text(curve.title), fontsize=10)
    ax.set_xlabel(
        {
            "steps": "optimizer step",
            "tokens": "training tokens",
            "time": f"wall time ({unit})",
            "flops": "training FLOPs",
        }[axis]
    )
    ax.set_ylabel(plain_text(curve.ylabel))
    if curve.log_y:
        ax.set_yscale("log")
    else:  # 1e-3, not 0.00100: short tick labels leave room for the axis label
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 5), useMathText=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure


def phase_boundaries(run: Run, axis: str) -> list[tuple[float, str]]:
    """(x on `axis`, name) of each point where a run's phase changes (config phases:): the last step of the phase
    before, and the name of the phase that begins there."""
    starts = [phase for phase in run.phases[1:] if phase.name]
    steps = np.array([phase.start_step for phase in starts], dtype=np.float64)
    if axis == "steps":
        x: Optional[np.ndarray] = steps
    elif axis == "tokens":
        x = np.array([phase.start_tokens for phase in starts], dtype=np.float64)
    else:
        x = run.interpolated("flops", steps) if axis == "flops" else run.elapsed_at(steps)
    return [] if x is None else [(float(at), phase.name) for at, phase in zip(x, starts, strict=True)]


def _draw_phase_boundaries(ax: Any, run: Run, axis: str, scale: float, color: str) -> None:
    """A dotted vertical line where each phase of `run` begins, with the phase's name beside it at the top."""
    for x, name in phase_boundaries(run, axis):
        at = x / scale if axis == "time" else x
        ax.axvline(at, color=color, linestyle=":", linewidth=1.0, alpha=0.7)
        ax.text(
            at,
            0.97,
            plain_text(name),
            transform=ax.get_xaxis_transform(),  # x in data, y in the axes' height: at the top whatever the values
            color=color,
            fontsize=7,
            va="top",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )


def _svg(figure: Any) -> str:
    import matplotlib  # matplotlib: the optional [report] extra

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text: smaller, sharp, searchable
        figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # inline SVG takes no XML prolog or DOCTYPE


# ---------------------------------------------------------------------------------------------
# Tables


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _last(run: Run, key: str) -> Optional[tuple[int, float]]:
    series = run.get(key)
    finite = series.finite() if series is not None else None
    return (int(finite.step[-1]), float(finite.value[-1])) if finite is not None and len(finite) else None


def _best(run: Run, key: str, lowest: bool) -> Optional[tuple[int, float]]:
    series = run.get(key)
    finite = series.finite() if series is not None else None
    if finite is None or not len(finite):
        return None
    i = int(np.argmin(finite.value) if lowest else np.argmax(finite.value))
    return int(finite.step[i]), float(finite.value[i])


def _at(found: Optional[tuple[int, float]], digits: int = 4) -> str:
    return f"{found[1]:.{digits}f} (step {found[0]:,})" if found else "—"


def _size(run: Run) -> str:
    layers, hidden = run.setting("model", "num_layers"), run.setting("model", "hidden_size")
    shape = f"L{layers}/H{hidden}" if layers and hidden else ""
    count = f"{run.parameters / 1e6:.2f}M parameters" if run.parameters else ""
    return ", ".join(part for part in (shape, count) if part) or "—"


def summary_rows(run: Run) -> list[tuple[str, str]]:
    """(label, value) of a run's final and best figures, size, tokens, time and checkpoints."""
    elapsed = _last(run, "elapsed_s")
    rows = [
        ("model", _size(run)),
        ("steps", f"{run.last_step():,}"),
        ("tokens seen", f"{run.last_tokens():,}"),
        ("wall time", _fmt_duration(elapsed[1]) if elapsed else "—"),
        ("final training loss", _at(_last(run, "loss"))),
        ("final validation loss", _at(_last(run, "eval_loss"))),
        ("best validation loss", _at(_best(run, "eval_loss", lowest=True))),
        ("best validation perplexity", _at(_best(run, "eval_ppl", lowest=True), 2)),
    ]
    if run.get("eval_acc") is not None:
        rows.append(("best MLM accuracy", _at(_best(run, "eval_acc", lowest=False))))
    for key in sorted(k for k in run.series if k.startswith("probe_") and not k.endswith("_seconds")):
        rows.append((f"best {key}", _at(_best(run, key, lowest=False))))
    rows.append(("checkpoints", ", ".join(f"step-{s}" for s in run.checkpoints) or "none"))
    return rows


def _listed_values(values: list[Any]) -> str:
    return ", ".join(f"{value:g}" if isinstance(value, float) else str(value) for value in values) or "—"


def phase_rows(run: Run) -> list[list[str]]:
    """A row per phase of a run of phases: its name, the steps it trained (after its start, up to its end), their
    count, its tokens, block length and masking rate."""
    return [
        [
            phase.name,
            f"{phase.start_step:,} to {phase.end_step:,}",
            f"{phase.steps:,}",
            f"{phase.tokens:,.0f}",
            _listed_values(phase.seq_lens),
            _listed_values(phase.mlm_probabilities),
        ]
        for phase in run.phases
    ]


def mixture_rows(run: Run) -> list[list[str]]:
    """A row per phase ("" the whole run) and source of a data mixture: the tokens drawn from the source in the phase,
    their share of the phase's, and the share the mixture aims at (run.json); [] for a run without a mixture."""
    rows = []
    for phase in run.phases:
        targets = run.target_shares(phase.name)
        total = sum(phase.drawn.values())
        for source in dict.fromkeys([*phase.drawn, *targets]):
            drawn = phase.drawn.get(source)
            share = f"{drawn / total:.1%}" if drawn is not None and total > 0 else "—"
            target = f"{targets[source]:.1%}" if source in targets else "—"
            rows.append(
                [phase.name or "(the run)", source, f"{drawn:,.0f}" if drawn is not None else "—", share, target]
            )
    return rows


def config_differences(runs: list[Run]) -> list[tuple[str, list[str]]]:
    """(key, value per run) for each configuration key whose value is not the same in every run."""
    flat = [flatten(run.config) for run in runs]
    keys = sorted({key for values in flat for key in values})
    missing = object()
    rows = []
    for key in keys:
        values = [values.get(key, missing) for values in flat]
        if any(v != values[0] for v in values):
            rows.append((key, ["(absent)" if v is missing else str(v) for v in values]))
    return rows


# ---------------------------------------------------------------------------------------------
# The page

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; font-size: 0.9em; }
th { background: #f3f3f3; }
td.ok { color: #1a7f37; font-weight: bold; } td.FAIL { color: #c62828; font-weight: bold; } td.na { color: #777; }
figure { margin: 1em 0; } figure svg { width: 100%; max-width: 900px; height: auto; }
figcaption { color: #666; font-size: 0.85em; }
.note { color: #8a5300; } .muted { color: #666; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _table(header: list[str], rows: list[list[str]], classes: Optional[list[str]] = None) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cells = []
        for j, cell in enumerate(row):
            css = f' class="{classes[i]}"' if classes and j == 0 else ""
            cells.append(f"<td{css}>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _health_section(runs: list[Run], verdicts: list[list[Verdict]]) -> str:
    parts = ["<h2>Health checks</h2>"]
    for run, found in zip(runs, verdicts, strict=True):
        failed = sum(v.status == FAIL for v in found)
        parts.append(f"<h3>{_e(run.name)}: {failed} of {len(found)} checks fail</h3>")
        rows = [[v.status, v.check, v.message, v.fix] for v in found]
        classes = [{OK: "ok", FAIL: "FAIL"}.get(v.status, "na") for v in found]
        parts.append(_table(["", "check", "verdict", "fix"], rows, classes))
    return "\n".join(parts)


def _summary_section(runs: list[Run]) -> str:
    table = [summary_rows(run) for run in runs]
    rows = [[label] + [dict(r).get(label, "—") for r in table] for label, _ in max(table, key=len)]
    parts = ["<h2>Runs</h2>", _table([""] + [run.name for run in runs], rows)]
    for run in runs:
        for note in run.notes:
            parts.append(f'<p class="note">{_e(run.name)}: {_e(note)}</p>')
    return "\n".join(parts)


def _phases_section(runs: list[Run]) -> str:
    """Each run's phases (config phases:) and, with a data mixture, each source's drawn share against its target;
    nothing for runs with neither."""
    parts = []
    for run in runs:
        if run.phased:
            parts.append(f"<h3>{_e(run.name)}: phases</h3>")
            parts.append(_table(["phase", "steps", "count", "tokens", "seq_len", "mlm_probability"], phase_rows(run)))
        mixture = mixture_rows(run)
        if mixture:
            parts.append(
                f"<h3>{_e(run.name)}: data mixture</h3><p class='muted'>The tokens drawn from each source in each "
                "phase (source_tokens in metrics.jsonl), and the share the mixture aims at (run.json).</p>"
            )
            parts.append(_table(["phase", "source", "tokens drawn", "drawn share", "target share"], mixture))
    return "\n".join(["<h2>Phases and data</h2>", *parts]) if parts else ""


def _scorecard_section(runs: list[Run]) -> str:
    """Each run's newest scorecard (`probe --suite` on one of its checkpoints), in percent; nothing without one."""
    parts = []
    for run in runs:
        if run.scorecard is None:
            continue
        step, record = run.scorecard
        header, rows = scorecard_table(record)
        seeds = (record.get("protocol") or {}).get("seeds") or []
        parts.append(
            f"<h3>{_e(run.name)}: step-{step}, suite {_e(local_name(str(record.get('suite'))))}</h3>"
            f"<p class='muted'>Median over {len(seeds)} seed(s), in percent; the interval is of the mean score.</p>"
        )
        parts.append(_table(header, rows))
    return "\n".join(["<h2>Scorecard</h2>", *parts]) if parts else ""


def _config_section(runs: list[Run]) -> str:
    if len(runs) == 1:
        text = "\n".join(f"{k}: {v}" for k, v in flatten(runs[0].config).items()) or "(no mlmtrain.yaml)"
        return f"<h2>Configuration</h2><details><summary>the resolved config</summary><pre>{_e(text)}</pre></details>"
    rows = config_differences(runs)
    if not rows:
        return "<h2>Configuration differences</h2><p>The runs share every configuration key.</p>"
    table = _table(["key"] + [run.name for run in runs], [[key] + values for key, values in rows])
    return f"<h2>Configuration differences</h2><p class='muted'>Only the keys that differ.</p>{table}"


def build_page(runs: list[Run], axis: str, overrides: dict[str, Any], png_dir: Optional[Path] = None) -> str:
    """The whole page as a string; with png_dir each plot is also written there as a PNG."""
    figures, missing = [], []
    for curve in curves_of(runs):
        figure = draw_curve(curve, runs, axis)
        if figure is None:
            missing.append(curve.title)
            continue
        if png_dir is not None:
            _write_png(figure, png_dir / f"{curve.slug}.png")
        caption = f"{curve.title}: {', '.join(curve_keys(curve, runs))}"  # the metrics.jsonl keys it draws
        figures.append(
            f'<figure class="curve" id="{curve.slug}">{_svg(figure)}<figcaption>{_e(caption)}</figcaption></figure>'
        )
    names = ", ".join(run.name for run in runs)
    other_axes = " or ".join(f"--x {a}" for a in AXES if a != axis)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        GENERATOR,
        f"<title>mlmtrain report: {_e(names)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>mlmtrain report: {_e(names)}</h1>",
        f"<p class='muted'>Written {_e(time.strftime('%Y-%m-%d %H:%M:%S'))}; x axis: {axis} "
        f"({_e(other_axes)} for the others).</p>",
        _health_section(runs, [run_checks(run, overrides) for run in runs]),
        _summary_section(runs),
        _phases_section(runs),
        _scorecard_section(runs),
        _config_section(runs),
        "<h2>Curves</h2>",
        *figures,
    ]
    if missing:
        parts.append(
            f"<p class='muted'>Not logged by {'this run' if len(runs) == 1 else 'these runs'}: "
            f"{_e(', '.join(missing))}.</p>"
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Writing files: only over files this tool wrote


def _ours(path: Path, mark: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return mark in handle.read(4096)
    except OSError:
        return False


def _refuse_foreign(path: Path, mark: bytes, option: str) -> None:
    if path.exists() and (not path.is_file() or not _ours(path, mark)):
        raise UserError("report", f"{path} exists and was not written by mlmtrain report; choose another {option}")


class _WriteFailed(UserError):
    """A page or PNG that could not be written (full disk, permissions): the live report warns and tries again at
    the next checkpoint, as the disk may have room by then."""


def _replace_file(path: Path, write: Any) -> None:
    """`write(temporary)` beside `path`, then renamed: a browser reloading the page mid-write sees the old one or
    the new one; a failed write leaves no temporary behind and becomes one line."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException as error:  # a plotting error or Ctrl-C amid the write must not leave a hidden half-file
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if not isinstance(error, OSError):
            raise
        raise _WriteFailed(
            "report", f"cannot write {path}: {write_failure(error, path)}; free disk space or fix permissions"
        ) from None


def _write_png(figure: Any, path: Path) -> None:
    _replace_file(
        path, lambda temporary: figure.savefig(temporary, format="png", dpi=150, metadata={"Software": PNG_MARK})
    )


def _write_text(path: Path, text: str) -> None:
    _replace_file(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_report(
    run_dirs: list[Path],
    out: Optional[Path] = None,
    axis: str = "steps",
    png_dir: Optional[Path] = None,
    overrides: Optional[list[str]] = None,
) -> Path:
    """`mlmtrain report`: the page for these runs (default: RUN_DIR/report.html for one run, ./report.html for more)."""
    if axis not in AXES:
        raise UserError("argument", f"--x {axis!r} is not an axis; use one of {', '.join(AXES)}")
    if not run_dirs:
        raise UserError("argument", "name at least one run folder: mlmtrain report RUN_DIR [RUN_DIR ...]")
    thresholds = parse_overrides(overrides or [])
    runs = load_runs(run_dirs)
    _matplotlib()
    key = "the folder of --out" if out is not None else "the report's folder"
    if out is None:
        out = Path(run_dirs[0]) / "report.html" if len(runs) == 1 else Path("report.html")
    out = Path(out)
    # the page and its PNGs stay out of the checkpoints they describe: a file mlmtrain did not record in one makes
    # it the user's (kept by keep-last, refused by --overwrite)
    checkpoints = local_inputs(
        (f"the checkpoints of {run_dir}:", str(Path(run_dir) / "checkpoints")) for run_dir in run_dirs
    )
    for option, path in (("--out", out), ("--png", png_dir)):
        if path is not None:
            check_apart(Path(path), option, checkpoints, f"set {option} outside it", holds=False)
    _refuse_foreign(out, GENERATOR.encode(), "--out file")
    if not out.parent.is_dir():
        raise UserError("argument", f"--out {out}: the folder {out.parent} does not exist; create it first")
    # proven writable before any plot is drawn or PNG written: a page that cannot be saved must not half-do the rest
    try:
        check_writable_folder(out.parent, "argument", key)
    except UserError as error:  # the folder exists: this is a failed write, which the live report tries again
        raise _WriteFailed(error.topic, error.message) from None
    if png_dir is not None:
        png_dir = Path(png_dir)
        if png_dir.exists() and not png_dir.is_dir():
            raise UserError("argument", f"--png {png_dir} is a file; pass a folder")
        for curve in (c for c in curves_of(runs) if curve_keys(c, runs)):  # checked before any is written
            _refuse_foreign(png_dir / f"{curve.slug}.png", PNG_MARK.encode(), "--png folder")
        check_writable_folder(png_dir, "argument", "--png")  # creates it
    _write_text(out, build_page(runs, axis, thresholds, png_dir))
    return out


def check_runs(run_dirs: list[Path], overrides: Optional[list[str]] = None) -> bool:
    """`mlmtrain report --check`: every check of every run on stdout; True when one failed."""
    thresholds = parse_overrides(overrides or [])
    failed = False
    for run in load_runs(run_dirs):
        verdicts = run_checks(run, thresholds)
        count = sum(v.status == FAIL for v in verdicts)
        failed = failed or count > 0
        print(f"{run.name}: {count} of {len(verdicts)} checks fail")
        for verdict in verdicts:
            fix = f" -> {verdict.fix}" if verdict.fix else ""
            print(f"  {verdict.status:<4} {verdict.check}: {verdict.message}{fix}")
        for note in run.notes:
            print(f"  note: {note}")
    return failed


class LiveReport:
    """RUN_DIR/report.html refreshed by `pretrain` at each checkpoint; a failure warns and never stops training."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.enabled = True

    def refresh(self) -> None:
        if not self.enabled:
            return
        try:
            write_report([self.run_dir])
        except _WriteFailed as error:  # the disk may have room at the next checkpoint
            say(f"report.html not written: {error.message}; training goes on")
        except UserError as error:  # matplotlib missing, a foreign report.html: say it once, then stop trying
            self.enabled = False
            say(f"report.html not written: {error.message} (set report.html: false to silence this)")
        except Exception as error:  # noqa: BLE001 — a plotting bug must not end a long run
            say(f"report.html not written ({type(error).__name__}: {first_line(error)[:200]}); training goes on")
