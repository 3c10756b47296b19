"""`electra`: replaced-token detection, a generator (a masked LM, saved in `generator/`) and the discriminator being
trained (`model/electra.py`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch

from mlmtrain.config import Config
from mlmtrain.data.masking import IGNORE_INDEX, VocabInfo, mean_rate
from mlmtrain.errors import UserError
from mlmtrain.model.bert import flops_per_token, padded_vocab_size
from mlmtrain.model.electra import (
    GENERATOR_DIR,
    build_electra,
    electra_configs,
    evaluate_electra,
    load_electra,
    masking_rate_note,
    scored_positions,
)
from mlmtrain.model.families import Family
from mlmtrain.report.curves import Curve
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train.base_model import Base
from mlmtrain.train.objectives.base import Blocks, Evaluation, Objective


class Electra(Objective):
    name = "electra"
    summary = "replaced-token detection (settings in the electra section)"
    builds = "a pair of BERT encoders"
    curves = (
        Curve(
            "eval-generator",
            "ELECTRA generator perplexity (validation)",
            ("eval_generator_perplexity",),
            "perplexity",
            log_y=True,
        ),
        Curve(
            "eval-discriminator",
            "ELECTRA replaced-token detection (validation)",
            ("eval_discriminator_accuracy", "eval_precision", "eval_recall", "eval_auc"),
            "score",
        ),
    )
    term_names = ("generator_loss", "discriminator_loss")
    model_type = "electra"
    architecture = "ElectraForPreTraining"
    model_folders = ("", GENERATOR_DIR)
    card_pipeline_tag = "feature-extraction"
    card_tags = ("electra",)
    card_trained = f"with ELECTRA's replaced-token detection (the generator, a masked-LM, is in `{GENERATOR_DIR}/`)"
    card_usage = (
        'from transformers import AutoModel, AutoTokenizer, ElectraForPreTraining\n\nMODEL = "."  '
        "# this folder, or the Hub repository it was pushed to\n"
        "tokenizer = AutoTokenizer.from_pretrained(MODEL)\n"
        "discriminator = ElectraForPreTraining.from_pretrained(MODEL)\n"
        "encoder = AutoModel.from_pretrained(MODEL)  # for fine-tuning: AutoModelForSequenceClassification\n"
    )

    def __init__(self, cfg: Config, vocab: VocabInfo, bases: Optional[Mapping[str, Base]] = None) -> None:
        super().__init__(cfg, vocab, bases)
        self.is_special = vocab.is_special(torch.arange(vocab.vocab_size))  # specials are never scored

    def build(self) -> Any:
        return build_electra(self.cfg, self.vocab)

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """The generator is no deeper than the discriminator, and its share of the model's width keeps its heads
        whole."""
        layers, most = cfg.electra.generator_layers, cfg.model.num_layers
        if layers is not None and layers > most:
            raise UserError(
                "config",
                f"electra.generator_layers ({layers}) is more than model.num_layers ({most}), and ELECTRA's generator "
                f"is a smaller model than its discriminator; set electra.generator_layers to {most} or fewer (null: "
                "as many)",
            )
        shape = cfg.electra.generator_shape(cfg.model)
        if shape["hidden_size"] % shape["num_heads"]:
            raise UserError(
                "config",
                f"electra.generator_size gives a generator of hidden size {shape['hidden_size']} and "
                f"{shape['num_heads']} heads, which do not divide; choose a share that keeps hidden size / heads whole "
                "(e.g. 0.25 or 0.5)",
            )

    def load(self, saved: ModelFolder, family: Family) -> Any:
        return load_electra(saved, self.cfg, self.vocab, family.dropout_settings(self.cfg.model))

    def planned_models(self, decided: dict[str, str]) -> dict[str, tuple[Any, dict[str, str]]]:
        discriminator, generator = electra_configs(self.cfg, self.vocab)
        layers = "electra.generator_layers" + ("" if self.cfg.electra.generator_layers else ", null: model.num_layers")
        by_generator = {
            key: "electra.generator_size" for key in ("hidden_size", "num_attention_heads", "intermediate_size")
        }
        return {
            "": (discriminator, decided),
            GENERATOR_DIR: (generator, {**decided, **by_generator, "num_hidden_layers": layers}),
        }

    def step_module(self, trained: Any) -> torch.nn.Module:
        return trained  # ElectraPretraining's own forward returns both sums

    @property
    def weights(self) -> tuple[float, ...]:
        return (1.0, self.cfg.electra.discriminator_weight)

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        labels = batch["labels"]
        scored = scored_positions(batch["input_ids"], labels, batch.get("attention_mask"), self.is_special)
        return [float((labels != IGNORE_INDEX).sum()), float(scored.sum())]

    def training_flops_per_token(self) -> float:
        """The discriminator's and the generator's. With H the discriminator's width, G the generator's, V the
        (padded) vocabulary and f the selection rate (1 with the dense head): the discriminator's encoder plus its
        H x H + H x 1 head on every token; the generator's encoder, the H x G projection of the shared embedding
        (when G != H), and its head, G x H then H x V, on the selected positions."""
        cfg, vocab_size = self.cfg, self.vocab.vocab_size
        model, seq_len, rate = cfg.model, cfg.data.seq_len, mean_rate(cfg.masking)
        shape = cfg.electra.generator_shape(model)
        generator = dataclasses.replace(
            model,
            hidden_size=shape["hidden_size"],
            num_heads=shape["num_heads"],
            intermediate_size=shape["intermediate_size"],
            num_layers=shape["num_layers"],
        )
        hidden, width = model.hidden_size, shape["hidden_size"]
        vocab = padded_vocab_size(vocab_size, model.pad_vocab_multiple)
        head_share = rate if model.sparse_head else 1.0
        discriminator_head = hidden * hidden + hidden
        projection = hidden * width if width != hidden else 0
        generator_head = head_share * (width * hidden + hidden * vocab)
        encoders = flops_per_token(model, vocab_size, seq_len, 0.0, True) + flops_per_token(
            generator, vocab_size, seq_len, 0.0, True
        )  # a selection rate of 0 with the sparse head: the encoders alone
        return encoders + 6.0 * (discriminator_head + projection + generator_head)

    def evaluate(
        self, trained: Any, blocks: Blocks, indices: Sequence[int], on: Evaluation
    ) -> tuple[dict[str, Any], str]:
        masking, seed = self.fixed_masks()  # the seed fixes the generator's samples too
        found = evaluate_electra(trained, blocks, indices, masking, seed, on.batch_size, on.device, on.autocast_dtype)
        metrics = {f"eval_{k}": v for k, v in found.as_dict().items() if k != "seconds"}
        summary = (
            f"validation loss {found.loss:.4f}: generator perplexity {found.generator_perplexity:.2f}, accuracy "
            f"{found.generator_accuracy:.3f}; discriminator accuracy {found.discriminator_accuracy:.3f}, "
            f"AUC {found.auc:.3f}"
        )
        return {**metrics, "eval_seconds": round(found.seconds, 3)}, summary

    def start_note(self) -> Optional[str]:
        return masking_rate_note(self.cfg)
