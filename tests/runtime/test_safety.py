"""mlmtrain never deletes what the user owns, and answers a hostile user's mistakes in one line.

Each test reproduces a case that once deleted files, dropped a promised checkpoint, hung, or ended in a traceback:
store and tokenizer folders that name the user's folders, meaningless --resume values, a resume that cannot work,
a second stop signal, write errors outside the checkpoint writer, unusable run folders, and over-long words.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlmtrain.data import tokenizer as tokenizer_module
from mlmtrain.data.tokenizer import MAX_WORD_CHARS
from mlmtrain.train.loop import pretrain

from ..helpers import (
    CHILD_ENV,
    CHILD_TIMEOUT_S,
    QUICK,
    assert_checkpoints_sound,
    assert_one_error_line,
    copy_corpus,
    file_size_limit,
    finish,
    logged_steps,
    metrics,
    output,
    run_cli,
    set_options,
    snapshot,
    start_pretrain,
    store_files,
    tiny_overrides,
    wait_for,
    write_corpus,
)

# ---------------------------------------------------------------------------------------------
# 1. data.store / tokenizer.path that name the user's folders


def test_tokenize_refuses_to_replace_a_folder_of_the_users(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    mine = tmp_path / "r"
    mine.mkdir()
    write_corpus(mine / "train.txt", 200, seed=1)
    (mine / "notes.md").write_text("my notes")
    before = snapshot(mine)
    options = set_options(tiny_data, tmp_path / "run", **{"data.store": str(mine)})
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: data: data.store", str(mine), "notes.md", "new folder")
    assert snapshot(mine) == before


def test_resume_with_the_store_set_to_the_run_folder_keeps_the_run(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(finished_run)
    options = set_options(tiny_data, finished_run, **QUICK, **{"data.store": str(finished_run)})
    code, lines = run_cli(capsys, "pretrain", *options, "--resume")
    assert code == 2
    assert_one_error_line(lines, "data.store", str(finished_run))
    assert snapshot(finished_run) == before


def test_a_store_folder_mlmtrain_wrote_is_still_rebuilt(tiny_data: Path, tmp_path: Path, capsys) -> None:
    options = set_options(tiny_data, tmp_path / "run", **{"data.store": str(tmp_path / "store")})
    assert run_cli(capsys, "tokenize", *options)[0] == 0
    shard = store_files(tmp_path / "store")[0]
    shard.write_bytes(b"")  # damaged: must be rebuilt, not refused
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 0, lines
    assert shard.stat().st_size > 0


def test_a_retrained_tokenizer_never_replaces_a_folder_with_other_files(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    own = {"tokenizer.path": str(tmp_path / "tok"), "data.store": str(tmp_path / "tokens")}
    assert run_cli(capsys, "tokenize", *set_options(tiny_data, tmp_path / "run", **own))[0] == 0
    (tmp_path / "tok" / "my-model.safetensors").write_bytes(b"weights of mine")
    before = snapshot(tmp_path / "tok")
    changed = set_options(tiny_data, tmp_path / "run", **own, **{"tokenizer.vocab_size": 150})
    code, lines = run_cli(capsys, "tokenize", *changed)
    assert code == 2
    assert_one_error_line(lines, "tokenizer.path", "my-model.safetensors")
    assert snapshot(tmp_path / "tok") == before


def test_leftover_staging_folders_of_killed_runs_are_removed(tiny_data: Path, tmp_path: Path, capsys) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / f".store.tmp-{dead.pid}"
    leftover.mkdir()
    (leftover / "train-00000.bin").write_bytes(b"\0" * 64)
    foreign = tmp_path / f".store.tmp-{dead.pid}-abc"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("not ours")
    # named after this very process: a container restarted after a kill runs mlmtrain under the killed one's pid
    # (often 1); the folder looked in use and stayed for good
    own = tmp_path / f".store.tmp-{os.getpid()}-0123abcd"
    own.mkdir()
    (own / "train-00000.bin").write_bytes(b"\0" * 64)
    options = set_options(tiny_data, tmp_path / "run", **{"data.store": str(tmp_path / "store")})
    assert run_cli(capsys, "tokenize", *options)[0] == 0
    assert not leftover.exists() and not own.exists()
    assert (foreign / "precious.txt").exists()


# ---------------------------------------------------------------------------------------------
# 2. meaningless --resume values


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_resume_value_is_refused_and_the_run_kept(
    value: str, finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(finished_run)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", value)
    assert code == 2
    assert_one_error_line(lines, "--resume", "auto")
    assert snapshot(finished_run) == before


def test_resume_given_the_run_folder_points_to_resume_auto(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    code, lines = run_cli(
        capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", str(finished_run)
    )
    assert code == 2
    line = assert_one_error_line(lines, "--resume auto")
    assert "--overwrite" not in line


# ---------------------------------------------------------------------------------------------
# 5. a resume that cannot work is refused before anything is rebuilt


@pytest.mark.parametrize("change", ["vocab_size", "corpus", "deleted"])
def test_a_refused_resume_leaves_tokenizer_and_store_untouched(
    change: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data, ignore=shutil.ignore_patterns("run", "tokenizer", "tokens"))
    run_dir = tmp_path / "run"
    own = {"tokenizer.path": str(run_dir / "tok"), "data.store": str(run_dir / "tokens")}
    assert run_cli(capsys, "pretrain", *set_options(data, run_dir, **QUICK, **own))[0] == 0
    extra = dict(own)
    if change == "vocab_size":
        extra["tokenizer.vocab_size"] = 180
    elif change == "corpus":
        with open(data / "train.txt", "a") as handle:
            handle.write("A new line that changes the corpus.\n")
    else:
        shutil.rmtree(run_dir / "tok")
    before = snapshot(run_dir)
    code, lines = run_cli(capsys, "pretrain", *set_options(data, run_dir, **QUICK, **extra), "--resume")
    assert code == 2
    newest = run_dir / "checkpoints" / "step-4"
    assert_one_error_line(lines, "mlmtrain: checkpoint: ", f"tokenizer.pretrained={newest}")
    assert snapshot(run_dir) == before
    # the way back the message names works, and continues the run
    way_back = {**extra, "tokenizer.pretrained": str(newest), "train.max_steps": 6}
    code, lines = run_cli(capsys, "pretrain", *set_options(data, run_dir, **way_back), "--resume")
    assert code == 0, lines
    assert assert_checkpoints_sound(run_dir).name == "step-6"


def test_a_resume_with_another_model_size_is_refused_before_tokenizing(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlmtrain.train.loop

    def no_tokenizing(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("tokenized before checking the checkpoint")

    monkeypatch.setattr(mlmtrain.train.loop, "_ensure_data", no_tokenizing)
    options = set_options(tiny_data, finished_run, **QUICK, **{"model.hidden_size": 48})
    code, lines = run_cli(capsys, "pretrain", *options, "--resume")
    assert code == 2
    assert_one_error_line(lines, "hidden_size=32", "the config says 48")


# ---------------------------------------------------------------------------------------------
# 3. a second stop signal


@pytest.mark.slow
@pytest.mark.parametrize("first,second", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGTERM)])
def test_a_second_signal_still_saves_the_checkpoint_or_says_it_is_lost(
    first: int, second: int, tiny_data: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    # a model big enough that a step and a save take a while, so the second signal lands amid them
    big = {
        "train.max_steps": 400,
        "checkpoint.save_every": 0,
        "train.eval_every": 0,
        "model.hidden_size": 256,
        "model.intermediate_size": 1024,
        "model.num_layers": 4,
        "model.num_heads": 4,
    }
    process = start_pretrain(tiny_data, run_dir, **big)
    wait_for(lambda: logged_steps(run_dir) >= 2, process, run_dir)
    process.send_signal(first)
    time.sleep(0.05)
    process.send_signal(second)
    code = finish(process, run_dir)
    said = output(run_dir)
    assert "Traceback" not in said, said
    stopped_at = max(line["step"] for line in metrics(run_dir) if "loss" in line)
    if code == 0:  # the save was finished: the checkpoint of the last step is there
        assert f"stopped at step {stopped_at}" in said, said
        assert assert_checkpoints_sound(run_dir).name == f"step-{stopped_at}"
    else:  # or the user was told, in words, that the steps since the last checkpoint are lost
        assert "without a checkpoint" in said, said
        assert code != 0


# ---------------------------------------------------------------------------------------------
# 4. write errors outside the checkpoint writer


def test_a_full_disk_while_writing_the_token_store_is_one_line(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    write_corpus(tmp_path / "train.txt", 2000, seed=3)
    options = set_options(
        tiny_data,
        tmp_path / "run",
        **{
            "data.train": str(tmp_path / "train.txt"),
            "data.store": str(tmp_path / "store"),
            "tokenizer.pretrained": str(tiny_data / "tokenizer"),
            "tokenizer.path": str(tmp_path / "tok"),
        },
    )
    with file_size_limit(30_000):  # the tokenizer (about 5 kB) fits, the train shard (about 100 kB) does not
        code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: data: could not write the token store", str(tmp_path / "store"))
    assert not (tmp_path / "store").exists()
    # nothing half-written beside it; the build lock stays there, empty, by design
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".store")] == [".store.lock"]
    assert (tmp_path / ".store.lock").stat().st_size == 0


def test_a_full_disk_while_writing_the_tokenizer_is_one_line(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    options = set_options(tiny_data, tmp_path / "run", **{"tokenizer.path": str(tmp_path / "tok")})
    with file_size_limit(2_000):
        code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: tokenizer: could not write", str(tmp_path / "tok"))
    assert not (tmp_path / "tok").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tok")] == [".tok.lock"]  # the build lock
    assert (tmp_path / ".tok.lock").stat().st_size == 0


def test_a_full_disk_while_appending_metrics_keeps_training_and_the_file_valid(
    tiny_config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cfg = tiny_config(**{**QUICK, "train.max_steps": 6})
    run_dir = Path(cfg.train.run_dir)
    real_write, room = os.write, [300]

    def write(fd: int, data: bytes) -> int:
        """metrics.jsonl on a disk that fills up after 300 bytes: the write stops midway, as a real one does."""
        if not os.readlink(f"/proc/self/fd/{fd}").endswith("metrics.jsonl"):
            return real_write(fd, data)
        if len(data) > room[0]:
            real_write(fd, data[: room[0]])
            room[0] = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        room[0] -= len(data)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    assert pretrain(cfg).name == "step-6"  # the run goes on and saves its checkpoints
    said = capsys.readouterr().err
    assert said.count("metrics.jsonl") == 1 and os.strerror(errno.ENOSPC) in said, said
    assert len(metrics(run_dir)) >= 1  # every line is whole JSON: the torn one was cut back


def test_a_resumed_run_repairs_a_torn_last_metrics_line(finished_run: Path, tiny_data: Path, capsys) -> None:
    metrics_file = finished_run / "metrics.jsonl"
    metrics_file.write_text(metrics_file.read_text() + '{"step": 5, "loss": 3.1')  # a kill amid a write
    options = set_options(tiny_data, finished_run, **{**QUICK, "train.max_steps": 6})
    code, lines = run_cli(capsys, "pretrain", *options, "--resume")
    assert code == 0, lines
    records = metrics(finished_run)
    assert [r["step"] for r in records if "loss" in r][-2:] == [5, 6]
    assert any("metrics.jsonl" in line and "torn" in line for line in lines), lines


# ---------------------------------------------------------------------------------------------
# 6 and 11. unusable run folders


def test_a_checkpoints_entry_that_is_a_file_is_refused_before_training(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").write_text("not a folder")
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK), "--resume")
    assert code == 2
    assert_one_error_line(lines, str(run_dir / "checkpoints"), "is a file")
    assert not (run_dir / "metrics.jsonl").exists()


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
@pytest.mark.parametrize(
    "blocker,setting",
    [("a file", {"train.tensorboard": True}), ("a link to nothing", {"train.trackers": "[tensorboard]"})],
)
def test_a_tensorboard_entry_that_is_not_a_folder_is_refused_before_tokenizing(
    blocker: str, setting: dict, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = copy_corpus(tiny_data, tmp_path)  # nothing tokenized yet: a late failure would build tokenizer and store
    run_dir, board = tmp_path / "run", tmp_path / "run" / "tensorboard"
    run_dir.mkdir()
    board.write_text("mine") if blocker == "a file" else board.symlink_to(tmp_path / "gone")
    code, lines = run_cli(capsys, "pretrain", *set_options(data, run_dir, **QUICK, **setting))
    assert code == 2
    assert_one_error_line(lines, str(board), "where TensorBoard's event files go", "then run again")
    assert not (data / "tokenizer").exists() and not (data / "tokens").exists()
    assert board.is_symlink() or board.read_text() == "mine"


def test_a_lock_that_is_a_folder_is_one_line(tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "run"
    (run_dir / ".lock").mkdir(parents=True)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK))
    assert code == 2
    assert_one_error_line(lines, str(run_dir / ".lock"), "is a folder")
    assert (run_dir / ".lock").is_dir()


# ---------------------------------------------------------------------------------------------
# 7. one very long line without whitespace


def test_a_long_word_does_not_stall_tokenizer_training(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_corpus(tmp_path / "train.txt", 300, seed=1)
    with open(tmp_path / "train.txt", "a") as handle:
        handle.write("x" * 200_000 + "\n")  # unpatched: about 26 s for the trainer alone (6.5 s at 100 kB)
    fed = []  # what the WordPiece trainer is given (its cost grows with the square of a word's length)
    batches = tokenizer_module._batches

    def watched(*args: Any) -> Iterator[list[str]]:
        for batch in batches(*args):
            fed.extend(batch)
            yield batch

    monkeypatch.setattr(tokenizer_module, "_batches", watched)
    options = set_options(tmp_path, tmp_path / "run", **{"data.validation": str(tmp_path / "train.txt")})
    code, lines = run_cli(capsys, "tokenize", *options)
    assert code == 0, lines
    assert fed and max(len(word) for text in fed for word in text.split()) <= MAX_WORD_CHARS
    assert any("longer than 100 characters" in line for line in lines), lines


# ---------------------------------------------------------------------------------------------
# Weak answers


def test_tokenize_beside_a_running_pretrain_on_the_same_run_dir_refuses(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from mlmtrain.train.guard import RunLock

    run_dir = tmp_path / "run"
    lock = RunLock(run_dir)  # what a live pretrain holds
    try:
        code, lines = run_cli(capsys, "tokenize", *set_options(tiny_data, run_dir))
    finally:
        lock.release()
    assert code == 2
    assert_one_error_line(lines, "is in use by a running mlmtrain")


@pytest.mark.slow
def test_sigterm_while_pretrain_tokenizes_says_so(tmp_path: Path) -> None:
    write_corpus(tmp_path / "train.txt", 100_000, seed=1)
    write_corpus(tmp_path / "valid.txt", 60, seed=2)
    run_dir = tmp_path / "run"
    process = start_pretrain(tmp_path, run_dir)

    def encoding() -> bool:
        return any(p.name.startswith(".tokens.tmp-") for p in tmp_path.iterdir())

    wait_for(encoding, process, run_dir)  # the store is being written
    process.send_signal(signal.SIGTERM)
    assert finish(process, run_dir) == 130, output(run_dir)
    assert output(run_dir).strip().splitlines()[-1] == "mlmtrain: interrupted", output(run_dir)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # the half-written store was removed


def run_offline(tmp_path: Path, *args: str, **env: str) -> tuple[float, list[str]]:
    """`mlmtrain ARGS` in a process that cannot reach the Hub: (seconds, stderr lines); exit code 2 asserted."""
    env = {**CHILD_ENV, "HF_HOME": str(tmp_path / "hf"), **env}
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.setdefault(variable, "0")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mlmtrain", *args], capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S
    )
    assert done.returncode == 2, done.stderr
    return time.perf_counter() - started, done.stderr.strip().splitlines()


def test_an_unreachable_hub_source_is_one_quick_line(tmp_path: Path) -> None:
    config = tmp_path / "hub.yaml"
    config.write_text(f"data:\n  train: hf:someone/corpus:train\ntrain:\n  run_dir: {tmp_path / 'run'}\n")
    seconds, lines = run_offline(tmp_path, "tokenize", "--config", str(config), HF_ENDPOINT="http://127.0.0.1:9")
    assert_one_error_line(lines, "hf:someone/corpus:train", "unreachable")
    assert seconds < 15


def test_a_hub_tokenizer_in_offline_mode_is_one_line(tiny_data: Path, tmp_path: Path) -> None:
    options = set_options(tiny_data, tmp_path / "run", **{"tokenizer.path": str(tmp_path / "tok")})
    _, lines = run_offline(tmp_path, "tokenize", *options, "--tokenizer", "someone/tok", HF_HUB_OFFLINE="1")
    assert_one_error_line(lines, "someone/tok", "unreachable", "HF_HUB_OFFLINE")


# (offline variables, what probe reads from the Hub): one variable asking for offline mode is offline for every library
OFFLINE_ONE_OF_THEM = {
    "transformers-offline-task": ({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}, ["--task", "hf:glue/sst2"]),
    "hub-offline-task": ({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "0"}, ["--task", "hf:glue/sst2"]),
    "transformers-offline-model": ({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}, ["--model", "someone/tiny"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(OFFLINE_ONE_OF_THEM))
def test_offline_in_one_variable_is_offline_for_every_library_and_no_password_is_printed(
    case: str, trained_run: Path, tmp_path: Path
) -> None:
    """HF_HUB_OFFLINE=0 beside TRANSFORMERS_OFFLINE=1 (or the reverse for datasets): offline for datasets,
    huggingface_hub and transformers alike, so no library goes online to retry for half a minute printing HF_ENDPOINT
    with its password; one line, with no retry."""
    variables, source = OFFLINE_ONE_OF_THEM[case]
    options = {"--model": str(trained_run / "checkpoints" / "latest"), "--task": str(tmp_path / "unused")}
    options.update(zip(source[::2], source[1::2], strict=True))
    arguments = [part for option in options.items() for part in option] + ["--max-length", "32", "--device", "cpu"]
    password = {"HF_ENDPOINT": "http://user:s3cret@127.0.0.1:9"}
    _, lines = run_offline(tmp_path, "probe", *arguments, **password, **variables)
    assert_one_error_line(lines, "someone/tiny" if "model" in case else "hf:glue/sst2")
    assert not any("s3cret" in line or "Retrying" in line for line in lines), lines  # no library went online


def test_whatever_a_library_logs_or_warns_goes_through_the_redaction() -> None:
    """A library's retry line quotes the URL it requested, HF_ENDPOINT's password in it: from the moment mlmtrain is
    about to reach the Hub (or its command line starts), log records and warnings are redacted."""
    import io
    import logging
    import warnings

    from mlmtrain.runtime.hub import offline_mode

    offline_mode()
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    library = logging.getLogger("huggingface_hub.utils._http")
    library.addHandler(handler)
    try:
        library.warning("'%s' thrown while requesting HEAD %s", "refused", "http://user:s3cret@host/x/config.json")
        try:
            raise ConnectionError("cannot reach https://user:s3cret@host/x")
        except ConnectionError:
            library.exception("retrying")
    finally:
        library.removeHandler(handler)
    # what Python prints for a warning (showwarning writes what formatwarning makes)
    written.write(warnings.formatwarning(UserWarning("token=hf_abcdefgh123 in a URL"), UserWarning, "lib.py", 1))
    text = written.getvalue()
    assert "http://user:***@host/x/config.json" in text and "https://user:***@host/x" in text
    assert "token=*** in a URL" in text and "s3cret" not in text and "hf_abcdefgh123" not in text


def test_the_memory_estimate_counts_the_parameters_of_the_built_model() -> None:
    from mlmtrain.config import ModelConfig
    from mlmtrain.model.bert import build_model, count_parameters, planned_parameter_count

    cfg = ModelConfig(hidden_size=48, num_layers=3, num_heads=4, intermediate_size=96, max_position_embeddings=64)
    assert planned_parameter_count(cfg, 203) == count_parameters(build_model(cfg, vocab_size=203, pad_id=0))


# ---------------------------------------------------------------------------------------------
# 8. a user's files inside the checkpoints folder


def test_keep_last_spares_an_old_checkpoint_that_holds_a_users_file(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """Pruning deletes only what the writer listed in checkpoint.json: a note the user left in an old checkpoint
    keeps that checkpoint (and says so once), the others are pruned as before."""
    checkpoints = finished_run / "checkpoints"
    note = checkpoints / "step-2" / "my-notes.txt"
    note.write_text("lr looked too high here")
    more = {**QUICK, "train.max_steps": 10, "checkpoint.keep_last": 1}
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **more), "--resume")
    assert code == 0, lines
    assert note.read_text() == "lr looked too high here"
    assert {p.name for p in checkpoints.glob("step-*")} == {"step-2", "step-10"}  # step-4 .. step-8 pruned
    kept = [line for line in lines if "kept" in line and "my-notes.txt" in line]
    assert len(kept) == 1 and str(checkpoints / "step-2") in kept[0]


def test_a_checkpoint_lists_every_file_its_writer_put_there(finished_run: Path) -> None:
    from mlmtrain.train.ownership import MANIFEST_FILE, foreign_files

    folder = finished_run / "checkpoints" / "step-4"
    listed = json.loads((folder / MANIFEST_FILE).read_text())["files"]
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert sorted(listed) == on_disk and {"model.safetensors", "COMPLETE", MANIFEST_FILE} <= set(listed)
    assert foreign_files(folder) == []
    (folder / "extra").mkdir()
    (folder / "extra" / "eval.json").write_text("{}")
    assert foreign_files(folder) == ["extra/eval.json"]
    (folder / MANIFEST_FILE).write_text("{}")  # no list (an older checkpoint): nothing in it is provably ours
    assert foreign_files(folder) is None


def test_a_users_folder_named_latest_is_refused_before_training(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "latest").mkdir(parents=True)
    (run_dir / "checkpoints" / "latest" / "keep.txt").write_text("mine")
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK), "--resume")
    assert code == 2
    assert_one_error_line(lines, str(run_dir / "checkpoints" / "latest"), "is a folder")
    assert (run_dir / "checkpoints" / "latest" / "keep.txt").read_text() == "mine"
    assert not list((run_dir / "checkpoints").glob("step-*"))


# ---------------------------------------------------------------------------------------------
# --overwrite and a resume from an older checkpoint delete only what mlmtrain provably wrote

USERS_FILES = {
    "a folder of the user's in checkpoints": "checkpoints/my-finetuned-model/weights.bin",
    "a note in a checkpoint": "checkpoints/step-2/NOTES.txt",
    "a file of the user's in checkpoints": "checkpoints/NOTES.txt",
    "a file of the user's in tensorboard": "tensorboard/events.out",
}


@pytest.mark.parametrize("where", USERS_FILES.values(), ids=USERS_FILES.keys())
def test_overwrite_refuses_while_the_old_run_holds_a_users_file(
    where: str, finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    (finished_run / "tensorboard").mkdir(exist_ok=True)
    (finished_run / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(b"old run's events")
    users = finished_run / where
    users.parent.mkdir(parents=True, exist_ok=True)
    users.write_text("mine")
    before = snapshot(finished_run)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--overwrite")
    assert code == 2
    named = str(finished_run / where.split("/")[0] / where.split("/")[1])  # the entry that holds the user's file
    assert_one_error_line(lines, "--overwrite would delete", named, "move it out")
    assert snapshot(finished_run) == before  # nothing of the old run deleted either: refused before any removal


def test_overwrite_removes_the_old_runs_files_and_keeps_the_users_beside_them(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    (finished_run / "tensorboard").mkdir()
    old_events = finished_run / "tensorboard" / "events.out.tfevents.1.host.1.0"
    old_events.write_bytes(b"old run's events")
    (finished_run / "notes.txt").write_text("mine")  # beside the run's files, not inside its folders
    old_losses = (finished_run / "metrics.jsonl").read_text()
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--overwrite")
    assert code == 0, lines
    assert (finished_run / "notes.txt").read_text() == "mine"
    assert not old_events.exists()
    assert {p.name for p in (finished_run / "checkpoints").iterdir()} == {"step-2", "step-4", "latest"}
    assert (finished_run / "metrics.jsonl").read_text().count('"step": 1,') == old_losses.count('"step": 1,')


def test_a_resume_that_would_move_a_later_checkpoint_holding_a_users_file_is_refused(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run resumed from step-2 moves the later step-4 aside (into checkpoints/superseded-at-step-2/): with a user's
    file in it, the resume is refused before training, and nothing changes."""
    checkpoints = finished_run / "checkpoints"
    (checkpoints / "step-4" / "NOTES.txt").write_text("mine")
    before = snapshot(finished_run)
    code, lines = run_cli(
        capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", str(checkpoints / "step-2")
    )
    assert code == 2
    assert_one_error_line(lines, str(checkpoints / "step-4"), "NOTES.txt", "move that folder out")
    assert snapshot(finished_run) == before


