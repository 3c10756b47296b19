"""`distill`: a student masked LM taught by a teacher masked LM (`distill.teacher`): the KL to the teacher's
distribution on the selected positions at a temperature, the ordinary MLM loss and, when asked, a cosine between the
last hidden states (`model/distill.py`). The student is a BERT of the model section's shape, or the teacher's
family with a share of its layers (`distill.init`); its checkpoint is an ordinary masked LM, no teacher inside."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch

from mlmtrain.config import Config, ModelConfig
from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.errors import UserError
from mlmtrain.model.bert import build_model, flops_per_token
from mlmtrain.model.distill import Distillation, DistilledStudent, projection_for, projects
from mlmtrain.model.families import Family, keep_layers, kept_layers_config, shape_of
from mlmtrain.runtime.model_folder import ModelFolder, transformers_config, weights_fingerprint
from mlmtrain.train.base_model import Base, check_base, read_base, take_shape, take_tokenizer
from mlmtrain.train.objectives.base import Blocks, Evaluation
from mlmtrain.train.objectives.mlm import MaskedLanguageModel
from mlmtrain.train.precision import resolve_precision

KEY = "distill.teacher"
PROJECTION = "distill_projection"  # the training state's entry of the hidden-state projection
TEACHER_WEIGHTS = "distill_teacher_weights"  # a checkpoint's record of its teacher's weights (checkpoint.json)


def resolve_teacher(cfg: Config, check_weights: bool = True) -> Base:
    """The teacher, read once; its tokenizer as the run's; with distill.init teacher-layers its widths and positions
    as the model's, and half its layers unless model.num_layers says how many; UserError for what conflicts."""
    name = cfg.distill.teacher
    teacher = check_base(name, KEY) if check_weights else read_base(name, KEY)
    take_tokenizer(cfg.tokenizer, teacher)
    positions = teacher.positions()
    if cfg.data.seq_len > positions:
        raise UserError(
            "config",
            f"data.seq_len ({cfg.data.seq_len}) is beyond the {positions} positions of {KEY} {name}; set "
            f"data.seq_len to {positions} or less",
        )
    if cfg.distill.init == "teacher-layers":
        layers = teacher.config[teacher.family.shape["num_layers"]]
        wanted = cfg.model.num_layers if cfg.set_by_user("model.num_layers") else max(1, layers // 2)
        take_shape(cfg, teacher, " or set distill.init: scratch", skip=("num_layers",))
        if wanted > layers:
            raise UserError(
                "config",
                f"model.num_layers ({wanted}) is more than the {layers} layers of {KEY} {name}, and distill.init "
                f"teacher-layers copies the student's layers from them; set model.num_layers to {layers} or less",
            )
        cfg.model.num_layers = wanted
    cfg.validate()
    return teacher


def kept_layers(student_layers: int, teacher_layers: int) -> list[int]:
    """The teacher's layers a student of `student_layers` starts from, evenly spaced from the first: every other one
    for half as many (DistilBERT's choice)."""
    return [index * teacher_layers // student_layers for index in range(student_layers)]


class Distill(MaskedLanguageModel):
    name = "distill"
    summary = "MLM taught by a bigger masked LM (settings in the distill section)"
    architectures = ("bert",)
    builds = "a student from scratch is a BERT, one from the teacher's layers the teacher's family"
    term_names = ("mlm_loss", "distill_loss", "hidden_loss")
    continues_a_model = False
    within_documents = False  # its step module encodes the student and the teacher across the whole block
    saves_any_family = True  # with distill.init teacher-layers the student is of the teacher's family
    card_trained = "with knowledge distillation from a teacher masked LM"
    card_teacher_key = KEY

    @property
    def teacher(self) -> Base:
        return self.base(KEY)

    @property
    def teacher_config(self) -> dict[str, Any]:
        return self.teacher.config

    @classmethod
    def check_config(cls, cfg: Config) -> None:
        """A teacher is named, and the student does not also continue a model."""
        if not cfg.distill.teacher:
            raise UserError(
                "config",
                "distill.teacher is not set, and train.objective distill needs a teacher; set distill.teacher to a "
                "masked LM's folder or hub name",
            )
        if cfg.tokenizer.kind != "wordpiece":
            raise UserError(
                "config",
                f"tokenizer.kind ({cfg.tokenizer.kind}) trains a tokenizer, and distill.teacher brings one; drop "
                "tokenizer.kind",
            )
        if cfg.model.init_from:
            raise UserError(
                "config",
                "model.init_from is set with train.objective distill; the student starts from scratch or from the "
                "teacher's layers (distill.init: teacher-layers): drop model.init_from",
            )

    @classmethod
    def resolve_models(cls, cfg: Config, check_weights: bool = True) -> dict[str, Base]:
        return {KEY: resolve_teacher(cfg, check_weights)}

    def load_teacher(self) -> Any:
        """The teacher's masked LM, in float32 (as trained)."""
        return self.teacher.load(self.cfg)

    def teacher_shape(self) -> ModelConfig:
        """The teacher's shape as a model section."""
        shape = {key: value for key, value in shape_of(self.teacher_config).items() if key != "max_position_embeddings"}
        return dataclasses.replace(self.cfg.model, pad_vocab_multiple=1, **shape)

    def build(self) -> Any:
        cfg = self.cfg
        if cfg.distill.init == "teacher-layers":
            student = self.load_teacher()  # its dropout is the config's: the model section holds the teacher's
            keep_layers(student, kept_layers(cfg.model.num_layers, self.teacher_shape().num_layers))
        else:
            student = build_model(cfg.model, vocab_size=self.vocab.vocab_size, pad_id=self.vocab.pad_id)
        return self.with_projection(student)

    def with_projection(self, student: Any) -> DistilledStudent:
        teacher_width = self.teacher_shape().hidden_size
        return DistilledStudent(
            student, projection_for(self.cfg.model.hidden_size, teacher_width, self.cfg.distill.hidden_weight)
        )

    def load(self, saved: ModelFolder, family: Family) -> Any:
        return self.with_projection(super().load(saved, family))  # the projection from the training state

    def planned_models(self, decided: dict[str, str]) -> dict[str, tuple[Any, dict[str, str]]]:
        if self.cfg.distill.init != "teacher-layers":
            return super().planned_models(decided)
        # the teacher's model, of its family, with the student's layers
        teacher_layers = self.teacher_config[self.teacher.family.shape["num_layers"]]
        kept = kept_layers_config(self.teacher_config, kept_layers(self.cfg.model.num_layers, teacher_layers))
        return {"": (transformers_config({**self.teacher_config, **kept}), decided)}

    def step_module(self, trained: Any) -> torch.nn.Module:
        device = next(trained.parameters()).device
        teacher = self.load_teacher().to(device)
        if resolve_precision(self.cfg.train.precision, device).dtype == torch.bfloat16:
            teacher.to(torch.bfloat16)  # where the run computes in bf16, the teacher's forward pays in it too
        distill = self.cfg.distill
        return Distillation(trained, teacher, self.vocab.vocab_size, distill.temperature, distill.hidden_weight)

    @property
    def weights(self) -> tuple[float, ...]:
        distill = self.cfg.distill
        return (1.0 - distill.alpha, distill.alpha, distill.hidden_weight)

    def counts(self, batch: Mapping[str, torch.Tensor]) -> list[float]:
        selected = float((batch["labels"] != IGNORE_INDEX).sum())
        mask = batch.get("attention_mask")
        tokens = float(mask.sum()) if mask is not None else float(batch["input_ids"].numel())
        return [selected, selected, tokens]  # the hidden-state loss is a mean over every real token

    def loss_terms(self, sums: torch.Tensor, counts: Sequence[float]) -> dict[str, float]:
        terms = super().loss_terms(sums, counts)
        if self.cfg.distill.hidden_weight <= 0:
            del terms["hidden_loss"]  # not computed
        return terms

    def training_flops_per_token(self) -> float:
        """The student's training (its head on the selected rows), the teacher's forward (a third of what training
        it would cost) and the projection's training, when there is one."""
        cfg, rate, seq_len = self.cfg, self.cfg.masking.mlm_probability, self.cfg.data.seq_len
        student = flops_per_token(cfg.model, self.vocab.vocab_size, seq_len, rate, True)
        teacher = flops_per_token(self.teacher_shape(), self.teacher_config["vocab_size"], seq_len, rate, True) / 3
        teacher_width = self.teacher_shape().hidden_size
        projected = projects(cfg.model.hidden_size, teacher_width, cfg.distill.hidden_weight)
        return student + teacher + (6.0 * cfg.model.hidden_size * teacher_width if projected else 0.0)

    @functools.cached_property
    def teacher_weights(self) -> str:
        """The fingerprint of the teacher's weights: a checkpoint records what it learned from (a folder of the same
        name may later hold another model)."""
        return weights_fingerprint(self.teacher.folder)

    def facts(self) -> dict[str, Any]:
        return {TEACHER_WEIGHTS: self.teacher_weights}

    def check_start(self, start: Any, branched: bool) -> Optional[str]:
        """A resume learns from the teacher its checkpoint learned from: distill.teacher holding another model (the
        same folder, other weights) is refused, as a result of two teachers mixed; a branch is a new run, and a note
        says its teacher changed."""
        was = start.record.get(TEACHER_WEIGHTS)
        if was is None or was == self.teacher_weights:
            return None
        teacher = self.cfg.distill.teacher
        if branched:
            return f"note: distill.teacher {teacher} holds other weights than the teacher {start.folder} learned from"
        raise UserError(
            "checkpoint",
            f"distill.teacher {teacher} holds other weights than the teacher {start.folder} learned from ({was[:19]}, "
            f"now {self.teacher_weights[:19]}), so a resume would mix two teachers; point distill.teacher at that "
            "teacher, or go on with this one as a new run: --branch-from that checkpoint --set train.run_dir=NEW",
        )

    def training_state(self, trained: Any) -> dict[str, Any]:
        return {PROJECTION: trained.projection_state()}

    def restore_training_state(self, trained: Any, saved: dict[str, Any]) -> None:
        if trained.projection is not None:
            kept = saved.get(PROJECTION) or {}
            if set(kept) != set(trained.projection.state_dict()):
                raise UserError(
                    "checkpoint",
                    "its training state holds no projection of the hidden-state loss, which this run trains "
                    "(distill.hidden_weight > 0 between other widths); resume with the config of that run",
                )
            trained.projection.load_state_dict(kept)

    def evaluate(
        self, trained: Any, blocks: Blocks, indices: Sequence[int], on: Evaluation
    ) -> tuple[dict[str, Any], str]:
        return super().evaluate(trained.student, blocks, indices, on)  # the student's own masked-LM figures
