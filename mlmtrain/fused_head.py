"""The masked-LM decoder and its cross-entropy in one pass, a few rows at a time, for float32 training on the CPU.

Run as separate operators, the decoder writes an N x V logits matrix (1,638 x 30,522 floats, 200 MB, for mini's
40 % of a 32 x 128 batch), and log-softmax, the loss's backward and their gradients each read and write another
matrix of that size. On a CPU those passes over memory cost more than the three matrix products they surround
(docs/benchmarks.md, "CPU: the head's loss in one pass"). Here each chunk of rows goes through the decoder, the
softmax and both gradient products while it is still in cache, in one reused buffer, and the full logits never exist.

The loss is a sum over the rows, so its gradients are known in the forward pass up to the scalar that backward
brings (the loop's 1 / selected tokens): forward computes them, backward scales them. Nothing is recomputed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Rows per chunk: about 8 M logits (32 MiB of float32). Timing mini's head alone on 2 cores, chunks of 4 to 16 M
# logits ran alike; 1 M was slower (more, smaller products) and the whole 48 M as well (a buffer past the caches).
CHUNK_LOGITS = 1 << 23


def fused_head_applies(hidden: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `decoder_cross_entropy` takes the fused path: float32 training on the CPU, outside autocast.

    The fused path is measured on the CPU only; on CUDA the separate operators (and autocast's bf16) stay."""
    return (
        hidden.device.type == "cpu"
        and hidden.dtype == weight.dtype == torch.float32
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    )


def decoder_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, targets: torch.Tensor, chunk_rows: int = 0
) -> torch.Tensor:
    """`F.cross_entropy(F.linear(hidden, weight, bias), targets, reduction="sum")` in float32, with the same value
    and gradients (to rounding) and without materialising the N x V logits when `fused_head_applies`.

    `targets` are all real labels (no ignore index): the sparse head passes the selected rows only.
    `chunk_rows` overrides the chunk size (tests); 0 picks about CHUNK_LOGITS logits a chunk.
    """
    if not fused_head_applies(hidden, weight):
        return F.cross_entropy(F.linear(hidden, weight, bias).float(), targets, reduction="sum")
    rows = chunk_rows or max(1, CHUNK_LOGITS // weight.shape[0])
    return _DecoderCrossEntropy.apply(hidden, weight, bias, targets, rows)


class _DecoderCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, rows):  # type: ignore[no-untyped-def]
        n = hidden.shape[0]
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        grad_bias = torch.zeros_like(bias)
        loss = hidden.new_zeros(())
        buffer = hidden.new_empty(min(rows, n), weight.shape[0])  # reused by every chunk: no fresh pages per chunk
        for start in range(0, n, rows):
            h, t = hidden[start : start + rows], targets[start : start + rows]
            logits = buffer[: h.shape[0]]
            torch.mm(h, weight.t(), out=logits)
            logits.add_(bias)
            logits.sub_(logits.amax(1, keepdim=True))  # shift by the row's max: exp cannot overflow
            target_logits = logits.gather(1, t.unsqueeze(1))
            logits.exp_()
            total = logits.sum(1, keepdim=True)
            loss += (total.log() - target_logits).sum()  # -log softmax at the target, summed
            # d loss / d logits = softmax - one_hot(target), built in place of the logits
            logits.div_(total)
            logits[torch.arange(h.shape[0], device=h.device), t] -= 1.0
            torch.mm(logits, weight, out=grad_hidden[start : start + rows])
            grad_weight.addmm_(logits.t(), h)
            grad_bias += logits.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):  # type: ignore[no-untyped-def]
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        return grad_hidden * grad_loss, grad_weight * grad_loss, grad_bias * grad_loss, None, None
