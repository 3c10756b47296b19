"""What many test modules share: tiny corpora and configs, the CLI run in-process or as a process, and readers of
what a run wrote (metrics, weights, a folder's files). Fixtures live in conftest.py; test modules import these."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest
import torch

from mlmtrain.config import Config, ModelConfig, load_config

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CHILD_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
CHILD_TIMEOUT_S = 240
# conftest's finished run: 4 steps, evaluated and saved at steps 2 and 4 (a resume under these trains nothing)
FINISHED = {"train.max_steps": 4, "train.eval_every": 2, "checkpoint.save_every": 2}
# the same 4 steps and checkpoints with no evaluation: a run to resume, refuse or overwrite
QUICK = {**FINISHED, "train.eval_every": 0}

# one layer of width 32: a model folder built in milliseconds for the tests that evaluate or probe one
TINY_MODEL = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)

# ---------------------------------------------------------------------------------------------
# Tiny corpora and configs

WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly hex bold jackdaws near "
    "my big sphinx of quartz and five boxing wizards judge every jumping vexed zebra"
).split()


def write_corpus(path: Path, documents: int, seed: int = 0) -> Path:
    """A deterministic English-like corpus: `documents` lines of varying length."""
    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        length = rng.randint(5, 60)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(length)).capitalize() + ".")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def store_files(store: Path, split: str = "train") -> tuple[Path, Path]:
    """The first shard and the document index of a token store's split (the files of its first source)."""
    unit = json.loads((store / "meta.json").read_text())["splits"][split]["sources"][0]
    return store / f"{unit}-00000.bin", store / f"{unit}.docs.npy"


def larger_weights(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with its matrices drawn at std 0.2: at init (std 0.02) every prediction is nearly uniform, so a wrong
    row, a lost position or a dropped mask hardly moves the loss; larger weights make such comparisons able to fail."""
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim >= 2:
                param.normal_(0.0, 0.2)
    return model


def tiny_overrides(root: Path, **extra: object) -> list[str]:
    """--set options for a model that trains a step in milliseconds."""
    values = {
        "data.train": str(root / "train.txt"),
        "data.validation": str(root / "valid.txt"),
        "data.seq_len": 32,
        "data.num_workers": 0,
        "tokenizer.vocab_size": 200,
        "tokenizer.path": str(root / "tokenizer"),
        "data.store": str(root / "tokens"),
        "model.hidden_size": 32,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "model.intermediate_size": 64,
        "model.max_position_embeddings": 64,
        "optim.warmup_steps": 2,
        "train.batch_size": 8,
        "train.max_steps": 10,
        "train.log_every": 1,
        "train.eval_every": 5,
        "train.eval_max_blocks": 8,
        "train.progress": False,
        "checkpoint.save_every": 5,
        "checkpoint.keep_last": 0,
        "report.html": False,  # the page costs a second or two per checkpoint; its own tests turn it on
    }
    values.update(extra)
    return [f"{k}={'null' if v is None else v}" for k, v in values.items()]


def mixture_config(root: Path, **overrides: object) -> Config:
    """A tiny config training in ROOT/run (the `mixture_data` fixture's overrides make it train on a mixture)."""
    return load_config(None, tiny_overrides(root, **{"train.run_dir": str(root / "run"), **overrides}))


def set_options(data: Path, run_dir: Path, **overrides: Any) -> list[str]:
    """`--set` options for the tiny model training in run_dir."""
    pairs = tiny_overrides(data, **{"train.run_dir": str(run_dir), **overrides})
    return [arg for pair in pairs for arg in ("--set", pair)]


def copy_corpus(tiny_data: Path, tmp_path: Path) -> Path:
    """The tiny corpus (train.txt, valid.txt) in a folder of its own, with no tokenizer or store built yet."""
    root = tmp_path / "data"
    root.mkdir()
    for name in ("train.txt", "valid.txt"):
        shutil.copy(tiny_data / name, root / name)
    return root


@contextmanager
def script_module(filename: str, module_name: str) -> Iterator[ModuleType]:
    """scripts/FILENAME as a module named `module_name` (scripts are not a package), registered in sys.modules while
    in use (dataclasses look their module up there) and removed after."""
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[module_name]


@contextmanager
def one_thread() -> Iterator[None]:
    """In-process runs on one thread, like the OMP_NUM_THREADS=1 subprocesses they are compared with (and on 2
    shared cores a second torch thread mostly waits for the first)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def free_port() -> int:
    """A local port nothing listens on (what a server that is down looks like)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The command line, in-process


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, list[str]]:
    """`mlmtrain ARGS` in-process: (exit code, stderr lines)."""
    from mlmtrain.cli.app import main as cli_main

    capsys.readouterr()
    try:
        cli_main(list(args))
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    return code, capsys.readouterr().err.strip().splitlines()


def assert_one_error_line(lines: list[str], *needles: str) -> str:
    """The command failed with exactly one `mlmtrain:` line, the last one, holding every needle; no traceback."""
    text = "\n".join(lines)
    assert "Traceback" not in text, text
    errors = [line for line in lines if line.startswith("mlmtrain: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], text
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


# ---------------------------------------------------------------------------------------------
# `mlmtrain pretrain` as a process


def start_pretrain(
    data: Path, run_dir: Path, *options: str, preexec_fn: Optional[Callable[[], None]] = None, **overrides: Any
) -> subprocess.Popen:
    """`python -m mlmtrain pretrain` in the background; its stderr goes to RUN_DIR.log (read with `output`)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = open(run_dir.with_suffix(".log"), "ab")
    command = [sys.executable, "-m", "mlmtrain", "pretrain", *set_options(data, run_dir, **overrides), *options]
    try:
        return subprocess.Popen(command, stdout=log, stderr=log, env=CHILD_ENV, preexec_fn=preexec_fn)
    finally:
        log.close()


def output(run_dir: Path) -> str:
    return run_dir.with_suffix(".log").read_text(errors="replace")


def finish(process: subprocess.Popen, run_dir: Path) -> int:
    try:
        return process.wait(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"pretrain did not finish in {CHILD_TIMEOUT_S}s:\n{output(run_dir)}")


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, run_dir: Path) -> None:
    """Poll `condition` every millisecond while the process runs (fails if it ends first)."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not condition():
        if process.poll() is not None:
            pytest.fail(
                f"pretrain ended (exit {process.returncode}) before the moment to interrupt it:\n{output(run_dir)}"
            )
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"pretrain made no progress in {CHILD_TIMEOUT_S}s:\n{output(run_dir)}")
        time.sleep(0.001)


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """Files may not grow past `size` bytes: a real write error from the kernel (EFBIG), no root needed."""
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write with EFBIG instead of killing us
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before)
        signal.signal(signal.SIGXFSZ, handler)


def torchrun(
    data: Path,
    run_dir: Path,
    *flags: str,
    log_dir: Optional[Path] = None,
    options: Optional[list[str]] = None,
    command_name: str = "pretrain",
    **overrides: object,
) -> subprocess.Popen:
    """Start `torchrun --standalone --nproc_per_node=2 -m mlmtrain pretrain` (or another command) on the tiny store
    (output piped), or with the --set `options` given (then `data`, `run_dir` and `overrides` are not read)."""
    overrides["train.run_dir"] = run_dir
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]  # = torchrun
    if log_dir is not None:
        command += ["--log-dir", str(log_dir), "--tee", "3"]  # each rank's output also lands in its own file
    command += ["-m", "mlmtrain", command_name, *flags]
    for option in tiny_overrides(data, **overrides) if options is None else options:
        command += ["--set", option]
    # One thread per process: two ranks share two cores. A collective timeout in seconds, not half an hour,
    # so a rank left waiting fails this test instead of hanging it.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLMTRAIN_DIST_TIMEOUT": "60"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_torchrun(job: subprocess.Popen, expect_ok: bool = True) -> str:
    output, _ = job.communicate(timeout=180)
    assert (job.returncode == 0) == expect_ok, output[-4000:]
    return output


