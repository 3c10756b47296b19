"""The training loop end to end: checkpoints that transformers loads, exact resume, run-dir guard, NaN guard."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from transformers import BertForMaskedLM

from mlmtrain.data.blocks import StoreBlocks, evaluation_blocks
from mlmtrain.data.masking import VocabInfo, evaluation_masking
from mlmtrain.data.store import TokenStore
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.evaluate.perplexity import evaluate_blocks
from mlmtrain.model.optim import learning_rate
from mlmtrain.train.loop import pretrain

from ..helpers import metrics, step_losses, weights


@pytest.mark.oldpins
def test_pretrain_writes_a_checkpoint_transformers_loads(tiny_config) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM, pipeline

    cfg = tiny_config()
    final = pretrain(cfg)
    run_dir = Path(cfg.train.run_dir)
    assert final == run_dir / "checkpoints" / "step-10"
    assert (run_dir / "checkpoints" / "latest").resolve() == final.resolve()
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "mlmtrain.yaml",
        "training_state.pt",
        "COMPLETE",
    ):
        assert (final / name).is_file(), name
    model = AutoModelForMaskedLM.from_pretrained(str(run_dir / "checkpoints" / "latest"))
    assert type(model) is BertForMaskedLM
    tokenizer = AutoTokenizer.from_pretrained(str(final))
    assert tokenizer.mask_token == "[MASK]"
    predictions = pipeline("fill-mask", model=str(final))("the quick brown [MASK] jumps")
    assert len(predictions) == 5
    lines = metrics(run_dir)
    train_lines = [m for m in lines if "loss" in m]
    assert [m["step"] for m in train_lines] == list(range(1, 11))
    keys = {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "data_wait_share", "elapsed_s"}
    assert set(train_lines[0]) >= keys
    assert all(0.0 <= m["data_wait_share"] <= 1.0 for m in train_lines)
    assert train_lines[-1]["tokens"] == 10 * 8 * 32
    evals = [m for m in lines if "eval_loss" in m]
    assert [m["step"] for m in evals] == [5, 10]
    assert all(m["eval_ppl"] > 1 for m in evals)
    assert all(0.0 <= m["eval_acc"] <= 1.0 for m in evals)
    assert (run_dir / "mlmtrain.yaml").is_file()


def test_loss_goes_down(tiny_config) -> None:
    cfg = tiny_config(**{"train.max_steps": 60, "optim.lr": 3e-3, "train.eval_every": 0, "checkpoint.save_every": 0})
    pretrain(cfg)
    losses = list(step_losses(Path(cfg.train.run_dir)).values())
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10 - 0.5


@pytest.mark.oldpins
@pytest.mark.parametrize("attention", ["packed", "within"])
def test_paused_and_resumed_run_equals_an_uninterrupted_one(attention: str, tiny_config, tmp_path: Path) -> None:
    whole = tiny_config(**{"train.run_dir": str(tmp_path / "whole"), "data.document_attention": attention})
    pretrain(whole)
    paused_cfg = tiny_config(
        **{"train.run_dir": str(tmp_path / "paused"), "train.pause_after": 5, "data.document_attention": attention}
    )
    paused = pretrain(paused_cfg)
    assert paused.name == "step-5"
    assert max(step_losses(tmp_path / "paused")) == 5
    resumed = pretrain(paused_cfg, resume="auto")
    assert resumed.name == "step-10"
    assert step_losses(tmp_path / "paused") == step_losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole" / "checkpoints" / "step-10"), weights(resumed)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_a_compiled_run_learns_as_the_eager_one_and_resumes_exactly(tiny_config, tmp_path: Path) -> None:
    """train.compile on the CPU: the eager run's losses (to float rounding: inductor fuses and reorders), with the
    classic random masks (a row count that changes every step), and a paused compiled run resumes exactly (before:
    in the last bits only, as inductor summed the token-type embedding's gradient with parallel atomic adds)."""
    common = {"model.dropout": 0.0, "train.max_steps": 6, "train.eval_every": 3, "checkpoint.save_every": 3}
    compiled = {**common, "train.compile": True}
    pretrain(tiny_config(**{"train.run_dir": str(tmp_path / "eager"), **common}))
    whole = pretrain(tiny_config(**{"train.run_dir": str(tmp_path / "whole"), **compiled}))
    eager, losses = step_losses(tmp_path / "eager"), step_losses(tmp_path / "whole")
    assert eager.keys() == losses.keys() == set(range(1, 7))
    for step in eager:
        assert losses[step] == pytest.approx(eager[step], rel=1e-4), step
    paused_cfg = tiny_config(**{"train.run_dir": str(tmp_path / "paused"), "train.pause_after": 3, **compiled})
    assert pretrain(paused_cfg).name == "step-3"
    resumed = pretrain(paused_cfg, resume="auto")
    assert step_losses(tmp_path / "paused") == losses
    a, b = weights(whole), weights(resumed)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_grad_accumulation_matches_one_big_batch(tiny_config, tmp_path: Path) -> None:
    # dropout off: the two runs draw dropout masks for different tensor shapes; fp32: bf16's rounding (precision auto
    # on a CPU with AVX512-BF16 runs the head in bf16) also depends on them
    common = {
        "model.hidden_dropout": 0.0,
        "model.attention_dropout": 0.0,
        "train.precision": "fp32",
        "train.eval_every": 0,
        "checkpoint.save_every": 0,
        "train.max_steps": 4,
    }
    big = tiny_config(**{"train.run_dir": str(tmp_path / "big"), **common})
    accum = tiny_config(**{"train.run_dir": str(tmp_path / "accum"), "train.micro_batch_size": 2, **common})
    pretrain(big)
    pretrain(accum)
    a, b = step_losses(tmp_path / "big"), step_losses(tmp_path / "accum")
    assert a.keys() == b.keys()
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=1e-5, abs=1e-5)


