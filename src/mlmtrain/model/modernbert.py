"""ModernBERT from scratch (`model.architecture: modernbert`): its transformers config at the run's shape with the
tokenizer's special ids, a freshly initialised `ModernBertForMaskedLM`, its parameter count and its training FLOPs
per token (a GLU feed-forward and local attention, unlike BERT's)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from mlmtrain.config import ModelConfig
from mlmtrain.data.masking import VocabInfo
from mlmtrain.model.bert import check_vocabulary, config_shape, padded_vocab_size
from mlmtrain.model.families import model_family

# ModernBERT's published layout: every third layer attends globally, the others within a window of this many tokens
GLOBAL_EVERY = 3
LOCAL_WINDOW = 128


def modernbert_config(cfg: ModelConfig, vocab: VocabInfo) -> Any:
    """The `ModernBertConfig` of `cfg` for the tokenizer of `vocab`: its special ids (transformers' defaults are those
    of ModernBERT's own 50k vocabulary) and rows padded to pad_vocab_multiple; dropout as the family table sets it
    (MLP and attention)."""
    from transformers import ModernBertConfig  # transformers: heavy, loaded on use

    check_vocabulary(vocab.vocab_size, vocab.pad_id)
    cls_id = vocab.cls_id if vocab.cls_id is not None else vocab.pad_id
    sep_id = vocab.sep_id if vocab.sep_id is not None else vocab.pad_id
    return ModernBertConfig(
        **config_shape(cfg, vocab.vocab_size),
        global_attn_every_n_layers=GLOBAL_EVERY,
        local_attention=LOCAL_WINDOW,
        mlp_dropout=cfg.hidden_dropout_prob,
        attention_dropout=cfg.attention_dropout_prob,
        pad_token_id=vocab.pad_id,
        cls_token_id=cls_id,
        bos_token_id=cls_id,
        sep_token_id=sep_id,
        eos_token_id=sep_id,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
        **{key: value for key, value in _rope_thetas(cfg).items() if value is not None},
    )


def _rope_thetas(cfg: ModelConfig) -> dict[str, Optional[float]]:
    """The rotary bases the model section sets, by transformers' ModernBertConfig keyword (None: the model's own)."""
    return {"global_rope_theta": cfg.global_rope_theta, "local_rope_theta": cfg.local_rope_theta}


def set_rope_theta(mlm: Any, cfg: ModelConfig) -> None:
    """A ModernBERT's rotary bases set to model.global_rope_theta and local_rope_theta where the model section sets
    them (a phase that extends the context raises them): in its config, which its saved config.json keeps, and in the
    frequencies of its rotary embeddings. Nothing for a model without rotary positions, or bases left null."""
    wanted = {name: float(value) for name, value in _rope_thetas(cfg).items() if value is not None}
    config = mlm.config
    if not wanted or not model_family(mlm).rotary:
        return
    layers = {"global_rope_theta": "full_attention", "local_rope_theta": "sliding_attention"}
    parameters = getattr(config, "rope_parameters", None)
    for name, theta in wanted.items():
        setattr(config, name, theta)  # transformers 4 reads these
        if isinstance(parameters, dict) and isinstance(parameters.get(layers[name]), dict):
            parameters[layers[name]]["rope_theta"] = theta  # transformers 5 reads these
    with torch.no_grad():
        for module in mlm.modules():
            for layer_type, name in ((kind, key) for key, kind in layers.items() if key in wanted):
                inverse = getattr(module, f"{layer_type}_inv_freq", None)  # transformers 5: one module, a buffer a type
                if inverse is not None:
                    fresh = _inverse_frequencies(wanted[name], inverse.numel() * 2, inverse.device)
                    inverse.copy_(fresh)
                    getattr(module, f"{layer_type}_original_inv_freq").copy_(fresh)
            if hasattr(module, "rotary_emb") and hasattr(module.rotary_emb, "inv_freq"):  # transformers 4: per layer
                local = getattr(module, "local_attention", (-1, -1)) != (-1, -1)
                theta = wanted.get("local_rope_theta" if local else "global_rope_theta")
                if theta is not None:
                    inverse = module.rotary_emb.inv_freq
                    inverse.copy_(_inverse_frequencies(theta, inverse.numel() * 2, inverse.device))


def _inverse_frequencies(theta: float, dim: int, device: torch.device) -> torch.Tensor:
    """Rotary positions' inverse frequencies of a head of `dim` dimensions at base `theta` (transformers' default)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=device) / dim))


def build_modernbert(cfg: ModelConfig, vocab: VocabInfo) -> Any:
    """A freshly initialised `ModernBertForMaskedLM` (transformers' own init; seed torch first), decoder tied to the
    word embedding as ModernBERT publishes it."""
    from transformers import ModernBertForMaskedLM  # transformers: heavy, loaded on use

    model = ModernBertForMaskedLM(modernbert_config(cfg, vocab))
    if model.decoder.weight is not model.model.embeddings.tok_embeddings.weight:
        raise RuntimeError("ModernBertForMaskedLM did not tie the decoder to the word embedding")
    return model


def modernbert_parameter_count(cfg: ModelConfig, vocab_size: int) -> int:
    """Parameters of `build_modernbert(cfg, ...)` for `vocab_size` tokens, computed without building it: no biases
    but the decoder's, LayerNorms without bias, the first layer without an attention norm (its input is the
    embedding's norm), the decoder weight tied."""
    hidden, inner, vocab = cfg.hidden_size, cfg.intermediate_size, padded_vocab_size(vocab_size, cfg.pad_vocab_multiple)
    layer = 4 * hidden * hidden + 3 * hidden * inner + 2 * hidden  # Wqkv, Wo; Wi (2 I), Wo (I); two norms
    head = hidden * hidden + hidden + vocab  # dense, norm, decoder bias
    # the embedding and its norm, the layers (the first has no attention norm), the final norm, the head
    return vocab * hidden + hidden + cfg.num_layers * layer - hidden + hidden + head


def modernbert_flops_per_token(
    cfg: ModelConfig, vocab_size: int, seq_len: int, mlm_probability: float, sparse_head: bool
) -> float:
    """Training FLOPs per input token of ModernBERT, counted as `model.bert.flops_per_token` counts BERT's:

        forward MACs per token = L * (4 H^2 + 3 H I) + 2 H * (global layers * S + local layers * K) + f * (H^2 + H V)

    3 H I: the GLU feed-forward, whose Wi projects to 2 I (input and gate) and Wo back from I; 2 H K: a local
    layer's scores and weighted values over the K = min(S, LOCAL_WINDOW + 1) keys its window holds; every
    GLOBAL_EVERY-th layer from the first is global, over all S keys. Rotary embeddings are left out (not matmuls).
    """
    hidden, vocab = cfg.hidden_size, padded_vocab_size(vocab_size, cfg.pad_vocab_multiple)
    global_layers = -(-cfg.num_layers // GLOBAL_EVERY)
    keys = global_layers * seq_len + (cfg.num_layers - global_layers) * min(seq_len, LOCAL_WINDOW + 1)
    encoder = cfg.num_layers * (4 * hidden * hidden + 3 * hidden * cfg.intermediate_size) + 2 * hidden * keys
    head = (mlm_probability if sparse_head else 1.0) * (hidden * hidden + hidden * vocab)
    return 6.0 * (encoder + head)