# ---------------------------------------------------------------------------------------------
# What a run wrote


def metrics(run_dir: Path) -> list[dict]:
    """Every line of RUN_DIR/metrics.jsonl (none when it is not there yet)."""
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def logged_steps(run_dir: Path) -> int:
    """Training steps logged so far, read while a run writes (a resumed run appends: this counts lines)."""
    path = Path(run_dir) / "metrics.jsonl"
    finished_lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return sum('"loss"' in line for line in finished_lines)


def by_step(run_dir: Path, key: str) -> dict[int, float]:
    """{step: value} of `key` over the metrics lines that hold it (the last line of a step wins)."""
    return {line["step"]: line[key] for line in metrics(run_dir) if key in line}


def step_losses(run_dir: Path) -> dict[int, float]:
    return by_step(run_dir, "loss")


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def assert_same_weights(a: Path, b: Path) -> None:
    left, right = weights(a), weights(b)
    assert left.keys() == right.keys()
    for key in left:
        assert torch.equal(left[key], right[key]), f"{key} differs between {a} and {b}"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (links as their target)."""
    found = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = os.readlink(path).encode()
        elif path.is_file():
            found[name] = path.read_bytes()
    return found


def assert_checkpoints_sound(run_dir: Path, planted: tuple[str, ...] = ()) -> Path:
    """Every step-N folder (but the planted ones) is complete; the newest loads and is what --resume auto takes."""
    from transformers import AutoModelForMaskedLM

    from mlmtrain.train import checkpoint as ckpt

    root = ckpt.checkpoints_dir(run_dir)
    step_folders = [p for p in root.iterdir() if p.name.startswith("step-") and p.name not in planted]
    for folder in step_folders:
        assert (folder / ckpt.COMPLETE).exists(), f"{folder} lacks {ckpt.COMPLETE}: a rename went wrong"
    newest = ckpt.latest_checkpoint(run_dir)
    assert newest is not None and newest.name.startswith("step-"), newest
    assert ckpt.resolve_resume(run_dir, "auto") == newest
    latest = root / "latest"
    if latest.is_symlink():  # a kill between the rename and the re-link leaves it one checkpoint behind
        assert (latest.resolve() / ckpt.COMPLETE).exists()
    model = AutoModelForMaskedLM.from_pretrained(str(newest))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    state = ckpt.load_training_state(newest)
    assert state["train_state"]["step"] == int(newest.name.removeprefix("step-"))
    return newest
