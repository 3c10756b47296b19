"""The model: the sparse head gives HF's loss and gradients, weights are tied, checkpoints are plain HF folders,
attention_mask=None reaches SDPA unmasked, the training attention runs in float32 under CPU autocast and is SDPA
otherwise, a document attending within itself in a packed block is as it is alone, and the FLOP count matches a hand
count."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from transformers import AutoModelForMaskedLM, BertForMaskedLM

from mlmtrain.config import Config, ModelConfig
from mlmtrain.data.masking import document_ids
from mlmtrain.errors import UserError
from mlmtrain.model.bert import (
    TRAINING_ATTENTION,
    MaskedLM,
    build_model,
    count_parameters,
    flops_per_token,
    padded_vocab_size,
    use_training_attention,
)
from mlmtrain.model.families import encode

from ..helpers import larger_weights

VOCAB = 100
PAD = 0


def tiny_config(**changes) -> ModelConfig:
    values = dict(
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    values.update(changes)
    return ModelConfig(**values)


@pytest.fixture
def model() -> BertForMaskedLM:
    torch.manual_seed(0)
    mlm = build_model(tiny_config(), VOCAB, PAD).eval()
    # At init (std 0.02) every prediction is nearly uniform, so the loss hardly depends on anything, a dropped
    # padding mask included (it moves the mean loss by ~1e-5). Larger weights make the comparisons able to fail.
    larger_weights(mlm)
    return mlm


def batch(padded: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(input_ids, labels, attention_mask): about 30 % of real positions selected; padded rows end in [PAD]."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, VOCAB, (3, 16), generator=generator)
    labels = torch.randint(1, VOCAB, (3, 16), generator=generator)
    labels[torch.rand(3, 16, generator=generator) > 0.3] = -100
    if not padded:
        return input_ids, labels, None
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 10:] = 0
    attention_mask[2, 5:] = 0
    input_ids[attention_mask == 0] = PAD
    labels[attention_mask == 0] = -100
    return input_ids, labels, attention_mask


def gradients(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters()}


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
@pytest.mark.parametrize("sparse_head", [True, False], ids=["sparse", "dense"])
def test_summed_loss_and_gradients_match_hf(model, padded, sparse_head):
    input_ids, labels, attention_mask = batch(padded)
    selected = int((labels != -100).sum())
    assert 0 < selected < labels.numel()

    reference = model(input_ids, attention_mask=attention_mask, labels=labels).loss
    reference.backward()
    expected_grads = gradients(model)
    model.zero_grad(set_to_none=True)

    loss_sum = MaskedLM(model, sparse_head=sparse_head)(input_ids, labels, attention_mask)
    assert loss_sum.dtype == torch.float32
    torch.testing.assert_close(loss_sum / selected, reference, rtol=1e-5, atol=1e-5)
    (loss_sum / selected).backward()
    for name, grad in gradients(model).items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_loss_is_float32_under_a_bfloat16_model(model):
    input_ids, labels, _ = batch(padded=False)
    loss_sum = MaskedLM(model.to(torch.bfloat16))(input_ids, labels)
    assert loss_sum.dtype == torch.float32


def test_padding_mask_changes_the_loss(model):
    # Guards the test above: if the mask were ignored, padded and unpadded runs of one batch would agree.
    input_ids, labels, attention_mask = batch(padded=True)
    wrapper = MaskedLM(model)
    selected = int((labels != -100).sum())
    masked, unmasked = (wrapper(input_ids, labels, mask) / selected for mask in (attention_mask, None))
    assert (masked - unmasked).abs().item() > 0.01


def test_no_selected_position_gives_zero_loss_and_zero_gradients(model):
    input_ids, _, _ = batch(padded=False)
    labels = torch.full_like(input_ids, -100)
    for sparse_head in (True, False):
        loss_sum = MaskedLM(model, sparse_head=sparse_head)(input_ids, labels)
        assert loss_sum.item() == 0.0
        assert loss_sum.requires_grad
        loss_sum.backward()
        for name, param in model.named_parameters():
            assert param.grad is not None, name
            assert not param.grad.any(), name
        model.zero_grad(set_to_none=True)


def test_decoder_is_tied_to_word_embedding(model):
    decoder = model.cls.predictions.decoder
    assert decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert decoder.bias is model.cls.predictions.bias
    # Tied weights count once: the word embedding (VOCAB x 32) is not counted again for the decoder.
    untied = sum(p.numel() for p in model.state_dict().values() if p.is_floating_point())
    assert count_parameters(model) == untied - VOCAB * 32 - VOCAB


@pytest.mark.parametrize(
    ("keys", "hidden", "attention"),
    [
        ({}, 0.1, 0.1),  # the defaults
        ({"hidden_dropout": 0.2, "attention_dropout": 0.3}, 0.2, 0.3),
        ({"dropout": 0.0}, 0.0, 0.0),  # one key for both
        ({"dropout": 0.05, "hidden_dropout": 0.05}, 0.05, 0.05),  # agreeing keys are fine
    ],
)
def test_model_dropout_sets_both_rates(keys, hidden, attention):
    config = build_model(ModelConfig(**{"hidden_size": 32, "num_heads": 2, **keys}), VOCAB, PAD).config
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (hidden, attention)


def test_model_dropout_and_a_contradicting_specific_key_are_refused():
    with pytest.raises(UserError, match=r"model.attention_dropout \(0.3\) contradicts model.dropout"):
        Config(model=ModelConfig(dropout=0.0, attention_dropout=0.3)).validate()


@pytest.mark.parametrize(("dropout", "agree"), [(0.0, True), (0.1, False)])
def test_dropout_zero_really_turns_dropout_off(dropout, agree):
    """In train mode, two forward passes of one batch agree exactly without dropout and differ with it."""
    torch.manual_seed(0)
    mlm = build_model(tiny_config(dropout=dropout), VOCAB, PAD).train()
    model = MaskedLM(mlm)
    ids = torch.randint(5, VOCAB, (4, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.where(torch.arange(16) % 3 == 0, ids, -100)
    first, second = model(ids, labels), model(ids, labels)
    assert torch.equal(first, second) is agree


def test_build_model_config():
    torch.manual_seed(0)
    model = build_model(tiny_config(pad_vocab_multiple=64, hidden_dropout=0.2, attention_dropout=0.3), VOCAB, 3)
    config = model.config
    assert config.vocab_size == 128
    assert model.bert.embeddings.word_embeddings.weight.shape == (128, 32)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (32, 2, 2)
    assert (config.intermediate_size, config.max_position_embeddings) == (64, 64)
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.2, 0.3)
    assert config.pad_token_id == 3
    assert config._attn_implementation == "sdpa"
    assert type(model) is BertForMaskedLM
    # HF's init, not zeros or PyTorch defaults: N(0, 0.02) weights and a zero row for [PAD].
    weight = model.bert.embeddings.word_embeddings.weight
    assert 0.015 < weight.std().item() < 0.025
    assert not weight[3].any()


@pytest.mark.parametrize(
    ("vocab", "multiple", "padded"), [(100, 1, 100), (100, 64, 128), (128, 64, 128), (30522, 64, 30528), (1, 8, 8)]
)
def test_padded_vocab_size(vocab, multiple, padded):
    assert padded_vocab_size(vocab, multiple) == padded


def test_build_model_rejects_a_pad_id_outside_the_vocabulary():
    with pytest.raises(UserError, match="pad token id 100"):
        build_model(tiny_config(), VOCAB, VOCAB)


def test_save_pretrained_round_trip(model, tmp_path):
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is BertForMaskedLM
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    input_ids, _, attention_mask = batch(padded=True)
    with torch.no_grad():
        expected = model(input_ids, attention_mask=attention_mask).logits
        actual = loaded(input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def sdpa_calls(monkeypatch) -> list[dict]:
    """Record the query dtype, attn_mask and is_causal of every scaled_dot_product_attention call (transformers'
    sdpa_attention_forward looks the function up on torch.nn.functional at every call; restored after the test)."""
    seen = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        seen.append({"dtype": query.dtype, "mask": kwargs.get("attn_mask"), "causal": kwargs.get("is_causal")})
        return original(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return seen


def test_unmasked_batch_reaches_sdpa_without_a_mask(model, monkeypatch):
    seen = sdpa_calls(monkeypatch)
    input_ids, labels, attention_mask = batch(padded=True)
    wrapper = MaskedLM(model)
    with torch.no_grad():
        wrapper(input_ids, labels)
        wrapper(input_ids, labels, torch.ones_like(input_ids))
        assert [(call["mask"], call["causal"]) for call in seen] == [(None, False)] * 4  # 2 layers, 2 calls
        seen.clear()
        wrapper(input_ids, labels, attention_mask)
    assert len(seen) == 2 and all(call["mask"] is not None for call in seen)


def roberta(pad: int) -> torch.nn.Module:
    """A tiny RobertaForMaskedLM, weights large enough that a token's context moves its hidden states."""
    from transformers import RobertaConfig, RobertaForMaskedLM

    torch.manual_seed(0)
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    config = RobertaConfig(vocab_size=VOCAB, max_position_embeddings=66, pad_token_id=pad, **shape)
    mlm = RobertaForMaskedLM(config).eval()
    larger_weights(mlm)
    return mlm


