"""Multi-process training with real `torchrun` workers on CPU (gloo): the losses of one process with the whole
batch, exact pause/resume, a refusal on rank 0 that stops every rank, and a killed rank that fails the job
without harming the last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.store import tokenize_corpus
from mlmtrain.errors import UserError
from mlmtrain.runtime.distributed import DistContext, init_distributed, on_main
from mlmtrain.train.loop import pretrain

from ..data.test_scale import data_files, generated_corpus, store_options, undated
from ..helpers import by_step, finish_torchrun, free_port, metrics, step_losses, tiny_overrides, torchrun, weights

# Dropout draws differ per rank, so only a dropout-free model can match a single process step for step.
# runs compared across process counts and micro-batch splits: no dropout (its masks follow the tensor shapes) and
# fp32 (bf16's rounding follows them too; on a CPU with AVX512-BF16, precision auto runs the head in bf16)
EXACT = {"model.hidden_dropout": 0.0, "model.attention_dropout": 0.0, "train.precision": "fp32"}


def config(data: Path, run_dir: Path, **overrides: object):
    return load_config(None, tiny_overrides(data, **{"train.run_dir": run_dir, **overrides}))


def train_lines(run_dir: Path) -> list[dict]:
    return [m for m in metrics(run_dir) if "loss" in m]


def losses(run_dir: Path, first: int = 1) -> list[float]:
    by_step = step_losses(run_dir)
    return [by_step[step] for step in sorted(by_step) if step >= first]


@pytest.fixture(scope="module")
def two_process_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """10 dropout-free steps on 2 ranks with micro-batch 2 and accumulation 2 (global batch 8); checkpoints at 5, 10."""
    run_dir = tmp_path_factory.mktemp("ddp") / "two"
    output = finish_torchrun(torchrun(tiny_data, run_dir, **EXACT, **{"train.micro_batch_size": 2}))
    return run_dir, output


@pytest.mark.slow
def test_two_processes_match_one_process_with_the_whole_batch(two_process_run, tiny_data: Path, tmp_path) -> None:
    two, output = two_process_run
    assert "2 process(es), global batch 8 x 32 tokens (micro-batch 2, accumulation 2)" in output
    pretrain(config(tiny_data, tmp_path / "one", **EXACT))  # one process: micro-batch 8, no accumulation
    assert losses(two) == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
    # metrics are the whole job's: the token count covers both ranks' blocks
    assert [m["tokens"] for m in train_lines(two)] == [step * 8 * 32 for step in range(1, 11)]


@pytest.mark.slow
def test_two_processes_tokenize_the_store_one_process_writes_byte_for_byte(tiny_data: Path, tmp_path: Path) -> None:
    """Each process encodes its groups of chunks and process 0 writes them in order: no shared part files, no merge,
    and the same bytes as one process writes."""
    generated_corpus(tmp_path / "train.txt", 20000)  # 3 groups of 8 chunks: process 0 encodes two, process 1 one
    generated_corpus(tmp_path / "valid.txt", 300, seed=1)
    stores = {}
    for processes in (1, 2):
        options = store_options(tmp_path, tiny_data, str(processes), **{"data.tokenize_workers": 1})
        if processes == 1:
            stores[1] = tokenize_corpus(load_config(None, options), quiet=True)
        else:
            output = finish_torchrun(torchrun(tiny_data, tmp_path / "run", options=options, command_name="tokenize"))
            assert "1 worker x 2 processes" in output, output[-3000:]
            stores[2] = tmp_path / "store-2"
    files = {count: data_files(folder) for count, folder in stores.items()}
    metas = {count: undated(files[count].pop("meta.json")) for count in (1, 2)}
    assert files[1] == files[2] and metas[1] == metas[2]


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process(two_process_run, tiny_data: Path, tmp_path) -> None:
    two, _ = two_process_run
    # 1 process x micro-batch 8 takes each global batch in one bite where the 2 ranks took two (accumulation 2)
    resumed = pretrain(config(tiny_data, tmp_path / "one", **EXACT), resume=str(two / "checkpoints" / "step-5"))
    assert resumed.name == "step-10"
    assert losses(tmp_path / "one") == pytest.approx(losses(two, first=6), rel=1e-5)


@pytest.mark.slow
def test_a_refusal_on_rank_0_stops_every_rank(two_process_run, tiny_data: Path, tmp_path) -> None:
    two, _ = two_process_run
    started = time.monotonic()
    # rank 0 alone guards the run folder; without --resume it refuses, and rank 1 must not wait for it in vain
    output = finish_torchrun(torchrun(tiny_data, two, log_dir=tmp_path / "logs", **EXACT), expect_ok=False)
    assert time.monotonic() - started < 60, output[-4000:]
    for rank in ("0", "1"):
        (log,) = [p for p in (tmp_path / "logs").rglob("stderr.log") if p.parent.name == rank]
        assert f"mlmtrain: run: {two} already holds a run; pass --resume" in log.read_text(), rank


@pytest.mark.slow
def test_paused_and_resumed_two_process_run_equals_an_uninterrupted_one(tiny_data: Path, tmp_path) -> None:
    # dropout on: each rank must get its own RNG state back, or the resumed losses drift
    whole, paused = tmp_path / "whole", tmp_path / "paused"
    finish_torchrun(torchrun(tiny_data, whole))
    assert "stopped at step 5" in finish_torchrun(torchrun(tiny_data, paused, **{"train.pause_after": 5}))
    assert max(m["step"] for m in train_lines(paused)) == 5
    finish_torchrun(torchrun(tiny_data, paused, "--resume", **{"train.pause_after": 5}))
    assert losses(paused) == pytest.approx(losses(whole), rel=1e-6)
    a, b = weights(whole / "checkpoints" / "step-10"), weights(paused / "checkpoints" / "step-10")
    assert all(torch.allclose(a[name], b[name], atol=1e-6) for name in a)


@pytest.mark.slow
def test_a_two_process_weight_average_equals_one_process_and_resumes_exactly(tiny_data: Path, tmp_path) -> None:
    """train.ema under torchrun: rank 0 saves the average of the weights every rank shares, as one process with the
    whole batch does, and a paused two-process run picks the average up where it stopped."""
    ema = {**EXACT, "train.micro_batch_size": 2, "train.ema": 0.8, "checkpoint.save_ema": True}
    finish_torchrun(torchrun(tiny_data, tmp_path / "two", **ema))
    pretrain(config(tiny_data, tmp_path / "one", **EXACT, **{"train.ema": 0.8, "checkpoint.save_ema": True}))
    one, two = (weights(tmp_path / name / "checkpoints" / "step-10") for name in ("one", "two"))
    assert set(one) == set(two)
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6)
    evaluated = {name: by_step(tmp_path / name, "ema_eval_loss") for name in ("one", "two")}
    assert sorted(evaluated["two"]) == [5, 10] and evaluated["two"] == pytest.approx(evaluated["one"], rel=1e-5)
    paused = tmp_path / "paused"
    assert "stopped at step 5" in finish_torchrun(torchrun(tiny_data, paused, **ema, **{"train.pause_after": 5}))
    finish_torchrun(torchrun(tiny_data, paused, "--resume", **ema))
    resumed = weights(paused / "checkpoints" / "step-10")
    assert all(torch.equal(resumed[name], two[name]) for name in two)


LATE_RANK_SCRIPT = """
import json, os, sys, time
from pathlib import Path

