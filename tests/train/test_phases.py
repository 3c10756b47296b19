"""Phases (config phases:): each trains from its first step under its own settings (masking, blocks, the learning
rate's wsd decay), its end kept as checkpoints/phase-NAME past checkpoint.keep_last; a run paused or killed at a
boundary or inside a phase resumes to the same losses; --branch-from a phase's end starts the next phase of another
recipe and leaves the source as it was; a context extension with a ModernBERT's rotary base raised loads in
transformers at the new length; `config show` and `config fields` say what each phase sets; bad phases are one line.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from mlmtrain.cli.app import main
from mlmtrain.config import Config, load_config, published_yaml
from mlmtrain.report.page import check_runs
from mlmtrain.report.rundata import load_run
from mlmtrain.runtime.progress import Reporter
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.budget import Budget
from mlmtrain.train.loop import pretrain
from mlmtrain.train.model_card import write_model_card
from mlmtrain.train.plan import forecast
from mlmtrain.train.step import TrainState

from ..helpers import (
    assert_one_error_line,
    finish,
    metrics,
    one_thread,
    output,
    run_cli,
    set_options,
    snapshot,
    start_pretrain,
    tiny_overrides,
    wait_for,
)

# a stable phase at 30 % masking, a context extension to blocks of 64, a decay at 15 % on blocks of 32 again
PHASES = [
    {"name": "stable", "max_steps": 6, "set": {"masking.mlm_probability": 0.3}},
    {"name": "long", "max_steps": 4, "set": {"data.seq_len": 64}},
    {"name": "decay", "max_steps": 4, "set": {"masking.mlm_probability": 0.15, "data.seq_len": 32}},
]
# phases set the length (train.max_steps null); evaluated and saved every 3 steps, so both fall inside phases too
RUN = {
    "train.max_steps": None,
    "optim.schedule": "wsd",
    "train.eval_every": 3,
    "checkpoint.save_every": 3,
    "checkpoint.keep_last": 1,
}
PEAK = 5e-4  # optim.lr's default


def phases_file(folder: Path, phases: list[dict[str, Any]]) -> Path:
    """A config file that holds `phases:` alone (the rest comes from --set options)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "phases.yaml"
    path.write_text(yaml.safe_dump({"phases": phases}))
    return path


def phased(data: Path, run_dir: Path, phases: list[dict[str, Any]] = PHASES, **overrides: Any) -> Config:
    """The tiny config training in run_dir in `phases`."""
    options = tiny_overrides(data, **{**RUN, "train.run_dir": str(run_dir), **overrides})
    return load_config(phases_file(run_dir.parent / f"{run_dir.name}-config", phases), options)


