"""`mlm+nsp` (BERT's next-sentence prediction) and `mlm+sop` (ALBERT's sentence order): MLM on sentence pairs cut
from the token store plus the pair head on the pooled [CLS], a `BertForPreTraining` (`model/pairs.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from transformers import BertForPreTraining

from mlmtrain.config import Config, mixture_of
from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.data.store import TokenStore
from mlmtrain.errors import UserError
from mlmtrain.model.families import Family
from mlmtrain.model.pairs import MIN_SEGMENT, PairPretraining, build_pretraining, evaluate_pairs, pair_windows
from mlmtrain.report.curves import Curve
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train.objectives.base import Blocks, Evaluation
from mlmtrain.train.objectives.mlm import MaskedLanguageModel


class SentencePairs(MaskedLanguageModel):
    """What the two pair objectives share; `next_sentence` tells them apart."""

    next_sentence: ClassVar[bool]  # NSP: a false B comes from another document; SOP: A and B swap
    term_names = ("mlm_loss", "pair_loss", "pair_accuracy")
    architecture = "BertForPreTraining"  # both train (and save) BERT's pre-training heads
    architectures = ("bert",)
    builds = "BERT's pooler and pair head"
    curves = (
        Curve(
            "pair-accuracy", "Sentence-pair accuracy (NSP / SOP)", ("pair_accuracy", "eval_pair_accuracy"), "accuracy"
        ),
    )
    continues_a_model = False
    within_documents = False  # a pair's two segments attend to each other
    saves_any_family = False

    def build(self) -> Any:
        return build_pretraining(self.cfg.model, vocab_size=self.vocab.vocab_size, pad_id=self.vocab.pad_id)

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """Sentence pairs are cut from the token store's documents, two segments of MIN_SEGMENT tokens or more."""
        shortest = 3 + 2 * MIN_SEGMENT
        if cfg.data.seq_len < shortest:
            raise UserError(
                "config",
                f"data.seq_len ({cfg.data.seq_len}) is too short for two segments of train.objective {cls.name}: "
                f"[CLS] A [SEP] B [SEP] needs at least {shortest}; raise data.seq_len",
            )
        if not cfg.data.use_store:
            raise UserError(
                "config",
                f"data.use_store is false, but train.objective {cls.name} cuts its pairs from the token store; set "
                "data.use_store: true",
            )
        if mixture_of(cfg.data.train):
            raise UserError(
                "config",
                f"data.train is a mixture, and train.objective {cls.name} cuts its pairs from one source's documents; "
                "name one source in data.train, or train.objective: mlm",
            )

    def load(self, saved: ModelFolder, family: Family) -> Any:
        return family.load(saved, self.cfg.model, BertForPreTraining)  # BERT's pre-training heads

    def step_module(self, trained: Any) -> torch.nn.Module:
        return PairPretraining(trained, sparse_head=self.cfg.model.sparse_head)

    def training_blocks(self, store: TokenStore, tokenizer: Any) -> tuple[Any, Any]:
        # sentence-pair blocks, drawn and masked by their own collator
        windows = self.validation_blocks(store, tokenizer)
        return windows, windows.collator(self.vocab, self.cfg.masking, self.cfg.train.seed, self.cfg.train.max_steps)

    def validation_blocks(self, store: TokenStore, tokenizer: Any, packing: bool = True) -> Any:
        return pair_windows(self.cfg, store, tokenizer, self.next_sentence)

    @property
    def weights(self) -> tuple[float, ...]:
        return (1.0, 1.0, 0.0)  # MLM + pair loss, summed; the accuracy rides along unweighted

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        labels = batch["labels"]
        blocks = float(labels.shape[0])  # the pair loss and accuracy are means over blocks
        return [float((labels != IGNORE_INDEX).sum()), blocks, blocks]

    def training_flops_per_token(self) -> float:
        # plus the pooler and the pair head, once per block
        model = self.cfg.model
        pair_head = model.hidden_size * model.hidden_size + 2 * model.hidden_size
        return super().training_flops_per_token() + 6.0 * pair_head / self.cfg.data.seq_len

    def evaluate(
        self, trained: Any, blocks: Blocks, indices: Sequence[int], on: Evaluation
    ) -> tuple[dict[str, Any], str]:
        # blocks: the validation split's PairWindows; the pairs fixed by the seed like the masks
        collator = blocks.collator(self.vocab, *self.fixed_masks())
        metrics = evaluate_pairs(trained, blocks, indices, collator, on.batch_size, on.device, on.autocast_dtype)
        summary = (
            f"validation loss {metrics['eval_loss']:.4f}: perplexity {metrics['eval_ppl']:.2f}, pair accuracy "
            f"{metrics['eval_pair_accuracy']:.3f}"
        )
        return metrics, summary


class NextSentence(SentencePairs):
    name = "mlm+nsp"
    summary = "MLM on sentence pairs plus BERT's next-sentence prediction"
    next_sentence = True


class SentenceOrder(SentencePairs):
    name = "mlm+sop"
    summary = "MLM on sentence pairs plus ALBERT's sentence-order prediction"
    next_sentence = False
