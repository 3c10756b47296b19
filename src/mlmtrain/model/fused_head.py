"""The masked-LM decoder and its cross-entropy in one pass, a few rows at a time, for training on the CPU in float32
or under bf16 autocast (train.precision bf16 or bf16-head).

Run as separate operators, the decoder writes an N x V logits matrix (hundreds of MB for a small model's selected
rows), and log-softmax, the loss's backward and their gradients each read and write another matrix of that size
(under autocast also its casts between bf16 and float32). On a CPU those passes over memory cost more than the three
matrix products they surround (docs/benchmarks/log.md). Here each
chunk of rows goes through the decoder, the softmax and both gradient products while it is still in cache, in reused
buffers, and the full logits never exist.

The loss is a sum over the rows, so its gradients are known in the forward pass up to the scalar that backward
brings (the loop's 1 / selected tokens): forward computes them, backward scales them. Nothing is recomputed.

Under bf16 autocast the three products run in bf16, as autocast would run them, and the softmax, the loss and the
accumulated weight and bias gradients in float32, as autocast's float32 loss would have them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Rows per chunk: about 8 M logits (32 MiB of float32). Timing mini's head alone on 2 cores, chunks of 4 to 16 M
# logits ran alike; 1 M was slower (more, smaller products) and the whole 48 M as well (a buffer past the caches).
CHUNK_LOGITS = 1 << 23

# The dtypes the fused path multiplies in: float32 outside autocast, bfloat16 under CPU autocast to bfloat16.
# (float16 autocast on the CPU keeps the separate operators: its logits could overflow where bf16's cannot.)
FUSED_DTYPES = (torch.float32, torch.bfloat16)


def product_dtype() -> torch.dtype:
    """The dtype the head's matrix products run in here: autocast's on the CPU where it is on, else float32."""
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32


def fused_head_applies(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `decoder_cross_entropy` takes the fused path: training on the CPU with a float32 weight, outside
    autocast or under bf16 autocast.

    The fused path is measured on the CPU only; on CUDA the separate operators (and autocast's bf16) stay."""
    return (
        hidden.device.type == "cpu"
        and hidden.dtype in FUSED_DTYPES
        and weight.dtype == torch.float32
        and torch.is_grad_enabled()
        and product_dtype() in FUSED_DTYPES
    )


def decoder_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor, chunk_rows: int = 0
) -> torch.Tensor:
    """`F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, reduction="sum")`, with the same value and
    gradients (to rounding: float32's, or under bf16 autocast bf16's) and without materialising the N x V logits
    when `fused_head_applies`.

    `targets` are all real labels (no ignore index): the sparse head passes the selected rows only.
    `chunk_rows` overrides the chunk size (tests); 0 picks about CHUNK_LOGITS logits a chunk.
    """
    if not fused_head_applies(hidden, weight):
        return F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, reduction="sum")
    rows = chunk_rows or max(1, CHUNK_LOGITS // weight.shape[0])
    return _DecoderCrossEntropy.apply(hidden, weight, bias, targets, rows, product_dtype())


class _DecoderCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows, dtype):  # type: ignore[no-untyped-def]
        with torch.autocast("cpu", enabled=False):  # the casts below are ours; autocast would add its own
            grads = _chunked_loss_and_grads(hidden, weight, bias, targets, rows, dtype)
        loss, grad_hidden, grad_weight, grad_bias = grads
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):  # type: ignore[no-untyped-def]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, grad_bias * grad_loss, None, None, None


def _chunked_loss_and_grads(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor, rows: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The summed loss and its gradients for hidden, weight and bias, products in `dtype`, softmax in float32."""
    n, vocab = hidden.shape[0], weight.shape[0]
    mixed = dtype != torch.float32
    h_all, w = hidden.to(dtype), weight.to(dtype)  # no copies in float32; in bf16 one cast of each, not one a chunk
    grad_hidden = torch.empty_like(h_all)
    grad_weight = torch.zeros_like(weight)
    grad_bias = torch.zeros_like(bias, dtype=torch.float32)
    loss = hidden.new_zeros((), dtype=torch.float32)
    # Buffers reused by every chunk: no fresh pages per chunk. In bf16 the products write `low`, the softmax runs
    # on a float32 copy, and the weight gradient's chunk is summed into float32 (autocast would round it once to bf16).
    buffer = hidden.new_empty(min(rows, n), vocab, dtype=torch.float32)
    low = buffer.new_empty(buffer.shape, dtype=dtype) if mixed else buffer
    grad_weight_part = weight.new_empty(weight.shape, dtype=dtype) if mixed else None
    for start in range(0, n, rows):
        h, t = h_all[start : start + rows], targets[start : start + rows]
        logits, logits_low = buffer[: h.shape[0]], low[: h.shape[0]]
        torch.mm(h, w.t(), out=logits_low)
        if mixed:
            logits.copy_(logits_low)
        logits.add_(bias)
        logits.sub_(logits.amax(1, keepdim=True))  # shift by the row's max: exp cannot overflow
        target_logits = logits.gather(1, t.unsqueeze(1))
        logits.exp_()
        total = logits.sum(1, keepdim=True)
        loss += (total.log() - target_logits).sum()  # -log softmax at the target, summed
        # d loss / d logits = softmax - one_hot(target), built in place of the logits
        logits.div_(total)
        logits[torch.arange(h.shape[0], device=h.device), t] -= 1.0
        grad_bias += logits.sum(0)
        if mixed:
            logits_low.copy_(logits)
            torch.mm(logits_low.t(), h, out=grad_weight_part)
            grad_weight += grad_weight_part
        else:
            grad_weight.addmm_(logits.t(), h)
        torch.mm(logits_low, w, out=grad_hidden[start : start + rows])
    return loss, grad_hidden.to(hidden.dtype), grad_weight, grad_bias.to(bias.dtype)
