"""A step with static shapes: the collator's fixed-capacity head positions (none dropped, the same rows as the labels
give), the sparse head's static rows (same loss and gradients, no data-dependent operator under compile), training
steps bit-identical to the label path, and no attention mask for packed batches under compile and export."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers

from mlmtrain.config import MaskingConfig
from mlmtrain.data.masking import (
    IGNORE_INDEX,
    POSITION_MULTIPLE,
    MaskingCollator,
    VocabInfo,
    selected_positions,
    selection_capacity,
)
from mlmtrain.model.bert import MaskedLM, build_model, use_training_attention
from mlmtrain.runtime.distributed import init_distributed
from mlmtrain.train.step import build_setup, train_step

from ..model.test_model import tiny_config as model_config

VOCAB = 100
TRANSFORMERS_4 = int(transformers.__version__.split(".")[0]) < 5
NO_MASK_INTERFACE = "transformers 4.x builds BERT's masks without the attention-mask interface"


def tiny_model() -> MaskedLM:
    torch.manual_seed(0)
    mlm = build_model(model_config(), VOCAB, 0)  # no dropout: forwards compare exactly
    use_training_attention(mlm)
    return MaskedLM(mlm).train()


def masked_batch(padded: bool) -> dict[str, torch.Tensor]:
    """A collated batch of 4 blocks of 32 ids (rows of different lengths when `padded`), with head positions."""
    vocab = VocabInfo(vocab_size=VOCAB, mask_id=1, pad_id=0, special_ids=(0, 1, 2, 3))
    collator = MaskingCollator(vocab, MaskingConfig(mlm_probability=0.3), seed=5, positions=True)
    generator = torch.Generator().manual_seed(2)
    lengths = (32, 20, 32, 9) if padded else (32,) * 4
    items = [
        {"input_ids": torch.randint(4, VOCAB, (n,), generator=generator), "epoch": 0, "index": i}
        for i, n in enumerate(lengths)
    ]
    return collator(items)


def test_collator_positions_are_the_selected_positions_at_a_fixed_capacity():
    for padded in (False, True):
        batch = masked_batch(padded)
        labels, positions = batch["labels"], batch["selected_positions"]
        expected = (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)
        assert positions.shape == (selection_capacity(labels.numel(), 0.3),)
        assert torch.equal(positions[: expected.numel()], expected)
        assert bool((positions[expected.numel() :] == labels.numel()).all())  # the sentinel, one past the end


def test_capacity_grows_to_fit_and_never_drops_a_position():
    assert selection_capacity(256 * 128, 0.15) == 5312  # 4,915 expected + 6 sd of 64.6 = 5,303, rounded up to 64
    assert selection_capacity(10, 0.5) == POSITION_MULTIPLE  # never more than all the positions, rounded up
    labels = torch.full((4, 64), IGNORE_INDEX)
    labels[:, ::2] = 7  # half the positions selected: far past the capacity of a 1 % rate
    positions = selected_positions(labels, 0.01)
    assert positions.numel() == 128 > selection_capacity(labels.numel(), 0.01)
    assert torch.equal(positions, (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1))


def test_static_rows_give_the_loss_and_gradients_of_the_exact_rows():
    batch = masked_batch(padded=True)
    exact, static = tiny_model(), tiny_model()
    static.static_rows = True
    losses = [module(**batch) for module in (exact, static)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[1], losses[0])
    for got, want in zip(static.parameters(), exact.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def sdpa_masks_and_shapes(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[list, list[str]]:
    """Compile `module` (whole graph, static shapes) with a backend that records the graph, run forward and backward
    on `batch`: the attn_mask of every SDPA call (None or a graph node) and the nodes whose shape depends on data."""
    masks, data_dependent = [], []

    def recording_backend(graph_module: torch.fx.GraphModule, example_inputs: list) -> object:
        for node in graph_module.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor) and any(isinstance(size, torch.SymInt) for size in value.shape):
                data_dependent.append(node.name)
            if node.op == "call_function" and "scaled_dot_product_attention" in str(node.target):
                masks.append(node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None))
        return graph_module.forward

    torch._dynamo.reset()
    try:
        torch.compile(module, backend=recording_backend, fullgraph=True, dynamic=False)(**batch).backward()
    finally:
        torch._dynamo.reset()
    return masks, data_dependent


@pytest.mark.slow
@pytest.mark.skipif(TRANSFORMERS_4, reason=NO_MASK_INTERFACE)
def test_compiled_step_module_has_static_shapes_and_masks_only_padded_batches():
    module = tiny_model()
    module.static_rows = True
    masks, data_dependent = sdpa_masks_and_shapes(module, masked_batch(padded=False))
    assert masks == [None, None]  # 2 layers: SDPA unmasked, free to take flash kernels
    assert data_dependent == []  # no shape depends on the data: nothing for the host to wait for
    masks, _ = sdpa_masks_and_shapes(module, masked_batch(padded=True))
    assert len(masks) == 2 and all(mask is not None for mask in masks)


@pytest.mark.skipif(TRANSFORMERS_4, reason=NO_MASK_INTERFACE)
def test_exported_encoder_gets_no_mask_for_a_packed_batch():
    # torch.export is tracing that transformers' own skip refuses in every 5.x version: the surest stand-in on a CPU
    # for dynamo in versions that refuse under compile too, and for CUDA graph capture.
    encoder = tiny_model().mlm.bert.eval()
    input_ids = masked_batch(padded=False)["input_ids"]

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.encoder(ids).last_hidden_state

    graph = torch.export.export(Encoder(), (input_ids,)).graph
    calls = [node for node in graph.nodes if "scaled_dot_product_attention" in str(node.target)]
    assert len(calls) == 2
    assert all((node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")) is None for node in calls)


def test_steps_from_collator_positions_are_bit_identical_to_the_label_path(tiny_config):
    cfg = tiny_config(**{"masking.whole_word": True, "data.packing": False})  # padded batches, whole words
    ctx = init_distributed("cpu")
    runs = []
    for keep_positions in (True, False):
        setup = build_setup(copy.deepcopy(cfg), ctx)
        results = []
        for _ in range(3):
            micro = [next(setup.batches) for _ in range(setup.layout.accum_steps)]
            assert all("selected_positions" in batch for batch in micro)
            if not keep_positions:  # the head finds its rows in the labels, as without the collator's positions
                micro = [{k: v for k, v in batch.items() if k != "selected_positions"} for batch in micro]
            result = train_step(setup, micro, lambda: 0.0)
            results.append((result.loss, result.grad_norm, result.skipped))
        runs.append((results, [p.detach().clone() for p in setup.mlm.parameters()]))
    (results, weights), (expected_results, expected_weights) = runs
    assert results == expected_results
    assert all(torch.equal(got, want) for got, want in zip(weights, expected_weights, strict=True))


def steps(setup, count: int) -> list:
    """`count` train_steps on the setup's own micro-batches."""
    results = []
    for _ in range(count):
        micro = [next(setup.batches) for _ in range(setup.layout.accum_steps)]
        results.append(train_step(setup, micro, lambda: 0.0))
    return results


