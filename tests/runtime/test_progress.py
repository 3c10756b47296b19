"""Progress into a file or a pipe (nohup, a scheduler, CI): plain lines now and then, never a bar redrawn with
carriage returns, for `tokenize`, `eval-perplexity` and `probe` as for `pretrain` (tests/train/test_train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlmtrain.config import MaskingConfig, ModelConfig, load_config
from mlmtrain.data.store import tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.evaluate.perplexity import evaluate_texts
from mlmtrain.model.bert import build_model
from mlmtrain.runtime.progress import progress_bar

from ..helpers import copy_corpus, tiny_overrides

pytestmark = pytest.mark.oldpins  # tqdm's oldest declared version too


def without_eta(lines: list[str]) -> list[str]:
    return [line.split(", ")[0] if line.endswith(" min left") else line for line in lines]


def test_a_plain_bar_writes_a_line_each_interval_and_where_it_ended(capsys: pytest.CaptureFixture) -> None:
    with progress_bar(10, "doc", "encode train", every_s=0.0) as bar:
        bar.set_postfix(tokens="1,000", refresh=False)
        bar.update(4)
        bar.update(6)
    with progress_bar(None, "block", "score", every_s=0.0) as bar:
        bar.update(1200)
    assert without_eta(capsys.readouterr().err.splitlines()) == [
        "encode train: 4/10 doc (40%): tokens 1,000",
        "encode train: 10/10 doc (100%): tokens 1,000",
        "score: 1,200 block",
    ]


def test_quick_work_and_a_disabled_bar_write_nothing(capsys: pytest.CaptureFixture) -> None:
    with progress_bar(10, "doc", "encode train") as bar:  # a line every 30 s: none yet
        bar.update(10)
    with progress_bar(10, "doc", "encode train", disable=True, every_s=0.0) as bar:
        bar.update(10)
    assert capsys.readouterr().err == ""


def test_tokenize_into_a_file_writes_no_redrawn_bar(tiny_data: Path, tmp_path: Path, capsys) -> None:
    root = copy_corpus(tiny_data, tmp_path)
    tokenize_corpus(load_config(None, tiny_overrides(root, **{"train.run_dir": str(tmp_path / "run")})))
    err = capsys.readouterr().err
    assert "tokenize:" in err and "\r" not in err


def test_eval_perplexity_into_a_file_writes_no_redrawn_bar(tiny_data: Path, capsys) -> None:
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    mlm = build_model(cfg, len(tokenizer), tokenizer.pad_token_id).eval()
    texts = (tiny_data / "valid.txt").read_text(encoding="utf-8").splitlines()
    evaluate_texts(mlm, tokenizer, texts, 32, MaskingConfig(), 0, 4, torch.device("cpu"), max_blocks=4, progress=True)
    assert "\r" not in capsys.readouterr().err
