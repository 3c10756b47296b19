"""scripts/cloze.py: the README's cloze answers ranked in a real model's predictions, agreeing with fill-mask."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from mlmtrain.cli.app import main as mlmtrain_main
from mlmtrain.config import DataConfig, ModelConfig, TokenizerConfig
from mlmtrain.data.sources import open_corpus
from mlmtrain.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from mlmtrain.model.bert import build_model

from ..helpers import script_module

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cloze():
    """scripts/cloze.py as a module."""
    with script_module("cloze.py", "cloze_script") as module:
        yield module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A WordPiece tokenizer trained on the builtin Python docs and a freshly initialised BertForMaskedLM."""
    folder = tmp_path_factory.mktemp("cloze") / "model"
    texts = list(open_corpus("builtin:python-docs", DataConfig()))[:400]
    save_tokenizer(train_tokenizer(texts, TokenizerConfig(vocab_size=400)), folder, TokenizerConfig())
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(0)
    size = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=64)
    build_model(size, len(tokenizer), tokenizer.pad_token_id).eval().save_pretrained(folder)
    return folder


def fill_mask(folder: Path, sentence: str, capsys: pytest.CaptureFixture) -> list[tuple[float, str]]:
    """(score, word) lines of `mlmtrain fill-mask --top-k 30` for one sentence."""
    capsys.readouterr()
    try:
        mlmtrain_main(["fill-mask", "--model", str(folder), "--device", "cpu", "-k", "30", sentence])
    except SystemExit as done:
        assert not done.code
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    return [(float(line.split()[0]), line.split()[1]) for line in lines]


def test_the_readme_holds_five_cloze_sentences(cloze) -> None:
    rows = cloze.readme_cloze(REPO / "README.md")
    assert [answer for _, answer in rows] == ["break", "def", "list", "return", "import"]
    assert all(sentence.count("[MASK]") == 1 for sentence, _ in rows)


def test_ranks_and_hits_agree_with_fill_mask(cloze, model_dir: Path, tmp_path: Path, capsys) -> None:
    first, second = "Use the [MASK] statement to load a module.", "A [MASK] is a mutable sequence."
    # answers the untrained model ranks at known places: whole words (a table row holds no "##" piece)
    ranked = [
        [(rank, score, word) for rank, (score, word) in enumerate(fill_mask(model_dir, s, capsys), 1)]
        for s in (first, second)
    ]
    near = next(row for row in ranked[0] if row[2].isalpha())
    far = next(row for row in ranked[1] if row[2].isalpha() and row[0] > near[0])
    readme = tmp_path / "README.md"
    readme.write_text(
        "| sentence | answer |\n|---|---|\n"
        f"| {first} | {near[2]} |\n| {second} | {far[2]} |\n| The [MASK] keyword. | zqxjv |\n",
        encoding="utf-8",
    )

    k = near[0]
    assert cloze.main([str(model_dir), "--readme", str(readme), "--top-k", str(k)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(model_dir)
    rows = [line.split() for line in out[1:4]]
    # rank, probability (fill-mask's score), answer, then the model's top k (fill-mask's first k words)
    assert rows[0][:3] == [str(near[0]), f"{near[1]:.4f}", near[2]]
    assert rows[0][3 : 3 + k] == [word for _, _, word in ranked[0][:k]]
    assert rows[1][:3] == [str(far[0]), f"{far[1]:.4f}", far[2]]
    assert rows[2][:3] == ["-", "0.0000", "zqxjv"]  # not one token of the vocabulary: no rank
    summary, mean = out[4].split("; mean log-probability of the answers: ")
    assert summary == f"in the top {k}: 1 of 3"  # the answer that is no token counts as a miss, not in the mean
    assert float(mean) == pytest.approx((math.log(near[1]) + math.log(far[1])) / 2, abs=0.05)

    assert cloze.main([str(model_dir), "--readme", str(readme), "--top-k", str(far[0])]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"in the top {far[0]}: 2 of 3; ")


def test_a_folder_that_is_no_model_is_one_line_exit_2(cloze, tmp_path: Path, capsys) -> None:
    assert cloze.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cloze: model: ") and "does not exist" in err and err.count("\n") == 1


def test_a_readme_without_the_table_is_refused(cloze, model_dir: Path, tmp_path: Path, capsys) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# no table\n", encoding="utf-8")
    with pytest.raises(SystemExit) as done:
        cloze.main([str(model_dir), "--readme", str(readme)])
    assert done.value.code == 2 and "no cloze table" in capsys.readouterr().err