def modernbert() -> torch.nn.Module:
    """A tiny ModernBertForMaskedLM whose local layers see 3 tokens either side, so its documents outgrow the window."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    shape = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64)
    config = ModernBertConfig(
        vocab_size=VOCAB, pad_token_id=PAD, local_attention=6, global_attn_every_n_layers=2, **shape
    )
    mlm = ModernBertForMaskedLM(config).eval()
    assert {"full_attention", "sliding_attention"} <= set(mlm.config.layer_types)
    larger_weights(mlm)
    return mlm


TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5


@pytest.mark.oldpins
@pytest.mark.parametrize(
    "family",
    [
        "bert",
        "roberta",
        pytest.param("modernbert", marks=pytest.mark.skipif(not TRANSFORMERS_5, reason="refused before 5 (below)")),
    ],
)
def test_a_document_packed_with_others_has_the_hidden_states_it_has_alone(family, model):
    """data.document_attention within: each document of a packed block ([CLS] first, each document ended by [SEP],
    the block closed by [SEP]) attends to itself alone, from position 0 (RoBERTa's after its padding offset),
    ModernBERT's local layers within their window too."""
    mlm = {"bert": lambda: model, "roberta": lambda: roberta(PAD), "modernbert": modernbert}[family]()
    cls_id, sep_id = 1, 2
    generator = torch.Generator().manual_seed(3)
    a, b, c = (torch.randint(3, VOCAB, (n,), generator=generator).tolist() for n in (7, 12, 5))
    # the last document's [SEP] is the block's body's last token: the block ends [SEP] [SEP]
    documents = [[cls_id, *a, sep_id], [*b, sep_id], [*c, sep_id, sep_id]]
    block = torch.tensor([sum(documents, [])])
    ids = document_ids(block, sep_id)
    assert ids.tolist() == [[i for i, document in enumerate(documents) for _ in document]]
    with torch.no_grad():
        within = encode(mlm, block, None, ids)[0].split([len(d) for d in documents])
        across = encode(mlm, block, None)[0].split([len(d) for d in documents])
        for document, packed, unmasked in zip(documents, within, across, strict=True):
            alone = encode(mlm, torch.tensor([document]), None)[0]
            torch.testing.assert_close(packed, alone, rtol=0, atol=1e-5)
            assert (unmasked - alone).abs().max() > 1e-2  # attention across the whole block reaches the others


@pytest.mark.oldpins
def test_modernbert_within_documents_is_refused_in_one_line_before_transformers_5() -> None:
    from mlmtrain.model.families import check_within_documents, family_of

    if TRANSFORMERS_5:
        check_within_documents(family_of("modernbert"), "model.architecture modernbert")  # takes it
        return
    with pytest.raises(UserError, match="install transformers>=5 or set data.document_attention: packed"):
        check_within_documents(family_of("modernbert"), "model.architecture modernbert")


def test_flops_per_token_matches_a_hand_count():
    cfg = ModelConfig(hidden_size=4, num_layers=2, num_heads=2, intermediate_size=8, pad_vocab_multiple=8)
    # Per layer: 4*16 projections + 2*32 feed-forward + 2*10*4 attention = 208 MACs; vocab 10 -> 16 padded;
    # head: 16 + 4*16 = 80 MACs on half the tokens (sparse) or all of them (dense).
    assert flops_per_token(cfg, 10, 10, 0.5, sparse_head=True) == 6 * (2 * 208 + 0.5 * 80)
    assert flops_per_token(cfg, 10, 10, 0.5, sparse_head=False) == 6 * (2 * 208 + 80)


def test_flops_per_token_is_sane_for_mini():
    cfg = ModelConfig()  # L4 H256 I1024
    sparse = flops_per_token(cfg, 30522, 128, 0.15, sparse_head=True)
    dense = flops_per_token(cfg, 30522, 128, 0.15, sparse_head=False)
    assert dense > sparse
    # The classic 6 * parameters estimate, non-embedding matrices plus the decoder for the dense head, is close.
    encoder_params = 4 * (4 * 256 * 256 + 2 * 256 * 1024)
    assert dense == pytest.approx(6 * (encoder_params + 256 * 256 + 256 * 30522), rel=0.05)
    assert flops_per_token(cfg, 30522, 512, 0.15, sparse_head=True) > sparse


def test_training_attention_runs_in_float32_under_cpu_autocast(model, monkeypatch):
    seen = sdpa_calls(monkeypatch)
    input_ids, labels, _ = batch(padded=False)
    stock = copy.deepcopy(model)
    use_training_attention(model)
    assert model.config._attn_implementation == TRAINING_ATTENTION
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        MaskedLM(stock)(input_ids, labels)
        assert [call["dtype"] for call in seen] == [torch.bfloat16] * 2  # HF's sdpa: autocast runs it in bf16
        seen.clear()
        MaskedLM(model)(input_ids, labels)
    assert [(call["dtype"], call["mask"]) for call in seen] == [(torch.float32, None)] * 2  # and still no mask


def test_training_attention_is_sdpa_outside_autocast_padding_masks_included(model, monkeypatch, tmp_path):
    seen = sdpa_calls(monkeypatch)
    input_ids, labels, attention_mask = batch(padded=True)
    stock = copy.deepcopy(model)
    use_training_attention(model)
    with torch.no_grad():
        expected = stock(input_ids, attention_mask=attention_mask).logits
        found = model(input_ids, attention_mask=attention_mask).logits
        unmasked = model(input_ids).logits
    torch.testing.assert_close(found, expected, rtol=0, atol=0)
    assert not torch.allclose(found, unmasked)  # the mask matters here, so the equality above checks it was applied
    assert all(call["mask"] is not None for call in seen[:4])
    model.save_pretrained(tmp_path)  # the checkpoint of a training model: a plain SDPA model, no mlmtrain needed
    assert TRAINING_ATTENTION not in (tmp_path / "config.json").read_text()
    assert AutoModelForMaskedLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"
