"""Symlinks, leftover folders and files saved over a checkpoint never cost a user's files.

`--overwrite`, `checkpoint.keep_last` and the clearing of killed saves' leftovers delete only what mlmtrain can prove
it wrote: a link is removed as a link (never followed), a leftover folder goes only when it holds nothing but
mlmtrain's files, and a checkpoint whose files differ from what its writer recorded (a fine-tuned model saved over
it) is kept, with the reason said.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mlmtrain.config import load_config
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import ownership

from ..helpers import QUICK, assert_one_error_line, run_cli, set_options, snapshot

RESUMED = {**QUICK, "train.max_steps": 6, "checkpoint.keep_last": 1}  # resumed from step-4: prunes step-2 and step-4


def dead_pid() -> int:
    """The pid of a process that has ended (what a killed save's leftover is named after)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def shared_folder(tmp_path: Path, *names: str) -> Path:
    """A folder outside the run holding other runs' files."""
    folder = tmp_path / "shared"
    folder.mkdir()
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"another run's " + name.encode())
    return folder


def overwrite(capsys: pytest.CaptureFixture, tiny_data: Path, run_dir: Path) -> tuple[int, list[str]]:
    return run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK), "--overwrite")


def assert_overwrite_refused(capsys: pytest.CaptureFixture, tiny_data: Path, run_dir: Path, named: str) -> None:
    """--overwrite is refused in one line naming `named`, before anything in run_dir is deleted."""
    before = snapshot(run_dir)
    code, lines = overwrite(capsys, tiny_data, run_dir)
    assert code == 2
    assert_one_error_line(lines, "--overwrite would delete", named, "cannot prove it wrote")
    assert snapshot(run_dir) == before


def resume(capsys: pytest.CaptureFixture, tiny_data: Path, run_dir: Path) -> tuple[int, list[str]]:
    return run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **RESUMED), "--resume")


def steps(run_dir: Path) -> set[str]:
    return {p.name for p in ownership.checkpoints_dir(run_dir).glob("step-*")}


# ---------------------------------------------------------------------------------------------
# symlinks: removed as links, never followed