import mlmtrain.train.step
import mlmtrain.train.loop
from mlmtrain.config import load_config

rank = int(os.environ["RANK"])
learning_rates = []
set_learning_rate = mlmtrain.train.step.set_learning_rate


def record(optimizer, lr):  # this process only: it exits when the run ends
    learning_rates.append(lr)
    set_learning_rate(optimizer, lr)


mlmtrain.train.step.set_learning_rate = record
if rank == 1:  # rank 1 enters the loop 1.5 s after rank 0: its own clock would read 1.5 s less all run long
    run = mlmtrain.train.loop.Loop.run
    mlmtrain.train.loop.Loop.run = lambda self: (time.sleep(1.5), run(self))[1]
mlmtrain.train.loop.pretrain(load_config(None, sys.argv[2:]))
Path(sys.argv[1], f"lr-{rank}.json").write_text(json.dumps(learning_rates))
"""


@pytest.mark.slow
def test_ranks_share_rank_0s_clock_for_max_time_and_the_schedule(tiny_data: Path, tmp_path) -> None:
    script = tmp_path / "late_rank.py"
    script.write_text(LATE_RANK_SCRIPT)
    settings = {"train.max_steps": None, "train.max_time": "4s", "train.eval_every": 0, "checkpoint.save_every": 0}
    overrides = tiny_overrides(tiny_data, **{"train.run_dir": tmp_path / "run", **settings, **EXACT})
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLMTRAIN_DIST_TIMEOUT": "60"}
    done = subprocess.run([*command, str(tmp_path), *overrides], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rank0, rank1 = (json.loads((tmp_path / f"lr-{rank}.json").read_text()) for rank in (0, 1))
    assert len(rank0) > 2
    assert rank0 == rank1  # the same learning rate at every step, and the same last step
    assert max(m["elapsed_s"] for m in train_lines(tmp_path / "run")) >= 4.0


def worker_pids(torchrun_pid: int) -> dict[int, int]:
    """{rank: pid} of torchrun's worker processes (children of the torchrun process)."""
    children = []
    for task in Path(f"/proc/{torchrun_pid}/task").iterdir():
        children += [int(pid) for pid in (task / "children").read_text().split()]
    workers = {}
    for pid in children:
        env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
        if "RANK" in env:
            workers[int(env["RANK"])] = pid
    return workers


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_and_the_last_checkpoint_stays_loadable(tiny_data: Path, tmp_path) -> None:
    from transformers import AutoModelForMaskedLM

    run_dir = tmp_path / "killed"
    settings = {"train.max_steps": 100_000, "train.eval_every": 0, "checkpoint.save_every": 10}
    job = torchrun(tiny_data, run_dir, **settings, **{"checkpoint.keep_last": 2})
    latest = run_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while not latest.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job.poll() is None, job.communicate()[0][-4000:]
    os.kill(worker_pids(job.pid)[1], signal.SIGKILL)
    started = time.monotonic()
    output = finish_torchrun(job, expect_ok=False)
    assert time.monotonic() - started < 60  # rank 0 is not left waiting for the dead rank
    assert "SIGKILL" in output and "rank      : 1" in output  # torchrun's summary names the rank that died

    AutoModelForMaskedLM.from_pretrained(str(latest))
    step = int(latest.resolve().name.removeprefix("step-"))
    resumed = pretrain(config(tiny_data, run_dir, **{**settings, "train.max_steps": step + 2}), resume="auto")
    assert resumed.name == f"step-{step + 2}"


