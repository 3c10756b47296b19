"""`probe`: the arguments checked, `evaluate.probe` run on a model (and, with `baseline`, on the same architecture
untrained), the fine-tuned model kept with `save`; returns the report."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from mlmtrain.config import LARGEST_INT
from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer_files
from mlmtrain.errors import UserError, interrupt_on_sigterm
from mlmtrain.evaluate.perplexity import check_tokenizer_fits
from mlmtrain.evaluate.probe import PreparedTask, encoder_config, probe_encoder
from mlmtrain.evaluate.tasks import TaskFields, load_task
from mlmtrain.model.families import model_positions
from mlmtrain.probe_settings import MODES, POOLINGS, ProbeSettings
from mlmtrain.runtime.files import check_apart, check_writable_folder, local_inputs, write_failure
from mlmtrain.tools.arguments import check_count, device_option


class SaveFailed(UserError):
    """`save` could not be written after the scores were taken: the error's line, and the report it cost."""

    def __init__(self, error: UserError, report: dict[str, Any]) -> None:
        super().__init__(error.topic, error.message)
        self.report = report


def _check_save(save: Optional[Path], mode: str, inputs: list[tuple[str, Path]]) -> None:
    """--save must name a new (or empty) folder, not a link, apart from every input: mlmtrain never replaces what it
    did not write, nor writes into what it reads."""
    if save is None:
        return
    if mode != "finetune":
        raise UserError("argument", "--save keeps a fine-tuned model; the linear mode trains none: drop --save")
    check_apart(save, "--save", inputs, "set --save to a new folder outside it")
    if save.is_symlink():  # the model is written beside it and renamed into place: never through a link
        raise UserError("argument", f"--save {save} is a link; set --save to a new folder (not a link)")
    if save.exists() and (not save.is_dir() or any(save.iterdir())):
        raise UserError("argument", f"--save {save} already exists and is not an empty folder; choose a new folder")
    # Checked here, before the task is read and the model trained: otherwise the save fails only after all of the
    # fine-tuning. Nothing is created: a probe that then fails on its task leaves no empty folders behind.
    check_writable_folder(save, "argument", "--save", create=False)


def save_model(model: Any, tokenizer: Any, folder: Path) -> None:
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


def probe(
    model: str,
    task: Optional[str],
    train: Optional[str],
    valid: Optional[str],
    test: Optional[str],
    fields: TaskFields,
    settings: ProbeSettings,
    baseline: bool,
    save: Optional[Path],
    device: str,
) -> dict[str, Any]:
    """Score `model` on the task; the report (raised with SaveFailed when the scores are taken but `save` fails)."""
    check_settings(settings)
    if task is None and (train is None or test is None):
        raise UserError("argument", "say what to probe on: --task FOLDER_OR_HF_NAME, or --train FILE --test FILE")
    inputs = local_inputs(
        [("--model", model), ("--task", task), ("--train", train), ("--valid", valid), ("--test", test)]
    )
    _check_save(save, settings.mode, inputs)
    torch_device = device_option(device)
    config, tokenizer = load_encoder(model, settings)
    loaded = load_task(task, fields, train, valid, test)
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
        **_reported_settings(settings),
        **result.as_dict(),
    }
    if baseline:
        untrained_result, _ = probe_encoder(model, config, prepared, settings, torch_device, baseline=True)
        report["baseline"] = untrained_result.as_dict()
    if save is not None:
        try:
            save_model(trained, tokenizer, save)
        except UserError as error:  # the scores cost the whole fine-tuning: the error carries them
            raise SaveFailed(error, report) from error
        report["saved"] = str(save)
    return report


def check_settings(settings: ProbeSettings) -> None:
    """A UserError naming the option of the first setting out of its range."""
    if settings.mode not in MODES:
        raise UserError("argument", f"--mode must be {' or '.join(MODES)} (got {settings.mode!r})")
    if settings.pooling not in POOLINGS:
        raise UserError("argument", f"--pooling must be {' or '.join(POOLINGS)} (got {settings.pooling!r})")
    for value, flag in (
        (settings.epochs, "--epochs"),
        (settings.batch_size, "--batch-size"),
        (settings.max_train_examples, "--max-train-examples"),
        (settings.max_eval_examples, "--max-eval-examples"),
    ):
        check_count(value, flag)
    if not (math.isfinite(settings.lr) and settings.lr > 0):  # nan fails no `<= 0` test
        raise UserError("argument", f"--lr must be a finite number > 0 (got {settings.lr})")
    if settings.max_length < 8:
        raise UserError("argument", f"--max-length must be >= 8 (got {settings.max_length})")
    if not 0 <= settings.seed <= LARGEST_INT:  # torch's seeds are 64-bit
        raise UserError("argument", f"--seed must lie in [0, {LARGEST_INT}] (got {settings.seed})")


def load_encoder(model: str, settings: ProbeSettings) -> tuple[Any, Any]:
    """(config, tokenizer) of the encoder `model`, checked to be one, to take `settings.max_length` tokens and to
    fit its tokenizer: before any task is read, so a mistyped --model fails at once."""
    config = encoder_config(model)
    positions = model_positions(config)
    if positions is not None and settings.max_length > positions:
        raise UserError(
            "argument", f"--max-length {settings.max_length} is beyond the model's {positions} positions; lower it"
        )
    tokenizer = load_tokenizer(model)
    check_tokenizer_fits(tokenizer, config, model)
    return config, tokenizer


def _reported_settings(settings: ProbeSettings) -> dict[str, Any]:
    if settings.mode == "linear":
        return {"max_length": settings.max_length}
    keys = ("epochs", "lr", "batch_size", "max_length", "warmup_ratio", "weight_decay")
    return {key: getattr(settings, key) for key in keys}