def test_a_save_never_replaces_a_step_folder_that_holds_a_users_file(finished_run: Path, tiny_config) -> None:
    """The writer's own guard, for a file that appears after the run started."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mlmtrain.errors import UserError
    from mlmtrain.train.checkpoint import save_checkpoint

    folder = finished_run / "checkpoints" / "step-4"
    (folder / "NOTES.txt").write_text("mine")
    before = snapshot(folder)
    model, tokenizer = AutoModelForMaskedLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    with pytest.raises(UserError, match="step-4 would be replaced.*NOTES.txt"):
        save_checkpoint(finished_run, 4, model, tokenizer, tiny_config(**QUICK), {"step": 4})
    assert snapshot(folder) == before
    assert not list((finished_run / "checkpoints").glob(".tmp-*"))


# ---------------------------------------------------------------------------------------------
# Checkpoint files that still parse but are not what mlmtrain wrote


def _not_a_training_state(path: Path) -> None:
    import torch

    torch.save({"note": "not a training state"}, path)


DAMAGED_BUT_PARSES = {
    "config.json that is a list": ("config.json", lambda path: path.write_text("[]"), "is missing or damaged"),
    "a training state without its keys": ("training_state.pt", _not_a_training_state, "has no train_state"),
}


@pytest.mark.parametrize("name, damage, said", DAMAGED_BUT_PARSES.values(), ids=DAMAGED_BUT_PARSES.keys())
def test_a_checkpoint_file_that_parses_but_is_not_mlmtrains_is_one_line(
    name: str, damage: Any, said: str, finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = finished_run / "checkpoints" / "step-4"
    damage(folder / name)
    more = {**QUICK, "train.max_steps": 6}
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **more), "--resume")
    assert code == 2
    assert_one_error_line(lines, f"{folder}/{name} {said}")


def test_eval_perplexity_on_a_checkpoint_whose_mlmtrain_yaml_is_not_a_mapping_falls_back_to_the_default(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """The saved mlmtrain.yaml only supplies the block length: damaged, the default applies (here beyond the tiny
    model's 64 positions, which says so in one line), and a block length given on the command line works."""
    folder = finished_run / "checkpoints" / "step-4"
    (folder / "mlmtrain.yaml").write_text("data: [1, 2]\n")
    command = ["eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--device", "cpu"]
    code, lines = run_cli(capsys, *command)
    assert code == 2
    assert_one_error_line(lines, "the default --seq-len is 128", "pass --seq-len 64 or less")
    code, lines = run_cli(capsys, *command, "--seq-len", "32")
    assert code == 0, lines


def test_a_block_length_too_short_in_a_checkpoints_mlmtrain_yaml_names_that_file(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = finished_run / "checkpoints" / "step-4"
    (folder / "mlmtrain.yaml").write_text("data:\n  seq_len: 4\n")
    command = ["eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--device", "cpu"]
    code, lines = run_cli(capsys, *command)
    assert code == 2
    assert_one_error_line(lines, f"data.seq_len of {folder / 'mlmtrain.yaml'} must be >= 8", "pass --seq-len")


# The process signals itself as the evaluation starts: a scheduler's SIGTERM (or `timeout`) during any command.
_SIGTERM_DURING_EVALUATION = """
import os, signal, sys
import mlmtrain.tools.masked_lm as commands
from mlmtrain.cli.app import main
def signalled(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return evaluate(*args, **kwargs)
evaluate, commands.evaluate_texts = commands.evaluate_texts, signalled
main(sys.argv[1:])
"""


def test_sigterm_during_a_command_other_than_pretrain_says_interrupted(finished_run: Path, tiny_data: Path) -> None:
    """Before: eval-perplexity (fill-mask, report, ...) died of SIGTERM silently, exit -15, with no word of why."""
    folder = finished_run / "checkpoints" / "step-4"
    command = ["eval-perplexity", "--model", str(folder), "--data", str(tiny_data / "valid.txt"), "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_DURING_EVALUATION, *command],
        env=CHILD_ENV,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 130, done.stderr
    assert_one_error_line(done.stderr.strip().splitlines(), "interrupted")


# ---------------------------------------------------------------------------------------------
# Data errors raised inside the loader's workers (data.use_store: false reads the corpus there)


@pytest.mark.parametrize("workers", [0, 1])
def test_too_little_text_for_a_live_worker_is_one_line(
    workers: int, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    small = tmp_path / "small.txt"
    small.write_text("small doc one\nsmall doc two\nthird\n")
    live = {"data.use_store": False, "data.num_workers": workers, "data.train": str(small)}
    live.update({"data.validation": str(small), "tokenizer.path": str(tmp_path / "tok")})  # not the shared one
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, tmp_path / "run", **QUICK, **live))
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: data: data shard 0 of 1 holds fewer tokens", "add text")


def test_overwrite_that_cannot_remove_the_old_run_is_one_line(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Any, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr("shutil.rmtree", refuse)  # as root, permissions cannot make a real removal fail
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--overwrite")
    assert code == 2
    assert_one_error_line(lines, "--overwrite could not remove the old run's", "step-2", os.strerror(errno.EACCES))
    assert (finished_run / "metrics.jsonl").exists()  # nothing after the failed removal was touched


def test_a_users_config_named_mlmtrain_yaml_in_a_fresh_run_folder_is_not_replaced(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from mlmtrain.config import SAVED_CONFIG_HEADER, load_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    mine = run_dir / "mlmtrain.yaml"
    mine.write_text("# my notes on this experiment\ntrain:\n  seed: 0\n")
    options = set_options(tiny_data, run_dir, **QUICK)
    code, lines = run_cli(capsys, "pretrain", "--config", str(mine), *options)
    assert code == 2
    assert_one_error_line(lines, str(mine), "not a config mlmtrain wrote", "rename your file")
    assert mine.read_text() == "# my notes on this experiment\ntrain:\n  seed: 0\n"
    assert not (run_dir / "checkpoints").exists()
    # what `mlmtrain config show` prints for these settings loses nothing when replaced: that one is accepted
    mine.write_text(load_config(mine, tiny_overrides(tiny_data, **{"train.run_dir": str(run_dir), **QUICK})).to_yaml())
    code, lines = run_cli(capsys, "pretrain", "--config", str(mine), *options)
    assert code == 0, lines
    assert mine.read_text().startswith(SAVED_CONFIG_HEADER)
