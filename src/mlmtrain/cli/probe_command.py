"""`mlmtrain probe`: runs `tools.probe` and prints its report as a table or one JSON object on stdout (the scores
also when --save then fails: they cost the whole fine-tuning)."""

from __future__ import annotations

import json
import math
from typing import Any

from mlmtrain.errors import UserError
from mlmtrain.runtime.durable import json_safe
from mlmtrain.tools.probe import SaveFailed, probe


def run_probe_command(suite_options: list[str], as_json: bool, **arguments: Any) -> None:
    """`mlmtrain probe`: `tools.probe.probe(**arguments)`, its report printed (also when --save then fails);
    `suite_options` are the options given that only --suite takes."""
    if suite_options:
        raise UserError("argument", f"{', '.join(suite_options)} go(es) with --suite; drop it or add --suite")
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


def run_suite_command(single_task_options: list[str], as_json: bool, **arguments: Any) -> None:
    """`mlmtrain probe --suite`: `tools.scorecard.scorecard(**arguments)`, printed as the GLUE-style table or one
    JSON object; `single_task_options` are the options given that only a single task's probe takes."""
    from mlmtrain.report.rundata import scorecard_table
    from mlmtrain.tools.scorecard import scorecard

    if single_task_options:
        raise UserError("argument", f"--suite names its own tasks and fields; drop {', '.join(single_task_options)}")
    record = scorecard(**arguments)
    if as_json:
        print(json.dumps(json_safe(record)), flush=True)
        return
    header, rows = scorecard_table(record)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    plan = record["protocol"]
    lines.append(
        f"fine-tuned {plan['epochs']} epoch(s) (the best on valid), lr {plan['lr']:g}, batch {plan['batch_size']}, "
        f"{plan['max_length']} tokens, seeds {', '.join(map(str, plan['seeds']))}; the median over seeds, in percent"
    )
    if record.get("reference"):
        reference = record["reference"]
        lines.append(f"reference: {reference['name']} on the {reference['split']} ({reference['source']})")
    lines.append(f"scorecard: {record['path']}")
    print("\n".join(lines), flush=True)
