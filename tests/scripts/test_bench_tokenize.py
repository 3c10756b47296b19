"""Smoke test of scripts/bench_tokenize.py: its quick mode end to end on a 1 MB corpus assembled from the shared
corpora gives positive figures, byte-identical stores across worker counts, and prints its verdicts and command line
(the targets themselves are judged by running it on a quiet machine); its S3 section under the [remote] extra."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ..helpers import script_module

SHARED = Path(__file__).resolve().parents[3] / "shared"
pytestmark = pytest.mark.skipif(not (SHARED / "corpora").is_dir(), reason="needs the shared corpora and tokenizer")


@pytest.fixture(scope="module")
def bench():
    """scripts/bench_tokenize.py as a module."""
    with script_module("bench_tokenize.py", "bench_tokenize") as module:
        yield module


@pytest.mark.slow
def test_quick_bench_reports_every_figure(bench, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # two processes in all: the first section's run serves memory's one size and scaling's one worker count
    argv = ["--quick", "--sizes-mb", "1", "--workers", "1", "--sections", "tokenize,memory,scaling"]
    argv += ["--work-dir", str(tmp_path), "--cores", "1"]  # datasets.map in-process: no pool to start
    result = bench.main(argv)
    out = capsys.readouterr().out
    corpus = tmp_path / "corpus-1.txt"
    assert 1e6 <= corpus.stat().st_size < 1.01e6 and corpus.read_bytes().endswith(b"\n")  # whole lines, 1 MB
    for side in ("mlmtrain", "run_mlm"):
        for key in ("wall_s", "tokens", "tokens_per_s_per_core", "peak_rss_gb", "disk_gb"):
            assert result[side][key] > 0, (side, key)
    assert abs(result["mlmtrain"]["tokens"] - result["run_mlm"]["tokens"]) < 0.05 * result["run_mlm"]["tokens"]
    assert result["ratio"] == pytest.approx(result["run_mlm"]["wall_s"] / result["mlmtrain"]["wall_s"])
    assert result["memory"] == {"1": result["mlmtrain"]["peak_rss_gb"]}
    assert result["scaling"] == {"runs": {1: result["mlmtrain"]}, "identical": True}
    assert out.count("PASS") + out.count("FAIL") == 3
    assert f"command: python scripts/bench_tokenize.py {' '.join(argv)}" in out


@pytest.mark.slow
@pytest.mark.extras  # moto's S3 server and s3fs: the [remote] extra
def test_quick_bench_compares_pretraining_from_s3_with_a_local_store(bench, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    result = bench.main(["--quick", "--sizes-mb", "1", "--sections", "s3", "--work-dir", str(tmp_path)])
    assert result["s3"]["local_tokens_per_s"] > 0 and result["s3"]["s3_tokens_per_s"] > 0


def test_sections_option_is_checked(bench) -> None:
    assert bench.parse_args(["--sections", "s3"]).sections == ["s3"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--sections", "tokenize,bogus"])


def test_stores_compare_byte_for_byte_but_for_their_date(bench, tiny_data: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_data / "tokens", tmp_path / "copy"))
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "created": "another day"}))
    assert bench.same_stores(tiny_data / "tokens", copy)
    shard = next(copy.glob("src-*-00000.bin"))
    shard.write_bytes(b"\x01" + shard.read_bytes()[1:])
    assert not bench.same_stores(tiny_data / "tokens", copy)