def test_run_dir_holding_a_run_needs_resume_or_overwrite(tiny_config) -> None:
    cfg = tiny_config(**{"train.max_steps": 2, "checkpoint.save_every": 0, "train.eval_every": 0})
    pretrain(cfg)
    with pytest.raises(UserError, match="already holds a run"):
        pretrain(cfg)
    assert pretrain(cfg, overwrite=True).name == "step-2"
    assert max(step_losses(Path(cfg.train.run_dir))) == 2


def test_max_tokens_budget(tiny_config) -> None:
    cfg = tiny_config(**{"train.max_steps": None, "train.max_tokens": 3 * 8 * 32, "train.eval_every": 0})
    assert pretrain(cfg).name == "step-3"


def test_keep_last_prunes_and_keep_best_spares_the_best(tiny_config, capsys) -> None:
    # a high learning rate makes validation loss wander, so the best is often not the last
    cfg = tiny_config(
        **{
            "train.max_steps": 12,
            "train.eval_every": 2,
            "checkpoint.save_every": 2,
            "checkpoint.keep_last": 1,
            "checkpoint.keep_best": True,
            "optim.lr": 0.05,
        }
    )
    pretrain(cfg)
    run_dir = Path(cfg.train.run_dir)
    evals = {m["step"]: m["eval_loss"] for m in metrics(run_dir) if "eval_loss" in m}
    best = min(evals, key=evals.get)
    kept = {p.name for p in (run_dir / "checkpoints").glob("step-*")}
    assert kept == {"step-12", f"step-{best}"}
    named = f"the lowest validation loss was at step {best}: {run_dir / 'checkpoints' / f'step-{best}'}"
    assert (named in capsys.readouterr().err) == (best != 12)  # the last line names the best when it is not the last


