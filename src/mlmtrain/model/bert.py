"""The model: a plain Hugging Face `BertForMaskedLM` built from `ModelConfig`, and `MaskedLM`, the one module
that the training loop (and DDP / torch.compile) wraps, whose forward runs encoder, MLM head and summed loss; the
attention a model runs while it trains (float32 under CPU autocast; no mask for an unpadded batch, compiled or not).
Also the parameter count and the training FLOPs per token used for throughput figures.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, BertConfig, BertForMaskedLM, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from mlmtrain.config import ModelConfig
from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.errors import UserError
from mlmtrain.model.families import encode, head_logits, model_family
from mlmtrain.model.fused_head import decoder_cross_entropy, fused_head_applies
from mlmtrain.model.last_layer import encode_selected, runs_on_rows, takes_documents


def padded_vocab_size(vocab_size: int, multiple: int) -> int:
    """`vocab_size` rounded up to a multiple of `multiple` (rows of the embedding and the decoder)."""
    return -(-vocab_size // multiple) * multiple


def build_model(cfg: ModelConfig, vocab_size: int, pad_id: int) -> BertForMaskedLM:
    """A freshly initialised `BertForMaskedLM` (HF's own init; seed torch first for reproducible weights).

    The embedding has `vocab_size` rounded up to `cfg.pad_vocab_multiple` rows; the extra rows are never
    labels, so training only pushes their logits down. The decoder weight is the word embedding (tied) and the
    result is a stock HF model: `save_pretrained` + `AutoModelForMaskedLM.from_pretrained` need nothing of ours.
    """
    model = BertForMaskedLM(bert_config(cfg, vocab_size, pad_id))
    # transformers 5.x ties through `_tied_weights_keys` in post_init; fail loudly if a future version stops doing
    # so, because an untied decoder silently doubles the embedding parameters and changes the checkpoint.
    if model.cls.predictions.decoder.weight is not model.bert.embeddings.word_embeddings.weight:
        raise RuntimeError("BertForMaskedLM did not tie the decoder to the word embedding")
    return model


def check_vocabulary(vocab_size: int, pad_id: int) -> None:
    """UserError for a tokenizer no model can be built for: an empty vocabulary, or a pad id outside it."""
    if vocab_size < 1:
        raise UserError("model", f"the tokenizer's vocabulary is empty (vocab_size={vocab_size})")
    if not 0 <= pad_id < vocab_size:
        raise UserError(
            "model",
            f"pad token id {pad_id} is outside the vocabulary [0, {vocab_size}); "
            "the tokenizer folder must define [PAD]",
        )


def config_shape(cfg: ModelConfig, vocab_size: int) -> dict[str, int]:
    """The shape keys of `cfg` as BERT's and ModernBERT's transformers configs name them, for a tokenizer of
    `vocab_size` tokens (rows padded to pad_vocab_multiple)."""
    return {
        "vocab_size": padded_vocab_size(vocab_size, cfg.pad_vocab_multiple),
        "hidden_size": cfg.hidden_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.intermediate_size,
        "max_position_embeddings": cfg.max_position_embeddings,
    }


def bert_config(cfg: ModelConfig, vocab_size: int, pad_id: int) -> BertConfig:
    """The `BertConfig` of `cfg` for a tokenizer of `vocab_size` tokens (rows padded to pad_vocab_multiple): what
    `build_model` makes, and what a resume compares a checkpoint's with."""
    check_vocabulary(vocab_size, pad_id)
    return BertConfig(
        **config_shape(cfg, vocab_size),
        hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_dropout_prob,
        pad_token_id=pad_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )


# The attention of a model being trained: HF's SDPA attention, except under autocast on the CPU, where it runs in
# float32: torch's CPU flash-attention backward is several times slower in bf16, and casting q, k and v up costs
# little beside it (docs/benchmarks/log.md).
# Only the running model uses it (`use_training_attention`): a saved config.json does not record the attention
# implementation, so checkpoints load as plain SDPA models with no mlmtrain installed.
TRAINING_ATTENTION = "mlmtrain_sdpa"


def sdpa_float32_under_cpu_autocast(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, Any]:
    """`sdpa_attention_forward`, in float32 under CPU autocast (its output too: the next Linear casts it back)."""
    if query.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()  # an additive mask must match the query's dtype
    with torch.autocast("cpu", enabled=False):
        return sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


AttentionInterface.register(TRAINING_ATTENTION, sdpa_float32_under_cpu_autocast)


def unpadded_sdpa_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """`sdpa_mask`, except that full bidirectional attention over a batch with no padding mask gets no mask also
    while dynamo traces, torch.export exports or a CUDA graph is captured. transformers decides that skip with
    `is_tracing`, true in all three, and then builds an all-True [B,1,S,S] mask in some versions and cases (5.17
    under compile, 5.24 under export), with which SDPA cannot use its flash kernels. A batch with padding is masked
    exactly as by `sdpa_mask`.

    Skips only calls made as `masking_utils` makes them (by keyword); `allow_is_bidirectional_skip` is what
    `create_bidirectional_mask` (transformers 5) passes when the mask is plain bidirectional; 4.x never passes it.
    """
    if (
        len(args) <= 3  # batch size, query and key lengths; the mask itself by keyword
        and kwargs.get("attention_mask") is None
        and kwargs.get("allow_is_bidirectional_skip")
        and kwargs.get("local_size") is None
    ):
        return None
    return sdpa_mask(*args, **kwargs)


AttentionMaskInterface.register(TRAINING_ATTENTION, unpadded_sdpa_mask)


def use_training_attention(trained: torch.nn.Module) -> None:
    """Switch every Hugging Face model inside `trained` (a masked LM, ELECTRA's pair) to TRAINING_ATTENTION, where
    its attention goes through transformers' attention interface (DeBERTa's does not: it keeps its own)."""
    for module in trained.modules():
        if isinstance(module, PreTrainedModel) and getattr(module, "_supports_attention_backend", True):
            module.set_attn_implementation(TRAINING_ATTENTION)


def head_autocast(device: torch.device, dtype: torch.dtype | None) -> Any:
    """Autocast for a masked-LM head alone (train.precision bf16-head), or nothing. The head's H x V decoder is
    about half of a small BERT's training work in a few large matrix products, where bf16 instructions pay for the
    casts around them; the encoder's many small products do not (docs/benchmarks/log.md)."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()


# Under train.compile the fused head runs eagerly (a graph break): its chunk loop and in-place gradients are already
# what inductor would make of the separate operators, and an autograd.Function with out= writes traces poorly.
_fused_decoder_loss = torch.compiler.disable(decoder_cross_entropy)


class MaskedLM(torch.nn.Module):
    """Wraps a masked LM (a `BertForMaskedLM`, or a base of another family: families.py) so DDP / torch.compile wrap ONE
    module whose forward does encoder + head + loss.

    `forward` returns the SUM of the float32 cross-entropy over selected positions (labels != -100), so the loop
    can divide by the number of selected tokens in the whole global batch (all micro-batches, all ranks) and get
    the exact mean, however unevenly the selected tokens fall.
    """

    def __init__(self, mlm: BertForMaskedLM, sparse_head: bool = True, sparse_last_layer: bool = True) -> None:
        super().__init__()
        self.mlm = mlm
        self.family = model_family(mlm)  # where its encoder and head live
        self.sparse_head = sparse_head
        self.head_dtype: torch.dtype | None = None  # train.precision bf16-head: autocast for the head alone
        # True off the CPU: the head takes the collator's fixed-capacity positions as they are, static shapes
        self.static_rows = False
        # model.sparse_last_layer on BERT-layout layers: the last one runs on the selected rows (last_layer.py)
        self.last_layer_on_rows = sparse_last_layer and runs_on_rows(mlm)
        self.rows_take_documents = takes_documents(mlm)  # data.document_attention within, too (transformers 5)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        selected_positions: torch.Tensor | None = None,
        document_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # document_ids (data.document_attention within): each token attends within its own document (families.py).
        # attention_mask=None reaches SDPA as attn_mask=None, its fast unmasked path, also under compile and graph
        # capture (unpadded_sdpa_mask; sdpa_attention_forward then sees is_causal False, as BertSelfAttention's
        # is_causal = config.is_decoder = False). An all-ones mask costs a `.all()` check, a host sync on CUDA, to
        # reach the same place; packed blocks have no padding, so pass None.
        # tests/model/test_model.py::test_unmasked_batch_reaches_sdpa_without_a_mask guards this against upgrades.
        if self.selected_rows_only(attention_mask, document_ids):
            # the last layer runs on the selected rows alone (last_layer.py); the head then finds them in labels
            hidden, labels = encode_selected(self.mlm, input_ids, labels, self.attention(), document_ids)
            return self.head_loss(hidden, labels)
        hidden = encode(self.mlm, input_ids, attention_mask, document_ids)
        return self.head_loss(hidden, labels, selected_positions)

    def selected_rows_only(self, attention_mask: torch.Tensor | None, document_ids: torch.Tensor | None) -> bool:
        """Whether the last layer runs on the selected rows alone: BERT-layout layers, the sparse head, packed blocks
        (no padding mask; documents where the layers take their mask, `takes_documents`), and rows found on the host
        (the CPU; static_rows keeps CUDA free of syncs)."""
        packed = attention_mask is None and (document_ids is None or self.rows_take_documents)
        return self.sparse_head and self.last_layer_on_rows and packed and not self.static_rows

    def attention(self) -> Any:
        """The attention function the model's layers run (TRAINING_ATTENTION's once `use_training_attention`)."""
        training = self.mlm.config._attn_implementation == TRAINING_ATTENTION
        return sdpa_float32_under_cpu_autocast if training else sdpa_attention_forward

    def head_loss(
        self, hidden: torch.Tensor, labels: torch.Tensor, selected_positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The summed float32 cross-entropy of the MLM head over the selected positions of `hidden` [B,T,H]
        (`selected_positions`: the collator's, where the batch has them; `head_rows`)."""
        if self.sparse_head:
            # The head (H x H transform, H x V decoder) is most of the cost of a small BERT; run it on the ~15 %
            # selected rows only.
            rows, targets = self.head_rows(labels, selected_positions)
            selected = hidden.flatten(0, 1).index_select(0, rows)
            transform, weight, bias = self.family.head(self.mlm)  # the model's own family's head (families.py)
            with head_autocast(hidden.device, self.head_dtype):
                transformed = transform(selected)
                if not self.static_rows and fused_head_applies(transformed, weight):
                    # training on the CPU (float32 or bf16): decoder and loss chunk by chunk, without the N x V
                    # logits (fused_head.py)
                    return _fused_decoder_loss(transformed, weight, bias, targets)
                logits = F.linear(transformed, weight, bias)
        else:
            with head_autocast(hidden.device, self.head_dtype):
                logits = head_logits(self.mlm, hidden).flatten(0, 1)
            targets = labels.flatten()
        # With no selected position the sum over an empty set is an exact 0 that still hangs off the graph (through
        # the empty head matmul), so backward runs and every parameter gets a zero gradient, as DDP expects.
        return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")

    def head_rows(self, labels: torch.Tensor, positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(rows of the flattened hidden states, their labels) for the sparse head: from the collator's
        `selected_positions` (masking.py) where the batch has them, else found in `labels`."""
        flat = labels.flatten()
        if positions is None:
            # a data-dependent count: one host sync on CUDA, shared by the rows and their labels
            rows = (flat != IGNORE_INDEX).nonzero().squeeze(1)
        elif not self.static_rows:
            rows = positions[positions < flat.numel()]  # the exact rows, in order: the fused head takes real labels
        else:
            # a fixed number of rows: the padding (sentinel flat.numel()) reads position 0 and is labelled -100, so
            # it adds nothing to the loss or the gradients
            padded = torch.cat((flat, flat.new_full((1,), IGNORE_INDEX)))
            return positions.clamp_max(flat.numel() - 1), padded.index_select(0, positions)
        return rows, flat.index_select(0, rows)


def planned_parameter_count(cfg: ModelConfig, vocab_size: int) -> int:
    """Parameters of `build_model(cfg, vocab_size)`, computed without building it (the decoder weight is tied)."""
    hidden, inner, vocab = cfg.hidden_size, cfg.intermediate_size, padded_vocab_size(vocab_size, cfg.pad_vocab_multiple)
    layer_norm = 2 * hidden
    embeddings = (vocab + cfg.max_position_embeddings + 2) * hidden + layer_norm  # words, positions, 2 token types
    attention = 4 * (hidden * hidden + hidden) + layer_norm  # query, key, value, output
    feed_forward = hidden * inner + inner + inner * hidden + hidden + layer_norm
    head = hidden * hidden + hidden + layer_norm + vocab  # transform, LayerNorm, decoder bias
    return embeddings + cfg.num_layers * (attention + feed_forward) + head


TRAINING_BYTES_PER_PARAMETER = 16  # float32 weight, gradient and AdamW's two moments


def device_memory_bytes(device: torch.device) -> int:
    """All the memory of `device` (a GPU's, or the machine's RAM for the CPU): what no model can exceed."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def count_parameters(model: torch.nn.Module) -> int:
    """Number of distinct parameter values (a tied weight counts once, as `parameters()` deduplicates)."""
    return sum(p.numel() for p in model.parameters())


H200_DENSE_BF16_TFLOPS = 989.0  # the default peak of the benchmarks' MFU: NVIDIA's dense bf16 figure for the H200


def flops_per_token(
    cfg: ModelConfig,
    vocab_size: int,
    seq_len: int,
    mlm_probability: float,
    sparse_head: bool,
    last_layer_on_rows: bool = False,
) -> float:
    """Training FLOPs per input token: forward + backward = 3 x forward, 2 FLOPs per multiply-accumulate.

    With H = hidden_size, I = intermediate_size, L = num_layers, S = seq_len, V = vocab_size rounded up to
    pad_vocab_multiple, and f = mlm_probability with the sparse head (1 with the dense head):

        forward MACs per token = L * (4 H^2 + 2 H I + 2 S H) + f * (H^2 + H V)
        training FLOPs per token = 6 * forward MACs per token

    4 H^2: query, key, value and output projections; 2 H I: the feed-forward pair; 2 S H: attention scores
    (Q K^T) and the weighted sum of values; H^2 + H V: the head's transform and decoder. Embedding lookups,
    LayerNorm, softmax and activations are left out (not matmuls). f is the nominal selection rate: special tokens
    are never selected, so the real share is a little lower.

    `last_layer_on_rows` (the sparse head's last layer on the selected rows, last_layer.py): the FLOPs that step
    runs, the last layer's keys and values on every token (2 H^2) and the rest of it on f of them
    (f * (2 H^2 + 2 H I + 2 S H)). Without it the count is the whole model's, as budgets (train.max_flops) use.
    """
    hidden, vocab = cfg.hidden_size, padded_vocab_size(vocab_size, cfg.pad_vocab_multiple)
    rest = 2 * hidden * hidden + 2 * hidden * cfg.intermediate_size + 2 * seq_len * hidden  # all but keys and values
    layer = 2 * hidden * hidden + rest
    head_share = mlm_probability if sparse_head else 1.0
    encoder = cfg.num_layers * layer
    if sparse_head and last_layer_on_rows and cfg.num_layers > 0:
        encoder -= (1 - mlm_probability) * rest
    head = head_share * (hidden * hidden + hidden * vocab)
    return 6.0 * (encoder + head)
