"""`mlmtrain probe`: checks the arguments, runs `mlmtrain.evaluate.probe` on a model (and, with --baseline, on the same
architecture untrained) and prints the scores as a table or one JSON object on stdout."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from mlmtrain.cli.commands import _device, _json_safe, _positive
from mlmtrain.config import LARGEST_INT
from mlmtrain.data.tokenizer import save_tokenizer_files
from mlmtrain.errors import UserError, interrupt_on_sigterm
from mlmtrain.evaluate.perplexity import check_tokenizer_fits
from mlmtrain.evaluate.probe import PreparedTask, encoder_config, probe_encoder
from mlmtrain.evaluate.probe_settings import MODES, POOLINGS, ProbeSettings
from mlmtrain.evaluate.tasks import TaskFields, load_task
from mlmtrain.model.families import model_positions
from mlmtrain.runtime.files import check_writable_folder, write_failure


def _check_save(save: Optional[Path], mode: str) -> None:
    """--save must name a new (or empty) folder: mlmtrain never replaces what it did not write."""
    if save is None:
        return
    if mode != "finetune":
        raise UserError("argument", "--save keeps a fine-tuned model; the linear mode trains none: drop --save")
    if save.exists() and (not save.is_dir() or any(save.iterdir())):
        raise UserError("argument", f"--save {save} already exists and is not an empty folder; choose a new folder")
    # Checked here, before the task is read and the model trained: otherwise the save fails only after all of the
    # fine-tuning. Nothing is created: a probe that then fails on its task leaves no empty folders behind.
    check_writable_folder(save, "argument", "--save", create=False)


def _save(model: Any, tokenizer: Any, folder: Path) -> None:
    """save_pretrained into a temporary sibling, then rename: a crash leaves no half-written folder under the name."""
    temporary = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    try:
        # SIGTERM stops like Ctrl-C here: killed outright, the process would leave the half-written folder behind
        with interrupt_on_sigterm():
            model.save_pretrained(temporary)
            save_tokenizer_files(tokenizer, temporary)  # vocab.txt too: slow tokenizers and transformers 4
            if folder.exists():  # the empty folder _check_save allowed
                folder.rmdir()
            temporary.rename(folder)
    except BaseException as error:  # Ctrl-C amid the write too: no hidden half-written folder stays behind
        shutil.rmtree(temporary, ignore_errors=True)
        if not isinstance(error, Exception):
            raise
        # OSError, or the plain Exception of a Rust-backed writer (tokenizers, safetensors)
        raise UserError(
            "argument",
            f"--save {folder}: could not write the fine-tuned model: {write_failure(error, folder)}; "
            "free disk space or fix permissions, then run again",
        ) from error


def run_probe_command(
    model: str,
    task: Optional[str],
    train: Optional[str],
    valid: Optional[str],
    test: Optional[str],
    text_field: str,
    pair_field: Optional[str],
    label_field: str,
    settings: ProbeSettings,
    baseline: bool,
    save: Optional[Path],
    device: str,
    as_json: bool,
    show: bool = True,
) -> dict[str, Any]:
    """Score `model` on the task; returns (and, with `show`, prints) the report."""
    from mlmtrain.data.tokenizer import load_tokenizer

    if settings.mode not in MODES:
        raise UserError("argument", f"--mode must be {' or '.join(MODES)} (got {settings.mode!r})")
    if settings.pooling not in POOLINGS:
        raise UserError("argument", f"--pooling must be {' or '.join(POOLINGS)} (got {settings.pooling!r})")
    if task is None and (train is None or test is None):
        raise UserError("argument", "say what to probe on: --task FOLDER_OR_HF_NAME, or --train FILE --test FILE")
    for value, flag in (
        (settings.epochs, "--epochs"),
        (settings.batch_size, "--batch-size"),
        (settings.max_train_examples, "--max-train-examples"),
        (settings.max_eval_examples, "--max-eval-examples"),
    ):
        _positive(value, flag)
    if not (math.isfinite(settings.lr) and settings.lr > 0):  # nan fails no `<= 0` test
        raise UserError("argument", f"--lr must be a finite number > 0 (got {settings.lr})")
    if settings.max_length < 8:
        raise UserError("argument", f"--max-length must be >= 8 (got {settings.max_length})")
    if not 0 <= settings.seed <= LARGEST_INT:  # torch's seeds are 64-bit
        raise UserError("argument", f"--seed must lie in [0, {LARGEST_INT}] (got {settings.seed})")
    _check_save(save, settings.mode)
    torch_device = _device(device)
    config = encoder_config(model)  # before the task is read: a mistyped --model fails at once
    positions = model_positions(config)
    if positions is not None and settings.max_length > positions:
        raise UserError(
            "argument", f"--max-length {settings.max_length} is beyond the model's {positions} positions; lower it"
        )
    tokenizer = load_tokenizer(model)
    check_tokenizer_fits(tokenizer, config, model)
    loaded = load_task(task, TaskFields(text_field, pair_field, label_field), train, valid, test)
    prepared = PreparedTask.build(loaded, tokenizer, settings)
    result, trained = probe_encoder(model, config, prepared, settings, torch_device, baseline=False)
    report = {
        "model": str(model),
        "task": loaded.name,
        "mode": settings.mode,
        "kind": "regression" if loaded.regression else "classification",
        "classes": len(loaded.classes),
        "train_examples": len(prepared.train),
        "valid_examples": len(prepared.valid),
        "test_examples": len(prepared.test),
        "seed": settings.seed,
        **_settings(settings),
        **result.as_dict(),
    }
    if baseline:
        untrained_result, _ = probe_encoder(model, config, prepared, settings, torch_device, baseline=True)
        report["baseline"] = untrained_result.as_dict()
    if save is not None:
        try:
            _save(trained, tokenizer, save)
        except UserError:
            if show:
                _print_report(report, as_json)  # the scores cost the whole fine-tuning: print them before the error
            raise
        report["saved"] = str(save)
    if show:
        _print_report(report, as_json)
    return report


def _print_report(report: dict[str, Any], as_json: bool) -> None:
    print(json.dumps(_json_safe(report)) if as_json else _table(report), flush=True)


def _settings(settings: ProbeSettings) -> dict[str, Any]:
    if settings.mode == "linear":
        return {"max_length": settings.max_length}
    keys = ("epochs", "lr", "batch_size", "max_length", "warmup_ratio", "weight_decay")
    return {key: getattr(settings, key) for key in keys}


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
