"""Schedules over the budget: WSD (warm-up, stable, decay) as a function of the budget, a decay branched from any
checkpoint into a new run (the source run untouched), the masking rate moving over the run, and an exact resume with
each of them and with the moving average of the weights."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.masking import MaskingCollator, VocabInfo, scheduled_rate
from mlmtrain.errors import UserError
from mlmtrain.model.optim import learning_rate
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.loop import pretrain

from ..helpers import (
    assert_one_error_line,
    metrics,
    run_cli,
    set_options,
    snapshot,
    step_losses,
    tiny_overrides,
    weights,
)

WSD = {"optim.schedule": "wsd", "optim.decay_share": 0.5, "optim.warmup_steps": 2}
MASK_SCHEDULE = {"masking.schedule": "linear", "masking.mlm_probability": 0.3, "masking.mlm_probability_end": 0.1}


def wsd_rate(step: int, max_steps: int, **settings: object) -> float:
    """The wsd learning rate of `step` in a run of `max_steps` steps (warm-up 10 steps, peak 1e-3)."""
    cfg = load_config(None, {"optim.schedule": "wsd", "optim.lr": 1e-3, "optim.warmup_steps": 10, **settings})
    return learning_rate(step, step / max_steps, cfg.optim, warmup_end_progress=10 / max_steps)


def test_wsd_warms_up_holds_then_decays_over_the_last_share_of_the_budget() -> None:
    assert wsd_rate(0, 100) == pytest.approx(1e-3 / 11)  # warm-up as the other schedules warm up
    assert [wsd_rate(step, 100, **{"optim.decay_share": 0.2}) for step in (10, 50, 80)] == [1e-3] * 3  # stable
    assert wsd_rate(90, 100, **{"optim.decay_share": 0.2, "optim.decay_shape": "linear"}) == pytest.approx(5e-4)
    one_minus_sqrt = wsd_rate(90, 100, **{"optim.decay_share": 0.2, "optim.decay_shape": "1-sqrt"})
    assert one_minus_sqrt == pytest.approx(1e-3 * (1 - 0.5**0.5))  # falls faster at first, then slower
    ending = {"optim.decay_share": 0.2, "optim.min_lr_ratio": 0.1}
    assert wsd_rate(100, 100, **ending) == pytest.approx(1e-4)  # ends at lr x min_lr_ratio


def test_wsd_decay_follows_the_budget_so_a_branch_decays_at_its_own_end_and_a_longer_one_stays_stable() -> None:
    # a 1000-step run decays over its last 200 steps; branched at step 600 with a budget of 700 steps and a decay
    # share of 1/7, the branch holds the peak at 600 and decays from there to its own end
    assert wsd_rate(650, 1000) == 1e-3
    branch = {"optim.decay_share": 100 / 700, "optim.decay_shape": "linear"}
    assert wsd_rate(600, 700, **branch) == pytest.approx(1e-3)
    assert wsd_rate(650, 700, **branch) == pytest.approx(5e-4)
    assert wsd_rate(700, 700, **branch) == pytest.approx(0.0)
    # the same run resumed with its budget raised to 2000 steps is still stable where it would have decayed
    assert wsd_rate(900, 1000) < 1e-3 and wsd_rate(900, 2000) == 1e-3


def test_the_masking_rate_moves_over_the_steps_and_the_head_capacity_follows_it(tiny_data: Path) -> None:
    from mlmtrain.data.tokenizer import load_tokenizer

    cfg = load_config(None, {**MASK_SCHEDULE, "masking.mlm_probability": 0.5, "masking.mlm_probability_end": 0.05})
    assert [scheduled_rate(cfg.masking, step, 10) for step in (0, 5, 10)] == pytest.approx([0.5, 0.275, 0.05])
    cosine = load_config(None, {**MASK_SCHEDULE, "masking.schedule": "cosine"})
    assert scheduled_rate(cosine.masking, 5, 10) == pytest.approx(0.2)  # half-way on the cosine too
    assert scheduled_rate(cosine.masking, 1, 10) > 0.28  # a cosine leaves the start slowly
    vocab = VocabInfo.from_tokenizer(load_tokenizer(tiny_data / "tokenizer"))
    collator = MaskingCollator(vocab, cfg.masking, seed=0, positions=True, total_steps=10)
    blocks = torch.randint(5, vocab.vocab_size, (16, 64))

    def batch(step: int) -> dict[str, torch.Tensor]:
        return collator([{"input_ids": block, "epoch": 0, "index": i, "step": step} for i, block in enumerate(blocks)])

    first, last = batch(0), batch(9)
    share = [float((b["labels"] != -100).float().mean()) for b in (first, last)]
    assert share[0] == pytest.approx(0.5, abs=0.05) and share[1] == pytest.approx(0.095, abs=0.03), share
    assert len(last["selected_positions"]) < len(first["selected_positions"])  # the sparse head's rows shrink


def test_every_metrics_line_logs_the_masking_rate_of_its_step(tiny_config) -> None:
    cfg = tiny_config(**MASK_SCHEDULE)
    pretrain(cfg)
    rates = {line["step"]: line["mlm_probability"] for line in metrics(Path(cfg.train.run_dir)) if "loss" in line}
    assert sorted(rates) == list(range(1, 11))
    # the line of step s reports the step just taken (s - 1): the start, the middle and the last step
    assert rates[1] == pytest.approx(0.3) and rates[6] == pytest.approx(0.2) and rates[10] == pytest.approx(0.12)
    constant = tiny_config(**{"train.run_dir": str(Path(cfg.train.run_dir).parent / "constant")})
    pretrain(constant)
    assert {m.get("mlm_probability") for m in metrics(Path(constant.train.run_dir)) if "loss" in m} == {0.15}


# the moving average of the weights saved as each checkpoint's model: the live weights come back from the state
EMA = {"train.ema": 0.8, "checkpoint.save_ema": True}


@pytest.mark.parametrize("extra", [{}, EMA], ids=["schedules", "ema"])
def test_paused_and_resumed_with_wsd_and_a_masking_schedule_equals_an_uninterrupted_run(
    extra: dict, tiny_config, tmp_path: Path
) -> None:
    settings = {**WSD, **MASK_SCHEDULE, "data.num_workers": 2, **extra}  # the rates are drawn in the loader's workers
    whole = tiny_config(**{**settings, "train.run_dir": str(tmp_path / "whole")})
    pretrain(whole)
    paused_cfg = tiny_config(**{**settings, "train.run_dir": str(tmp_path / "paused"), "train.pause_after": 5})
    pretrain(paused_cfg)
    resumed = pretrain(paused_cfg, resume="auto")
    assert step_losses(tmp_path / "paused") == step_losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole" / "checkpoints" / "step-10"), weights(resumed)
    assert all(torch.equal(a[key], b[key]) for key in a)


@pytest.fixture(scope="module")
def source_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 10-step wsd run checkpointed at steps 5 and 10 (its decay starts at step 5)."""
    run_dir = tmp_path_factory.mktemp("branch") / "source"
    pretrain(load_config(None, tiny_overrides(tiny_data, **{**WSD, "train.run_dir": str(run_dir)})))
    return run_dir


