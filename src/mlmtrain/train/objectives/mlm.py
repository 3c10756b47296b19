"""`mlm`: masked language modeling, a masked LM of model.architecture (BERT or ModernBERT: `model/architectures.py`)
through the sparse head (`model/bert.py`); the one objective that may continue an existing model (model.init_from)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mlmtrain.data.masking import MaskingCollator, mean_rate
from mlmtrain.evaluate.perplexity import evaluate_blocks
from mlmtrain.model.architectures import ARCHITECTURES, architecture_of
from mlmtrain.model.bert import MaskedLM
from mlmtrain.model.families import Family
from mlmtrain.runtime.model_folder import ModelFolder, transformers_config
from mlmtrain.train.base_model import KEY as BASE_KEY
from mlmtrain.train.base_model import load_base_model
from mlmtrain.train.objectives.base import Blocks, Evaluation, Objective


class MaskedLanguageModel(Objective):
    name = "mlm"
    summary = "masked language modeling"
    architecture = "BertForMaskedLM"
    architectures = tuple(ARCHITECTURES)  # every architecture mlmtrain builds
    continues_a_model = True
    within_documents = True
    saves_any_family = True  # a continued base's

    def build(self) -> Any:
        if self.cfg.model.init_from:
            return load_base_model(self.cfg, self.base(BASE_KEY))
        return architecture_of(self.cfg.model).build(self.cfg.model, self.vocab)

    def load(self, saved: ModelFolder, family: Family) -> Any:
        return family.load(saved, self.cfg.model)  # the masked LM of the checkpoint's family (a continued base's)

    def planned_models(self, decided: dict[str, str]) -> dict[str, tuple[Any, dict[str, str]]]:
        if self.cfg.model.init_from:  # the base's own model, with rows for the words the tokenizer added
            base = self.base(BASE_KEY)
            rows = max(base.config["vocab_size"], self.vocab.vocab_size)
            return {"": (transformers_config({**base.config, "vocab_size": rows}), dict.fromkeys(decided, BASE_KEY))}
        return {"": (architecture_of(self.cfg.model).config(self.cfg.model, self.vocab), decided)}

    def step_module(self, trained: Any) -> torch.nn.Module:
        model = self.cfg.model
        return MaskedLM(trained, sparse_head=model.sparse_head, sparse_last_layer=model.sparse_last_layer)

    def collator(self) -> MaskingCollator:
        # the sparse head takes its rows from the collator (model/bert.py's MaskedLM.head_rows)
        cfg = self.cfg
        return MaskingCollator(
            self.vocab,
            cfg.masking,
            seed=cfg.train.seed,
            positions=cfg.model.sparse_head,
            total_steps=cfg.train.max_steps,
            documents=cfg.data.document_attention == "within",
        )

    def training_flops_per_token(self) -> float:
        model = self.cfg.model
        rate = mean_rate(self.cfg.masking)  # the head's share of the rows, over the run
        count = architecture_of(model).flops_per_token
        return count(model, self.vocab.vocab_size, self.cfg.data.seq_len, rate, model.sparse_head)

    def evaluate(
        self, trained: Any, blocks: Blocks, indices: Sequence[int], on: Evaluation
    ) -> tuple[dict[str, Any], str]:
        masking, seed = self.fixed_masks()
        result = evaluate_blocks(
            trained,
            blocks,
            indices,
            self.vocab,
            masking,
            seed,
            on.batch_size,
            on.device,
            on.autocast_dtype,
            documents=self.cfg.data.document_attention == "within",  # the attention it trains with
        )
        metrics = {
            "eval_loss": result.loss,
            "eval_ppl": result.perplexity,
            "eval_acc": result.accuracy,
            "eval_masked_tokens": result.masked_tokens,
            "eval_seconds": round(result.seconds, 3),
        }
        summary = (
            f"validation loss {result.loss:.4f}, perplexity {result.perplexity:.2f}, accuracy {result.accuracy:.4f}"
        )
        return metrics, summary
