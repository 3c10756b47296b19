"""The last layer on the selected rows alone (model/last_layer.py): the loss and every gradient are the whole
layer's, for BERT and RoBERTa, blocks with unequal counts and a block with none, with attention over the whole block or
within each document; the whole layer still runs where a padding mask is needed or the family's layers are not
BERT's."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    DistilBertConfig,
    DistilBertForMaskedLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.model.bert import MaskedLM
from mlmtrain.model.families import transformer_layers
from mlmtrain.model.last_layer import runs_on_rows, selected_grid, takes_documents

from ..helpers import larger_weights

SIZE = dict(
    vocab_size=300,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def masked_lm(kind: str):
    torch.manual_seed(0)
    model = {
        "bert": lambda: BertForMaskedLM(BertConfig(**SIZE, attn_implementation="sdpa")),
        "roberta": lambda: RobertaForMaskedLM(RobertaConfig(**SIZE, attn_implementation="sdpa")),
    }[kind]()
    return larger_weights(model)  # so that a wrong row or a lost position moves the loss


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of 40 tokens with 12, 3, none and 20 selected positions."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 300, (4, 40), generator=generator)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for block, count in enumerate((12, 3, 0, 20)):
        positions = torch.randperm(38, generator=generator)[:count] + 1
        labels[block, positions] = input_ids[block, positions]
    return input_ids, labels


def loss_and_gradients(model, rows_only: bool, **inputs) -> tuple[torch.Tensor, list[torch.Tensor]]:
    step = MaskedLM(model)
    assert step.last_layer_on_rows  # BERT-layout layers: the path exists for this model
    step.last_layer_on_rows = rows_only
    model.zero_grad(set_to_none=True)
    loss = step(*batch(), **inputs)
    loss.backward()
    return loss.detach(), [param.grad.clone() for param in model.parameters()]


def count_last_layer_calls(model) -> list[int]:
    calls = []
    transformer_layers(model)[-1].register_forward_hook(lambda *args: calls.append(1))
    return calls


def documents() -> torch.Tensor:
    """Document ids [4,40]: three documents in the first block, two in the second, one in the third and fourth."""
    ids = torch.zeros(4, 40, dtype=torch.long)
    ids[0, 9:], ids[0, 25:], ids[1, 30:] = 1, 2, 1
    return ids


@pytest.mark.oldpins
@pytest.mark.parametrize("within", [False, True], ids=["packed", "within"])
@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_the_last_layer_on_the_selected_rows_gives_the_whole_layers_loss_and_gradients(kind: str, within: bool) -> None:
    model = masked_lm(kind)
    if within and not takes_documents(model):
        pytest.skip("under transformers 4.x attention within documents runs the whole last layer")
    inputs = {"document_ids": documents()} if within else {}
    calls = count_last_layer_calls(model)
    rows_loss, rows_grads = loss_and_gradients(model, rows_only=True, **inputs)
    assert calls == []  # the layer's own forward (every position) did not run
    whole_loss, whole_grads = loss_and_gradients(model, rows_only=False, **inputs)
    assert calls == [1]
    torch.testing.assert_close(rows_loss, whole_loss, rtol=1e-5, atol=1e-4)
    assert whole_loss > 1.0  # 35 positions' summed cross-entropy, not an empty sum
    for found, expected in zip(rows_grads, whole_grads, strict=True):
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.oldpins
def test_a_padding_mask_runs_the_whole_last_layer_and_documents_under_transformers_4() -> None:
    model = masked_lm("bert")
    calls = count_last_layer_calls(model)
    input_ids, labels = batch()
    step = MaskedLM(model)
    step(input_ids, labels, attention_mask=torch.ones_like(input_ids))
    MaskedLM(model, sparse_head=False)(input_ids, labels)
    MaskedLM(model, sparse_last_layer=False)(input_ids, labels)
    assert calls == [1, 1, 1]
    step(input_ids, labels, document_ids=documents())
    assert len(calls) == (3 if takes_documents(model) else 4)


def test_a_batch_with_nothing_selected_is_an_exact_zero_with_zero_gradients() -> None:
    """As with the whole layer: backward runs and every parameter gets a gradient (DDP expects one from each rank)."""
    model = masked_lm("bert")
    input_ids, labels = batch()
    loss = MaskedLM(model)(input_ids, torch.full_like(labels, IGNORE_INDEX))
    loss.backward()
    assert loss.item() == 0.0
    assert all(param.grad is not None and not param.grad.any() for param in model.parameters())


def test_only_bert_layout_families_run_the_last_layer_on_rows() -> None:
    assert runs_on_rows(masked_lm("bert")) and runs_on_rows(masked_lm("roberta"))
    distil = DistilBertForMaskedLM(DistilBertConfig(vocab_size=300, dim=32, n_layers=2, n_heads=4, hidden_dim=64))
    assert not runs_on_rows(distil) and not MaskedLM(distil).last_layer_on_rows


def test_the_grid_holds_each_blocks_selected_positions_in_order_then_unselected_ones() -> None:
    labels = torch.tensor([[-100, 7, -100, 9], [-100, -100, -100, 4]])
    positions, targets = selected_grid(labels)
    assert positions.tolist() == [[1, 3], [3, 0]]
    assert targets.tolist() == [[7, 9], [4, -100]]
    positions, targets = selected_grid(torch.full((2, 4), -100))
    assert positions.shape == (2, 1) and (targets == -100).all()  # one column, nothing selected in it
