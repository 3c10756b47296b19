"""The last transformer layer on the selected positions only. The masked-LM loss reads the last layer's output at the
selected positions alone, and there a position depends on the others only through their keys and values: so the last
layer's queries, attention output, feed-forward and LayerNorms run on the selected rows, its keys and values on every
token. The loss and gradients are those of the whole layer; (1 - selection rate) of most of its work is saved.
For BERT-layout layers (`Family.bert_layout`: BERT, RoBERTa) on packed blocks: with no attention mask, or, where the
layers take a prepared mask (transformers 5), attention kept within each document (data.document_attention within).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.model.families import document_attention, model_family, prepared_masks, transformer_layers


def runs_on_rows(mlm: Any) -> bool:
    """Whether `mlm`'s last layer can run on the selected rows alone (its family's layers are BERT's, with absolute
    positions: nothing in a layer depends on where a row sits)."""
    embedding = getattr(mlm.config, "position_embedding_type", "absolute")  # 4.x's relative_key variants need all
    return model_family(mlm).bert_layout and embedding == "absolute" and mlm.config.num_hidden_layers > 0


def takes_documents(mlm: Any) -> bool:
    """Whether the rows path can keep attention within documents: its layers take the 4-D mask `document_attention`
    makes as it is (transformers 5); under 4.x the whole last layer runs there."""
    return prepared_masks(mlm)


def selected_grid(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [B,K], their labels [B,K]): each block's selected positions (labels != -100) in order, K the most
    any block has (1 when none is: attention takes no empty query). A block with fewer fills its row with unselected
    positions, labelled -100 already, so they add nothing to the loss or the gradients."""
    unselected, order = torch.sort((labels == IGNORE_INDEX).to(torch.int8), dim=1, stable=True)  # selected first
    # the first K columns, where some block still has a selected position (a mask, not a number read on the host)
    columns = (unselected == 0).any(0)
    columns[0] = True
    positions = order[:, columns]
    return positions, labels.gather(1, positions)


def encode_selected(
    mlm: Any,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    attend: Callable[..., tuple[torch.Tensor, Any]],
    document_ids: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(last hidden states at the selected positions [B,K,H], their labels [B,K]) of a packed batch; `attend` is
    the attention function the model trains with (an `AttentionInterface` function: query, key and value [B,N,T,D]
    in, [B,T,N,D] out); with `document_ids`, each token attends within its own document (`takes_documents`)."""
    *layers, last = transformer_layers(mlm)
    mask, position_ids = document_attention(mlm, document_ids) if document_ids is not None else (None, None)
    hidden = getattr(mlm, model_family(mlm).encoder).embeddings(input_ids=input_ids, position_ids=position_ids)
    for layer in layers:
        output = layer(hidden, mask)  # None: every token attends to the whole block
        hidden = output[0] if isinstance(output, tuple) else output  # transformers 4.x returns a tuple
    positions, targets = selected_grid(labels)
    rows_mask = None if mask is None else mask.gather(2, positions[:, None, :, None].expand(-1, 1, -1, mask.size(-1)))
    return _last_layer_at(last, hidden, positions, attend, rows_mask), targets


def _last_layer_at(
    layer: Any,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    attend: Callable[..., tuple[torch.Tensor, Any]],
    mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """A BERT layer's output [B,K,H] at `positions` [B,K] of its input `hidden` [B,T,H], as its forward computes it
    (`mask` [B,1,K,T], bool: where each selected row may attend)."""
    batch, count = positions.shape
    rows = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.size(-1)))
    attention = layer.attention.self
    heads, size = attention.num_attention_heads, attention.attention_head_size

    def split(x: torch.Tensor) -> torch.Tensor:  # [B,T,H] -> [B,N,T,D]
        return x.view(batch, x.size(1), heads, size).transpose(1, 2)

    query, key, value = split(attention.query(rows)), split(attention.key(hidden)), split(attention.value(hidden))
    dropout = attention.dropout.p if attention.training else 0.0
    context, _ = attend(attention, query, key, value, mask, dropout=dropout, scaling=size**-0.5, is_causal=False)
    attended = layer.attention.output(context.reshape(batch, count, heads * size), rows)  # dense, dropout, residual LN
    return layer.output(layer.intermediate(attended), attended)  # the feed-forward pair and its residual LayerNorm
