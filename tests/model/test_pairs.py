"""The sentence-pair objectives (mlm+nsp, mlm+sop): pair construction, determinism, exact resume, a checkpoint the
Auto classes load with its trained pooler, a pair head that learns, and one-line refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.masking import IGNORE_INDEX, VocabInfo
from mlmtrain.data.store import TokenStore, tokenize_corpus
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.model.pairs import PairPretraining, build_pretraining
from mlmtrain.train.loop import pretrain
from mlmtrain.train.objectives import objective_of

from ..helpers import WORDS, metrics, step_losses, tiny_overrides, weights

PAIRS = {"train.objective": "mlm+nsp", "train.max_steps": 6, "train.eval_every": 3, "checkpoint.save_every": 3}


def windows_of(cfg, split: str = "train"):
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    objective = objective_of(cfg, VocabInfo.from_tokenizer(tokenizer))
    return objective.validation_blocks(TokenStore(cfg.store_dir, split), tokenizer), tokenizer


def contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    """Whether `needle` is a contiguous run of `haystack`."""
    n = len(needle)
    return any(np.array_equal(haystack[i : i + n], needle) for i in range(len(haystack) - n + 1))


@pytest.mark.parametrize("objective", ["mlm+nsp", "mlm+sop"])
def test_pair_blocks(objective: str, tiny_config) -> None:
    """Shares near one half, [CLS] A [SEP] B [SEP] with types 0 then 1, consecutive segments of one document for a
    true (or swapped) pair, a span of another document for NSP's false B, and no pair reaching into padding."""
    cfg = tiny_config(**{"train.objective": objective})
    windows, tokenizer = windows_of(cfg)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    draws = [windows.pair(i, 0, 0) for i in range(len(windows))]
    share = sum(label for *_, label in draws) / len(draws)
    assert 0.4 < share < 0.6, share
    for index, (first, second, label) in enumerate(draws[:60]):
        window = windows[index]
        assert len(first) >= 4 and len(second) >= 4 and len(first) + len(second) <= cfg.data.seq_len - 3
        if label == 0:
            assert np.array_equal(np.concatenate([first, second]), window)
        elif objective == "mlm+sop":
            assert np.array_equal(np.concatenate([second, first]), window)
        else:
            assert np.array_equal(first, window[: len(first)])
            store = windows.store
            others = [store.document(d) for d in range(store.num_documents) if d != windows.doc[index]]
            assert any(contains(other, second) for other in others)
    collator = windows.collator(VocabInfo.from_tokenizer(tokenizer), cfg.masking, 0)
    batch = collator([{"input_ids": None, "epoch": 0, "index": i} for i in range(len(windows))])
    attended = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).bool()
    for row in range(len(windows)):
        length = int(attended[row].sum())
        ids, types = batch["input_ids"][row], batch["token_type_ids"][row]
        first, second, label = draws[row]
        assert ids[0] == cls_id and ids[len(first) + 1] == sep_id and ids[length - 1] == sep_id
        assert types[: len(first) + 2].eq(0).all() and types[len(first) + 2 : length].eq(1).all()
        assert types[length:].eq(0).all() and batch["labels"][row, length:].eq(IGNORE_INDEX).all()
        assert batch["next_sentence_label"][row] == label
    assert not (batch["token_type_ids"].bool() & ~attended).any()  # no segment reaches into padding


def test_pairs_are_a_pure_function_of_seed_epoch_and_block(tiny_config) -> None:
    cfg = tiny_config()
    windows, tokenizer = windows_of(tiny_config(**{"train.objective": "mlm+nsp"}))
    collator = windows.collator(VocabInfo.from_tokenizer(tokenizer), cfg.masking, 5)

    def served(index: int, epoch: int, batch_with: list[int]) -> tuple:
        batch = collator([{"input_ids": None, "epoch": epoch, "index": i} for i in [index, *batch_with]])
        length = int(batch["attention_mask"][0].sum()) if "attention_mask" in batch else batch["input_ids"].shape[1]
        return tuple(batch[k][0, :length].tolist() for k in ("input_ids", "labels", "token_type_ids")), int(
            batch["next_sentence_label"][0]
        )

    assert served(7, 0, []) == served(7, 0, [3, 11]) == served(7, 0, [40])
    assert any(served(i, 0, []) != served(i, 1, []) for i in range(10))  # another epoch draws again


