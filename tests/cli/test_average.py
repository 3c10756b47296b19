"""`mlmtrain average`: the mean of a run's checkpoints as a new model folder that transformers loads with its
tokenizer, computed by hand here from the saved weights; what it refuses in one line, writing nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from mlmtrain.train import checkpoint as ckpt

from ..helpers import TINY_MODEL, assert_one_error_line, run_cli, snapshot, weights


def test_the_average_is_the_mean_of_the_saved_weights_and_loads_with_its_tokenizer(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from mlmtrain import average_checkpoints

    steps = [trained_run / "checkpoints" / f"step-{step}" for step in (2, 4)]
    before = snapshot(trained_run)
    out = tmp_path / "averaged"
    code, lines = run_cli(capsys, "average", str(steps[1]), str(steps[0]), "--out", str(out))  # any order
    assert code == 0, lines
    saved = [weights(folder) for folder in steps]
    averaged = weights(out)
    assert averaged.keys() == saved[0].keys()
    for name, tensor in averaged.items():
        expected = (sum(step[name].double() for step in saved) / 2).to(saved[0][name].dtype)
        assert torch.equal(tensor, expected), name
    assert not torch.equal(
        averaged["bert.embeddings.word_embeddings.weight"], saved[1]["bert.embeddings.word_embeddings.weight"]
    )
    model = AutoModelForMaskedLM.from_pretrained(str(out))
    for name, param in model.named_parameters():
        assert torch.equal(param.detach(), averaged[name]), name
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert (
        tokenizer("a lazy dog")["input_ids"] == AutoTokenizer.from_pretrained(str(steps[1]))("a lazy dog")["input_ids"]
    )
    assert snapshot(trained_run) == before  # the checkpoints are only read
    # --last 2 of the run is the same mean, written over the folder average wrote (the API's call of the command)
    first = (out / "model.safetensors").read_bytes()
    assert average_checkpoints(trained_run, out, last=2) == out
    assert (out / "model.safetensors").read_bytes() == first


@pytest.fixture
def other_shape(trained_run: Path, tmp_path: Path) -> Path:
    """A model folder of another shape (one layer of width 32) with the run's own tokenizer."""
    from mlmtrain.data.tokenizer import load_tokenizer
    from mlmtrain.model.bert import build_model

    folder = tmp_path / "other"
    step = trained_run / "checkpoints" / "step-2"
    tokenizer = load_tokenizer(step)
    build_model(TINY_MODEL, len(tokenizer), tokenizer.pad_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_what_cannot_be_averaged_is_one_line_and_writes_nothing(
    trained_run: Path, other_shape: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    step_2, step_4 = (str(trained_run / "checkpoints" / f"step-{step}") for step in (2, 4))
    unfinished = shutil.copytree(step_4, tmp_path / "unfinished")
    (unfinished / ckpt.COMPLETE).unlink()
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    new = tmp_path / "new"
    cases = [
        ([step_2, str(other_shape)], new, "models of another shape"),
        ([step_2, str(unfinished)], new, "not a complete checkpoint"),
        ([step_2, str(tmp_path / "nowhere")], new, "does not exist"),
        ([step_2], new, "two or more checkpoints"),
        ([step_2, step_2], new, "are one checkpoint"),
        ([str(trained_run), step_2], new, "is a run folder"),
        ([str(trained_run), "--last", "3"], new, "has 2 complete checkpoint(s), and --last 3"),
        ([step_2, step_4], users, "--out " + str(users) + " is not a folder mlmtrain wrote"),
        ([step_2, step_4], a_file, "is not a folder"),
    ]
    before = snapshot(tmp_path)
    for arguments, out, needle in cases:
        code, lines = run_cli(capsys, "average", *arguments, "--out", str(out))
        assert code == 2, (arguments, lines)
        assert_one_error_line(lines, needle)
        assert snapshot(tmp_path) == before, arguments  # nothing written, the user's folder and file as they were
        assert not new.exists()


def test_an_out_that_is_holds_or_lies_inside_a_checkpoint_is_refused_for_that_reason(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`average A B --out B/avg` would write into a checkpoint it reads (never pruned afterwards, a foreign folder to
    every later check of the run): refused for that reason, also through a link and for --out B itself (not as "not a
    folder mlmtrain wrote"); the fix, a folder outside them, works."""
    step_2, step_4 = (finished_run / "checkpoints" / f"step-{step}" for step in (2, 4))
    (tmp_path / "link").symlink_to(step_4)
    cases = {
        step_4 / "avg": f"lies inside checkpoint {step_4}",
        step_4: f"is checkpoint {step_4}",
        tmp_path / "link" / "avg": f"(it leads to {step_4.resolve() / 'avg'}) lies inside checkpoint",
        finished_run / "checkpoints": f"holds checkpoint {step_2}",
    }
    before = snapshot(finished_run)
    for out, needle in cases.items():
        code, lines = run_cli(capsys, "average", str(step_2), str(step_4), "--out", str(out))
        assert code == 2, (out, lines)
        assert_one_error_line(lines, f"--out {out}", needle, "which this command only reads", "outside them")
        assert snapshot(finished_run) == before, out
    code, lines = run_cli(capsys, "average", str(step_2), str(step_4), "--out", str(finished_run / "averaged"))
    assert code == 0, lines


def test_sharded_save_pretrained_folders_are_averaged_through_their_index(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """save_pretrained writes a large model as shards and an index (model-00001-of-0000N.safetensors): averaged as
    its tensors say, the same mean as of the single-file folders, not refused as lacking model.safetensors."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    sharded = []
    for step in (2, 4):
        folder = tmp_path / f"sharded-{step}"
        source = trained_run / "checkpoints" / f"step-{step}"
        AutoModelForMaskedLM.from_pretrained(str(source)).save_pretrained(str(folder), max_shard_size="40KB")
        AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(folder))
        assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1 and not (folder / "model.safetensors").exists()
        sharded.append(str(folder))
    code, lines = run_cli(capsys, "average", *sharded, "--out", str(tmp_path / "from-shards"))
    assert code == 0, lines
    steps = [str(trained_run / "checkpoints" / f"step-{step}") for step in (2, 4)]
    code, lines = run_cli(capsys, "average", *steps, "--out", str(tmp_path / "whole"))
    assert code == 0, lines
    from_shards, whole = weights(tmp_path / "from-shards"), weights(tmp_path / "whole")
    assert from_shards.keys() <= whole.keys() and len(from_shards) > 10
    for name, tensor in from_shards.items():
        assert torch.equal(tensor, whole[name]), name
