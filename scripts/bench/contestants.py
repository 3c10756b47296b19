"""Each contestant in a process of its own, with its log and its peak RSS: ours as `python -m mlmtrain pretrain`
(its figures read back from metrics.jsonl), the workers as `benchmark.py --worker KIND`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from bench.setup import REPO, BenchmarkError, Setup

ENTRY = REPO / "scripts" / "benchmark.py"  # the workers' processes run the script again, with --worker


def _child_env() -> dict[str, str]:
    """The children import mlmtrain from this checkout even where it is not installed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def run_logged(command: list[str], run_dir: Path) -> float:
    """Run `command` with its output in run_dir/benchmark.log; returns its peak RSS in MiB (its process tree's)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "benchmark.log"
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + shlex.join(command) + "\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_child_env())
        # wait4, not wait: its rusage is this child's own (RUSAGE_CHILDREN would be the max over all children so far)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise BenchmarkError(f"{command[1:4]} failed with exit code {process.returncode}; {log} ends:\n{tail}")
    return usage.ru_maxrss / 1024


def run_worker(kind: str, spec: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, run_dir=str(run_dir))
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1))
    rss = run_logged([sys.executable, str(ENTRY), "--worker", kind, "--spec", str(run_dir)], run_dir)
    return dict(json.loads((run_dir / "result.json").read_text()), process_peak_rss_mb=rss)


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a metrics.jsonl."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [m for m in lines if "loss" in m], [m for m in lines if "eval_ppl" in m]


def run_ours(setup: Setup, run_dir: Path, overrides: list[str], config: Optional[Path] = None) -> dict[str, Any]:
    """`python -m mlmtrain pretrain` on `config` (default the size's), as a user runs it; its per-step points and
    evaluations come from metrics.jsonl."""
    command = [
        sys.executable,
        "-m",
        "mlmtrain",
        "pretrain",
        "--config",
        str(config or setup.config_path()),
        "--overwrite",
    ]
    command += [arg for override in overrides for arg in ("--set", override)]
    rss = run_logged(command, run_dir)
    train, evals = read_metrics(run_dir / "metrics.jsonl")
    return {
        "points": [(m["tokens"], m["elapsed_s"]) for m in train],
        "evals": training_clock(train, evals),
        "steps": train[-1]["step"] if train else 0,
        "tokens": train[-1]["tokens"] if train else 0,
        "flops": train[-1].get("flops", 0) if train else 0,
        "process_peak_rss_mb": rss,
        "command": shlex.join(command),
    }


def training_clock(train: list[dict], evals: list[dict]) -> list[dict[str, float]]:
    """Evaluations on the training clock: elapsed_s of the step evaluated, minus the evaluations before it.

    elapsed_s counts evaluation time; eval lines carry `eval_seconds` (0 if an older mlmtrain lacks it). Needs a
    train line at every evaluated step (log_every 1).
    """
    elapsed = {m["step"]: m["elapsed_s"] for m in train}
    out, paused = [], 0.0
    for m in evals:
        out.append(
            {
                "step": m["step"],
                "train_seconds": elapsed[m["step"]] - paused,
                "eval_loss": m["eval_loss"],
                "eval_ppl": m["eval_ppl"],
                "eval_seconds": m.get("eval_seconds", 0.0),
                **{key: m[key] for key in ("ema_eval_loss", "ema_eval_ppl") if key in m},  # with train.ema
            }
        )
        paused += m.get("eval_seconds", 0.0)
    return out


def hf_spec(setup: Setup, run_dir: Path, mode: str, extra: Optional[dict] = None, **fields: Any) -> dict[str, Any]:
    """The HF worker's orders for an evaluated run (quality or recipe): config, text, evaluation cadence."""
    return {
        "config": str(setup.config_path()),
        "overrides": setup.hf(run_dir, extra=extra),
        "mode": mode,
        "eval_every": setup.args.eval_every,
        "train_text": str(setup.train_text),
        "hf_cache": str(setup.work_dir / "hf-datasets"),
        **fields,
    }
