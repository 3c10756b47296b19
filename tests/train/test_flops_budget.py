"""train.max_flops: the objective's training FLOPs per token (ELECTRA: generator and discriminator), the budget that
stops the run and ends the schedule, and the `flops` of every metrics line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import PreTrainedModel

from mlmtrain.config import load_config
from mlmtrain.data.masking import MaskingCollator, VocabInfo
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.model.bert import flops_per_token
from mlmtrain.train.loop import pretrain
from mlmtrain.train.objectives import objective_of

from ..helpers import metrics

TOKENS_PER_STEP = 8 * 32  # the tiny config's global batch x seq_len


@pytest.mark.parametrize("objective, architecture", [("mlm", "bert"), ("electra", "bert"), ("mlm", "modernbert")])
def test_flops_per_token_matches_a_count_of_one_training_step(
    objective: str, architecture: str, tiny_data: Path, monkeypatch
) -> None:
    """The formula against torch's FLOP counter over a real forward and backward: ELECTRA's counts its generator
    (half width here, about a quarter of the work) as well as its discriminator; ModernBERT's its GLU feed-forward
    (Wi projects to twice the intermediate size). The objective counts the whole last layer; model.sparse_last_layer
    runs less of it, which `flops_per_token(..., last_layer_on_rows=True)` counts (below)."""
    import mlmtrain.model.bert

    monkeypatch.setattr(mlmtrain.model.bert, "fused_head_applies", lambda *_: False)  # its out= products go uncounted
    cfg = load_config(
        None,
        [
            "model.hidden_size=64",
            "model.num_layers=2",
            "model.num_heads=2",
            "model.intermediate_size=128",
            "model.dropout=0",
            "data.seq_len=64",
            "masking.fixed_count=true",
            "model.sparse_last_layer=false",
            f"train.objective={objective}",
            f"model.architecture={architecture}",
            *(["electra.generator_size=0.5"] if objective == "electra" else []),
        ],
    )
    vocab = VocabInfo.from_tokenizer(load_tokenizer(tiny_data / "tokenizer"))
    objective = objective_of(cfg, vocab)
    trained = objective.build()
    for part in trained.modules():  # eager attention: the counter does not count the CPU's fused SDPA kernel
        if isinstance(part, PreTrainedModel):
            part.set_attn_implementation("eager")
    module = objective.step_module(trained)
    rows = torch.randint(5, vocab.vocab_size, (8, 64), generator=torch.Generator().manual_seed(0))
    batch = MaskingCollator(vocab, cfg.masking, 0)(
        [{"input_ids": r, "epoch": 0, "index": i} for i, r in enumerate(rows)]
    )
    with FlopCounterMode(display=False) as counter:
        module(**batch).sum().backward()
    counted = counter.get_total_flops() / rows.numel()
    assert objective.training_flops_per_token() == pytest.approx(counted, rel=0.05)
    if objective.name == "mlm" and architecture == "bert":  # the last layer on the selected rows: what it runs
        module.last_layer_on_rows = True
        with FlopCounterMode(display=False) as counter:
            module(**batch).sum().backward()
        rate, (hidden, seq_len) = cfg.masking.mlm_probability, (64, 64)
        on_rows = flops_per_token(cfg.model, vocab.vocab_size, seq_len, rate, True, last_layer_on_rows=True)
        # that path attends through SDPA, whose CPU kernel the counter does not count: its last layer's scores
        uncounted = 6 * rate * 2 * seq_len * hidden
        assert counter.get_total_flops() / rows.numel() == pytest.approx(on_rows - uncounted, rel=0.05)
        assert on_rows < 0.8 * counted


def test_max_flops_stops_at_the_budget_and_the_schedule_ends_there(tiny_config) -> None:
    """A FLOP budget worth six steps runs six steps with the learning rates of a six-step budget (max_time only
    caps a broken budget: its share stays far below the FLOPs' in six steps)."""
    quiet = {"train.eval_every": 0, "checkpoint.save_every": 0, "optim.schedule": "linear"}
    by_steps = tiny_config(
        **quiet, **{"train.max_steps": 6, "train.run_dir": str(Path(tiny_config().train.run_dir) / "s")}
    )
    flops_per_token = objective_of(
        by_steps, VocabInfo.from_tokenizer(load_tokenizer(by_steps.tokenizer_dir))
    ).flops_per_token
    budget = 6 * TOKENS_PER_STEP * flops_per_token
    by_flops = tiny_config(**quiet, **{"train.max_steps": None, "train.max_flops": budget, "train.max_time": "30s"})
    assert pretrain(by_flops).name == "step-6"
    pretrain(by_steps)
    lines = [m for m in metrics(Path(by_flops.train.run_dir)) if "loss" in m]
    reference = [m for m in metrics(Path(by_steps.train.run_dir)) if "loss" in m]
    assert [m["lr"] for m in lines] == [m["lr"] for m in reference]
    assert all(m["flops"] == m["tokens"] * flops_per_token for m in metrics(Path(by_flops.train.run_dir)))
    assert lines[-1]["flops"] == budget


def test_a_flop_budget_replaces_the_default_step_budget() -> None:
    cfg = load_config(None, ["train.max_flops=1e15"])
    assert cfg.train.max_flops == 1e15 and cfg.train.max_steps is None
    assert load_config(None, ["train.max_flops=1e15", "train.max_time=1h"]).train.max_time_seconds == 3600


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["train.max_flops=1e15", "train.max_tokens=1000"], "train.max_tokens (1000) contradicts train.max_flops"),
        (["train.max_flops=1e15", "train.max_steps=50"], "train.max_steps (50) contradicts train.max_flops"),
        (["train.max_flops=0", "train.max_steps=null"], "train.max_flops must be a finite number > 0"),
        (["train.max_flops=.inf"], "train.max_flops must be a finite number"),  # every float key refuses inf
    ],
)
def test_contradicting_budgets_are_refused(overrides: list[str], needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


def test_the_report_plots_against_flops(tmp_path: Path) -> None:
    from mlmtrain.report import page as report
    from mlmtrain.report.rundata import load_run

    folder = tmp_path / "run"
    folder.mkdir()
    lines = [{"step": s, "tokens": 256 * s, "flops": 1000 * 256 * s, "loss": 5.0 / s} for s in (1, 2, 3, 4)]
    lines.append({"step": 4, "tokens": 1024, "flops": 1024000, "eval_loss": 1.5})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = load_run(folder)
    assert list(report._x_values(run, run.series["loss"], "flops")) == [256000, 512000, 768000, 1024000]
    assert list(report._x_values(run, run.series["eval_loss"], "flops")) == [1024000]
    pytest.importorskip("matplotlib")
    page = report.write_report([folder], axis="flops")
    assert "x axis: flops" in page.read_text()


def test_the_health_checks_know_a_flop_budget(tmp_path: Path) -> None:
    """The warm-up check judges a max_flops run by the steps its budget comes to (2,000 here), as for max_steps."""
    from mlmtrain.report import health
    from mlmtrain.report.rundata import load_run

    from ..report.test_report import healthy_spec, write_run

    spec = healthy_spec()
    for line in spec["train"] + spec["evals"]:
        line["flops"] = line["tokens"] * 1000
    spec["config"]["train"] = {"max_steps": None, "max_tokens": None, "max_flops": 2000 * 100_000 * 1000}
    verdicts = {v.check: v for v in health.run_checks(load_run(write_run(tmp_path / "run", spec)), {})}
    assert verdicts["warm-up"].status == health.OK, verdicts["warm-up"]
    assert verdicts["tokens per parameter"].message == "the run plans 200.0 tokens per parameter"
