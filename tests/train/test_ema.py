"""The moving average of the weights (train.ema): the weighted mean it claims, from the weights of each step; the
checkpoint's model when checkpoint.save_ema asks, loading as an ordinary masked LM; its figures beside the live
weights' in every evaluation; bad settings refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.ema import WeightAverage
from mlmtrain.train.loop import pretrain

from ..helpers import assert_one_error_line, metrics, run_cli, set_options, weights

DECAY = 0.5  # large steps of the average: four steps weigh visibly


def expected_average(steps: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    """sum_i (1 - d) d^(t-i) w_i / (1 - d^t) over the weights after steps 1..t, computed in float64."""
    last = len(steps)
    norm = 1 - decay**last
    return {
        name: sum((1 - decay) * decay ** (last - i) * step[name].double() for i, step in enumerate(steps, 1)) / norm
        for name in steps[0]
    }


def test_the_average_is_the_bias_corrected_weighted_mean_of_the_weights_after_each_step() -> None:
    layer = torch.nn.Linear(3, 2)
    average = WeightAverage(layer, 0.9)
    seen = []
    for step in range(5):
        with torch.no_grad():
            for param in layer.parameters():
                param.copy_(torch.randn_like(param) + step)
        average.update()
        seen.append({name: param.detach().clone() for name, param in layer.named_parameters()})
    expected = expected_average(seen, 0.9)
    with average.applied() as live:
        for name, param in layer.named_parameters():
            torch.testing.assert_close(param.double(), expected[name], rtol=1e-6, atol=1e-6)
    for name, param in layer.named_parameters():  # the live weights are back, bit for bit
        assert torch.equal(param, live[name]) and torch.equal(param, seen[-1][name])


def test_a_run_saves_the_average_as_its_checkpoints_model_and_evaluates_both(tiny_config) -> None:
    from transformers import AutoModelForMaskedLM

    cfg = tiny_config(
        **{
            "train.ema": DECAY,
            "checkpoint.save_ema": True,
            "train.max_steps": 4,
            "checkpoint.save_every": 1,
            "train.eval_every": 2,
        }
    )
    final = pretrain(cfg)
    run_dir = Path(cfg.train.run_dir)
    # each checkpoint's training state keeps the live weights of its step: the average of steps 1..4 from them
    live = [ckpt.load_training_state(run_dir / "checkpoints" / f"step-{step}")["live_weights"] for step in range(1, 5)]
    saved = weights(final)
    for name, tensor in expected_average(live, DECAY).items():
        torch.testing.assert_close(saved[name].double(), tensor, rtol=1e-6, atol=1e-6)
    assert not all(torch.equal(saved[name], live[-1][name]) for name in live[-1])  # not the live weights
    model = AutoModelForMaskedLM.from_pretrained(str(final))  # an ordinary masked-LM folder
    for name, param in model.named_parameters():
        if name in saved:
            assert torch.equal(param.detach(), saved[name]), name
    evaluated = [line for line in metrics(run_dir) if "eval_loss" in line]
    assert [line["step"] for line in evaluated] == [2, 4]
    assert all(line["ema_eval_loss"] != line["eval_loss"] for line in evaluated)
    # the card and the record rank the weights the checkpoint holds: the average's
    assert ckpt.load_training_state(final)["ema"]["updates"] == 4
    record = (final / "checkpoint.json").read_text()
    assert str(evaluated[-1]["ema_eval_loss"]) in record
    card = (final / "README.md").read_text()
    assert f"| validation perplexity | {evaluated[-1]['ema_eval_ppl']:.4f} |" in card


@pytest.mark.parametrize(
    "settings, needle",
    [
        ({"train.ema": 0}, "train.ema must be in (0, 1)"),
        ({"train.ema": 1}, "train.ema must be in (0, 1)"),
        ({"train.ema": 1.5}, "train.ema must be in (0, 1)"),
        ({"checkpoint.save_ema": True}, "checkpoint.save_ema is true but train.ema is null"),
    ],
)
def test_a_bad_average_setting_is_one_line_and_writes_nothing(
    settings: dict, needle: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **settings))
    assert code == 2
    assert_one_error_line(lines, needle)
    assert not run_dir.exists()