@pytest.fixture(scope="module")
def nsp_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 steps of mlm+nsp on the tiny store; checkpoints at 3 and 6."""
    run_dir = tmp_path_factory.mktemp("nsp") / "whole"
    pretrain(load_config(None, tiny_overrides(tiny_data, **{**PAIRS, "train.run_dir": str(run_dir)})))
    return run_dir


def test_a_pair_run_logs_its_loss_terms_and_resumes_exactly(nsp_run: Path, tiny_data: Path, tmp_path: Path) -> None:
    lines = metrics(nsp_run)
    steps = [m for m in lines if "loss" in m]
    for m in steps:
        assert m["loss"] == pytest.approx(m["mlm_loss"] + m["pair_loss"])
        assert 0.0 <= m["pair_accuracy"] <= 1.0
    evals = [m for m in lines if "eval_loss" in m]
    assert [m["step"] for m in evals] == [3, 6]
    assert evals[-1]["eval_pairs"] == 8 and 0.0 <= evals[-1]["eval_pair_accuracy"] <= 1.0
    paused = load_config(None, tiny_overrides(tiny_data, **{**PAIRS, "train.run_dir": str(tmp_path / "paused")}))
    paused.train.pause_after = 3
    assert pretrain(paused).name == "step-3"
    resumed = pretrain(paused, resume="auto")
    assert step_losses(tmp_path / "paused") == step_losses(nsp_run)
    whole = weights(nsp_run / "checkpoints" / "step-6")
    assert all(torch.equal(whole[name], tensor) for name, tensor in weights(resumed).items())
    assert [m["eval_pair_accuracy"] for m in metrics(tmp_path / "paused") if "eval_loss" in m][-1] == evals[-1][
        "eval_pair_accuracy"
    ]  # the same fixed pairs


def test_the_checkpoint_loads_as_pretraining_masked_lm_and_classifier(nsp_run: Path) -> None:
    from transformers import (
        AutoModelForMaskedLM,
        AutoModelForPreTraining,
        AutoModelForSequenceClassification,
        BertForPreTraining,
    )

    final = nsp_run / "checkpoints" / "latest"
    assert json.loads((final / "config.json").read_text())["architectures"] == ["BertForPreTraining"]
    pretraining, info = AutoModelForPreTraining.from_pretrained(str(final), output_loading_info=True)
    assert type(pretraining) is BertForPreTraining and not info["missing_keys"]
    _, info = AutoModelForMaskedLM.from_pretrained(str(final), output_loading_info=True)
    assert not info["missing_keys"]
    classifier, info = AutoModelForSequenceClassification.from_pretrained(str(final), output_loading_info=True)
    assert set(info["missing_keys"]) <= {"classifier.weight", "classifier.bias"}  # the new task head alone
    pooler = classifier.bert.pooler.dense.weight
    assert torch.equal(pooler, pretraining.bert.pooler.dense.weight)  # the trained pooler, not a fresh one
    torch.manual_seed(0)
    fresh = build_pretraining(load_config(final / "mlmtrain.yaml").model, pretraining.config.vocab_size, 0)
    assert not torch.equal(pooler, fresh.bert.pooler.dense.weight)


@pytest.mark.slow
def test_the_pair_head_learns_a_trivial_next_sentence(tiny_data: Path, tmp_path: Path) -> None:
    """NSP on documents "x x x x x x . y y y y y y ." (x and y from two word sets): a true B is the y half, a false
    one a span of another document, mostly x words, so the words of the block give the label away; the pair head
    learns it (accuracy from chance to well above it in 80 steps)."""
    import random

    rng = random.Random(0)
    first, second = WORDS[:8], WORDS[8:16]
    documents = [
        " ".join(rng.choice(first) for _ in range(6)) + " . " + " ".join(rng.choice(second) for _ in range(6)) + " ."
        for _ in range(128)
    ]
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text("\n".join(documents) + "\n")
    overrides = {
        "train.objective": "mlm+nsp",
        "train.run_dir": str(tmp_path / "run"),
        "tokenizer.pretrained": str(tiny_data / "tokenizer"),
        "model.dropout": 0.0,
    }
    cfg = load_config(None, tiny_overrides(tmp_path, **overrides))
    tokenize_corpus(cfg, quiet=True)
    windows, tokenizer = windows_of(cfg)
    collator = windows.collator(VocabInfo.from_tokenizer(tokenizer), cfg.masking, 0)
    torch.manual_seed(0)
    module = PairPretraining(build_pretraining(cfg.model, len(tokenizer), tokenizer.pad_token_id))
    optimizer = torch.optim.AdamW(module.parameters(), lr=5e-3)
    accuracy = []
    for step in range(80):
        rows = range(step % 4 * 32, step % 4 * 32 + 32)
        batch = collator([{"input_ids": None, "epoch": step, "index": i} for i in rows])
        masked_lm, pair, correct = module(**batch)
        loss = masked_lm / max(int((batch["labels"] != IGNORE_INDEX).sum()), 1) + pair / 32
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        accuracy.append(float(correct) / 32)
    assert sum(accuracy[:5]) / 5 < 0.7 and sum(accuracy[-10:]) / 10 > 0.75, accuracy


@pytest.mark.parametrize(
    "overrides,needle",
    [
        ({"train.objective": "mlm+nsp", "data.seq_len": 10}, "too short for two segments"),
        ({"train.objective": "mlm+sop", "data.use_store": False}, "cuts its pairs from the token store"),
    ],
)
def test_bad_pair_configs_are_refused(overrides: dict, needle: str, tmp_path: Path) -> None:
    import mlmtrain

    with pytest.raises(UserError, match=needle):
        mlmtrain.load_config(None, tiny_overrides(tmp_path, **overrides))


def test_documents_too_short_to_pair_are_refused(tiny_data: Path, tmp_path: Path) -> None:
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text("\n".join(" ".join(WORDS[i : i + 3]) for i in range(40)) + "\n")
    overrides = {"train.objective": "mlm+nsp", "tokenizer.pretrained": str(tiny_data / "tokenizer")}
    cfg = load_config(None, tiny_overrides(tmp_path, **{**overrides, "train.run_dir": str(tmp_path / "run")}))
    with pytest.raises(UserError, match="document\\(s\\) of 8 tokens or more"):
        pretrain(cfg)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_resuming_with_another_objective_is_refused(nsp_run: Path, tiny_data: Path, tmp_path: Path) -> None:
    step3 = nsp_run / "checkpoints" / "step-3"
    before = sorted(p.name for p in (nsp_run / "checkpoints").iterdir())
    for objective in ("mlm", "mlm+sop"):
        other = tiny_overrides(tiny_data, **{**PAIRS, "train.objective": objective, "train.run_dir": str(nsp_run)})
        with pytest.raises(
            UserError, match=re.escape(f"trained with train.objective mlm+nsp, the config says {objective}")
        ):
            pretrain(load_config(None, other), resume=str(step3))
    assert sorted(p.name for p in (nsp_run / "checkpoints").iterdir()) == before  # nothing written or moved
    mlm = load_config(None, tiny_overrides(tiny_data, **{"train.run_dir": str(tmp_path / "mlm"), "train.max_steps": 1}))
    mlm_checkpoint = pretrain(mlm)
    as_pairs = tiny_overrides(tiny_data, **{**PAIRS, "train.run_dir": str(tmp_path / "mlm")})
    with pytest.raises(UserError, match=re.escape("trained with train.objective mlm, the config says mlm+nsp")):
        pretrain(load_config(None, as_pairs), resume=str(mlm_checkpoint))


def test_the_report_draws_the_pair_accuracy(nsp_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from mlmtrain.report import page as report

    page = report.write_report([nsp_run], out=tmp_path / "page.html").read_text()
    assert 'id="pair-accuracy"' in page
