"""The fused decoder + cross-entropy (mlmtrain/model/fused_head.py): the same sum and gradients as the separate
operators, whatever the chunking, a zero gradient for an empty selection, under bf16 autocast bf16 products no less
accurate than autocast's own, the separate operators wherever it does not apply, and MaskedLM's sparse head takes it
for float32 and bf16 training on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mlmtrain.config import ModelConfig
from mlmtrain.model.bert import MaskedLM, build_model
from mlmtrain.model.fused_head import decoder_cross_entropy

ROWS, HIDDEN, VOCAB = 13, 8, 50


def inputs(rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, HIDDEN, generator=generator).requires_grad_()
    # Large weights: peaked softmaxes, so a wrong shift, target or normaliser changes the loss by a lot.
    weight = (torch.randn(VOCAB, HIDDEN, generator=generator) * 2.0).requires_grad_()
    bias = torch.randn(VOCAB, generator=generator).requires_grad_()
    targets = torch.randint(0, VOCAB, (rows,), generator=generator)
    return hidden, weight, bias, targets


def loss_and_grads(loss_fn, scale: float = 0.37, rows: int = ROWS):
    hidden, weight, bias, targets = inputs(rows)
    loss = loss_fn(hidden, weight, bias, targets)
    (loss * scale).backward()  # the loop divides the sum by the selected tokens: backward must carry the scale
    return loss.detach(), hidden.grad, weight.grad, bias.grad, loss.grad_fn


def reference(hidden, weight, bias, targets):
    return F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")


@pytest.mark.parametrize("chunk_rows", [0, 1, 4, ROWS, 100])
def test_sum_and_gradients_match_the_separate_operators(chunk_rows):
    expected = loss_and_grads(reference)
    found = loss_and_grads(lambda *args: decoder_cross_entropy(*args, chunk_rows=chunk_rows))
    assert type(found[-1]).__name__ == "_DecoderCrossEntropyBackward"  # the fused path ran, not the fallback
    for name, got, want in zip(("loss", "hidden", "weight", "bias"), found[:4], expected[:4], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)


def test_an_empty_selection_gives_zero_and_zero_gradients():
    loss, grad_hidden, grad_weight, grad_bias, _ = loss_and_grads(decoder_cross_entropy, rows=0)
    assert loss.item() == 0.0
    assert grad_hidden.shape == (0, HIDDEN)
    assert grad_weight is not None and not grad_weight.any()
    assert grad_bias is not None and not grad_bias.any()


def test_without_gradients_or_under_float16_autocast_the_separate_operators_run():
    hidden, weight, bias, targets = inputs()
    expected = reference(hidden, weight, bias, targets).detach()
    with torch.no_grad():  # evaluation: no gradients to compute in the forward pass
        torch.testing.assert_close(decoder_cross_entropy(hidden, weight, bias, targets), expected)
    with torch.autocast("cpu", dtype=torch.float16):  # fp16 logits could overflow: not fused
        loss = decoder_cross_entropy(hidden, weight, bias, targets)
    assert type(loss.grad_fn).__name__ != "_DecoderCrossEntropyBackward"
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss.detach(), expected, rtol=0.05, atol=0.0)


def relative_errors(found, expected) -> list[float]:
    return [((got - want).norm() / want.norm()).item() for got, want in zip(found[:4], expected[:4], strict=True)]


def under_bf16_autocast(loss_fn):
    def run(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_fn(*args)

    return run


@pytest.mark.parametrize("chunk_rows", [0, 1, 4, 100])
def test_under_bf16_autocast_the_products_run_in_bf16_and_err_no_more_than_autocasts_own(chunk_rows):
    exact = loss_and_grads(reference)  # float32 throughout
    autocast = loss_and_grads(under_bf16_autocast(reference))  # the separate operators under autocast
    fused = loss_and_grads(under_bf16_autocast(lambda *args: decoder_cross_entropy(*args, chunk_rows=chunk_rows)))
    assert type(fused[-1]).__name__ == "_DecoderCrossEntropyBackward"
    assert fused[0].dtype == torch.float32 and all(grad.dtype == torch.float32 for grad in fused[1:4])
    fused_errors, autocast_errors = relative_errors(fused, exact), relative_errors(autocast, exact)
    names = ("loss", "hidden", "weight", "bias")
    for name, fused_error, autocast_error in zip(names, fused_errors, autocast_errors, strict=True):
        assert fused_error <= 1.5 * autocast_error + 1e-4, (name, fused_error, autocast_error)
    # the products really ran in bf16 (float32 products would agree with `exact` to float32 rounding)
    assert fused_errors[1] > 1e-4 and fused_errors[2] > 1e-4
    for name, got, want in zip(names, fused[:4], autocast[:4], strict=True):
        torch.testing.assert_close(got, want, rtol=0.05, atol=0.05, msg=name)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16-head"])
def test_the_sparse_head_trains_through_the_fused_loss_on_the_cpu(precision):
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, dropout=0.0)
    model = build_model(cfg, VOCAB, 0)
    input_ids = torch.randint(1, VOCAB, (2, 12))
    labels = torch.where(torch.rand(2, 12) < 0.5, input_ids, torch.full_like(input_ids, -100))

    def loss(sparse_head: bool) -> torch.Tensor:
        masked_lm = MaskedLM(model, sparse_head=sparse_head)
        masked_lm.head_dtype = torch.bfloat16 if precision == "bf16-head" else None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            return masked_lm(input_ids, labels)

    fused = loss(sparse_head=True)
    assert type(fused.grad_fn).__name__ == "_DecoderCrossEntropyBackward"
    dense = loss(sparse_head=False)  # the separate operators, every position
    tolerance = 1e-5 if precision == "fp32" else 0.02
    torch.testing.assert_close(fused, dense, rtol=tolerance, atol=tolerance)
