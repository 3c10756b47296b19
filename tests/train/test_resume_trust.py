"""A resume trusts nothing in the checkpoint it continues: its training state is read as tensors and plain values
only (a state holding any other object is refused before it is built, so a planted pickle never runs), and every
shape the checkpoint fixes, the ELECTRA generator's included, must be the config's, or the resume is refused in one
line; dropout, which only changes training, may change and is announced.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.errors import UserError
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train import ownership
from mlmtrain.train.loop import pretrain

from ..helpers import QUICK, assert_one_error_line, run_cli, set_options
from .test_electra_train import electra_config


class RunsCode:
    """An object whose unpickling runs `source` (what a hostile training_state.pt would hold)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return exec, (self.source,)


def _training_state_shape(**extra: Any) -> dict[str, Any]:
    """The keys a resume reads, plus `extra`: a file that passes every check after loading."""
    return {"train_state": {"step": 4}, "optimizer": {}, "scaler": {}, "rng": [], **extra}


# ---------------------------------------------------------------------------------------------
# The training state: tensors and plain values only


def test_a_saved_training_state_loads_with_weights_only(finished_run: Path) -> None:
    state = torch.load(finished_run / "checkpoints" / "step-4" / ckpt.STATE_FILE, weights_only=True)
    assert state["train_state"]["step"] == 4
    assert isinstance(state["rng"][0]["torch"], torch.Tensor)


