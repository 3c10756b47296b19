"""What a resume says about itself: a run whose budget is already spent trains nothing and writes nothing (no
second evaluation line, no new checkpoint), and a resume under training settings other than the checkpoint's names
each one that changed, since the run then no longer reproduces an uninterrupted one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlmtrain.config import load_config
from mlmtrain.runtime.model_folder import ModelFolder, read_model_folder
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import ownership, resume_checks
from mlmtrain.train.loop import pretrain

from ..helpers import FINISHED, run_cli, set_options, snapshot, tiny_overrides


def test_resuming_a_finished_run_trains_and_writes_nothing(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(finished_run)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **FINISHED), "--resume", "auto")
    assert code == 0, lines
    text = "\n".join(lines)
    assert "has already spent the run's budget (train.max_steps); nothing to train" in text, text
    assert "step-4" in text
    assert snapshot(finished_run) == before  # no duplicate eval line in metrics.jsonl, no checkpoint rewritten


def test_a_finished_run_with_a_larger_budget_goes_on(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    options = set_options(tiny_data, finished_run, **{**FINISHED, "train.max_steps": 6})
    code, lines = run_cli(capsys, "pretrain", *options, "--resume", "auto")
    assert code == 0, lines
    assert ownership.latest_checkpoint(finished_run).name == "step-6"
    assert "train.max_steps: 4 -> 6" in "\n".join(lines)  # the one setting changed is named


def test_a_resume_names_every_training_setting_that_changed(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    changed = {"train.max_steps": 6, "train.seed": 3, "optim.lr": 0.002, "masking.mlm_probability": 0.2}
    options = set_options(tiny_data, finished_run, **{**FINISHED, **changed, "train.log_every": 3})
    code, lines = run_cli(capsys, "pretrain", *options, "--resume", "auto")
    assert code == 0, lines
    (note,) = [line for line in lines if line.startswith("note: resuming with training settings")]
    for change in ("train.max_steps: 4 -> 6", "train.seed: 0 -> 3", "optim.lr: 0.0005 -> 0.002"):
        assert change in note, note
    assert "masking.mlm_probability: 0.15 -> 0.2" in note
    assert "log_every" not in note  # a cadence changes no weight: not named


def test_a_resume_with_the_same_settings_adds_no_note(finished_run: Path, tiny_data: Path) -> None:
    cfg = load_config(None, tiny_overrides(tiny_data, **{**FINISHED, "train.run_dir": str(finished_run)}))
    step = finished_run / "checkpoints" / "step-4"
    assert resume_checks.setting_changes(read_model_folder(step), cfg) == []
    (step / "mlmtrain.yaml").unlink()
    changed = load_config(None, tiny_overrides(tiny_data, **{**FINISHED, "train.seed": 3}))
    assert resume_checks.setting_changes(read_model_folder(step), changed) == []  # nothing to compare


def test_every_setting_that_changes_training_is_named_electras_too(tmp_path: Path) -> None:
    """The note's keys come from the config's fields: the ELECTRA loss weight and temperature change training."""
    from mlmtrain.config import save_config

    saved = load_config(None, ["train.objective=electra"])
    save_config(saved, tmp_path)
    changed = load_config(None, ["train.objective=electra", "electra.discriminator_weight=20", "electra.temperature=2"])
    assert resume_checks.setting_changes(ModelFolder(tmp_path, {}, None), changed) == [
        "electra.discriminator_weight: 50.0 -> 20.0",
        "electra.temperature: 1.0 -> 2.0",
    ]


def test_a_resume_resolves_its_checkpoint_once(
    finished_run: Path, tiny_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pretrain resolves --resume once into the run it plans; the checks, the tokenizer and the loop read that."""
    resolved = []
    resolve = ckpt.resolve_resume
    monkeypatch.setattr(ckpt, "resolve_resume", lambda *args: resolved.append(args) or resolve(*args))
    cfg = load_config(None, tiny_overrides(tiny_data, **{**FINISHED, "train.run_dir": str(finished_run)}))
    assert pretrain(cfg, resume="auto") == ownership.latest_checkpoint(finished_run).resolve()
    assert resolved == [(finished_run, "auto")]
