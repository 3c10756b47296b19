"""Faults a long run meets: kill -9, a full disk, corrupt or foreign checkpoints, NaN losses, two runs, signals.

Each fault has its own test. The process tests start the real `python -m mlmtrain pretrain` (one thread each);
reference runs happen in-process on one thread too, so CPU results are bit-for-bit comparable.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.errors import UserError
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import ownership
from mlmtrain.train.loop import pretrain

from ..helpers import (
    CHILD_ENV,
    CHILD_TIMEOUT_S,
    assert_checkpoints_sound,
    assert_one_error_line,
    assert_same_weights,
    by_step,
    copy_corpus,
    file_size_limit,
    finish,
    logged_steps,
    metrics,
    one_thread,
    output,
    run_cli,
    set_options,
    start_pretrain,
    tiny_overrides,
    wait_for,
    weights,
)


def temporary_folders(run_dir: Path) -> list[Path]:
    folder = ownership.checkpoints_dir(run_dir)
    return sorted(p for p in folder.iterdir() if p.name.startswith(".tmp-")) if folder.is_dir() else []


# ---------------------------------------------------------------------------------------------
# kill -9


KILL_RUN = {"train.max_steps": 40, "checkpoint.save_every": 2, "checkpoint.keep_last": 3, "train.eval_every": 10}
# the kill -9 run keeps a moving average of the weights as each checkpoint's model: it and the live weights survive too
AVERAGED_KILL_RUN = {**KILL_RUN, "train.ema": 0.9, "checkpoint.save_ema": True}


def _kill_when(moment: str, rng: random.Random, process: subprocess.Popen, run_dir: Path) -> None:
    """Wait for a moment of the given kind, then SIGKILL the process.

    steps: a few steps on, plus a random pause (anywhere: a step, an evaluation, a save).
    write-start: as soon as a new temporary checkpoint folder appears.
    write-end: once the temporary folder holds training_state.pt (fsync, COMPLETE and rename are next).
    """
    start = logged_steps(run_dir)
    wait_for(lambda: logged_steps(run_dir) >= start + rng.randint(3, 8), process, run_dir)
    if moment == "steps":
        time.sleep(rng.uniform(0.0, 0.05))
    else:
        seen = set(temporary_folders(run_dir))
        wanted = "" if moment == "write-start" else ckpt.STATE_FILE

        def writing() -> bool:
            fresh = [p for p in temporary_folders(run_dir) if p not in seen]
            return any(not wanted or (p / wanted).exists() for p in fresh)

        wait_for(writing, process, run_dir)
    process.send_signal(signal.SIGKILL)


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_equals_an_uninterrupted_run(tiny_data: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    with one_thread():
        pretrain(
            load_config(
                None,
                tiny_overrides(
                    tiny_data, **{**AVERAGED_KILL_RUN, "checkpoint.keep_last": 0, "train.run_dir": str(whole)}
                ),
            )
        )
    reference_losses, reference_evals = by_step(whole, "loss"), by_step(whole, "eval_loss")
    reference_averages = by_step(whole, "ema_eval_loss")

    run_dir = tmp_path / "killed"
    rng = random.Random(8)
    kills_during_write = 0
    for number, moment in enumerate(["steps", "write-start", "write-end"]):
        earlier = set(temporary_folders(run_dir))
        process = start_pretrain(tiny_data, run_dir, *(["--resume"] if number else []), **AVERAGED_KILL_RUN)
        _kill_when(moment, rng, process, run_dir)
        assert finish(process, run_dir) == -signal.SIGKILL, output(run_dir)
        kills_during_write += bool(set(temporary_folders(run_dir)) - earlier)
        newest = assert_checkpoints_sound(run_dir, planted=("step-999",))
        assert_same_weights(newest, whole / "checkpoints" / newest.name)
        if number == 0:
            # What a kill can leave besides complete checkpoints: a temporary folder that already holds COMPLETE
            # (killed between the marker and the rename; this one's "writer", another live process, is alive, so it
            # stays), and a newer step folder without COMPLETE.
            planted = shutil.copytree(newest, ownership.checkpoints_dir(run_dir) / f".tmp-step-998-{os.getppid()}")
            unmarked = shutil.copytree(newest, ownership.checkpoints_dir(run_dir) / "step-999")
            (unmarked / ownership.COMPLETE).unlink()
            assert ownership.latest_checkpoint(run_dir) == newest
    assert kills_during_write >= 1, "no kill landed while a checkpoint was being written"

    with one_thread():  # the last resume in-process: the killed runs 2 and 3 already resumed through a process
        overrides = tiny_overrides(tiny_data, **AVERAGED_KILL_RUN, **{"train.run_dir": str(run_dir)})
        pretrain(load_config(None, overrides), "auto")
    assert ownership.latest_checkpoint(run_dir).name == "step-40"
    assert temporary_folders(run_dir) == [planted]  # the killed saves' leftovers were cleared by the next save
    assert_same_weights(run_dir / "checkpoints" / "step-40", whole / "checkpoints" / "step-40")
    # every step any of the runs logged (killed ones included) matches the uninterrupted run, and each
    # resumed run re-did the steps after its checkpoint, so the last line of every step is there too
    for line in metrics(run_dir):
        if "loss" in line:
            assert line["loss"] == reference_losses[line["step"]], line
        if "eval_loss" in line:
            assert line["eval_loss"] == reference_evals[line["step"]], line
            assert line["ema_eval_loss"] == reference_averages[line["step"]], line
    assert by_step(run_dir, "loss").keys() == reference_losses.keys()


def test_resuming_an_older_checkpoint_replaces_the_later_ones_whole(tiny_config, tmp_path: Path) -> None:
    cfg = tiny_config(**SAVE_RUN)
    run_dir = Path(cfg.train.run_dir)
    pretrain(cfg)
    first_step_4 = weights(run_dir / "checkpoints" / "step-4")
    first_folder = os.stat(run_dir / "checkpoints" / "step-4").st_ino
    assert pretrain(cfg, resume=str(run_dir / "checkpoints" / "step-2")).name == "step-6"
    again = run_dir / "checkpoints" / "step-4"
    assert os.stat(again).st_ino != first_folder  # a new folder swapped in, not files written over the old one
    assert all(torch.equal(first_step_4[key], value) for key, value in weights(again).items())
    assert assert_checkpoints_sound(run_dir).name == "step-6"
    assert not temporary_folders(run_dir) and not list(ownership.checkpoints_dir(run_dir).glob(".old-*"))


def test_a_run_resumed_from_an_older_checkpoint_sets_the_later_ones_aside_and_keeps_its_own(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # The earlier run's step-4 and step-6 are still there. Left in place, they passed for the newest: keep_last
    # deleted this run's step-3 the moment it was written (latest then pointed at nothing), and --resume went back
    # to the earlier run's step-6, dropping this run's steps (often trained with other settings: the reason to go
    # back).
    run_dir = tmp_path / "run"
    options = set_options(tiny_data, run_dir, **SAVE_RUN, **{"checkpoint.keep_last": 0})
    assert run_cli(capsys, "pretrain", *options)[0] == 0
    root = ownership.checkpoints_dir(run_dir)
    earlier = {name: (root / name / "model.safetensors").read_bytes() for name in ("step-4", "step-6")}
    older = root / "step-2"
    resumed = [*options, "--set", "checkpoint.keep_last=2"]
    code, lines = run_cli(capsys, "pretrain", *resumed, "--resume", str(older), "--set", "train.pause_after=3")
    assert code == 0 and lines[-1].startswith("stopped at step 3"), lines
    # the fix it names is the run's own config: the resume below follows it
    assert lines[-1].rstrip().endswith(f"mlmtrain pretrain --config {run_dir / 'mlmtrain.yaml'} --resume"), lines[-1]
    aside = root / "superseded-at-step-2"
    assert any("moved step-4, step-6" in line and str(aside) in line for line in lines), lines
    assert {name: (aside / name / "model.safetensors").read_bytes() for name in earlier} == earlier
    assert (root / "latest").resolve() == (root / "step-3").resolve()
    assert assert_checkpoints_sound(run_dir).name == "step-3"
    code, lines = run_cli(capsys, "pretrain", "--config", str(run_dir / "mlmtrain.yaml"), "--resume")
    assert code == 0 and any("at step 3" in line for line in lines), lines
    assert [p.name for _, p in ownership.complete_checkpoints(run_dir)] == ["step-4", "step-6"]
    # --overwrite knows the folder as mlmtrain's and removes it with the rest of the run
    assert run_cli(capsys, "pretrain", *options, "--overwrite")[0] == 0
    assert not aside.exists()


# Before the run starts, the process plants what a killed earlier process with its very pid would have left.
_LEFT_BY_THE_SAME_PID = """
import os, sys
from pathlib import Path
from mlmtrain.cli.app import main
left = Path(sys.argv[1]) / "checkpoints" / f".tmp-step-999-{os.getpid()}"
left.mkdir(parents=True)
(left / "model.safetensors").write_bytes(b"half")
main(sys.argv[2:])
"""


@pytest.mark.slow
def test_a_half_written_checkpoint_left_under_the_runs_own_pid_is_removed(tiny_data: Path, tmp_path: Path) -> None:
    # A container restarted after a kill runs mlmtrain under the pid of the killed process (often 1): its half-written
    # checkpoint is named after a process that is alive, this one, and was never removed.
    run_dir = tmp_path / "run"
    command = [sys.executable, "-c", _LEFT_BY_THE_SAME_PID, str(run_dir), "pretrain", "--resume"]
    command += set_options(tiny_data, run_dir, **SAVE_RUN)
    done = subprocess.run(command, env=CHILD_ENV, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert not temporary_folders(run_dir) and assert_checkpoints_sound(run_dir).name == "step-6"


@pytest.mark.slow
def test_a_run_killed_with_its_loader_worker_alive_can_resume_at_once(tiny_data: Path, tmp_path: Path) -> None:
    # A DataLoader worker is a forked child: it inherits the run's lock descriptor and outlives a SIGKILLed main
    # process by seconds. The lock must belong to the main process alone, or a resume at once is refused.
    from mlmtrain.train.guard import RunLock

    run_dir = tmp_path / "killed"
    process = start_pretrain(tiny_data, run_dir, **{**KILL_RUN, "data.num_workers": 1})
    wait_for(lambda: logged_steps(run_dir) >= 5, process, run_dir)
    process.send_signal(signal.SIGKILL)
    assert finish(process, run_dir) == -signal.SIGKILL
    RunLock(run_dir).release()  # before the fix: "in use by a running mlmtrain (pid …)", the dead main's pid


# A worker dies while the main process is busy elsewhere: drawing the page (a second or two at each checkpoint with
# the default report.html) or writing a checkpoint. torch's SIGCHLD handler raised its report right there: inside
# safetensors' C code it came out as an unrelated ValueError and a traceback. The write must finish, and the report
# wait for the next batch.
_WORKER_DIES_DURING = """
import multiprocessing, os, signal, sys, time
from pathlib import Path
import mlmtrain.report.page as report
import mlmtrain.train.checkpoint as checkpoint
from mlmtrain.cli.app import main
module, name = {{"report": report, "checkpoint": checkpoint}}[{module!r}], {name!r}
original = getattr(module, name)
def worker_killed_meanwhile(*args, **kwargs):
    workers = multiprocessing.active_children()
    assert workers, "no loader worker to kill"
    for worker in workers:
        os.kill(worker.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60  # until the kernel has made each a zombie, so SIGCHLD has come
    while any(Path(f"/proc/{{w.pid}}/stat").read_text().split(") ")[-1][0] != "Z" for w in workers):
        assert time.monotonic() < deadline, "the killed worker never died"
        time.sleep(0.01)
    time.sleep(0.2)  # Python code runs on, where the signal's handler would raise
    setattr(module, name, original)  # later saves as usual
    return original(*args, **kwargs)
setattr(module, name, worker_killed_meanwhile)
main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "extra"),
    [(("report", "write_report"), {"report.html": True}), (("checkpoint", "write_model_card"), {})],
    ids=["drawing-the-page", "writing-a-checkpoint"],
)
def test_a_loader_worker_killed_while_the_run_writes_is_the_one_line_after_the_write(
    tiny_data: Path, tmp_path: Path, target: tuple[str, str], extra: dict
) -> None:
    run_dir = tmp_path / "run"
    options = set_options(tiny_data, run_dir, **{**KILL_RUN, "data.num_workers": 1, **extra})
    script = _WORKER_DIES_DURING.format(module=target[0], name=target[1])
    done = subprocess.run(
        [sys.executable, "-c", script, "pretrain", *options],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 2, done.stderr
    line = assert_one_error_line(done.stderr.strip().splitlines(), "DataLoader worker", "num_workers", "--resume")
    assert "report.html" not in done.stderr and "could not write" not in done.stderr, done.stderr
    assert "step-2" in line  # the checkpoint being written when the worker died was finished, and the line names it
    assert assert_checkpoints_sound(run_dir).name == "step-2"


# ---------------------------------------------------------------------------------------------
# Full disk


SAVE_RUN = {"train.max_steps": 6, "checkpoint.save_every": 2, "train.eval_every": 0}
NO_SPACE = os.strerror(errno.ENOSPC)


def _half_written(path: Path) -> None:
    """What a full disk leaves: the first half of the file."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)


def _fail_weights(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    import transformers.modeling_utils
    from safetensors import SafetensorError

    real = transformers.modeling_utils.safe_save_file

    def save_file(tensors: Any, filename: str, *args: Any, **kwargs: Any) -> None:
        real(tensors, filename, *args, **kwargs)
        if f".tmp-step-{step}-" in str(filename):
            _half_written(Path(filename))
            raise SafetensorError(f"Error while serializing: I/O error: {NO_SPACE} (os error {errno.ENOSPC})")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", save_file)


def _fail_state(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    real = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        real(obj, f, *args, **kwargs)
        if f".tmp-step-{step}-" in str(f):
            _half_written(Path(f))
            raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file")

    monkeypatch.setattr(torch, "save", save)


def _fail_fsync(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if f".tmp-step-{step}-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, NO_SPACE)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


WRITE_FAULTS = {"weights": _fail_weights, "training-state": _fail_state, "fsync": _fail_fsync}


def assert_failed_save_left_no_trace(run_dir: Path, failed_step: int, kept_step: int) -> None:
    assert not temporary_folders(run_dir), temporary_folders(run_dir)
    assert not (ownership.checkpoints_dir(run_dir) / f"step-{failed_step}").exists()
    kept = assert_checkpoints_sound(run_dir)
    assert kept.name == f"step-{kept_step}"
    assert (ownership.checkpoints_dir(run_dir) / "latest").resolve() == kept.resolve()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="the fsync fault finds files through /proc")
@pytest.mark.parametrize("fault", list(WRITE_FAULTS))
def test_disk_full_while_saving_keeps_the_previous_checkpoint(
    fault: str, tiny_config, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_config(**SAVE_RUN)
    run_dir = Path(cfg.train.run_dir)
    WRITE_FAULTS[fault](monkeypatch, step=4)
    with pytest.raises(UserError) as raised:
        pretrain(cfg)
    message = str(raised.value)
    assert message.startswith("checkpoint: could not write ") and "step-4" in message, message
    assert "step-2" in message and "--resume" in message, message
    assert "\n" not in message
    assert_failed_save_left_no_trace(run_dir, failed_step=4, kept_step=2)
    monkeypatch.undo()  # space freed: the run continues from step 2
    assert pretrain(cfg, resume="auto").name == "step-6"


def test_disk_full_via_the_cli_is_one_line_and_exit_2(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    _fail_fsync(monkeypatch, step=4)
    run_dir = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **SAVE_RUN))
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: checkpoint: could not write", "step-4", NO_SPACE, "step-2")
    assert_failed_save_left_no_trace(run_dir, failed_step=4, kept_step=2)


def test_real_write_error_from_the_real_writers_is_one_line_and_exit_2(
    tiny_config, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    cfg = tiny_config(**SAVE_RUN, **{"train.pause_after": 2})
    run_dir = Path(cfg.train.run_dir)
    pretrain(cfg)
    with file_size_limit(150_000):  # the weights (105 kB) fit, the optimizer state (250 kB) does not
        code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **SAVE_RUN), "--resume")
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: checkpoint: could not write", "step-4", "step-2")
    assert_failed_save_left_no_trace(run_dir, failed_step=4, kept_step=2)


def test_a_write_error_on_the_runs_config_before_the_first_step_is_one_line(
    tiny_config, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    pretrain(tiny_config(**SAVE_RUN))  # tokenizer and store built: the new run's first file is its config
    run_dir = tmp_path / "new-run"
    with file_size_limit(64):  # the lock's "pid N" fits; the run's mlmtrain.yaml does not
        code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **SAVE_RUN))
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: run: could not write the run's config in", str(run_dir), "free disk")
    assert not ownership.checkpoints_dir(run_dir).exists()


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="needs a Linux tmpfs")
def test_a_really_full_disk_keeps_the_previous_checkpoint(tiny_config, tmp_path: Path) -> None:
    disk = tmp_path / "small-disk"
    if not _mount_tmpfs(disk, "800k"):  # room for two checkpoints of the tiny model (about 370 kB each)
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        cfg = tiny_config(**{**SAVE_RUN, "train.max_steps": 20, "train.run_dir": str(disk / "run")})
        with pytest.raises(UserError, match=f"could not write .*{NO_SPACE}") as raised:
            pretrain(cfg)
        failed = int(re.search(r"step-(\d+)", str(raised.value)).group(1))
        assert_failed_save_left_no_trace(disk / "run", failed_step=failed, kept_step=failed - 2)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ---------------------------------------------------------------------------------------------
# Corrupt or foreign checkpoints


@pytest.fixture(scope="module")
def good_checkpoint(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("good") / "run"
    overrides = {"train.max_steps": 2, "checkpoint.save_every": 0, "train.eval_every": 0, "train.run_dir": str(run_dir)}
    return pretrain(load_config(None, tiny_overrides(tiny_data, **overrides)))


def _truncate_weights(folder: Path, tiny_data: Path, tmp: Path) -> None:
    _half_written(folder / "model.safetensors")


def _remove_state(folder: Path, tiny_data: Path, tmp: Path) -> None:
    (folder / ckpt.STATE_FILE).unlink()


def _garble_state(folder: Path, tiny_data: Path, tmp: Path) -> None:
    (folder / ckpt.STATE_FILE).write_bytes(random.Random(0).randbytes(5000))


def _truncate_state(folder: Path, tiny_data: Path, tmp: Path) -> None:
    _half_written(folder / ckpt.STATE_FILE)


def _remove_marker(folder: Path, tiny_data: Path, tmp: Path) -> None:
    (folder / ownership.COMPLETE).unlink()


def _other_model_size(folder: Path, tiny_data: Path, tmp: Path) -> None:
    """Replace the checkpoint by one of a wider model (hidden 48 instead of 32)."""
    overrides = {"train.max_steps": 1, "checkpoint.save_every": 0, "train.eval_every": 0, "model.hidden_size": 48}
    wide = pretrain(load_config(None, tiny_overrides(tiny_data, **{**overrides, "train.run_dir": str(tmp / "wide")})))
    shutil.rmtree(folder)
    shutil.copytree(wide, folder)


def _other_tokenizer(folder: Path, tiny_data: Path, tmp: Path) -> None:
    """Same shapes, but the vocabulary of the saved tokenizer is another one (two tokens swap ids)."""
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(tokenizer))


CHECKPOINT_DAMAGE = {
    "truncated-weights": (_truncate_weights, "cannot load the weights"),
    "missing-training-state": (_remove_state, ckpt.STATE_FILE),
    "garbage-training-state": (_garble_state, "damaged"),
    "truncated-training-state": (_truncate_state, "damaged"),
    "no-complete-marker": (_remove_marker, ownership.COMPLETE),
    "other-model-size": (_other_model_size, "hidden_size=48"),
    "other-tokenizer": (_other_tokenizer, "another tokenizer than {tokenizer} (tokenizer.path)"),
}


@pytest.mark.parametrize("damage", list(CHECKPOINT_DAMAGE))
def test_resume_refuses_a_corrupt_or_foreign_checkpoint(
    damage: str, good_checkpoint: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spoil, problem = CHECKPOINT_DAMAGE[damage]
    folder = shutil.copytree(good_checkpoint, tmp_path / "step-2")
    spoil(folder, tiny_data, tmp_path)
    run_dir = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir), "--resume", str(folder))
    assert code == 2
    assert_one_error_line(
        lines, "mlmtrain: checkpoint: ", str(folder), problem.format(tokenizer=tiny_data / "tokenizer")
    )
    assert not metrics(run_dir) and not ckpt.checkpoints_dir(run_dir).exists()  # nothing started from scratch


def test_eval_perplexity_refuses_truncated_weights(
    good_checkpoint: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = shutil.copytree(good_checkpoint, tmp_path / "step-2")
    _half_written(folder / "model.safetensors")
    code, lines = run_cli(
        capsys, "eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--device", "cpu"
    )
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: model: ", str(folder), "truncated or corrupt")


def test_eval_perplexity_on_weights_that_do_not_fit_an_edited_config_says_so(
    good_checkpoint: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = shutil.copytree(good_checkpoint, tmp_path / "step-2")
    settings = json.loads((folder / "config.json").read_text())
    settings["intermediate_size"] *= 2  # the weights stay as trained: every feed-forward matrix has the old shape
    (folder / "config.json").write_text(json.dumps(settings))
    code, lines = run_cli(
        capsys, "eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--device", "cpu"
    )
    assert code == 2
    assert_one_error_line(lines, str(folder), "do not have the shapes its config.json describes")


# ---------------------------------------------------------------------------------------------
# Non-finite loss


def test_nonfinite_loss_stops_with_one_line_and_no_nan_checkpoint(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    absurd = {
        "optim.lr": 1e6,
        "optim.warmup_steps": 0,
        "optim.grad_clip": 0,
        "train.max_steps": 50,
        "train.max_nonfinite": 2,
        "checkpoint.save_every": 1,
        "train.eval_every": 0,
    }
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **absurd))
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: train: ", "non-finite", "optim.lr")
    folders = sorted(ownership.checkpoints_dir(run_dir).glob("step-*"))
    for folder in folders:
        assert all(torch.isfinite(t).all() for t in weights(folder).values()), folder
    assert not temporary_folders(run_dir)


# ---------------------------------------------------------------------------------------------
# Two runs in one folder


@pytest.mark.slow
def test_second_run_on_the_same_run_dir_refuses_and_the_first_is_unharmed(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    run = {"train.max_steps": 60, "checkpoint.save_every": 5, "checkpoint.keep_last": 3, "train.eval_every": 0}
    first = start_pretrain(tiny_data, run_dir, **run)
    wait_for(lambda: logged_steps(run_dir) >= 2, first, run_dir)
    # The second (this process) even asks for --overwrite: it must refuse before touching anything.
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **run), "--overwrite")
    assert code == 2
    assert_one_error_line(
        lines, f"mlmtrain: run: {run_dir} is in use by a running mlmtrain (pid {first.pid})", "train.run_dir"
    )
    assert finish(first, run_dir) == 0, output(run_dir)
    steps = [line["step"] for line in metrics(run_dir) if "loss" in line]
    assert steps == list(range(1, 61))  # one run's lines, nothing interleaved
    assert assert_checkpoints_sound(run_dir).name == "step-60"
    assert len(ownership.complete_checkpoints(run_dir)) == 3  # keep_last


# ---------------------------------------------------------------------------------------------
# Two runs sharing one token store and tokenizer (a sweep)


@pytest.mark.parametrize(("folder", "what"), [("tokens", "the token store"), ("tokenizer", "the tokenizer")])
def test_a_second_mlmtrain_waits_while_another_builds_the_store_or_tokenizer(
    tiny_data: Path, tmp_path: Path, folder: str, what: str
) -> None:
    import fcntl

    root = copy_corpus(tiny_data, tmp_path)
    log_path = tmp_path / "tokenize.log"
    with open(root / f".{folder}.lock", "a") as held, open(log_path, "ab") as log:
        fcntl.flock(held, fcntl.LOCK_EX)  # as another mlmtrain building it would
        command = [sys.executable, "-m", "mlmtrain", "tokenize", *set_options(root, tmp_path / "run")]
        process = subprocess.Popen(command, stdout=log, stderr=log, env=CHILD_ENV)
        waiting = f"another mlmtrain is building {what} in {root / folder}; waiting for it to finish"
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while waiting not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.01)
        time.sleep(0.5)  # a process that did not wait would be writing by now
        assert not (root / folder).exists() and not (root / "tokens").exists()
    # the lock is released: it goes on and builds both
    assert process.wait(timeout=CHILD_TIMEOUT_S) == 0, log_path.read_text()
    assert (root / "tokens" / "COMPLETE").is_file() and (root / "tokenizer" / "tokenizer.json").is_file()


# ---------------------------------------------------------------------------------------------
# SIGTERM / SIGINT


STOP_RUN = {"train.max_steps": 40, "checkpoint.save_every": 0, "train.eval_every": 0}


def assert_stopped_then_resumed_equals_whole(tiny_data: Path, run_dir: Path, whole: Path) -> None:
    """The stop left a complete checkpoint at its last step; resuming from it equals an uninterrupted run."""
    stopped_at = max(by_step(run_dir, "loss"))
    assert stopped_at < STOP_RUN["train.max_steps"]
    assert assert_checkpoints_sound(run_dir).name == f"step-{stopped_at}"
    with one_thread():
        resumed = pretrain(
            load_config(None, tiny_overrides(tiny_data, **STOP_RUN, **{"train.run_dir": str(run_dir)})), resume="auto"
        )
        pretrain(load_config(None, tiny_overrides(tiny_data, **STOP_RUN, **{"train.run_dir": str(whole)})))
    assert resumed.name == "step-40"
    assert_same_weights(resumed, whole / "checkpoints" / "step-40")


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_exits_0_and_resume_reaches_the_end(tiny_data: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "stopped"
    process = start_pretrain(tiny_data, run_dir, **STOP_RUN)
    wait_for(lambda: logged_steps(run_dir) >= 4, process, run_dir)
    process.send_signal(signal.SIGTERM)
    assert finish(process, run_dir) == 0, output(run_dir)
    stopped_at = max(by_step(run_dir, "loss"))
    assert f"stopped at step {stopped_at}" in output(run_dir) and "--resume" in output(run_dir), output(run_dir)
    assert "Traceback" not in output(run_dir)
    assert_stopped_then_resumed_equals_whole(tiny_data, run_dir, tmp_path / "whole")


def test_sigint_saves_a_checkpoint_and_resume_reaches_the_end(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # Ctrl-C in-process: a thread sends SIGINT to this process once steps are logged (the handler runs in
    # the main thread, inside the training loop; 40 steps leave ample room after step 3).
    run_dir = tmp_path / "stopped"
    finished = threading.Event()

    def interrupt() -> None:
        while not finished.is_set():
            if logged_steps(run_dir) >= 3:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.001)

    watcher = threading.Thread(target=interrupt)
    watcher.start()
    try:
        with one_thread():
            code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **STOP_RUN))
    finally:
        finished.set()
        watcher.join()
    assert code == 0
    assert any(line.startswith("stopped at step ") and "--resume" in line for line in lines), lines
    assert_stopped_then_resumed_equals_whole(tiny_data, run_dir, tmp_path / "whole")


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
@pytest.mark.slow
def test_a_signal_to_the_whole_process_group_saves_a_checkpoint_with_loader_workers(
    tiny_data: Path, tmp_path: Path, name: str
) -> None:
    # Ctrl-C in a terminal and a scheduler's stop signal the whole process group, DataLoader workers included. A
    # worker that died of it made the main process fail with torch's traceback, no checkpoint saved.
    run_dir = tmp_path / "stopped"
    overrides = {**STOP_RUN, "train.max_steps": 100_000, "data.num_workers": 1}
    process = start_pretrain(tiny_data, run_dir, preexec_fn=os.setsid, **overrides)
    wait_for(lambda: logged_steps(run_dir) >= 4, process, run_dir)
    os.killpg(process.pid, getattr(signal, name))
    assert finish(process, run_dir) == 0, output(run_dir)
    assert "Traceback" not in output(run_dir)
    stopped_at = max(by_step(run_dir, "loss"))
    assert f"stopped at step {stopped_at}" in output(run_dir), output(run_dir)
    assert assert_checkpoints_sound(run_dir).name == f"step-{stopped_at}"


@pytest.mark.slow
def test_a_loader_worker_killed_under_the_run_is_one_line_that_says_to_resume(tiny_data: Path, tmp_path: Path) -> None:
    # What the kernel's out-of-memory killer does to a worker: torch raises its report wherever the main process is
    # (a step, or a checkpoint's write, where it read as a full disk).
    run_dir = tmp_path / "run"
    overrides = {**KILL_RUN, "train.max_steps": 100_000, "data.num_workers": 1}
    process = start_pretrain(tiny_data, run_dir, **overrides)
    wait_for(lambda: logged_steps(run_dir) >= 6, process, run_dir)
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    assert len(children) == 1, children  # the one DataLoader worker
    os.kill(int(children[0]), signal.SIGKILL)
    assert finish(process, run_dir) == 2, output(run_dir)
    log = output(run_dir)
    assert "Traceback" not in log and "could not write" not in log, log
    message = [line for line in log.splitlines() if line.startswith("mlmtrain: data: DataLoader worker")]
    assert len(message) == 1 and "num_workers" in message[0] and "--resume" in message[0], log
    assert_checkpoints_sound(run_dir)
