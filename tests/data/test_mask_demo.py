"""`mlmtrain mask-demo`: the masks it shows are the training collator's, under the config's masking settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.mask_demo import mask_demo
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo
from mlmtrain.data.tokenizer import load_tokenizer

TEXT = "The quick brown fox jumps over a lazy dog while seven wizards quietly hex bold jackdaws."


def mlmtrain(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlmtrain", *args], capture_output=True, text=True, cwd=cwd)


def test_the_demo_counts_are_the_collators_on_the_same_seed(tiny_data: Path) -> None:
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    masking = load_config(None, ["masking.mlm_probability=0.3"]).masking
    demo = mask_demo(TEXT, tokenizer, masking, seed=7, seq_len=64, samples=40)

    collator = MaskingCollator(VocabInfo.from_tokenizer(tokenizer), masking, seed=7)
    block = torch.tensor(demo.ids)
    batch = collator([{"input_ids": block, "epoch": 0, "index": i} for i in range(40)])
    selected = batch["labels"] != IGNORE_INDEX
    assert demo.input_ids == batch["input_ids"][0].tolist()
    assert demo.labels == batch["labels"][0].tolist()
    assert demo.loss_positions == int(selected[0].sum())
    assert demo.samples.picked == selected.sum(0).tolist()
    assert demo.samples.selected == int(selected.sum())
    assert demo.samples.masked == int((selected & (batch["input_ids"] == tokenizer.mask_token_id)).sum())
    assert demo.samples.masked + demo.samples.random + demo.samples.kept == demo.samples.selected
    assert demo.became[0] is None and demo.became[-1] is None  # [CLS] and [SEP] are never selected


def test_the_demo_follows_the_configs_masking(tiny_data: Path) -> None:
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    masking = load_config(None, ["masking.fixed_count=true", "masking.mlm_probability=0.5"]).masking
    demo = mask_demo(TEXT, tokenizer, masking, seed=0, seq_len=64)
    assert demo.loss_positions == round(0.5 * sum(demo.maskable))
    assert sum(demo.became[i] is not None for i in range(len(demo.ids))) == demo.loss_positions


def test_mask_demo_json_and_text(tiny_data: Path, tmp_path: Path) -> None:
    tokenizer = str(tiny_data / "tokenizer")
    done = mlmtrain("mask-demo", TEXT, "--tokenizer", tokenizer, "--samples", "200", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["loss_positions"] == sum(p["label"] != IGNORE_INDEX for p in found["positions"])
    shares = found["samples"]
    assert 0.7 < shares["masked"] / shares["selected"] < 0.9
    assert len(shares["picked"]) == len(found["positions"])
    done = mlmtrain("mask-demo", TEXT, "--tokenizer", tokenizer, "--seed", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "positions carry loss" in done.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["   "], "TEXT is empty"),
        (["some text", "--set", f"tokenizer.path={'/no/such/tokenizer'}"], "run `mlmtrain tokenize` first"),
        (["some text", "--samples", "0"], "--samples must be >= 1"),
        (["some text", "--samples", "1000001"], "--samples must be at most 1,000,000 (got 1,000,001)"),
    ],
)
def test_mask_demo_bad_input_is_one_line(args: list[str], needle: str, tmp_path: Path) -> None:
    done = mlmtrain("mask-demo", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], done.stderr
