"""`mlmtrain probe`: runs `tools.probe` and prints its report as a table or one JSON object on stdout (the scores
also when --save then fails: they cost the whole fine-tuning)."""

from __future__ import annotations

import json
import math
from typing import Any

from mlmtrain.runtime.durable import json_safe
from mlmtrain.tools.probe import SaveFailed, probe


def run_probe_command(as_json: bool, **arguments: Any) -> None:
    """`mlmtrain probe`: `tools.probe.probe(**arguments)`, its report printed (also when --save then fails)."""
    try:
        report = probe(**arguments)
    except SaveFailed as error:
        _print_report(error.report, as_json)
        raise
    _print_report(report, as_json)


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    print(json.dumps(json_safe(report)) if as_json else _table(report), flush=True)


def _figure(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "n/a"


def _score_rows(scores: dict[str, Any], label: str) -> list[tuple[str, str]]:
    low, high = scores["ci95"]
    interval = f"{_figure(low)} to {_figure(high)}" if math.isfinite(low) else "n/a"
    if "accuracy" in scores:
        return [
            (f"{label}accuracy", _figure(scores["accuracy"])),
            (f"{label}95% interval", interval),
            (f"{label}macro-F1", _figure(scores["macro_f1"])),
        ]
    return [
        (f"{label}Pearson", _figure(scores["pearson"])),
        (f"{label}95% interval", interval),
        (f"{label}Spearman", _figure(scores["spearman"])),
    ]


def _table(report: dict[str, Any]) -> str:
    if report["mode"] == "linear":
        how = f"linear probe on frozen {report['pooling']}-pooled features (L2 {report['l2']:g}, chosen on valid)"
    else:
        how = (
            f"fine-tuned {report['epochs']} epoch(s), lr {report['lr']:g}, batch {report['batch_size']}; "
            f"best epoch on valid: {report['best_epoch']}"
        )
    kind = f"{report['classes']} classes" if report["kind"] == "classification" else "regression"
    rows = [
        ("model", report["model"]),
        ("task", f"{report['task']} ({kind})"),
        (
            "examples",
            f"{report['train_examples']:,} train / {report['valid_examples']:,} valid / "
            f"{report['test_examples']:,} test",
        ),
        ("mode", how),
        *_score_rows(report, "test "),
    ]
    if "majority_accuracy" in report:
        rows.append(("majority class", _figure(report["majority_accuracy"])))
    rows.append(("seconds", f"{report['seconds']:.1f}"))
    if "baseline" in report:
        rows += _score_rows(report["baseline"], "untrained ")
        rows.append(("untrained seconds", f"{report['baseline']['seconds']:.1f}"))
    if "saved" in report:
        rows.append(("saved", report["saved"]))
    width = max(len(name) for name, _ in rows) + 2
    return "\n".join(f"{name:<{width}}{value}" for name, value in rows)