def test_nonfinite_gradients_under_a_finite_loss_count_in_a_row(tiny_config):
    setup = build_setup(tiny_config(), init_distributed("cpu"))
    weight = setup.mlm.cls.predictions.transform.dense.weight
    hook = weight.register_hook(lambda grad: torch.full_like(grad, float("nan")))
    results = steps(setup, 3)
    assert all(r.skipped and r.loss == r.loss for r in results)  # skipped with a finite loss
    reading = results[-1].read()
    assert (setup.state.step, reading.nonfinite_in_row, reading.nonfinite_total) == (3, 3, 3)  # skipped steps count
    hook.remove()
    reading = steps(setup, 1)[0].read()
    assert not reading.skipped and (reading.nonfinite_in_row, reading.longest_nonfinite_run) == (0, 3)


def test_a_nonfinite_loss_under_fp16_leaves_the_scaler_as_it_was(tiny_config):
    setup = build_setup(tiny_config(**{"train.precision": "fp16"}), init_distributed("cpu"))
    assert setup.scaler.is_enabled()
    steps(setup, 1)
    scale = setup.scaler.get_scale()
    bias = setup.mlm.cls.predictions.decoder.bias
    with torch.no_grad():
        saved, bias[5] = bias[5].clone(), float("nan")  # every logit row, so the loss, turns NaN
    assert steps(setup, 1)[0].skipped and setup.scaler.get_scale() == scale
    with torch.no_grad():
        bias[5] = saved
    assert not steps(setup, 1)[0].skipped  # the scaler takes the next step as usual
