"""The interface every objective implements (`Objective`), with what most share: the loss arithmetic over the
global batch, a masked LM's blocks and collator, and the model card of a masked LM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import numpy as np
import torch

from mlmtrain.config import Config, MaskingConfig
from mlmtrain.data.blocks import StoreBlocks
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo, evaluation_masking
from mlmtrain.data.store import TokenStore
from mlmtrain.model.families import Family
from mlmtrain.report.curves import Curve
from mlmtrain.runtime.model_folder import ModelFolder
from mlmtrain.train.base_model import Base, read_base

if TYPE_CHECKING:  # a checkpoint's record names its objective (checkpoint.py imports this package)
    from mlmtrain.train.checkpoint import SavedCheckpoint

Blocks = Union[Sequence[np.ndarray], Mapping[int, np.ndarray]]


@dataclass
class Evaluation:
    """Where training-time evaluation runs: its batch size, device and autocast dtype."""

    batch_size: int
    device: torch.device
    autocast_dtype: Optional[torch.dtype]


FILL_MASK_USAGE = (
    'from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, pipeline\n\nMODEL = "."  '
    "# this folder, or the Hub repository it was pushed to\n"
    'fill = pipeline("fill-mask", model=MODEL)\n'
    'print(fill(f"The capital of France is {fill.tokenizer.mask_token}."))\n'
    "tokenizer = AutoTokenizer.from_pretrained(MODEL)\n"
    "mlm = AutoModelForMaskedLM.from_pretrained(MODEL)\n"
    "encoder = AutoModel.from_pretrained(MODEL)  # for fine-tuning: AutoModelForSequenceClassification\n"
)


class Objective:
    """What a run of one `train.objective` trains, reads, optimises, evaluates, saves and says, for `cfg` and the
    tokenizer's `vocab`. The class attributes are facts about the objective, read without a run (checkpoints,
    model cards, refusals)."""

    name: ClassVar[str]  # its train.objective
    term_names: ClassVar[tuple[str, ...]] = ("loss",)  # metric names of the loss terms, beside the weighted `loss`
    # how the report draws the metrics only it logs (a run records them in run.json; `*_loss` terms are drawn anyway)
    curves: ClassVar[tuple[Curve, ...]] = ()
    model_type: ClassVar[str] = "bert"  # config.json's model_type of the saved model
    architecture: ClassVar[str]  # config.json's `architectures` of the saved model: how a resume recognises it
    model_folders: ClassVar[tuple[str, ...]] = ("",)  # the checkpoint's model folders: "" itself, or a subfolder
    summary: ClassVar[str]  # what it trains, in a few words, for `config fields` and messages
    continues_a_model: ClassVar[bool] = False  # whether model.init_from may name a base (of any family) to start from
    # the model.architecture values it builds from scratch (model/architectures.py), and why, for a refusal
    architectures: ClassVar[tuple[str, ...]] = ("bert",)
    builds: ClassVar[str] = "a BERT"
    # whether it trains with data.document_attention within (its step module and evaluation take "document_ids")
    within_documents: ClassVar[bool] = False
    # whether its checkpoint may be a masked LM of another family than BERT (model/families.py)
    saves_any_family: ClassVar[bool] = False
    card_teacher_key: ClassVar[Optional[str]] = None  # the config key naming the model it learns from, for the card
    card_pipeline_tag: ClassVar[str] = "fill-mask"
    card_tags: ClassVar[tuple[str, ...]] = ("fill-mask",)  # after mlmtrain's and the model type's
    card_trained: ClassVar[str] = "with masked language modeling"  # "pretrained ... by mlmtrain" in the card
    card_usage: ClassVar[str] = FILL_MASK_USAGE  # the card's "How to load" code

    def __init__(self, cfg: Config, vocab: VocabInfo, bases: Optional[Mapping[str, Base]] = None) -> None:
        self.cfg, self.vocab = cfg, vocab
        self.bases = dict(bases or {})  # the models the config names, read once (by config key), where resolved
        # training FLOPs per input token of the trained module(s): train.max_flops counts them
        self.flops_per_token = round(self.training_flops_per_token())

    def base(self, key: str) -> Base:
        """The model config key `key` names (model.init_from, distill.teacher), read once."""
        if key not in self.bases:
            self.bases[key] = read_base(getattr(getattr(self.cfg, key.split(".")[0]), key.split(".")[1]), key)
        return self.bases[key]

    # --- its config, and the models it names

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """UserError for a config this objective cannot train, beyond each section's own rules. Nothing for most."""

    @classmethod
    def resolve_models(cls, cfg: Config, check_weights: bool = True) -> dict[str, Base]:
        """Fill `cfg` from the models its own section names, refusing what conflicts (before anything is written),
        and return them by config key, read; `check_weights` false reads their config.json only. Nothing for most
        objectives."""
        return {}

    # --- what it builds, and a checkpoint of it

    def build(self) -> Any:
        """A freshly initialised model of the objective: what the optimizer steps and checkpoints save (seed torch
        first for reproducible weights)."""
        raise NotImplementedError

    def load(self, saved: ModelFolder, family: Family) -> Any:
        """The model a checkpoint folder holds (for resume; `saved`: read once), loaded as its `family` loads, with the
        config's dropout."""
        raise NotImplementedError

    def planned_models(self, decided: dict[str, str]) -> dict[str, tuple[Any, dict[str, str]]]:
        """The transformers config of each model `build` makes, by `model_folders` entry, each with the settings
        that decide its keys (`decided`: the model section's), to name them in a resume's error."""
        raise NotImplementedError

    def facts(self) -> dict[str, Any]:
        """What a checkpoint records of how it was trained beyond its config (its checkpoint.json), which a resume
        holds the run to (`check_start`); nothing for most objectives."""
        return {}

    def check_start(self, start: SavedCheckpoint, branched: bool) -> Optional[str]:
        """UserError for a checkpoint (`start`) this run cannot continue for what its facts say; for a branch, a
        note instead where a new run may differ. None when all is well."""
        return None

    def training_state(self, trained: Any) -> dict[str, Any]:
        """What it trains beside the saved model(s), for the checkpoint's training state (tensors and plain values)."""
        return {}

    def restore_training_state(self, trained: Any, saved: dict[str, Any]) -> None:
        """Put back into `trained` (loaded by `load`) what `training_state` kept in a checkpoint's training state."""

    # --- what a step reads and optimises

    def step_module(self, trained: Any) -> torch.nn.Module:
        """The module a step calls (and DDP / torch.compile wrap): forward(input_ids, labels, ...) -> loss sums."""
        raise NotImplementedError

    def collator(self) -> MaskingCollator:
        """The masking collator of the training blocks (seeded by train.seed; masking.schedule over max_steps)."""
        cfg = self.cfg
        return MaskingCollator(self.vocab, cfg.masking, seed=cfg.train.seed, total_steps=cfg.train.max_steps)

    def training_blocks(self, store: TokenStore, tokenizer: Any) -> tuple[Any, Any]:
        """(the blocks of the token store's training split, their collator)."""
        return self.validation_blocks(store, tokenizer, packing=self.cfg.data.packing), self.collator()

    def validation_blocks(self, store: TokenStore, tokenizer: Any, packing: bool = True) -> Any:
        """The blocks of a token-store split that evaluation reads (packed, whatever the run trains on)."""
        return StoreBlocks(store, self.cfg.data.seq_len, packing, tokenizer.cls_token_id, tokenizer.sep_token_id)

    @property
    def weights(self) -> tuple[float, ...]:
        """Each loss term's weight in `loss`."""
        return (1.0,)

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        """Each term's denominator in a micro-batch (the selected positions, for a masked LM)."""
        return [float((batch["labels"] != IGNORE_INDEX).sum())]

    def loss(self, sums: torch.Tensor, counts: Sequence[float]) -> torch.Tensor:
        """sum over terms of weight x (term sum / term count): the step's mean loss (a count of 0 counts as 1)."""
        sums, weights = sums.reshape(-1), self.weights
        total = sums[0] * weights[0] / max(counts[0], 1.0)
        for index in range(1, len(weights)):
            total = total + sums[index] * weights[index] / max(counts[index], 1.0)
        return total

    def loss_terms(self, sums: torch.Tensor, counts: Sequence[float]) -> dict[str, float]:
        """Each term's unweighted mean, for the metrics (nothing for a single-term objective)."""
        if len(self.term_names) < 2:
            return {}
        values = sums.reshape(-1).tolist()
        return {name: values[i] / max(counts[i], 1.0) for i, name in enumerate(self.term_names)}

    def training_flops_per_token(self) -> float:
        """Training FLOPs per input token of what it trains (`model.bert.flops_per_token`'s count: 6 x the
        multiply-accumulates of the matrix products)."""
        raise NotImplementedError

    # --- what it evaluates and says

    def evaluate(
        self, trained: Any, blocks: Blocks, indices: Sequence[int], on: Evaluation
    ) -> tuple[dict[str, Any], str]:
        """Training-time evaluation of blocks `indices` with fixed masks (`fixed_masks`) and seeds: the metrics to
        log, `eval_loss` among them, and a one-line summary."""
        raise NotImplementedError

    def fixed_masks(self) -> tuple[MaskingConfig, int]:
        """(masking, seed) of every evaluation: the classic 15 % masks, whatever masking the run trains with."""
        return evaluation_masking(self.cfg.masking), self.cfg.masking.eval_seed

    def start_note(self) -> Optional[str]:
        """A note for the start line about a setting that works against this objective; None when all is well."""
        return None
