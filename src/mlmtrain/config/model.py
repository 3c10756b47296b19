"""The model section (the encoder built or continued) and the sections one objective alone reads: ELECTRA's generator
and distillation's teacher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from mlmtrain.config.fields import GENERATOR_SHARE, above, at_least, quiet, require, setting, trains, within


@dataclass
class ModelConfig:
    architecture: Literal["bert", "modernbert"] = trains(
        "bert",
        "the encoder built from scratch: bert (learned positions, GELU feed-forward, pooler) or modernbert (rotary "
        "positions, alternating global and 128-token local attention, GLU feed-forward, no biases; MLM only: "
        "model.dropout sets its MLP and attention dropout); with model.init_from the base's architecture applies",
    )
    hidden_size: int = trains(256, "width of the encoder", check=at_least(1))
    num_layers: int = trains(4, "transformer layers", check=at_least(1))
    num_heads: int = trains(
        4, "attention heads; must divide hidden_size (modernbert: into heads of an even size)", check=at_least(1)
    )
    intermediate_size: int = trains(1024, "width of the feed-forward layer", check=at_least(1))
    max_position_embeddings: int = trains(512, "longest sequence the model can take", check=at_least(1))
    dropout: Union[float, None] = setting(
        None,
        "hidden and attention dropout in one key (0: none, as Cramming and ModernBERT train); null: the two below",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    hidden_dropout: float = setting(
        0.1,
        "dropout on hidden states (model.dropout, when set, replaces it)",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    attention_dropout: float = setting(
        0.1,
        "dropout on attention probabilities (model.dropout, when set, replaces it)",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    sparse_head: bool = quiet(True, "run the MLM head on the selected positions only (same loss, less work)")
    sparse_last_layer: bool = quiet(
        True,
        "with sparse_head, run the last layer's queries, feed-forward and LayerNorms on the selected positions only "
        "(BERT and RoBERTa layers, packed blocks, on the CPU; same loss, less work)",
    )
    pad_vocab_multiple: int = trains(
        1, "round the embedding rows up to a multiple of this (64 suits GPUs)", check=at_least(1)
    )
    global_rope_theta: Union[float, None] = trains(
        None,
        "ModernBERT: the base of the rotary positions of its global attention layers (160000 raised for a longer "
        "context, as Ettin's extension phase does); null: the model's own (a base's, else 160000)",
        check=above(0),
    )
    local_rope_theta: Union[float, None] = trains(
        None,
        "ModernBERT: the base of the rotary positions of its local (sliding-window) attention layers; null: the "
        "model's own (a base's, else 10000)",
        check=above(0),
    )
    init_from: Union[str, None] = trains(
        None,
        "start from this masked LM (a folder or hub name; BERT, RoBERTa, DistilBERT, ModernBERT, DeBERTa-v2): its "
        "weights, shape and tokenizer; shape keys left at "
        "their defaults take the base's; optimizer and schedule start fresh",
        path="hub",
    )

    def validate(self) -> None:
        require(
            self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            f"({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})",
        )

    @property
    def hidden_dropout_prob(self) -> float:
        """The dropout on hidden states the model gets: model.dropout when set, else model.hidden_dropout."""
        return self.hidden_dropout if self.dropout is None else self.dropout

    @property
    def attention_dropout_prob(self) -> float:
        """The dropout on attention probabilities the model gets: model.dropout when set, else attention_dropout."""
        return self.attention_dropout if self.dropout is None else self.dropout


@dataclass
class ElectraConfig:
    generator_size: float = trains(
        0.25,
        "generator width as a share of the discriminator's (hidden size, heads, feed-forward); "
        "ELECTRA found 1/4 to 1/2 best; at most 1",
        check=GENERATOR_SHARE,
    )
    generator_layers: Union[int, None] = trains(
        None,
        "generator transformer layers, at most model.num_layers; null: as many",
        check=at_least(1),
    )
    discriminator_weight: float = trains(
        50.0, "weight of the replaced-token loss against the generator's MLM loss", check=above(0)
    )
    temperature: float = trains(1.0, "sampling temperature of the generator's replacements", check=above(0))

    def generator_shape(self, model: ModelConfig) -> dict[str, int]:
        """Hidden size, heads, feed-forward width and layers of the generator: the discriminator's scaled by
        `generator_size` (as the original ELECTRA code scales them), with at least one head."""
        heads = max(1, round(model.num_heads * self.generator_size))
        return {
            "hidden_size": max(heads, round(model.hidden_size * self.generator_size)),
            "num_heads": heads,
            "intermediate_size": max(1, round(model.intermediate_size * self.generator_size)),
            "num_layers": self.generator_layers or model.num_layers,
        }


@dataclass
class DistillConfig:
    teacher: Union[str, None] = trains(
        None,
        "the masked LM that teaches (a folder or hub name; any family model.init_from takes): its tokenizer is the "
        "run's, it runs without gradients in eval mode; required with train.objective: distill",
        path="hub",
    )
    temperature: float = trains(
        2.0, "softmax temperature of the teacher's and the student's distributions (the KL is scaled by T^2)", above(0)
    )
    alpha: float = trains(
        0.5,
        "weight of the KL to the teacher in the loss; the masked-LM loss gets 1 - alpha",
        check=within(0, 1, "[]"),
    )
    hidden_weight: float = trains(
        0.0,
        "weight of a cosine loss between the student's and the teacher's last hidden states (through a learned "
        "projection, not saved in the student, when the widths differ); 0: none",
        check=at_least(0),
    )
    init: Literal["scratch", "teacher-layers"] = trains(
        "scratch",
        "scratch: a BERT of the model section's shape; teacher-layers: the teacher's embeddings, head and evenly "
        "spaced layers (every other one for half the layers, as DistilBERT), its widths, of its family",
    )
