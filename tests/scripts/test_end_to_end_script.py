"""scripts/end_to_end.py, the whole command-line path with its checks, run on tiny sizes on this machine's device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "end_to_end.py"
CHECKS = (
    "tokenize",
    "pretrain",
    "kill -9",
    "resume equals uninterrupted",
    "eval-perplexity",
    "fill-mask (CLI)",
    "transformers on the device",
    "ELECTRA pretrain",
    "torch.compile, fixed-count masks",
)


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=600
    )


@pytest.mark.slow
def test_every_check_passes_on_tiny_sizes(tmp_path: Path) -> None:
    done = run_script("--quick", "--work-dir", str(tmp_path / "work"))
    assert done.returncode == 0, done.stdout + done.stderr
    for check in CHECKS:
        assert f"PASS  {check}:" in done.stdout, done.stdout
    # on a CPU the resumed run must be the uninterrupted one, bit for bit
    assert "bit-identical: True" in done.stdout, done.stdout


def test_a_work_dir_it_did_not_make_is_refused_and_left_alone(tmp_path: Path) -> None:
    work = tmp_path / "mine"
    work.mkdir()
    (work / "notes.txt").write_text("keep me")
    done = run_script("--quick", "--work-dir", str(work))
    assert done.returncode == 2
    assert "did not write" in done.stderr and "--work-dir" in done.stderr
    assert [p.name for p in work.iterdir()] == ["notes.txt"]
