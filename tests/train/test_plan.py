"""How long a run will take and what ended it: the forecast from the measured rate, the plan line, the budget named
at the end, every step in metrics.jsonl, and a warm-up that stretches with a time budget."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from mlmtrain.config import load_config
from mlmtrain.data.blocks import BatchRamp
from mlmtrain.report.health import run_checks
from mlmtrain.report.rundata import load_run
from mlmtrain.runtime.progress import duration
from mlmtrain.train.budget import Budget
from mlmtrain.train.loop import pretrain
from mlmtrain.train.plan import Forecast, RateMeter, forecast
from mlmtrain.train.step import TrainState

from ..helpers import metrics


@pytest.mark.parametrize(
    ("budgets", "expected"),
    [
        (["train.max_steps=1000"], Forecast("train.max_steps", 1000, 900 / 2)),
        (["train.max_steps=1000", "train.max_time=1000"], Forecast("train.max_steps", 1000, 450)),
        (["train.max_steps=1000", "train.max_time=20"], Forecast("train.max_time", 100 + 20, 10)),
        (["train.max_steps=null", "train.max_tokens=400000"], Forecast("train.max_tokens", 400, 150)),
        (["train.max_steps=null", "train.max_flops=4e9"], Forecast("train.max_flops", 400, 150)),
    ],
)
def test_the_forecast_names_the_budget_that_ends_the_run_first(budgets: list[str], expected: Forecast) -> None:
    """100 steps of 1,000 tokens (10 MFLOPs each) done in 10 s: 2 steps/s from here on."""
    state = TrainState(step=100, tokens=100_000, flops=1_000_000_000, elapsed_s=10.0)
    assert forecast(Budget(load_config(None, budgets)), state, 2.0, 1000.0) == expected
    assert forecast(Budget(load_config(None, budgets)), state, 0.0, 1000.0) is None  # no rate yet: no forecast


@pytest.mark.parametrize("budgets", [["train.max_steps=null", "train.max_tokens=30000"], ["train.max_steps=130"]])
def test_the_forecast_counts_the_steps_of_a_batch_warm_up_at_their_own_sizes(budgets: list[str]) -> None:
    """A batch that grows from 4 to 32 blocks of 10 tokens over the first 20,000 tokens, 4 blocks a step at a time:
    three small steps measured at 4 steps/s must not make the steps ahead small too."""
    ramp = BatchRamp(32, 4, start=4, warmup_tokens=20_000, block_tokens=10)
    done = 3
    state = TrainState(step=done, tokens=int(ramp.tokens_of(0, done)), flops=0, elapsed_s=1.0)
    tokens_per_step = state.tokens / done
    plan = forecast(Budget(load_config(None, budgets)), state, 4.0, tokens_per_step, ramp)
    step, tokens = done, state.tokens  # the true end: walk the ramp's steps until the budget is spent
    while (tokens < 30_000) if "train.max_tokens=30000" in budgets else (step < 130):
        tokens += ramp.size(step) * 10
        step += 1
    assert len(ramp.table) < step < len(ramp.table) + 60 and plan.final_step == step  # past the warm-up, soon
    assert plan.seconds_left == pytest.approx((tokens - state.tokens) / (4.0 * tokens_per_step), rel=0.01)
    unramped = forecast(Budget(load_config(None, budgets)), state, 4.0, tokens_per_step)
    if "train.max_steps=130" in budgets:  # what the plan line said before it knew of the ramp: too little time ...
        assert unramped.seconds_left < plan.seconds_left / 2
    else:  # ... or too many steps
        assert unramped.final_step > 2 * plan.final_step


def test_a_run_in_its_batch_warm_up_plans_the_steps_it_then_takes(
    tiny_config: Callable, capsys: pytest.CaptureFixture
) -> None:
    settings = {"train.max_steps": None, "train.max_tokens": 40_000, "train.eval_every": 0, "train.log_every": 1}
    warm_up = {"train.batch_size": 16, "train.micro_batch_size": 2, "train.batch_size_start": 2}
    warm_up["train.batch_warmup_tokens"] = 30_000
    run_dir = Path(pretrain(tiny_config(**settings, **warm_up, **{"checkpoint.save_every": 0}))).parent.parent
    planned = re.search(r"plan: ([\d,]+) steps, until train.max_tokens", capsys.readouterr().err)
    tokens = [0] + [line["tokens"] for line in metrics(run_dir) if "loss" in line]
    sizes = [after - before for before, after in zip(tokens, tokens[1:], strict=False)]
    assert planned and int(planned[1].replace(",", "")) == len(sizes)  # the steps it planned, it took
    assert sizes[30] < sizes[-1]  # the plan (after the first 25 steps) was made while the batch still grew


def test_the_rate_leaves_out_the_first_steps_and_waits_for_enough_steps() -> None:
    meter = RateMeter(min_steps=3, min_seconds=100.0, skip=2)
    meter.add(10.0, 64)  # the first steps are slow: left out
    meter.add(50.0, 64)  # the clock starts here
    for now in (51.0, 51.5, 52.0):
        assert not meter.ready()
        meter.add(now, 64)
    assert meter.ready() and meter.steps_per_s() == 1.5 and meter.tokens_per_step() == 64
    assert [duration(s) for s in (42, 600, 9000)] == ["42 s", "10 min", "2.5 h"]


def test_a_run_plans_names_what_ended_it_and_logs_its_last_steps(
    tiny_config: Callable, capsys: pytest.CaptureFixture
) -> None:
    settings = {"train.max_steps": 33, "train.log_every": 10, "train.eval_every": 0, "checkpoint.save_every": 0}
    run_dir = Path(pretrain(tiny_config(**settings))).parent.parent
    err = capsys.readouterr().err
    assert "plan: 33 steps, until train.max_steps ends the run, at" in err
    assert "until train.max_steps ended the run" in err
    logged = [line["step"] for line in metrics(run_dir) if "loss" in line]
    assert logged == [10, 20, 30, 33]  # the last three steps have their line, as the full windows do


def test_a_time_budget_stretches_the_warm_up_and_a_run_ending_inside_its_warm_up_is_flagged(
    tiny_config: Callable, capsys: pytest.CaptureFixture, ticking_clock: None
) -> None:
    """Warm-up of 20,000 of 100,000 planned steps under 3 seconds: it takes the first 20 % of the time, the rate
    reaches its peak and decays; with no step budget beside the time, the run ends inside its warm-up, which
    the health checks flag."""
    common = {"train.max_time": 3, "optim.warmup_steps": 20_000, "optim.lr": 1e-3, "train.eval_every": 0}
    run_dir = Path(pretrain(tiny_config(**common, **{"train.max_steps": 100_000}))).parent.parent
    assert "until train.max_time ended the run" in capsys.readouterr().err
    rates = [line["lr"] for line in metrics(run_dir) if "lr" in line]
    assert max(rates) > 0.5e-3 and rates[-1] < 0.2e-3  # step-counted, 20,000 steps would keep it below 1e-5
    assert {v.check: v.status for v in run_checks(load_run(run_dir))}["warm-up"] != "FAIL"

    inside = Path(pretrain(tiny_config(**common, **{"train.max_steps": None, "train.run_dir": str(run_dir) + "-2"})))
    verdict = {v.check: v for v in run_checks(load_run(inside.parent.parent))}["warm-up"]
    assert verdict.status == "FAIL" and "inside its warm-up of 20,000 steps" in verdict.message, verdict