def test_max_time_budget_stops_on_time_and_stretches_the_schedule(tiny_config, ticking_clock) -> None:
    cfg = tiny_config(
        **{
            "train.max_steps": None,
            "train.max_time": "3s",
            "train.eval_every": 0,
            "checkpoint.save_every": 0,
            "optim.warmup_steps": 1,
        }
    )
    final = pretrain(cfg)
    lines = [m for m in metrics(Path(cfg.train.run_dir)) if "loss" in m]
    assert final.name == f"step-{lines[-1]['step']}"
    # it stops at the first step that ends past the budget (the loop's clock ticks at each reading; elapsed_s is
    # logged rounded to the millisecond: a step that ended at 2.9996 s reads 3.0, hence <= for the one before)
    assert lines[-1]["elapsed_s"] >= 3.0 >= lines[-2]["elapsed_s"]
    lrs = [m["lr"] for m in lines]
    assert all(a >= b for a, b in zip(lrs[1:-1], lrs[2:], strict=True))  # decay after the one warm-up step
    # each step's lr is the schedule at the share of the time budget spent (logged elapsed_s, to the millisecond):
    # the decay is stretched over the time budget however fast or slow the steps are
    warmup_end = lines[1]["elapsed_s"] / 3.0  # the share spent when the step after warm-up ran
    for m in lines[1:]:
        expected = learning_rate(m["step"] - 1, m["elapsed_s"] / 3.0, cfg.optim, warmup_end)
        assert m["lr"] == pytest.approx(expected, rel=1e-3, abs=1e-6), m


def test_training_time_evaluation_keeps_the_classic_masks(tiny_config, tmp_path: Path) -> None:
    """A recipe that trains on 40 % fixed-count masks is evaluated on the same 15 % masks as the default one."""
    evaluated = {}
    for name, masking in (("classic", {}), ("recipe", {"masking.mlm_probability": 0.4, "masking.fixed_count": True})):
        run_dir = tmp_path / name
        pretrain(tiny_config(**masking, **{"train.run_dir": str(run_dir), "train.max_steps": 5}))
        evaluated[name] = [m["eval_masked_tokens"] for m in metrics(run_dir) if "eval_masked_tokens" in m]
    assert evaluated["classic"] == evaluated["recipe"] != []


def test_on_resume_the_configs_optimizer_settings_win_and_are_announced(tiny_config, capsys) -> None:
    paused = pretrain(tiny_config(**{"train.pause_after": 5, "train.eval_every": 0}))
    capsys.readouterr()
    changed = {"optim.weight_decay": 0.05, "optim.beta2": 0.95, "optim.eps": 1e-8, "train.eval_every": 0}
    final = pretrain(tiny_config(**changed), resume=str(paused))
    assert "optimizer settings from the config replace the checkpoint's" in capsys.readouterr().err
    decay, no_decay = torch.load(final / "training_state.pt", weights_only=True)["optimizer"]["param_groups"]
    assert (decay["weight_decay"], tuple(decay["betas"]), decay["eps"]) == (0.05, (0.9, 0.95), 1e-8)
    assert (no_decay["weight_decay"], tuple(no_decay["betas"])) == (0.0, (0.9, 0.95))


def test_progress_into_a_file_is_a_plain_line_now_and_then_not_a_redrawn_bar(capsys: pytest.CaptureFixture) -> None:
    # nohup or a scheduler sends stderr to a file (here capsys: not a terminal); a bar redrawn 10 times a second
    # would fill it with carriage returns
    from mlmtrain.runtime.progress import Reporter

    default = Reporter(None, None, show_bar=True)  # every 30 s: quick steps print nothing yet
    for step in (1, 2, 3):
        default.advance(step, 2.5, 1e-3, 1000.0)
    default.close()
    assert capsys.readouterr().err == ""
    every_time = Reporter(None, 100, show_bar=True, plain_every_s=0.0)
    for step in (1, 2, 3):
        every_time.advance(step, 2.5, 1e-3, 1000.0)
    every_time.close()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" min left")[0].rsplit(",", 1)[0] for line in lines] == [
        f"step {step}/100 ({step}%): loss 2.500, lr 1.00e-03, 1,000 tokens/s" for step in (1, 2, 3)
    ]


