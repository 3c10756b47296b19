"""The optimizer: decay / no-decay groups over a tied BERT, AdamW settings, and the schedule at its key points."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from mlmtrain.config import ModelConfig, OptimConfig, TrainConfig
from mlmtrain.model.bert import MaskedLM, build_model
from mlmtrain.model.optim import build_optimizer, learning_rate, parameter_groups, set_learning_rate, warmup_share


@pytest.fixture(scope="module")
def model() -> MaskedLM:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_layers=2, num_heads=2, intermediate_size=32, max_position_embeddings=32)
    return MaskedLM(build_model(cfg, vocab_size=50, pad_id=0))


def test_parameter_groups_split_matrices_from_biases_and_layernorm(model):
    decay, no_decay = parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert len(decay["params"]) == len(decay["param_names"]) and len(no_decay["params"]) == len(no_decay["param_names"])

    assert all(p.ndim == 2 for p in decay["params"])
    assert all(name.endswith(".weight") and "LayerNorm" not in name for name in decay["param_names"])
    for name in (
        "mlm.bert.embeddings.word_embeddings.weight",
        "mlm.bert.embeddings.position_embeddings.weight",
        "mlm.bert.encoder.layer.0.attention.self.query.weight",
        "mlm.bert.encoder.layer.1.intermediate.dense.weight",
        "mlm.cls.predictions.transform.dense.weight",
    ):
        assert name in decay["param_names"]
    for name in (
        "mlm.bert.embeddings.LayerNorm.weight",
        "mlm.bert.embeddings.LayerNorm.bias",
        "mlm.bert.encoder.layer.0.attention.self.query.bias",
        "mlm.bert.encoder.layer.1.output.LayerNorm.weight",
        "mlm.cls.predictions.bias",
        "mlm.cls.predictions.transform.LayerNorm.weight",
    ):
        assert name in no_decay["param_names"]
    assert all(name.endswith("bias") or "LayerNorm" in name for name in no_decay["param_names"])


def test_parameter_groups_hold_each_parameter_once(model):
    grouped = [p for group in parameter_groups(model, 0.01) for p in group["params"]]
    assert len({id(p) for p in grouped}) == len(grouped)
    assert {id(p) for p in grouped} == {id(p) for p in model.parameters()}
    # The tied word embedding / decoder weight appears once, under the embedding's name.
    word_embedding = model.mlm.bert.embeddings.word_embeddings.weight
    assert sum(p is word_embedding for p in grouped) == 1
    assert sum(p is model.mlm.cls.predictions.decoder.bias for p in grouped) == 1


def test_parameter_groups_leave_out_frozen_parameters(model):
    position = model.mlm.bert.embeddings.position_embeddings.weight
    position.requires_grad_(False)
    try:
        grouped = [p for group in parameter_groups(model, 0.01) for p in group["params"]]
    finally:
        position.requires_grad_(True)
    assert all(p is not position for p in grouped)


def test_build_optimizer(model):
    cfg = OptimConfig(lr=3e-4, weight_decay=0.05, beta1=0.8, beta2=0.95, eps=1e-7)
    optimizer = build_optimizer(model, cfg, torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.AdamW)
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert decay["param_names"] == parameter_groups(model, 0.05)[0]["param_names"]
    for group in optimizer.param_groups:
        assert group["lr"] == 3e-4 and group["betas"] == (0.8, 0.95) and group["eps"] == 1e-7
        assert group["fused"] is True  # torch's fused kernel on the CPU too

    set_learning_rate(optimizer, 1e-5)
    assert [group["lr"] for group in optimizer.param_groups] == [1e-5, 1e-5]


def test_build_optimizer_fuses_on_cuda(model):
    # AdamW checks the parameters' device only at the first step, so this runs without a GPU.
    optimizer = build_optimizer(model, OptimConfig(), torch.device("cuda"))
    assert all(group["fused"] is True for group in optimizer.param_groups)


def test_the_fused_cpu_step_matches_the_foreach_one():
    # The fused kernel is a faster route to the same AdamW update: three steps land where the foreach path's do.
    torch.manual_seed(0)
    fused_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    foreach_model = copy.deepcopy(fused_model)
    cfg = OptimConfig(lr=1e-2, weight_decay=0.1)
    fused = build_optimizer(fused_model, cfg, torch.device("cpu"))
    groups = parameter_groups(foreach_model, cfg.weight_decay)
    foreach = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, foreach=True)
    before = [p.detach().clone() for p in fused_model.parameters()]
    for _ in range(3):
        grads = [torch.randn_like(p) for p in fused_model.parameters()]
        for model, optimizer in ((fused_model, fused), (foreach_model, foreach)):
            for param, grad in zip(model.parameters(), grads, strict=True):
                param.grad = grad.clone()
            optimizer.step()
    for a, b, start in zip(fused_model.parameters(), foreach_model.parameters(), before, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert not torch.equal(a.detach(), start)  # every tensor moved: the comparison is not of untouched weights


def test_optimizer_step_decays_only_the_decay_group():
    # With zero gradients Adam's update is 0, so a step moves a parameter only through weight decay.
    layer = torch.nn.Linear(4, 4)
    optimizer = build_optimizer(layer, OptimConfig(lr=0.1, weight_decay=0.5), torch.device("cpu"))
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    for param in layer.parameters():
        param.grad = torch.zeros_like(param)
    optimizer.step()
    torch.testing.assert_close(layer.weight.detach(), weight * (1 - 0.1 * 0.5))
    torch.testing.assert_close(layer.bias.detach(), bias)


def schedule(name: str, **changes) -> OptimConfig:
    return OptimConfig(lr=1.0, warmup_steps=10, schedule=name, **changes)


@pytest.mark.parametrize("name", ["linear", "cosine", "constant"])
def test_warmup_is_a_line_from_the_first_step_to_the_peak(name):
    cfg = schedule(name)
    # Step budget of 110: warm-up ends at progress 10/110.
    values = [learning_rate(step, step / 110, cfg, warmup_end_progress=10 / 110) for step in range(11)]
    assert values == pytest.approx([(step + 1) / 11 for step in range(11)])
    assert values[0] > 0 and values[-1] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("name", "middle", "end"), [("linear", 0.5, 0.0), ("cosine", 0.5, 0.0), ("constant", 1.0, 1.0)]
)
def test_decay_runs_from_the_end_of_warmup_to_the_end_of_the_budget(name, middle, end):
    cfg = schedule(name)
    start = 10 / 110
    assert learning_rate(10, start, cfg, start) == pytest.approx(1.0)
    assert learning_rate(60, 60 / 110, cfg, start) == pytest.approx(middle)
    assert learning_rate(110, 1.0, cfg, start) == pytest.approx(end)


def test_cosine_and_linear_differ_between_the_key_points():
    quarter = 0.25
    assert learning_rate(20, quarter, schedule("linear")) == pytest.approx(0.75)
    assert learning_rate(20, quarter, schedule("cosine")) == pytest.approx((1 + math.cos(math.pi / 4)) / 2)


@pytest.mark.parametrize(("name", "middle"), [("linear", 0.6), ("cosine", 0.6), ("constant", 1.0)])
def test_min_lr_ratio_sets_the_floor(name, middle):
    cfg = schedule(name, min_lr_ratio=0.2)
    assert learning_rate(10, 0.0, cfg) == pytest.approx(1.0)
    assert learning_rate(50, 0.5, cfg) == pytest.approx(middle)
    assert learning_rate(100, 1.0, cfg) == pytest.approx(0.2 if name != "constant" else 1.0)


def test_progress_is_clamped():
    cfg = schedule("linear", min_lr_ratio=0.1)
    assert learning_rate(500, 1.7, cfg) == pytest.approx(0.1)
    assert learning_rate(10, -0.3, cfg) == pytest.approx(1.0)
    # Progress behind the end of warm-up (a time budget's clock) does not lift the rate above the peak.
    assert learning_rate(12, 0.05, cfg, warmup_end_progress=0.1) == pytest.approx(1.0)


def test_progress_is_any_budget_share():
    # A time budget: the loop recorded progress 0.2 when warm-up ended; half-way through what is left is 0.6.
    cfg = schedule("linear")
    assert learning_rate(37, 0.6, cfg, warmup_end_progress=0.2) == pytest.approx(0.5)
    assert learning_rate(99, 1.0, cfg, warmup_end_progress=1.0) == pytest.approx(0.0)


def test_no_warmup_starts_at_the_peak():
    cfg = OptimConfig(lr=2e-3, warmup_steps=0, schedule="cosine")
    assert learning_rate(0, 0.0, cfg) == pytest.approx(2e-3)


def test_one_cycle_is_a_triangle_over_the_budget():
    cfg = OptimConfig(lr=1.0, warmup_steps=100, schedule="one-cycle", cycle_peak=0.25)
    # warmup_steps plays no part: the rise is measured in budget, whatever the budget counts
    values = [learning_rate(step, progress, cfg) for step, progress in enumerate([0.0, 0.125, 0.25, 0.625, 1.0])]
    assert values == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.0])
    floored = OptimConfig(lr=1.0, schedule="one-cycle", cycle_peak=0.5, min_lr_ratio=0.1)
    assert learning_rate(0, 0.0, floored) == pytest.approx(0.1)
    assert learning_rate(5, 0.75, floored) == pytest.approx(0.55)
    assert learning_rate(9, 1.4, floored) == pytest.approx(0.1)  # clamped past the end


@pytest.mark.parametrize(
    ("budgets", "share"),
    [
        ({"max_steps": 1000}, None),  # steps alone: warm-up counts steps
        ({"max_steps": None, "max_time": "3m"}, None),  # no step count to scale from: steps, and the health check
        ({"max_steps": 1000, "max_time": "3m"}, 0.05),
        ({"max_steps": 1000, "max_tokens": 10_000}, 0.05),
    ],
)
def test_warm_up_is_a_share_of_a_budget_other_than_steps(budgets: dict, share) -> None:
    assert warmup_share(OptimConfig(warmup_steps=50), TrainConfig(**budgets)) == share
    assert warmup_share(OptimConfig(warmup_steps=50, schedule="one-cycle"), TrainConfig(**budgets)) is None


def test_a_time_budget_stretches_the_warm_up_and_a_step_budget_keeps_it() -> None:
    """100 planned steps with 10 of warm-up: a time budget that allows only 40 steps warms up over its first 10 %
    (4 steps) and decays over the rest; where the steps end the run, the warm-up is the step-counted line."""
    cfg = schedule("linear")  # lr 1, 10 warm-up steps
    share = 10 / 100
    time_bound = [learning_rate(step, (step + 0.5) / 40, cfg, 0.0, share) for step in range(40)]
    assert time_bound[:4] == pytest.approx([(step + 0.5) / 40 / share for step in range(4)])  # the rise
    assert time_bound[4] == pytest.approx(1.0 - (4.5 / 40 - share) / (1 - share))  # warm-up over: decaying
    assert max(time_bound) <= 1.0 and time_bound[-1] < 0.02
    step_bound = [learning_rate(step, step / 100, cfg, 0.0, share) for step in range(11)]
    assert step_bound == pytest.approx([(step + 1) / 11 for step in range(10)] + [1.0])
