"""A step that never waits for the device: no tensor is read on the host inside a step, the loop reads a step's
figures only where a line, an evaluation, a checkpoint or the end needs them, the logging cadence changes neither the
weights nor the logged figures, a non-finite step is skipped on the device, and train.max_nonfinite still stops a run
at the next read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mlmtrain.errors import UserError
from mlmtrain.runtime.distributed import init_distributed
from mlmtrain.train import loop as loop_module
from mlmtrain.train import step as step_module
from mlmtrain.train.loop import pretrain
from mlmtrain.train.step import build_setup, train_step

TIMINGS = ("tokens_per_s", "data_wait_share", "elapsed_s", "eval_seconds")
READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu")


@pytest.fixture
def device_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Record, per step of the loop, every tensor read on the host made inside `train_step` (outside its host-side
    counting of the host's batches) and the steps after which the loop read a step's figures."""
    seen: dict[str, list] = {"in_step": [], "read_at": []}
    where = {"in_step": False, "setup": None}

    def recording(name: str):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            if where["in_step"]:
                seen["in_step"].append(name)
            return original(self, *args, **kwargs)

        return read

    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, recording(name))

    def stepping(setup, *args, **kwargs):
        where["in_step"], where["setup"] = True, setup
        try:
            return train_step(setup, *args, **kwargs)
        finally:
            where["in_step"] = False

    global_counts = step_module._global_counts

    def counting(*args, **kwargs):  # host figures of the host's batches: no device involved
        was, where["in_step"] = where["in_step"], False
        try:
            return global_counts(*args, **kwargs)
        finally:
            where["in_step"] = was

    read_device = step_module.read_device

    def reading(values):
        seen["read_at"].append(where["setup"].state.step)
        return read_device(values)

    monkeypatch.setattr(loop_module, "train_step", stepping)
    monkeypatch.setattr(step_module, "_global_counts", counting)
    monkeypatch.setattr(step_module, "read_device", reading)
    return seen


def test_the_loop_reads_the_device_only_at_log_steps_and_the_end(tiny_config, device_reads) -> None:
    cfg = tiny_config(
        **{"train.log_every": 4, "train.max_steps": 10, "train.eval_every": 0, "checkpoint.save_every": 0}
    )
    pretrain(cfg)
    assert device_reads["in_step"] == []  # no step waits for the device
    assert device_reads["read_at"] == [4, 8, 10]  # the two log steps and the end of the budget


def test_evaluations_and_checkpoints_read_too(tiny_config, device_reads) -> None:
    cfg = tiny_config(**{"train.log_every": 5, "train.max_steps": 7, "train.eval_every": 3, "checkpoint.save_every": 2})
    pretrain(cfg)
    assert device_reads["in_step"] == []
    assert device_reads["read_at"] == [2, 3, 4, 5, 6, 7]  # saves at 2, 4, 6; evaluation at 3, 6; log at 5; end at 7


def test_the_logging_cadence_changes_neither_weights_nor_logged_figures(tiny_config, tmp_path: Path) -> None:
    runs = {}
    for every in (1, 4):
        run_dir = tmp_path / f"every-{every}"
        cfg = tiny_config(
            **{
                "train.run_dir": str(run_dir),
                "train.log_every": every,
                "train.max_steps": 8,
                "train.micro_batch_size": 4,  # with gradient accumulation
                "checkpoint.save_every": 0,
            }
        )
        pretrain(cfg)
        lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        lines = [{k: v for k, v in line.items() if k not in TIMINGS} for line in lines]
        weights = load_file(str(run_dir / "checkpoints" / "step-8" / "model.safetensors"))
        runs[every] = lines, weights
    (every_step, weights), (every_4, weights_4) = runs[1], runs[4]
    assert [line for line in every_step if "loss" not in line or line["step"] % 4 == 0] == every_4
    assert len(every_step) > len(every_4)
    assert weights.keys() == weights_4.keys() and all(torch.equal(weights[k], weights_4[k]) for k in weights)


def test_a_nonfinite_step_is_skipped_on_the_device_and_the_next_trains(tiny_config, device_reads) -> None:
    setup = build_setup(tiny_config(), init_distributed("cpu"))
    weight = setup.mlm.bert.encoder.layer[1].output.dense.weight
    poisoned = {2}  # the second step's gradient turns NaN
    calls = []

    def poison(grad: torch.Tensor) -> torch.Tensor:
        calls.append(len(calls) + 1)
        return grad * float("nan") if calls[-1] in poisoned else grad

    weight.register_hook(poison)

    def state_of() -> list[torch.Tensor]:
        optim = [t.clone() for s in setup.optimizer.state.values() for t in s.values()]
        return [p.detach().clone() for p in setup.mlm.parameters()] + optim

    results, states = [], []
    for _ in range(3):
        results.append(loop_module.train_step(setup, [next(setup.batches)], clock=lambda: 0.0))  # the recorded one
        states.append(state_of())
    assert device_reads["in_step"] == [] and device_reads["read_at"] == []  # nothing read so far
    assert setup.state.step == 3  # the skipped step is a step of the schedule
    assert all(torch.equal(a, b) for a, b in zip(states[1], states[0], strict=True))  # weights, moments, step counts
    assert not all(torch.equal(a, b) for a, b in zip(states[2], states[1], strict=True))
    readings = [result.read() for result in results]
    assert [r.skipped for r in readings] == [False, True, False]
    assert [(r.nonfinite_in_row, r.nonfinite_total) for r in readings] == [(0, 0), (1, 1), (0, 1)]
    assert all(torch.isfinite(p).all() for p in setup.mlm.parameters())


def test_max_nonfinite_stops_the_run_at_the_next_read(tiny_config, tmp_path: Path) -> None:
    absurd = {
        "optim.lr": 1e6,  # the weights blow up within a few steps: every later step is non-finite
        "optim.warmup_steps": 0,
        "optim.grad_clip": 0,
        "train.max_steps": 60,
        "train.max_nonfinite": 2,
        "train.log_every": 5,
        "train.eval_every": 0,
        "checkpoint.save_every": 0,
    }
    with pytest.raises(UserError, match=r"non-finite losses or gradients in a row by step (\d+)") as raised:
        pretrain(tiny_config(**absurd))
    stopped_at = int(raised.value.message.split("by step ")[1].split(";")[0])
    assert stopped_at % 5 == 0 and stopped_at < 60  # at a log step: at most log_every - 1 steps late
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    skipped = [line for line in lines if "nonfinite_skipped" in line]
    assert skipped and skipped[-1]["step"] == stopped_at and skipped[-1]["nonfinite_skipped"] >= 2
    assert all("loss" not in line or line["loss"] == line["loss"] for line in lines)  # no NaN loss logged
