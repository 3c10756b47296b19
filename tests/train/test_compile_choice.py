"""train.compile: auto — on the CPU where a compiler works and the whole budget repays compiling, off otherwise,
with the reason the start line prints; true and false as said. The compiler's probe is stubbed at its boundary
(`cpu_compiler_works`), so these run in milliseconds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

import pytest
import torch

from mlmtrain.config import TrainConfig
from mlmtrain.train import compiling
from mlmtrain.train.compiling import COMPILE_MIN_FLOPS, COMPILE_MIN_SECONDS, choose_compile, planned_flops

CPU = torch.device("cpu")
TOKENS_PER_STEP = 32 * 128
LONG_STEPS = int(COMPILE_MIN_FLOPS / (TOKENS_PER_STEP * 4e7)) + 1  # mini's ~4e7 FLOPs a token: just long enough


def _probe(answer: Optional[str], calls: list[int]) -> Callable[[], Optional[str]]:
    def probe() -> Optional[str]:
        calls.append(1)
        return answer

    return probe


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> Callable[[Optional[str]], list[int]]:
    """compiler(None): a compiler works here; compiler("why"): it does not. Returns the list of the probe's calls."""

    def stub(answer: Optional[str]) -> list[int]:
        calls: list[int] = []
        monkeypatch.setattr(compiling, "cpu_compiler_works", _probe(answer, calls))
        return calls

    return stub


def _choose(device: torch.device = CPU, **train: object):
    return choose_compile(TrainConfig(**{"compile": "auto", **train}), device, TOKENS_PER_STEP, 4e7)


def test_auto_compiles_a_long_run_where_a_compiler_works(compiler) -> None:
    calls = compiler(None)
    choice = _choose(max_steps=LONG_STEPS)
    assert choice.on and calls == [1]
    assert choice.line().startswith("compile: on (auto: a C++ compiler works here")


def test_auto_stays_eager_without_a_working_compiler_and_says_why(compiler) -> None:
    compiler("no C++ compiler works here")
    choice = _choose(max_steps=LONG_STEPS)
    assert not choice.on
    assert choice.line() == "compile: off (auto: no C++ compiler works here)"


@pytest.mark.parametrize(
    "budget",
    [
        {"max_steps": LONG_STEPS - 2},
        {"max_steps": None, "max_tokens": 1000},
        {"max_steps": None, "max_flops": COMPILE_MIN_FLOPS / 2},
        {"max_steps": LONG_STEPS, "max_time": COMPILE_MIN_SECONDS - 1},  # the first budget spent ends the run
        {"max_steps": None, "max_time": "5m"},
    ],
    ids=["steps", "tokens", "flops", "steps-and-time", "time"],
)
def test_auto_stays_eager_for_a_short_budget_without_probing(compiler, budget: dict) -> None:
    calls = compiler(None)
    choice = _choose(**budget)
    assert not choice.on and calls == []  # no compiler probed for a run too short to use it
    assert "too short to repay compiling" in choice.reason


def test_auto_compiles_a_long_time_budget(compiler) -> None:
    compiler(None)
    assert _choose(max_steps=None, max_time="2h").on


def test_true_and_false_are_as_said_and_auto_stays_off_on_a_gpu(compiler) -> None:
    calls = compiler("no C++ compiler works here")
    assert choose_compile(TrainConfig(compile=True, max_steps=1), CPU, TOKENS_PER_STEP, 4e7).on
    assert not choose_compile(TrainConfig(compile=False, max_steps=LONG_STEPS), CPU, TOKENS_PER_STEP, 4e7).on
    assert not _choose(torch.device("cuda"), max_steps=LONG_STEPS).on
    assert calls == []


def test_planned_flops_is_the_smallest_work_budget() -> None:
    train = TrainConfig(max_steps=10, max_tokens=TOKENS_PER_STEP * 5)
    assert planned_flops(train, TOKENS_PER_STEP, 2.0) == TOKENS_PER_STEP * 5 * 2.0
    assert planned_flops(TrainConfig(max_steps=None, max_time="1h"), TOKENS_PER_STEP, 2.0) is None


def test_the_start_line_says_what_auto_chose(tiny_config, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A short run under auto trains eagerly and says so in one line; its steps are the eager run's."""
    from mlmtrain.train.loop import pretrain

    pretrain(tiny_config(**{"train.run_dir": str(tmp_path / "run"), "train.max_steps": 1, "train.compile": "auto"}))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("compile:")]
    assert len(lines) == 1 and lines[0].startswith("compile: off (auto: the budget, "), lines
