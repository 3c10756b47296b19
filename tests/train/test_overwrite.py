"""`pretrain --overwrite` deletes the old run only once every check of the new run has passed: each refusal the new
run can meet leaves the old run as it was, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import FINISHED, assert_one_error_line, run_cli, set_options, snapshot

# each: (the new run's settings, {{root}}: the test's folder; the topic of the refusal, a phrase of it)
REFUSALS = {
    "data.train does not exist": ({"data.train": "{root}/missing.txt"}, "data:", "missing.txt"),
    "a model too big for memory": (
        {"model.hidden_size": 8192, "model.num_heads": 64, "model.num_layers": 48, "model.intermediate_size": 32768},
        "model:",
        "choose a smaller model",
    ),
    "tokenizer.path names a user's folder": (
        {"tokenizer.path": "{root}/mine", "tokenizer.vocab_size": 150},
        "tokenizer:",
        "mine",
    ),
    "data.store names a user's folder": ({"data.store": "{root}/mine"}, "data:", "mine"),
    "a probe task that does not exist": ({"probe.task": "{root}/no-task", "probe.max_length": 32}, "", "no-task"),
    "data.seq_len beyond the model's positions": ({"data.seq_len": 128}, "config:", "data.seq_len"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_refusal_of_the_new_run_leaves_the_old_run_intact(
    case: str, finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    settings, topic, phrase = REFUSALS[case]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    before = snapshot(finished_run)
    options = {key: str(value).format(root=tmp_path) for key, value in {**FINISHED, **settings}.items()}
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **options), "--overwrite")
    assert code == 2
    assert_one_error_line(lines, topic, phrase)
    assert snapshot(finished_run) == before
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine\n"


def test_a_branch_of_another_tokenizer_leaves_the_run_it_would_overwrite_intact(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The checkpoint a branch starts from was trained with another tokenizer than the run's: refused before the run
    in train.run_dir is removed."""
    other = tmp_path / "other"
    trained = {**FINISHED, "tokenizer.path": str(other / "tokenizer"), "data.store": str(other / "tokens")}
    code, lines = run_cli(
        capsys, "pretrain", *set_options(tiny_data, other / "run", **trained, **{"tokenizer.vocab_size": 150})
    )
    assert code == 0, lines
    before = snapshot(finished_run)
    branch = ["--branch-from", str(other / "run" / "checkpoints" / "step-4"), "--overwrite"]
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **FINISHED), *branch)
    assert code == 2
    assert_one_error_line(lines, "checkpoint:", "another tokenizer")
    assert snapshot(finished_run) == before