def training_lines(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {line["step"]: line for line in metrics(run_dir) if "loss" in line}


def evaluations(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {line["step"]: line for line in metrics(run_dir) if "eval_loss" in line}


def assert_same_losses(run_dir: Path, reference: Path) -> None:
    """Every training and validation loss run_dir logged (its killed or paused parts too) is the reference run's."""
    losses, evals = training_lines(reference), evaluations(reference)
    for line in metrics(run_dir):
        if "loss" in line:
            assert line["loss"] == losses[line["step"]]["loss"], line
        if "eval_loss" in line:
            assert line["eval_loss"] == evals[line["step"]]["eval_loss"], line


def printed(capsys: pytest.CaptureFixture, *args: str) -> str:
    """What `mlmtrain ARGS`, run in-process, prints on stdout (it must succeed)."""
    capsys.readouterr()
    main(list(args))
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def phased_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three phases run once without a stop (read it, never change it)."""
    run_dir = tmp_path_factory.mktemp("phased") / "run"
    with one_thread():
        pretrain(phased(tiny_data, run_dir))
    return run_dir


# ---------------------------------------------------------------------------------------------
# Each phase from its first step


def test_each_phase_trains_under_its_settings_from_its_first_step(phased_run: Path) -> None:
    lines = training_lines(phased_run)
    assert sorted(lines) == list(range(1, 15))
    expected = {"stable": (range(1, 7), 0.3, 32), "long": (range(7, 11), 0.3, 64), "decay": (range(11, 15), 0.15, 32)}
    for phase, (steps, rate, length) in expected.items():
        for step in steps:
            line = lines[step]
            assert (line["phase"], line["mlm_probability"], line["seq_len"]) == (phase, rate, length), line
            # the blocks really are of that length: each step of 8 blocks adds 8 x seq_len tokens
            assert line["tokens"] - (lines[step - 1]["tokens"] if step > 1 else 0) == 8 * length, line
    # evaluations run at the phase's length and say so
    evals = evaluations(phased_run)
    assert {step: (line["phase"], line["seq_len"]) for step, line in evals.items()} == {
        3: ("stable", 32),
        6: ("stable", 32),
        9: ("long", 64),
        10: ("long", 64),  # a phase's end is evaluated
        12: ("decay", 32),
        14: ("decay", 32),
    }
    # wsd: warm-up over 2 steps, the peak until the last phase, which decays over its 4 steps as 1 - sqrt(t)
    lr = {step: line["lr"] for step, line in lines.items()}
    assert [lr[step] for step in (1, 2)] == pytest.approx([PEAK / 3, 2 * PEAK / 3])
    assert all(lr[step] == pytest.approx(PEAK) for step in range(3, 12))
    for step in range(11, 15):  # a step's rate is set before it, at the share of the phase done: 0, 1/4, 2/4, 3/4
        assert lr[step] == pytest.approx(PEAK * (1 - math.sqrt((step - 11) / 4))), step


def test_each_phase_end_is_kept_past_keep_last_and_the_card_names_the_longest_length(phased_run: Path) -> None:
    root = ckpt.checkpoints_dir(phased_run)
    assert sorted(p.name for p in root.iterdir()) == ["latest", "phase-decay", "phase-long", "phase-stable", "step-14"]
    for name, step in {"phase-stable": 6, "phase-long": 10, "phase-decay": 14}.items():
        assert ckpt.recorded_step(root / name) == step
        assert ckpt.load_training_state(root / name)["train_state"]["step"] == step
    card = (root / "step-14" / "README.md").read_text()
    assert "- blocks of 32 tokens in phase stable, 64 in long, 32 in decay, packed" in card
    assert "- longest trained length: 64 tokens" in card and "| phases | stable, long, decay |" in card
    assert "- longest trained length: 32 tokens" in (root / "phase-stable" / "README.md").read_text()
    # the run's config is the one it was given, its phases in it; each phase's settings are in the checkpoints'
    saved = load_config(phased_run / "mlmtrain.yaml")
    assert saved.masking.mlm_probability == 0.15 and [p.name for p in saved.phases] == ["stable", "long", "decay"]


def test_a_phase_of_other_training_text_is_published_by_its_name(
    phased_run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    books = tmp_path / "private" / "books.txt"
    phases = [*PHASES[:2], {**PHASES[2], "set": {**PHASES[2]["set"], "data.train": str(books)}}]
    cfg = phased(tiny_data, tmp_path / "run", phases)
    assert yaml.safe_load(published_yaml(cfg))["phases"][2]["set"]["data.train"] == "books.txt"
    folder = Path(shutil.copytree(ckpt.checkpoints_dir(phased_run) / "step-14", tmp_path / "step-14"))
    card = write_model_card(folder, cfg, 14, {"tokens": 4608}, {"train_state": {"phase": 2}}, phased_run).read_text()
    assert "- training: `train.txt` in phase stable; `train.txt` in phase long; `books.txt` in phase decay\n" in card
    assert str(tmp_path) not in card


def test_a_phase_that_sets_optim_decay_decays_and_the_phases_after_it_stay_at_the_end(
    tiny_data: Path, tmp_path: Path
) -> None:
    phases = [
        {"name": "stable", "max_steps": 4},
        {"name": "anneal", "max_steps": 4, "set": {"optim.decay": True, "optim.decay_shape": "linear"}},
        {"name": "after", "max_steps": 2, "set": {"masking.mlm_probability": 0.2}},
    ]
    run_dir = tmp_path / "run"
    settings = {"optim.min_lr_ratio": 0.1, "train.eval_every": 0, "checkpoint.save_every": 0}
    with one_thread():
        pretrain(phased(tiny_data, run_dir, phases, **settings))
    lr = {step: line["lr"] for step, line in training_lines(run_dir).items()}
    low = 0.1 * PEAK
    assert [lr[step] for step in range(5, 9)] == pytest.approx([low + (PEAK - low) * (1 - t / 4) for t in range(4)])
    assert [lr[9], lr[10]] == pytest.approx([low, low])


def test_a_phase_probes_at_its_own_cadence(tiny_data: Path, tmp_path: Path) -> None:
    for split, count in (("train", 12), ("valid", 6), ("test", 6)):  # a task of two labels, its words the corpus's
        rows = [{"text": f"the quick fox {'jumps' if i % 2 else 'sleeps'} here", "label": i % 2} for i in range(count)]
        (tmp_path / "task").mkdir(exist_ok=True)
        (tmp_path / "task" / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    phases = [{"name": "stable", "max_steps": 4}, {"name": "decay", "max_steps": 4, "set": {"probe.every": 2}}]
    probe = {"probe.task": str(tmp_path / "task"), "probe.every": 4, "probe.max_length": 16, "probe.batch_size": 6}
    run_dir = tmp_path / "run"
    with one_thread():
        pretrain(phased(tiny_data, run_dir, phases, **probe, **{"train.eval_every": 0, "checkpoint.save_every": 0}))
    assert [line["step"] for line in metrics(run_dir) if "probe_seconds" in line] == [4, 6, 8]


def test_report_check_passes_on_a_run_of_phases(phased_run: Path, capsys: pytest.CaptureFixture) -> None:
    failed = check_runs([phased_run], ["report.tokens_per_param=0.1"])  # a tiny run is short of tokens by design
    said = capsys.readouterr().out
    assert not failed and "note:" not in said, said
    assert "warm-up takes 2 of 14 steps" in said and "in phase decay" in said
    phases = load_run(phased_run).phases
    assert [(p.name, p.steps, p.tokens, p.seq_lens, p.mlm_probabilities) for p in phases] == [
        ("stable", 6, 6 * 8 * 32, [32], [0.3]),
        ("long", 4, 4 * 8 * 64, [64], [0.3]),
        ("decay", 4, 4 * 8 * 32, [32], [0.15]),
    ]


# ---------------------------------------------------------------------------------------------
# Resume: paused in-process at a boundary and inside a phase, killed in a process at both


@pytest.mark.parametrize("pause", [6, 8], ids=["at-the-boundary", "inside-a-phase"])
def test_a_run_stopped_at_a_boundary_or_inside_a_phase_resumes_to_the_same_losses(
    pause: int, phased_run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    with one_thread():
        assert pretrain(phased(tiny_data, run_dir, **{"train.pause_after": pause})).name == f"step-{pause}"
        kept = ckpt.checkpoints_dir(run_dir) / "phase-stable"
        if pause == 6:  # as a kill between the phase's last save and its keeping leaves it
            shutil.rmtree(kept)
        pretrain(load_config(run_dir / "mlmtrain.yaml"), "auto")
    assert_same_losses(run_dir, phased_run)
    assert sorted(training_lines(run_dir)) == list(range(1, 15))
    assert ckpt.recorded_step(kept) == 6  # kept on the resume, when the stop came before


def test_a_finished_run_of_phases_trains_further_in_a_phase_added_to_its_config(
    phased_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = Path(shutil.copytree(phased_run, tmp_path / "run", symlinks=True))
    capsys.readouterr()
    with one_thread():
        pretrain(load_config(run_dir / "mlmtrain.yaml"), "auto")
    assert "nothing to train: raise the last phase's budget, or add a phase, in the config" in capsys.readouterr().err
    more = [*PHASES, {"name": "more", "max_steps": 2, "set": {"masking.mlm_probability": 0.2}}]
    with one_thread():
        pretrain(phased(tiny_data, run_dir, more), "auto")
    said = capsys.readouterr().err
    assert "(phases: stable, long, decay -> stable, long, decay, more (names, budgets or set:))" in said, said
    lines = training_lines(run_dir)
    assert [(lines[step]["phase"], lines[step]["mlm_probability"]) for step in (15, 16)] == [("more", 0.2)] * 2
    assert ckpt.recorded_step(ckpt.checkpoints_dir(run_dir) / "phase-more") == 16


# for the kills: a long phase of 9 steps, checkpoints 3 steps apart (at 9 and 12 inside it), so that a kill as soon as
# a checkpoint appears lands before the next one, however slow the machine
KILLED_PHASES = [PHASES[0], {**PHASES[1], "max_steps": 9}, {**PHASES[2], "max_steps": 3}]


@pytest.mark.slow
def test_kill_9_at_a_phase_boundary_and_inside_a_phase_then_resume_gives_the_same_losses(
    tiny_data: Path, tmp_path: Path
) -> None:
    whole = tmp_path / "whole"
    with one_thread():
        pretrain(phased(tiny_data, whole, KILLED_PHASES))
    run_dir = tmp_path / "killed"
    options = ("--config", str(phases_file(tmp_path / "config", KILLED_PHASES)))
    root = ckpt.checkpoints_dir(run_dir)
    # killed as soon as the stable phase's end is kept: the newest checkpoint is the boundary's
    process = start_pretrain(tiny_data, run_dir, *options, **RUN)
    wait_for(lambda: (root / "phase-stable" / ckpt.COMPLETE).exists(), process, run_dir)
    process.send_signal(signal.SIGKILL)
    assert finish(process, run_dir) == -signal.SIGKILL, output(run_dir)
    assert ckpt.latest_checkpoint(run_dir).name == "step-6", output(run_dir)
    # resumed from the boundary, killed once a checkpoint inside the long phase (steps 7 to 15) is saved
    process = start_pretrain(tiny_data, run_dir, *options, "--resume", **RUN)
    wait_for(lambda: (root / "step-9" / ckpt.COMPLETE).exists(), process, run_dir)
    process.send_signal(signal.SIGKILL)
    assert finish(process, run_dir) == -signal.SIGKILL, output(run_dir)
    assert ckpt.latest_checkpoint(run_dir).name in ("step-9", "step-12"), output(run_dir)
    process = start_pretrain(tiny_data, run_dir, *options, "--resume", **RUN)
    assert finish(process, run_dir) == 0, output(run_dir)
    assert_same_losses(run_dir, whole)
    assert sorted(training_lines(run_dir)) == sorted(training_lines(whole)) == list(range(1, 19))
    assert [ckpt.recorded_step(root / f"phase-{name}") for name in ("stable", "long", "decay")] == [6, 15, 18]


# ---------------------------------------------------------------------------------------------
# Branching from a phase's end


def test_branching_from_a_phase_end_starts_the_next_phase_and_leaves_the_source_untouched(
    phased_run: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = snapshot(phased_run)
    stable = ckpt.checkpoints_dir(phased_run) / "phase-stable"
    anneal = [PHASES[0], {"name": "anneal", "max_steps": 4, "set": {"masking.mlm_probability": 0.2}}]
    run_dir = tmp_path / "anneal"
    with one_thread():
        pretrain(phased(tiny_data, run_dir, anneal), branch_from=str(stable))
    lines = training_lines(run_dir)
    assert sorted(lines) == [7, 8, 9, 10]
    assert {(line["phase"], line["mlm_probability"]) for line in lines.values()} == {("anneal", 0.2)}
    assert [lines[step]["lr"] for step in range(7, 11)] == pytest.approx(
        [PEAK * (1 - math.sqrt(t / 4)) for t in range(4)]  # wsd decays over the last phase, anneal
    )
    assert ckpt.recorded_step(ckpt.checkpoints_dir(run_dir) / "phase-anneal") == 10
    # a recipe of phases the source never had starts its first phase at the checkpoint, its schedule from there
    other = tmp_path / "other"
    phases = [{"name": "domain", "max_steps": 4}]
    with one_thread():
        pretrain(phased(tiny_data, other, phases, **{"optim.schedule": "linear"}), branch_from=str(stable))
    lr = [line["lr"] for line in training_lines(other).values()]
    assert lr == pytest.approx([PEAK * (1 - t / 4) for t in range(4)])
    assert snapshot(phased_run) == source  # the source run, byte for byte

    # a resume into phases that lack the checkpoint's is refused before anything is written
    code, lines = run_cli(
        capsys,
        "pretrain",
        "--config",
        str(phases_file(tmp_path / "domain-config", phases)),
        *set_options(tiny_data, run_dir, **RUN),
        "--resume",
        str(ckpt.checkpoints_dir(run_dir) / "step-10"),
    )
    assert code == 2
    assert_one_error_line(lines, "in phase anneal", "phases are domain", "its mlmtrain.yaml", "--branch-from")


# ---------------------------------------------------------------------------------------------
# A context extension


def test_a_context_extension_phase_saves_a_model_transformers_runs_at_the_new_length(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from transformers import AutoModelForMaskedLM

    phases = [
        {"name": "stable", "max_steps": 3},
        {"name": "long", "max_steps": 2, "set": {"data.seq_len": 64, "model.global_rope_theta": 320000}},
    ]
    run_dir = tmp_path / "run"
    with one_thread():
        final = pretrain(phased(tiny_data, run_dir, phases, **{"model.architecture": "modernbert"}))
    kept = ckpt.checkpoints_dir(run_dir) / "phase-long"
    assert ckpt.recorded_step(kept) == ckpt.recorded_step(final) == 5
    saved = json.loads((kept / "config.json").read_text())
    stable = json.loads((ckpt.checkpoints_dir(run_dir) / "phase-stable" / "config.json").read_text())
    thetas = [  # transformers 5 keeps a base per attention type, 4 keeps global_rope_theta
        config.get("rope_parameters", {}).get("full_attention", {}).get("rope_theta", config.get("global_rope_theta"))
        for config in (stable, saved)
    ]
    assert thetas == [160000.0, 320000.0]
    model = AutoModelForMaskedLM.from_pretrained(str(kept), trust_remote_code=False).eval()
    assert model.config.max_position_embeddings == 64
    ids = torch.randint(5, model.config.vocab_size, (2, 64))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (2, 64, model.config.vocab_size) and torch.isfinite(logits).all()
    assert "- longest trained length: 64 tokens" in (kept / "README.md").read_text()
    code, lines = run_cli(
        capsys, "eval-perplexity", "--model", str(kept), "--data", str(tiny_data / "valid.txt"), "--seq-len", "64"
    )
    assert code == 0, lines


# ---------------------------------------------------------------------------------------------
# The plan and the progress line


def test_the_plan_names_the_phase_and_the_time_left_in_it_and_in_the_run(tiny_data: Path, tmp_path: Path) -> None:
    phases = [
        {"name": "stable", "max_steps": 600},
        {"name": "long", "max_steps": 400, "set": {"data.seq_len": 64}},  # steps of twice the tokens
        {"name": "decay", "max_tokens": 25_600, "set": {"data.seq_len": 32}},  # 100 steps of 256 tokens
    ]
    budget = Budget(phased(tiny_data, tmp_path / "run", phases))
    # 100 steps of 8 x 32 tokens at 2 steps/s: each later step of 512 tokens takes 1 s, of 256 tokens 0.5 s
    state = TrainState(step=100, tokens=25_600, flops=10**9, phase_name="stable")
    plan = forecast(budget, state, 2.0, 256.0)
    assert (plan.phase_final_step, plan.phase_seconds_left, plan.final_step, plan.seconds_left) == (600, 250, 1100, 700)
    assert plan.line(2.0, 512.0) == (
        "plan: phase stable (1 of 3) ends at step 600 by its max_steps in about 4 min; the run ends at step 1,100, "
        "after long and decay, in about 12 min; at 2.00 steps/s, 512 tokens/s (later phases counted at this one's "
        "time per token)"
    )
    assert plan.left() == "4 min left in the phase, 12 min in the run"
    state = TrainState(step=1050, tokens=422_400, phase=2, phase_name="decay", phase_start={"tokens": 409_600.0})
    plan = forecast(budget, state, 2.0, 256.0)
    assert plan.line(2.0, 512.0) == (
        "plan: phase decay (3 of 3) ends the run at step 1,100 by its max_tokens in about 25 s, at 2.00 steps/s, "
        "512 tokens/s"
    )
    assert plan.left() == "25 s left"
    # the step count the progress bar starts from: only where steps alone end the run
    assert budget.known_steps() is None
    assert Budget(phased(tiny_data, tmp_path / "run")).known_steps() == 14
    assert Budget(load_config(None, ["train.max_time=2h"])).known_steps() is None


def test_the_progress_line_names_the_phase_and_gives_the_plans_time_left(capsys: pytest.CaptureFixture) -> None:
    reporter = Reporter(None, None, show_bar=True, plain_every_s=0.0)  # a max_time run: no step count, no plan yet
    reporter.advance(10, 2.5, 1e-3, 1000.0, None, "stable")
    reporter.advance(100, 2.5, 1e-3, 1000.0, 1100, "stable", "4 min left in the phase, 12 min in the run")
    reporter.close()
    assert capsys.readouterr().err.splitlines() == [
        "step 10: phase stable, loss 2.500, lr 1.00e-03, 1,000 tokens/s",
        "step 100/1100 (9%): phase stable, loss 2.500, lr 1.00e-03, 1,000 tokens/s, 4 min left in the phase, 12 min "
        "in the run",
    ]


def test_a_run_of_phases_plans_each_phase_once_it_has_measured_its_rate(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    phases = [{"name": "stable", "max_steps": 26}, {"name": "decay", "max_steps": 2}]  # a rate after 5 + 20 steps
    settings = {"train.eval_every": 0, "checkpoint.save_every": 0, "train.log_every": 10}
    with one_thread():
        pretrain(phased(tiny_data, tmp_path / "run", phases, **settings))
    plans = [line for line in capsys.readouterr().err.splitlines() if line.startswith("plan:")]
    assert len(plans) == 1, plans  # the decay phase ends before it has a rate
    assert plans[0].startswith("plan: phase stable (1 of 2) ends at step 26 by its max_steps in about "), plans
    assert "; the run ends at step 28, after decay, in about " in plans[0]


# ---------------------------------------------------------------------------------------------
# What the config says of its phases, and bad phases


def test_config_show_prints_each_phase_with_its_settings_resolved_and_fields_mark_what_a_phase_sets(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    phases = [{**PHASES[0], "set": {"masking.mlm_probability": "0.3"}}, *PHASES[1:]]  # a quoted number, coerced
    config = phases_file(tmp_path, phases)
    options = set_options(tiny_data, tmp_path / "run", **RUN)
    shown = printed(capsys, "config", "show", "--config", str(config), *options)
    tree = yaml.safe_load(shown)
    assert tree["phases"][0] == {"name": "stable", "max_steps": 6, "set": {"masking.mlm_probability": 0.3}}
    assert shown.endswith(
        "# each phase trains under the config above with its set: and those of the phases before it:\n"
        "#   stable (max_steps 6): masking.mlm_probability 0.3\n"
        "#   long (max_steps 4): masking.mlm_probability 0.3, data.seq_len 64\n"
        "#   decay (max_steps 4; wsd decays here): masking.mlm_probability 0.15, data.seq_len 32\n"
    ), shown
    (tmp_path / "shown.yaml").write_text(shown)  # what config show prints is a config that loads as it
    assert load_config(tmp_path / "shown.yaml").phases == load_config(config, options[1::2]).phases

    fields = printed(capsys, "config", "fields")
    assert "data.seq_len: 128    (must be >= 8; a phase may set it)" in fields
    assert "model.dropout: null    (must be in [0, 1))\n" in fields  # a phase may not set it
    assert "phases[].max_tokens: null    (must be >= 1)" in fields


PHASE = {"name": "long", "max_steps": 2}
BAD_PHASES = {
    "no budget": ([{"name": "long"}], "phases: long: a phase needs exactly one budget of max_steps"),
    "two budgets": (
        [{**PHASE, "max_tokens": 100}],
        "phases: long: a phase needs exactly one budget of max_steps, max_tokens, max_time, max_flops (has "
        "max_steps and max_tokens)",
    ),
    "the model's shape": ([{**PHASE, "set": {"model.hidden_size": 64}}], "phases: long: set: model.hidden_size cannot"),
    "the tokenizer": ([{**PHASE, "set": {"tokenizer.vocab_size": 300}}], "phases: long: set: tokenizer.vocab_size"),
    "the objective": ([{**PHASE, "set": {"train.objective": "electra"}}], "phases: long: set: train.objective cannot"),
    "dropout": ([{**PHASE, "set": {"model.dropout": 0.2}}], "phases: long: set: model.dropout cannot change"),
    "a budget in set": ([{**PHASE, "set": {"train.max_steps": 5}}], "phases: long: set: train.max_steps is a budget"),
    "an unknown key": ([{**PHASE, "set": {"masking.mlm_prob": 0.2}}], "did you mean 'masking.mlm_probability'"),
    "a key without section": ([{**PHASE, "set": {"seq_len": 64}}], "unknown key 'seq_len'; did you mean 'data.seq_"),
    "a bad value": ([{**PHASE, "set": {"masking.mlm_probability": 2}}], "phases: long: masking.mlm_probability must"),
    "beyond the positions": (
        [{**PHASE, "set": {"data.seq_len": 128}}],
        "phases: long: data.seq_len (128) must be <= model.max_position_embeddings (64)",
    ),
    "rotary bases of a BERT": (
        [{**PHASE, "set": {"model.global_rope_theta": 1e5}}],
        "phases: long: model.global_rope_theta sets the base of rotary positions",
    ),
    "two of one name": ([PHASE, PHASE], "phases: long: two phases are named long; give each its own name"),
    "a budget under train": ([PHASE], "train.max_steps is set beside phases"),
    "optim.decay for the whole run": ([PHASE], "optim.decay is true for the whole run"),
}


@pytest.mark.parametrize("case", list(BAD_PHASES))
def test_a_bad_phase_is_one_line_naming_the_phase_and_the_key_and_nothing_is_written(
    case: str, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    phases, needle = BAD_PHASES[case]
    overrides = {
        **RUN,
        "train.max_steps": 10 if case == "a budget under train" else None,
        "optim.decay": case == "optim.decay for the whole run",
    }
    run_dir = tmp_path / "run"
    config = phases_file(tmp_path / "config", phases)
    code, lines = run_cli(capsys, "pretrain", "--config", str(config), *set_options(tiny_data, run_dir, **overrides))
    assert code == 2
    assert_one_error_line(lines, needle)
    assert not run_dir.exists()
