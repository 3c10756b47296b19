"""Smoke test of scripts/bench_data.py: the whole benchmark at tiny sizes on the builtin corpus gives positive figures
and prints both targets' verdicts and the command line (the speed targets themselves are checked by running it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import script_module


@pytest.fixture(scope="module")
def bench():
    """scripts/bench_data.py as a module."""
    with script_module("bench_data.py", "bench_data") as module:
        yield module


@pytest.mark.slow
def test_quick_bench_reports_positive_figures(bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    threads = torch.get_num_threads()
    argv = ["--quick", "--corpus", "builtin:python-docs", "--work-dir", str(tmp_path / "work"), "--train-threads", "1"]
    try:
        result = bench.main(argv)
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out

    collator, pipeline = result["collator"], result["pipeline"]
    for key in ("ours_blocks_per_s", "hf_blocks_per_s", "ratio"):
        assert collator[key] > 0, key
    for key in (
        "worker_tokens_per_s",
        "worker_batches_per_s",
        "in_process_tokens_per_s",
        "train_tokens_per_s",
        "train_step_s",
        "ratio",
    ):
        assert pipeline[key] > 0, key
    assert pipeline["worker_tokens_per_s"] == pytest.approx(pipeline["worker_batches_per_s"] * 32 * 128)
    assert pipeline["ratio"] == pytest.approx(pipeline["worker_tokens_per_s"] / pipeline["train_tokens_per_s"])
    assert (tmp_path / "work" / "tokens" / "COMPLETE").exists()  # a real token store, built by tokenize_corpus
    assert "collator vs HF:" in out and "pipeline vs mini training:" in out
    assert out.count("PASS") + out.count("FAIL") == 2
    assert f"command: python scripts/bench_data.py {' '.join(argv)}" in out


def test_sections_option_is_checked(bench) -> None:
    assert bench.parse_args(["--sections", "pipeline"]).sections == ["pipeline"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--sections", "collator,bogus"])