def test_a_branch_continues_a_checkpoint_in_a_new_run_and_leaves_the_source_byte_identical(
    source_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(source_run)
    branch_dir = tmp_path / "decay"
    # the branch's own tokenizer and store folders: it writes the checkpoint's tokenizer there, never trains one
    options = set_options(
        tiny_data,
        branch_dir,
        **{**WSD, "train.max_steps": 8, "tokenizer.path": None, "data.store": None},
    )
    code, lines = run_cli(capsys, "pretrain", *options, "--branch-from", str(source_run / "checkpoints" / "step-5"))
    assert code == 0, lines
    assert snapshot(source_run) == before
    assert ckpt.latest_checkpoint(branch_dir).name == "step-8"
    rates = {line["step"]: line["lr"] for line in metrics(branch_dir) if "loss" in line}
    assert sorted(rates) == [6, 7, 8]  # it goes on from the checkpoint's step
    source_rates = {line["step"]: line["lr"] for line in metrics(source_run) if "loss" in line}
    assert rates[6] < source_rates[6] == 5e-4  # the decay sits at the branch's own end (step 4 of 8), not at 5 of 10
    # the whole training state came along: the branch steps exactly as the source resumed with its settings would
    resumed = shutil.copytree(source_run, tmp_path / "resumed", symlinks=True)
    cfg = load_config(None, tiny_overrides(tiny_data, **{**WSD, "train.max_steps": 8, "train.run_dir": str(resumed)}))
    pretrain(cfg, resume=str(resumed / "checkpoints" / "step-5"))
    a, b = weights(branch_dir / "checkpoints" / "step-8"), weights(resumed / "checkpoints" / "step-8")
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_a_decay_branched_from_the_stable_phase_is_the_run_planned_for_its_budget_to_the_bit(
    source_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # "Decay branched at 50 % vs a run planned for that budget": the source (10 steps, stable up to step 5) branched
    # at step 5 with a budget of 8 steps decays over steps 5-8 as a run planned for 8 steps from the start does (its
    # stable phase ends at step 4 of 8: the steps before it ran at the same peak in both). Under step budgets the two
    # are one run: weights equal to the bit, so a stable run's checkpoints are as good as planned runs of any budget
    # whose decay starts after them.
    branch_dir = tmp_path / "branched"
    options = set_options(
        tiny_data, branch_dir, **{**WSD, "train.max_steps": 8, "tokenizer.path": None, "data.store": None}
    )
    code, lines = run_cli(capsys, "pretrain", *options, "--branch-from", str(source_run / "checkpoints" / "step-5"))
    assert code == 0, lines
    planned = tmp_path / "planned"
    pretrain(
        load_config(None, tiny_overrides(tiny_data, **{**WSD, "train.max_steps": 8, "train.run_dir": str(planned)}))
    )
    branched_losses = {line["step"]: line["loss"] for line in metrics(branch_dir) if "loss" in line}
    planned_losses = {line["step"]: line["loss"] for line in metrics(planned) if "loss" in line}
    assert branched_losses == {step: planned_losses[step] for step in (6, 7, 8)}
    a, b = weights(branch_dir / "checkpoints" / "step-8"), weights(planned / "checkpoints" / "step-8")
    assert all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("optim.decay_share", 0, "optim.decay_share must be in (0, 1)"),
        ("optim.decay_share", 1, "optim.decay_share must be in (0, 1)"),
        ("masking.mlm_probability_end", 1.0, "masking.mlm_probability_end must be in (0, 1)"),
        ("masking.mlm_probability_end", 0, "masking.mlm_probability_end must be in (0, 1)"),
    ],
)
def test_a_schedule_out_of_its_range_is_refused_in_one_line(
    key: str, value: float, needle: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    options = set_options(tiny_data, run_dir, **{**WSD, **MASK_SCHEDULE, key: value})
    code, lines = run_cli(capsys, "pretrain", *options)
    assert code == 2
    assert_one_error_line(lines, needle)
    assert not run_dir.exists()


def test_a_masking_schedule_without_its_end_or_its_steps_is_refused() -> None:
    with pytest.raises(UserError, match="mlm_probability_end is null but masking.schedule is cosine"):
        load_config(None, {"masking.schedule": "cosine"})
    with pytest.raises(UserError, match="mlm_probability_end is set but masking.schedule is constant"):
        load_config(None, {"masking.mlm_probability_end": 0.1})
    with pytest.raises(UserError, match="masking.schedule .linear. follows the steps of train.max_steps"):
        load_config(None, {**MASK_SCHEDULE, "train.max_steps": None, "train.max_time": "1m"})


def test_bad_branches_are_refused_in_one_line_and_write_nothing(
    source_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(source_run)
    step_5 = source_run / "checkpoints" / "step-5"
    unfinished = shutil.copytree(step_5, tmp_path / "unfinished")
    (unfinished / ckpt.COMPLETE).unlink()
    new = tmp_path / "new"
    cases = [
        (set_options(tiny_data, new, **WSD), ["--branch-from", str(tmp_path / "nowhere")], "no such folder"),
        (set_options(tiny_data, new, **WSD), ["--branch-from", str(unfinished)], "not a complete checkpoint"),
        (set_options(tiny_data, new, **WSD), ["--branch-from", str(tmp_path)], "not a complete checkpoint"),
        (
            set_options(tiny_data, new, **{**WSD, "model.num_layers": 3}),
            ["--branch-from", str(step_5)],
            "num_layers",
        ),
        (
            set_options(tiny_data, new, **{**WSD, "train.objective": "mlm+sop"}),
            ["--branch-from", str(step_5)],
            "branch with train.objective: mlm",
        ),
        (set_options(tiny_data, new, **WSD), ["--branch-from", str(step_5), "--resume", "auto"], "pass one of them"),
        (
            set_options(tiny_data, source_run, **WSD),
            ["--branch-from", str(source_run / "checkpoints" / "latest")],
            "a branch never writes into the run it starts from",
        ),
    ]
    for options, extra, needle in cases:
        code, lines = run_cli(capsys, "pretrain", *options, *extra)
        assert code == 2, (extra, lines)
        line = assert_one_error_line(lines, needle)
        assert "--overwrite" not in line  # the new folder holds nothing to overwrite: the fix is another checkpoint
        assert not new.exists(), extra
    assert snapshot(source_run) == before


def test_a_branch_inside_its_source_run_or_through_a_link_into_it_is_refused(
    source_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The branch's train.run_dir may not be the source run, lie inside it (RUN/branch-a), also through a link into
    it, nor hold it: one line naming the fix, the source byte for byte as it was. The fix (a new folder outside it)
    is what test_a_branch_continues_a_checkpoint_in_a_new_run_and_leaves_the_source_byte_identical follows."""
    before = snapshot(source_run)
    (tmp_path / "link").symlink_to(source_run)
    step_5 = str(source_run / "checkpoints" / "step-5")
    cases = {
        source_run / "branch-a": "lies inside the run",
        tmp_path / "link" / "branch-b": f"(it leads to {source_run.resolve() / 'branch-b'}) lies inside the run",
        source_run / "checkpoints" / "branch-c": "lies inside the run",
        source_run.parent: "holds the run",
    }
    for run_dir, needle in cases.items():
        options = set_options(tiny_data, run_dir, **{**WSD, "tokenizer.path": None, "data.store": None})
        code, lines = run_cli(capsys, "pretrain", *options, "--branch-from", step_5)
        assert code == 2, (run_dir, lines)
        assert_one_error_line(lines, f"train.run_dir {run_dir}", needle, "--set train.run_dir=NEW")
    assert snapshot(source_run) == before


def test_a_masking_schedule_beside_a_flop_budget_names_a_fix_that_loads(tiny_config, tmp_path: Path) -> None:
    """masking.schedule follows train.max_steps, which a FLOP budget leaves null; the first fix named used to be
    "set train.max_steps", which train.max_flops then refused. Each fix named now loads, and the first one trains."""
    settings = {**MASK_SCHEDULE, "train.max_flops": 1e9}
    fixes = "set train.max_steps in place of train.max_flops, or masking.schedule: constant without masking.mlm_prob"
    with pytest.raises(UserError, match=fixes):
        load_config(None, settings)
    in_place = {**MASK_SCHEDULE, "train.max_steps": 2, "train.run_dir": str(tmp_path / "run")}
    assert pretrain(tiny_config(**in_place)).name == "step-2"
    assert load_config(None, {**settings, "masking.schedule": "constant", "masking.mlm_probability_end": None})
