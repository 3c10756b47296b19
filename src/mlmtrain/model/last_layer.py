"""The last transformer layer on the selected positions only. The masked-LM loss reads the last layer's output at the
selected positions alone, and there a position depends on the others only through their keys and values: so the last
layer's queries, attention output, feed-forward and LayerNorms run on the selected rows, its keys and values on every
token. The loss and gradients are those of the whole layer; (1 - selection rate) of most of its work is saved.
For BERT-layout layers (`Family.bert_layout`: BERT, RoBERTa) on blocks with no attention mask (packed blocks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.model.families import model_family, transformer_layers


def runs_on_rows(mlm: Any) -> bool:
    """Whether `mlm`'s last layer can run on the selected rows alone (its family's layers are BERT's, with absolute
    positions: nothing in a layer depends on where a row sits)."""
    embedding = getattr(mlm.config, "position_embedding_type", "absolute")  # 4.x's relative_key variants need all
    return model_family(mlm).bert_layout and embedding == "absolute" and mlm.config.num_hidden_layers > 0


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
    mlm: Any, input_ids: torch.Tensor, labels: torch.Tensor, attend: Callable[..., tuple[torch.Tensor, Any]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(last hidden states at the selected positions [B,K,H], their labels [B,K]) of an unmasked batch; `attend` is
    the attention function the model trains with (an `AttentionInterface` function: query, key and value [B,N,T,D]
    in, [B,T,N,D] out)."""
    *layers, last = transformer_layers(mlm)
    hidden = getattr(mlm, model_family(mlm).encoder).embeddings(input_ids=input_ids)
    for layer in layers:
        output = layer(hidden, None)  # no mask: every token attends to the whole block
        hidden = output[0] if isinstance(output, tuple) else output  # transformers 4.x returns a tuple
    positions, targets = selected_grid(labels)
    return _last_layer_at(last, hidden, positions, attend), targets


def _last_layer_at(
    layer: Any, hidden: torch.Tensor, positions: torch.Tensor, attend: Callable[..., tuple[torch.Tensor, Any]]
) -> torch.Tensor:
    """A BERT layer's output [B,K,H] at `positions` [B,K] of its input `hidden` [B,T,H], as its forward computes it."""
    batch, count = positions.shape
    rows = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, hidden.size(-1)))
    attention = layer.attention.self
    heads, size = attention.num_attention_heads, attention.attention_head_size

    def split(x: torch.Tensor) -> torch.Tensor:  # [B,T,H] -> [B,N,T,D]
        return x.view(batch, x.size(1), heads, size).transpose(1, 2)

    query, key, value = split(attention.query(rows)), split(attention.key(hidden)), split(attention.value(hidden))
    dropout = attention.dropout.p if attention.training else 0.0
    context, _ = attend(attention, query, key, value, None, dropout=dropout, scaling=size**-0.5, is_causal=False)
    attended = layer.attention.output(context.reshape(batch, count, heads * size), rows)  # dense, dropout, residual LN
    return layer.output(layer.intermediate(attended), attended)  # the feed-forward pair and its residual LayerNorm