def test_a_step_with_finite_loss_but_non_finite_gradients_is_skipped(tiny_config) -> None:
    """One NaN in one gradient (a GPU attention backward can give it while the loss stays finite) would make every
    weight NaN through clipping and AdamW: the step is skipped on the device and counted, as for a non-finite loss (it
    is still a step of the schedule: only its update is missing), and the next step trains as usual."""
    import math
    import time

    from mlmtrain.runtime.distributed import DistContext
    from mlmtrain.train.step import build_setup, train_step

    setup = build_setup(tiny_config(), DistContext(device=torch.device("cpu")))
    weight = setup.mlm.bert.encoder.layer[0].attention.self.query.weight
    poison = weight.register_hook(lambda grad: grad * float("nan"))
    before = {name: p.detach().clone() for name, p in setup.mlm.named_parameters()}
    result = train_step(setup, [next(setup.batches)], clock=time.perf_counter)
    assert result.skipped and math.isfinite(result.loss) and math.isnan(result.grad_norm)
    reading = result.read()
    assert (setup.state.step, reading.nonfinite_in_row, reading.nonfinite_total) == (1, 1, 1)
    assert all(torch.equal(p, before[name]) for name, p in setup.mlm.named_parameters())
    poison.remove()
    result = train_step(setup, [next(setup.batches)], clock=time.perf_counter)
    assert not result.skipped and math.isfinite(result.grad_norm)
    reading = result.read()
    assert (setup.state.step, reading.nonfinite_in_row, reading.nonfinite_total) == (2, 0, 1)
    assert all(torch.isfinite(p).all() for p in setup.mlm.parameters())
    assert not torch.equal(weight, before["bert.encoder.layer.0.attention.self.query.weight"])


def test_attention_auto_trains_within_documents_and_saves_it_so(tiny_config, capsys) -> None:
    """data.document_attention auto on a BERT trained with MLM: within documents, said at the start, and saved so in
    the run's config, which the checkpoint's evaluation reads."""
    cfg = tiny_config(**{"data.document_attention": "auto", "train.max_steps": 2, "train.eval_every": 0})
    final = pretrain(cfg)
    assert "attention: each token attends to its own document" in capsys.readouterr().err
    for saved in (Path(cfg.train.run_dir) / "mlmtrain.yaml", final / "mlmtrain.yaml"):
        assert yaml.safe_load(saved.read_text())["data"]["document_attention"] == "within", saved


def test_a_run_attending_within_documents_evaluates_as_it_trains(tiny_config) -> None:
    """data.document_attention within: the run's own evaluation keeps each token to its document too, so its
    validation loss is that of the model scored within documents, not across the whole block."""
    settings = {"data.document_attention": "within", "train.precision": "fp32", "optim.lr": 3e-3}
    cfg = tiny_config(**settings, **{"train.max_steps": 2, "train.eval_every": 2})
    pretrain(cfg)
    run_dir = Path(cfg.train.run_dir)
    eval_loss = [line["eval_loss"] for line in metrics(run_dir) if "eval_loss" in line][-1]
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    store = TokenStore(cfg.store_dir, "validation")
    blocks = StoreBlocks(store, cfg.data.seq_len, True, tokenizer.cls_token_id, tokenizer.sep_token_id)
    mlm = BertForMaskedLM.from_pretrained(str(run_dir / "checkpoints" / "step-2"))
    vocab, masking = VocabInfo.from_tokenizer(tokenizer), evaluation_masking(cfg.masking)
    indices = evaluation_blocks(blocks, cfg.train.eval_max_blocks)
    cpu = torch.device("cpu")
    scored = {
        within: evaluate_blocks(mlm, blocks, indices, vocab, masking, cfg.masking.eval_seed, 8, cpu, documents=within)
        for within in (True, False)
    }
    assert eval_loss == pytest.approx(scored[True].loss, rel=1e-6)
    assert eval_loss != pytest.approx(scored[False].loss, rel=1e-5)