def test_overwrite_removes_a_linked_tensorboard_folder_as_a_link(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`RUN/tensorboard` linked to a folder that other runs log into: --overwrite followed the link, deleted their
    event files, then failed ("Not a directory") with the run's checkpoints already gone."""
    shared = shared_folder(tmp_path, "events.out.tfevents.1.host.1.0", "events.out.tfevents.2.host.2.0")
    before = snapshot(shared)
    (finished_run / "tensorboard").symlink_to(shared, target_is_directory=True)
    code, lines = overwrite(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert snapshot(shared) == before
    assert not (finished_run / "tensorboard").is_symlink()
    assert any("removed the link" in line and str(finished_run / "tensorboard") in line for line in lines), lines
    assert steps(finished_run) == {"step-2", "step-4"}


def test_overwrite_removes_a_linked_checkpoints_folder_as_a_link(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    checkpoints = ownership.checkpoints_dir(finished_run)
    elsewhere = tmp_path / "elsewhere"
    checkpoints.rename(elsewhere)  # the old run's checkpoints, kept on another disk behind a link
    checkpoints.symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(elsewhere)
    code, lines = overwrite(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert snapshot(elsewhere) == before
    assert not checkpoints.is_symlink() and steps(finished_run) == {"step-2", "step-4"}


def test_overwrite_refuses_a_link_it_did_not_make_inside_a_checkpoint_and_deletes_nothing(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    shared = shared_folder(tmp_path, "corpus.txt")
    (finished_run / "tensorboard").symlink_to(shared, target_is_directory=True)  # would be removed, but not yet
    (ownership.checkpoints_dir(finished_run) / "step-2" / "data").symlink_to(shared, target_is_directory=True)
    assert_overwrite_refused(capsys, tiny_data, finished_run, "step-2")
    assert (finished_run / "tensorboard").is_symlink()
    assert (shared / "corpus.txt").exists()


def test_overwrite_refuses_a_link_named_like_an_event_file(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """TensorBoard writes no links: one named like its event file is the user's (another run's log, shown here)."""
    shared = shared_folder(tmp_path, "events.out.tfevents.1.host.1.0")
    (finished_run / "tensorboard").mkdir()
    (finished_run / "tensorboard" / "events.out.tfevents.1.host.1.0").symlink_to(
        shared / "events.out.tfevents.1.host.1.0"
    )
    assert_overwrite_refused(capsys, tiny_data, finished_run, str(finished_run / "tensorboard"))


def test_keep_last_keeps_an_old_checkpoint_holding_a_link_and_says_so(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A link to a folder inside an old checkpoint was removed with no word when keep_last pruned it."""
    shared = shared_folder(tmp_path, "corpus.txt")
    old = ownership.checkpoints_dir(finished_run) / "step-2"
    (old / "data").symlink_to(shared, target_is_directory=True)
    code, lines = resume(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert steps(finished_run) == {"step-2", "step-6"} and (old / "data").is_symlink()
    kept = [line for line in lines if line.startswith(f"kept {old} ")]
    assert len(kept) == 1 and "data is a link" in kept[0], lines


def test_a_checkpoints_link_to_a_missing_folder_is_one_line_before_training(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ownership.checkpoints_dir(run_dir).symlink_to(tmp_path / "unmounted-disk", target_is_directory=True)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK))
    assert code == 2
    assert_one_error_line(lines, str(ownership.checkpoints_dir(run_dir)), "does not exist", "remove the link")
    assert not (run_dir / "metrics.jsonl").exists()


def test_overwrite_refuses_a_folder_named_like_a_run_file_before_deleting_anything(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    (finished_run / "run.json").unlink()
    (finished_run / "run.json").mkdir()
    (finished_run / "run.json" / "mine.txt").write_text("mine")
    assert_overwrite_refused(capsys, tiny_data, finished_run, str(finished_run / "run.json"))


def test_a_lock_file_that_is_a_link_is_one_line_and_its_target_untouched(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The lock file is truncated and written with the pid: through a link, that emptied a file of the user's."""
    run_dir, mine = tmp_path / "run", tmp_path / "notes.txt"
    run_dir.mkdir()
    mine.write_text("mine")
    (run_dir / ".lock").symlink_to(mine)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **QUICK))
    assert code == 2
    assert_one_error_line(lines, str(run_dir / ".lock"), "is a link")
    assert mine.read_text() == "mine"


# ---------------------------------------------------------------------------------------------
# leftover folders of killed saves: removed only when they hold nothing but mlmtrain's files


def leftover(run_dir: Path, name: str, source: str = "step-4", drop: tuple[str, ...] = ()) -> Path:
    """A copy of a checkpoint of the run under a killed save's name (without the files in `drop`)."""
    folder = ownership.checkpoints_dir(run_dir) / name
    shutil.copytree(ownership.checkpoints_dir(run_dir) / source, folder)  # copy2 keeps the sizes and times recorded
    for dropped in drop:
        (folder / dropped).unlink()
    return folder


USERS_LEFTOVERS = {
    "a save killed before its record": (".tmp-step-6-{pid}", (ownership.MANIFEST_FILE, ownership.COMPLETE)),
    "a save killed before the rename": (".tmp-step-6-{pid}", (ownership.COMPLETE,)),
    "a checkpoint moved aside": (".old-step-2-{pid}", ()),
}


@pytest.mark.parametrize("name, drop", USERS_LEFTOVERS.values(), ids=USERS_LEFTOVERS.keys())
def test_a_leftover_holding_a_users_file_survives_resume_and_stops_overwrite(
    name: str, drop: tuple[str, ...], finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = leftover(finished_run, name.format(pid=dead_pid()), source="step-2", drop=drop)
    (folder / "my-notes.txt").write_text("mine")
    code, lines = resume(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert (folder / "my-notes.txt").read_text() == "mine"
    assert_overwrite_refused(capsys, tiny_data, finished_run, str(folder))


@pytest.mark.parametrize("command", [resume, overwrite])
def test_leftovers_of_killed_saves_are_still_removed(
    command: Callable, finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """What a save killed at any moment leaves: every file a save writes but its record and marker (killed before
    it recorded them), the same with its record (killed before the rename), a replaced checkpoint moved aside, and
    the link that was to become `latest`."""
    pid = dead_pid()
    planted = [
        leftover(finished_run, f".tmp-step-6-{pid}", drop=(ownership.MANIFEST_FILE, ownership.COMPLETE)),
        leftover(finished_run, f".tmp-step-8-{pid}-0123abcd", drop=(ownership.COMPLETE,)),
        leftover(finished_run, f".old-step-2-{pid}-0123abcd", source="step-2"),
        ownership.checkpoints_dir(finished_run) / f".latest-{pid}",
    ]
    planted[-1].symlink_to("step-2")
    code, lines = command(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert not [path for path in planted if path.exists() or path.is_symlink()]


# ---------------------------------------------------------------------------------------------
# files saved over a checkpoint under the names its writer used


def save_a_classifier_over(folder: Path) -> None:
    """What a user does with a checkpoint: fine-tune it and save the result into the same folder."""
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=3).save_pretrained(str(folder))


def test_keep_last_keeps_a_checkpoint_a_fine_tuned_model_was_saved_into(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    old = ownership.checkpoints_dir(finished_run) / "step-2"
    save_a_classifier_over(old)
    before = snapshot(old)
    code, lines = resume(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert steps(finished_run) == {"step-2", "step-6"} and snapshot(old) == before
    kept = [line for line in lines if line.startswith(f"kept {old} ")]
    assert len(kept) == 1 and "model.safetensors changed since saved" in kept[0], lines


def test_a_file_rewritten_with_the_same_size_still_keeps_its_checkpoint(finished_run: Path) -> None:
    folder = ownership.checkpoints_dir(finished_run) / "step-2"
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(reversed(weights.read_bytes())))
    assert ownership.foreign_files(folder) == ["model.safetensors changed since saved"]
    assert not ownership.written_by_mlmtrain(folder)


def test_overwrite_refuses_a_fine_tuned_model_saved_into_a_checkpoint(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    save_a_classifier_over(ownership.checkpoints_dir(finished_run) / "step-4")
    assert_overwrite_refused(capsys, tiny_data, finished_run, "step-4")


def test_overwrite_refuses_a_changed_checkpoint_among_the_superseded_ones(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    checkpoints = ownership.checkpoints_dir(finished_run)
    aside = checkpoints / "superseded-at-step-2"
    aside.mkdir()
    (checkpoints / "step-4").rename(aside / "step-4")  # as a resume from step-2 sets the later steps aside
    (aside / "step-4" / "config.json").write_text("{}")
    assert_overwrite_refused(capsys, tiny_data, finished_run, str(aside))


def test_a_checkpoint_whose_record_names_its_files_only_is_kept_as_unprovable(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """An earlier mlmtrain recorded names only, which a model saved over the checkpoint reuses: nothing in such a
    checkpoint is provably mlmtrain's, so keep_last keeps it and says so."""
    old = ownership.checkpoints_dir(finished_run) / "step-2"
    record = json.loads((old / ownership.MANIFEST_FILE).read_text())
    (old / ownership.MANIFEST_FILE).write_text(json.dumps({key: record[key] for key in ("step", "files")}))
    code, lines = resume(capsys, tiny_data, finished_run)
    assert code == 0, lines
    assert "step-2" in steps(finished_run)
    assert any(line.startswith(f"kept {old} ") and "older mlmtrain" in line for line in lines), lines


def test_an_electra_checkpoint_records_its_generator_and_its_unrecorded_leftover_is_ours(
    tiny_data: Path, tmp_path: Path
) -> None:
    """A model folder inside the checkpoint (the generator) is recorded like the rest, and a save killed before its
    record (a subfolder included) is still known for mlmtrain's."""
    from mlmtrain.data.masking import VocabInfo
    from mlmtrain.data.tokenizer import load_tokenizer
    from mlmtrain.model.electra import GENERATOR_DIR, build_electra

    from ..model.test_electra import TINY

    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    cfg = load_config(None, [*TINY, f"train.run_dir={tmp_path / 'run'}"])
    pair = build_electra(cfg, VocabInfo.from_tokenizer(tokenizer))
    folder = ckpt.save_checkpoint(tmp_path / "run", 3, pair, tokenizer, cfg, {"step": 3})
    recorded = json.loads((folder / ownership.MANIFEST_FILE).read_text())["written"]
    assert f"{GENERATOR_DIR}/model.safetensors" in recorded and ownership.foreign_files(folder) == []
    killed = leftover(tmp_path / "run", f".tmp-step-6-{dead_pid()}", source="step-3", drop=(ownership.MANIFEST_FILE,))
    assert ownership.written_by_mlmtrain(killed)
    (killed / GENERATOR_DIR / "notes.txt").write_text("mine")
    assert not ownership.written_by_mlmtrain(killed)


def test_a_folder_the_config_writes_inside_one_it_reads_is_refused_before_anything_is_written(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """train.run_dir, tokenizer.path and data.store apart from data.train's folder (its next read would take the run's
    files for text), model.init_from's base and a link into them: one line, nothing written; the fix works."""
    from ..train.test_init_from import write_base

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(tiny_data / "train.txt", corpus / "train.txt")
    base = write_base(tmp_path / "base")
    (tmp_path / "to-corpus").symlink_to(corpus)
    data = {"data.train": str(corpus), "data.validation": str(tiny_data / "valid.txt")}
    elsewhere = {"tokenizer.path": str(tmp_path / "tok"), "data.store": str(tmp_path / "store")}
    init = {"model.init_from": str(base), "tokenizer.vocab_size": 30522, "model.max_position_embeddings": 64}
    cases = [
        ("pretrain", {**data, **elsewhere}, corpus / "run", "train.run_dir", f"lies inside data.train {corpus}"),
        ("tokenize", {**data, **elsewhere, "data.store": str(corpus / "tokens")}, tmp_path / "run", "data.store", ""),
        ("pretrain", {**data, **elsewhere}, tmp_path / "to-corpus" / "run", "train.run_dir", "it leads to"),
        ("pretrain", {**data, **elsewhere, **init}, base / "run", "train.run_dir", "model.init_from"),
        ("tokenize", {**data, **init, "tokenizer.path": str(base / "tok")}, tmp_path / "run", "tokenizer.path", ""),
        (
            "tokenize",
            {**data, "data.store": str(tmp_path)},
            tmp_path / "run",
            "data.store",
            f"holds data.train {corpus}",
        ),
    ]
    before = {folder: snapshot(folder) for folder in (corpus, base)}
    for command, settings, run_dir, key, needle in cases:
        code, lines = run_cli(capsys, command, *set_options(tiny_data, run_dir, **settings))
        assert code == 2, (settings, lines)
        assert_one_error_line(lines, f"mlmtrain: config: {key} ", needle, "which this command only reads")
        assert {folder: snapshot(folder) for folder in before} == before
    assert not (tmp_path / "run").exists() and not (tmp_path / "tok").exists()
    options = set_options(tiny_data, tmp_path / "run", **{**data, **elsewhere})
    code, lines = run_cli(capsys, "tokenize", *options)  # the fix: every folder outside what the run reads
    assert code == 0, lines
    assert {folder: snapshot(folder) for folder in before} == before
