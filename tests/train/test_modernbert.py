"""model.architecture modernbert: ModernBERT from scratch with mlmtrain's byte-level BPE (tokenizer.kind bpe) and
whole-word masks, through tokenize, pretrain (killed and resumed), eval-perplexity, fill-mask and probe; the checkpoint
is a stock ModernBertForMaskedLM with the tokenizer's special ids; its parameters and FLOPs per token as counted;
what only BERT has is refused in one line."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.masking import STARTS, VocabInfo, word_marks
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.model.architectures import ARCHITECTURES
from mlmtrain.model.bert import count_parameters
from mlmtrain.train import checkpoint as ckpt
from mlmtrain.train.loop import pretrain

from ..evaluate.test_evaluate import eval_json
from ..evaluate.test_probe import topics  # noqa: F401  (a fixture: a tiny labelled task)
from ..helpers import (
    assert_one_error_line,
    assert_same_weights,
    by_step,
    copy_corpus,
    finish,
    one_thread,
    output,
    run_cli,
    set_options,
    start_pretrain,
    tiny_overrides,
    wait_for,
)

# a byte-level BPE needs its 256 bytes and the five specials before its first merge
MODERN = {"model.architecture": "modernbert", "tokenizer.kind": "bpe", "tokenizer.vocab_size": 400}
SAMPLE = "The quick brown fox jumps over the lazy dog."


def _tokenize(capsys: pytest.CaptureFixture, data: Path, run_dir: Path, **extra: object):
    """`mlmtrain tokenize` of the corpus in `data` with MODERN settings: the tokenizer it wrote."""
    code, lines = run_cli(capsys, "tokenize", *set_options(data, run_dir, **{**MODERN, **extra}))
    assert code == 0, lines
    assert any("trained byte-level BPE" in line for line in lines), lines
    return load_tokenizer(data / "tokenizer")


@pytest.mark.slow
def test_modernbert_from_scratch_tokenizes_learns_survives_a_kill_and_serves_every_command(
    tiny_data: Path,
    topics: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    from transformers import AutoModelForMaskedLM, pipeline

    data = copy_corpus(tiny_data, tmp_path)
    run = {**MODERN, "masking.whole_word": True, "train.max_steps": 20, "optim.lr": 3e-3}
    tokenizer = _tokenize(capsys, data, tmp_path / "whole", **run)
    saved = json.loads((data / "tokenizer" / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "BPE"
    assert word_marks(tokenizer) == (STARTS, "Ġ")  # whole-word masks find every word, the first of a text too
    assert tokenizer.convert_ids_to_tokens(tokenizer("quick brown").input_ids) == ["[CLS]", "Ġquick", "Ġbrown", "[SEP]"]
    assert VocabInfo.from_tokenizer(tokenizer).continuation is not None

    whole = tmp_path / "whole"
    with one_thread():
        final = pretrain(load_config(None, tiny_overrides(data, **run, **{"train.run_dir": str(whole)})))
    evals = by_step(whole, "eval_loss")
    assert evals[20] < evals[5] - 0.5, evals  # it learns
    config = json.loads((final / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
    ids = {"pad_token_id": "pad", "cls_token_id": "cls", "bos_token_id": "cls", "sep_token_id": "sep"}
    for key, role in ids.items():  # the tokenizer's ids, not those of ModernBERT's own vocabulary (pad 50283, ...)
        assert config[key] == getattr(tokenizer, f"{role}_token_id"), key

    # killed with SIGKILL after its first checkpoint, resumed: the weights of the run that never stopped
    killed = tmp_path / "killed"
    process = start_pretrain(data, killed, **run)
    wait_for(lambda: ckpt.latest_checkpoint(killed) is not None, process, killed)
    process.send_signal(signal.SIGKILL)
    assert finish(process, killed) == -signal.SIGKILL, output(killed)
    with one_thread():
        code, lines = run_cli(capsys, "pretrain", *set_options(data, killed, **run), "--resume", "auto")
    assert code == 0, lines
    assert_same_weights(killed / "checkpoints" / "step-20", final)

    reloaded = AutoModelForMaskedLM.from_pretrained(str(final))
    assert type(reloaded).__name__ == "ModernBertForMaskedLM"
    answers = pipeline("fill-mask", model=str(final))("The quick brown [MASK] jumps.", top_k=3)
    assert len(answers) == 3 and all(answer["token_str"] for answer in answers)
    probe = ["--task", str(topics / "task"), "--mode", "linear", "--max-length", "32", "--device", "cpu"]
    for command in (
        ["eval-perplexity", "--data", str(data / "valid.txt"), "--seq-len", "32"],
        ["fill-mask", "The quick brown [MASK] jumps."],
        ["probe", *probe],
    ):
        code, lines = run_cli(capsys, command[0], "--model", str(final), *command[1:])
        assert code == 0, lines
    card = (final / "README.md").read_text()
    assert "A 2-layer ModernBERT encoder" in card and "BPE, " in card and "lower-cased" in card


@pytest.mark.oldpins
def test_a_modernbert_checkpoint_resumes_exactly_loads_in_transformers_and_keeps_its_architecture(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from transformers import AutoModelForMaskedLM, ModernBertForMaskedLM, pipeline

    data = copy_corpus(tiny_data, tmp_path)
    _tokenize(capsys, data, tmp_path / "whole")
    options = {**MODERN, "train.max_steps": 6, "checkpoint.save_every": 3, "train.eval_every": 3}
    whole = pretrain(load_config(None, tiny_overrides(data, **options, **{"train.run_dir": str(tmp_path / "whole")})))
    paused_dir = tmp_path / "paused"
    paused = tiny_overrides(data, **options, **{"train.run_dir": str(paused_dir), "train.pause_after": 3})
    assert pretrain(load_config(None, paused)).name == "step-3"

    # the checkpoint is a ModernBERT: a config that builds a BERT refuses to continue it, in one line
    bert = {**options, "model.architecture": "bert"}
    code, lines = run_cli(capsys, "pretrain", *set_options(data, paused_dir, **bert), "--resume", "auto")
    assert code == 2
    assert_one_error_line(lines, "holds a modernbert model", "model.architecture bert")
    assert ckpt.latest_checkpoint(paused_dir).name == "step-3"

    resumed = pretrain(load_config(None, tiny_overrides(data, **options, **{"train.run_dir": str(paused_dir)})), "auto")
    assert_same_weights(resumed, whole)
    assert type(AutoModelForMaskedLM.from_pretrained(str(whole))) is ModernBertForMaskedLM
    predictions = pipeline("fill-mask", model=str(whole))(SAMPLE.replace("fox", "[MASK]"))
    assert len(predictions) == 5


def test_modernbert_parameters_are_counted_without_building_it() -> None:
    cfg = load_config(None, ["model.architecture=modernbert", "model.hidden_size=32", "model.num_layers=4"]).model
    vocab = VocabInfo(vocab_size=203, mask_id=4, pad_id=0, special_ids=(0, 1, 2, 3, 4), cls_id=2, sep_id=3)
    architecture = ARCHITECTURES["modernbert"]
    torch.manual_seed(0)
    assert architecture.parameters(cfg, 203) == count_parameters(architecture.build(cfg, vocab))


@pytest.mark.parametrize(
    "extra, needles",
    [
        (
            {"train.objective": "electra"},
            ["model.architecture (modernbert) is not one train.objective electra builds", "train.objective: mlm"],
        ),
        ({"train.objective": "mlm+nsp"}, ["model.architecture", "mlm+nsp", "drop model.architecture"]),
        ({"train.objective": "mlm+sop"}, ["model.architecture", "mlm+sop", "train.objective: mlm"]),
        ({"model.init_from": "some/base"}, ["model.architecture (modernbert) builds a model from scratch"]),
        ({"tokenizer.pretrained": "some/tokenizer"}, ["tokenizer.kind (bpe)", "drop tokenizer.kind"]),
    ],
)
def test_what_only_bert_has_is_refused_in_one_line_with_nothing_written(
    extra: dict, needles: list[str], tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **MODERN, **extra))
    assert code == 2
    assert_one_error_line(lines, "config:", *needles)
    assert not run_dir.exists()


@pytest.mark.parametrize("hidden, heads, fixed", [(126, 2, 3), (64, 64, 32)], ids=["odd-head", "head-of-one"])
def test_heads_that_rotary_positions_cannot_turn_are_refused_before_anything_is_written(
    hidden: int, heads: int, fixed: int, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Rotary positions turn a head's dimensions in pairs: 126 / 2 = 63 failed at step 1 (after the tokenizer and
    store were written), 64 / 64 = 1 trained a rotary embedding broadcast to 2 dimensions. One line at once, naming
    a num_heads that works; with it, ModernBERT trains."""
    data = copy_corpus(tiny_data, tmp_path)
    shape = {**MODERN, "model.hidden_size": hidden, "model.intermediate_size": 64, "train.max_steps": 1}
    code, lines = run_cli(
        capsys, "pretrain", *set_options(data, tmp_path / "run", **shape, **{"model.num_heads": heads})
    )
    assert code == 2
    assert_one_error_line(lines, f"model.num_heads ({heads})", "rotary", f"set model.num_heads to {fixed}")
    assert (
        sorted(path.name for path in data.iterdir()) == ["train.txt", "valid.txt"] and not (tmp_path / "run").exists()
    )
    code, lines = run_cli(
        capsys, "pretrain", *set_options(data, tmp_path / "run", **shape, **{"model.num_heads": fixed})
    )
    assert code == 0, lines
    config = json.loads((tmp_path / "run" / "checkpoints" / "step-1" / "config.json").read_text())
    assert (config["hidden_size"] // config["num_attention_heads"]) % 2 == 0


@pytest.mark.skipif(int(__import__("transformers").__version__.split(".")[0]) < 5, reason="within needs transformers 5")
def test_modernbert_from_scratch_attends_within_documents_and_evaluates_so(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """data.document_attention within on ModernBERT (its global and local masks kept to each document: the model
    tests hold that to 1e-5): a run trains, and eval-perplexity attends as it trained."""
    data = copy_corpus(tiny_data, tmp_path)
    run = {**MODERN, "data.document_attention": "within", "train.max_steps": 4, "train.eval_every": 4}
    with one_thread():
        final = pretrain(load_config(None, tiny_overrides(data, **run, **{"train.run_dir": str(tmp_path / "run")})))
    assert 4 in by_step(tmp_path / "run", "eval_loss")
    scored = eval_json(capsys, final, data=str(data / "valid.txt"))
    assert scored["document_attention"] == "within" and scored["perplexity"] > 1