def test_a_training_state_that_would_run_code_is_refused_and_never_runs(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ran = tmp_path / "the-payload-ran"
    state = finished_run / "checkpoints" / "step-4" / ckpt.STATE_FILE
    torch.save(_training_state_shape(payload=RunsCode(f"open({str(ran)!r}, 'w').write('pwned')")), state)
    options = set_options(tiny_data, finished_run, **{**QUICK, "train.max_steps": 6})
    try:
        code, lines = run_cli(capsys, "pretrain", *options, "--resume", "auto")
    finally:  # checked first, whatever the resume did after
        assert not ran.exists(), "the pickled payload ran"
    assert code == 2
    assert_one_error_line(lines, f"mlmtrain: checkpoint: {state} ", "exec", "never unpickled")
    assert ownership.latest_checkpoint(finished_run).name == "step-4"  # nothing trained, nothing saved


def test_a_model_folder_whose_pytorch_weights_would_run_code_is_refused_and_never_runs(
    finished_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The other pickles a user may be handed: a model folder with pytorch_model.bin (read by transformers)."""
    from safetensors.torch import load_file

    ran, model = tmp_path / "the-payload-ran", shutil.copytree(finished_run / "checkpoints" / "step-4", tmp_path / "m")
    weights = {**load_file(model / "model.safetensors"), "extra": RunsCode(f"open({str(ran)!r}, 'w').write('pwned')")}
    torch.save(weights, model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    command = ["eval-perplexity", "--model", str(model), "--data", str(tiny_data / "valid.txt"), "--seq-len", "32"]
    try:
        code, lines = run_cli(capsys, *command, "--device", "cpu")
    finally:
        assert not ran.exists(), "the pickled payload ran"
    assert code == 2
    assert_one_error_line(lines, str(model))


def test_a_training_state_of_the_older_pickled_format_is_refused_in_one_line(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    """mlmtrain's earlier format pickled numpy's RNG state as an array: such a file is not read either."""
    state = finished_run / "checkpoints" / "step-4" / ckpt.STATE_FILE
    torch.save(_training_state_shape(rng=[{"numpy": np.random.get_state()}]), state)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", "auto")
    assert code == 2
    assert_one_error_line(lines, str(state), "numpy", "never unpickled", "resume from a checkpoint")


DAMAGED_RNG = {
    "not a list": "random",
    "not a mapping": ["random"],
    "a torch state of text": [{"torch": "abc", "python": random.getstate(), "numpy": {}}],
    "a python state of the wrong length": [
        {"torch": torch.get_rng_state(), "python": (3, (1, 2), None), "numpy": ckpt.rng_state()["numpy"]}
    ],
}


@pytest.mark.parametrize("rng", DAMAGED_RNG.values(), ids=DAMAGED_RNG.keys())
def test_a_training_state_whose_rng_states_are_damaged_is_one_line(
    rng: Any, finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    state = finished_run / "checkpoints" / "step-4" / ckpt.STATE_FILE
    torch.save(_training_state_shape(rng=rng), state)
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", "auto")
    assert code == 2
    assert_one_error_line(lines, f"{state} has damaged RNG states")


def test_rng_states_come_back_from_a_weights_only_file(tmp_path: Path) -> None:
    before = ckpt.rng_state()
    try:
        random.seed(5), np.random.seed(6), torch.manual_seed(7)
        torch.save(ckpt.rng_state(), tmp_path / "rng.pt")
        drawn = (random.random(), np.random.rand(), np.random.randn(), torch.rand(1).item())
        ckpt.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
        assert (random.random(), np.random.rand(), np.random.randn(), torch.rand(1).item()) == drawn
    finally:
        ckpt.set_rng_state(before)


# ---------------------------------------------------------------------------------------------
# Shapes the checkpoint fixes


SHAPE_CHANGES = {
    "model.max_position_embeddings": ("max_position_embeddings=64", "the config says 128"),
    "model.pad_vocab_multiple": ("vocab_size=", "model.pad_vocab_multiple"),
    "model.num_layers": ("num_hidden_layers=2", "the config says 3"),
}
CHANGED_TO = {"model.max_position_embeddings": 128, "model.pad_vocab_multiple": 64, "model.num_layers": 3}


@pytest.mark.parametrize("key", SHAPE_CHANGES)
def test_resuming_with_another_model_shape_is_refused(key: str, finished_run: Path, tiny_config) -> None:
    saved, said = SHAPE_CHANGES[key]
    cfg = tiny_config(**{**QUICK, "train.max_steps": 6, key: CHANGED_TO[key]})
    with pytest.raises(UserError, match="step-4 was trained with") as refused:
        pretrain(cfg, resume="auto")
    assert saved in refused.value.message and said in refused.value.message and key in refused.value.message
    assert ownership.latest_checkpoint(finished_run).name == "step-4"


def test_a_checkpoint_whose_config_json_has_another_architecture_key_is_refused(
    finished_run: Path, tiny_config
) -> None:
    """A key no config setting controls (here the token-type vocabulary) names itself and what mlmtrain builds."""
    path = finished_run / "checkpoints" / "step-4" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "type_vocab_size": 3}))
    with pytest.raises(UserError, match=r"step-4 was trained with type_vocab_size=3, mlmtrain builds 2"):
        pretrain(tiny_config(**{**QUICK, "train.max_steps": 6}), resume="auto")


def test_a_checkpoint_whose_config_json_holds_a_value_of_another_type_is_one_line(
    finished_run: Path, tiny_data: Path, capsys: pytest.CaptureFixture
) -> None:
    path = finished_run / "checkpoints" / "step-4" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_position_embeddings": "64"}))
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, finished_run, **QUICK), "--resume", "auto")
    assert code == 2
    assert_one_error_line(lines, str(path.parent), "max_position_embeddings")  # transformers 5 says damaged, 4 '"64"'


def test_a_changed_dropout_is_applied_on_resume_and_announced(
    finished_run: Path, tiny_config, capsys: pytest.CaptureFixture
) -> None:
    capsys.readouterr()
    resumed = pretrain(tiny_config(**{**QUICK, "train.max_steps": 6, "model.dropout": 0.0}), resume="auto")
    assert "note: dropout from the config replaces the checkpoint's (hidden_dropout_prob: 0.1 -> 0.0" in (
        capsys.readouterr().err
    )
    saved = json.loads((resumed / "config.json").read_text())
    assert saved["hidden_dropout_prob"] == saved["attention_probs_dropout_prob"] == 0.0
    assert load_config(resumed / "mlmtrain.yaml").model.dropout == 0.0  # the saved config and model agree


ELECTRA_SHORT = {"train.max_steps": 2, "train.eval_every": 0, "checkpoint.save_every": 2}
GENERATOR_CHANGES = {
    "electra.generator_layers": (1, "generator was trained with num_hidden_layers=2, the config says 1"),
    "electra.generator_size": (0.5, "generator was trained with hidden_size=8, the config says 16"),
}


@pytest.fixture(scope="module")
def electra_checkpoint(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps of ELECTRA (a generator of 2 layers, width 8), checkpointed at step 2."""
    run_dir = tmp_path_factory.mktemp("electra-trust") / "run"
    return pretrain(electra_config(tiny_data, run_dir, **ELECTRA_SHORT))


@pytest.mark.parametrize("key", GENERATOR_CHANGES)
def test_resuming_electra_with_another_generator_is_refused(
    key: str, electra_checkpoint: Path, tiny_data: Path, tmp_path: Path
) -> None:
    value, said = GENERATOR_CHANGES[key]
    cfg = electra_config(tiny_data, tmp_path / "run", **{**ELECTRA_SHORT, "train.max_steps": 4, key: value})
    with pytest.raises(UserError, match="generator was trained with") as refused:
        pretrain(cfg, resume=str(electra_checkpoint))
    assert said in refused.value.message and key in refused.value.message
    assert str(electra_checkpoint / "generator") in refused.value.message