@pytest.mark.slow
def test_a_rank_that_outlives_another_says_so_in_one_line(tiny_data: Path, tmp_path) -> None:
    # Two ranks started by hand, as the processes of one machine in a multi-node job: no agent signals the survivor,
    # which learns of the dead rank only from its next collective (gloo's "Connection reset by peer").
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLMTRAIN_DIST_TIMEOUT": "60", "WORLD_SIZE": "2"}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    command = [sys.executable, "-m", "mlmtrain", "pretrain"]
    for option in tiny_overrides(tiny_data, **{"train.run_dir": run_dir, "train.max_steps": 100_000}):
        command += ["--set", option]
    ranks = [
        subprocess.Popen(
            command,
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoints" / "latest").exists() and ranks[0].poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        ranks[1].kill()
        output, _ = ranks[0].communicate(timeout=120)
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    assert ranks[0].returncode == 2, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("mlmtrain: distributed: another process of this job stopped") and "--resume" in last


def test_on_main_runs_the_action_and_shares_its_error_single_process() -> None:
    assert on_main(DistContext(), lambda: 3) == 3

    def refuse() -> None:
        raise UserError("run", "no")

    with pytest.raises(UserError, match="run: no"):
        on_main(DistContext(), refuse)


@pytest.mark.parametrize("value", ["0", "soon"])
def test_a_bad_collective_timeout_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MLMTRAIN_DIST_TIMEOUT", value)
    monkeypatch.setenv("WORLD_SIZE", "2")  # the timeout is read only when joining a job
    with pytest.raises(UserError, match="MLMTRAIN_DIST_TIMEOUT must be a number of seconds > 0"):
        init_distributed("cpu")
