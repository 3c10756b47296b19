"""Distillation: the student being trained with the projection onto the teacher's width (`DistilledStudent`, what
the optimizer steps and checkpoints save: the student alone), and `Distillation`, the module a step calls: the
student's masked-LM loss, the KL to the teacher's distribution on the selected positions and the cosine between the
last hidden states, as sums."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from mlmtrain.data.masking import IGNORE_INDEX
from mlmtrain.model.bert import MaskedLM, head_autocast
from mlmtrain.model.families import encode, model_family


class DistilledStudent(torch.nn.Module):
    """The student masked LM and, for the hidden-state loss between other widths, a learned projection from the
    student's width to the teacher's. `save_pretrained` writes the student alone: an ordinary masked LM of its
    family; the projection travels in the training state (`projection_state`)."""

    def __init__(self, student: Any, projection: Optional[torch.nn.Linear] = None) -> None:
        super().__init__()
        self.student, self.projection = student, projection

    @property
    def config(self) -> Any:
        return self.student.config

    @property
    def base_model(self) -> Any:
        """The student's encoder: what a downstream probe fine-tunes."""
        return self.student.base_model

    def save_pretrained(self, folder: Union[str, Path], **kwargs: Any) -> None:
        self.student.save_pretrained(str(folder), **kwargs)

    def projection_state(self) -> dict[str, torch.Tensor]:
        """The projection's weights (none: {}), for the training state."""
        if self.projection is None:
            return {}
        return {name: value.detach().cpu() for name, value in self.projection.state_dict().items()}


def projects(student_width: int, teacher_width: int, hidden_weight: float) -> bool:
    """Whether the hidden-state loss needs a projection: it is on, and the widths differ."""
    return hidden_weight > 0 and student_width != teacher_width


def projection_for(student_width: int, teacher_width: int, hidden_weight: float) -> Optional[torch.nn.Linear]:
    """The projection the hidden-state loss needs, or None (`projects`; seed torch first)."""
    if not projects(student_width, teacher_width, hidden_weight):
        return None
    return torch.nn.Linear(student_width, teacher_width)


class Distillation(MaskedLM):
    """The student's masked LM (as `MaskedLM`: its sparse head's rows) taught by `teacher`, which runs without
    gradients in eval mode and is no submodule: no optimizer, DDP or state dict sees it.

    `forward` returns three float32 sums: the cross-entropy over the selected positions; the KL from the teacher's to
    the student's distribution at `temperature` over the same positions, times temperature^2 (so its gradients keep
    their scale as the temperature changes, as Hinton et al. and DistilBERT scale it); and 1 - cosine between the
    (projected) student's and the teacher's last hidden states over every real token (0 when `hidden_weight` is 0).
    """

    def __init__(
        self, trained: DistilledStudent, teacher: Any, vocab_size: int, temperature: float, hidden_weight: float
    ) -> None:
        super().__init__(trained.student, sparse_head=True)  # the KL needs the logits of the selected rows only
        self.projection = trained.projection
        object.__setattr__(self, "teacher", teacher.eval().requires_grad_(False))  # unregistered: not trained
        self.teacher_family = model_family(teacher)
        self.vocab_size, self.temperature, self.hidden_weight = vocab_size, temperature, hidden_weight

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        selected_positions: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        hidden = encode(self.mlm, input_ids, attention_mask)
        with torch.no_grad():
            teacher_hidden = encode(self.teacher, input_ids, attention_mask)
        rows, targets = self.head_rows(labels, selected_positions)
        logits = self.rows_logits(self.mlm, self.family, hidden, rows)
        with torch.no_grad():
            teacher_logits = self.rows_logits(self.teacher, self.teacher_family, teacher_hidden, rows)
        counted = (targets != IGNORE_INDEX).float()  # static rows pad with -100: those add nothing
        cross_entropy = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
        return torch.stack(
            (
                cross_entropy,
                (self.divergence(logits, teacher_logits) * counted).sum(),
                self.hidden_loss(hidden, teacher_hidden, attention_mask),
            )
        )

    def rows_logits(self, mlm: Any, family: Any, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """float32 logits of the head of `mlm` (of `family`) on `rows` of the flattened hidden states."""
        transform, weight, bias = family.head(mlm)
        with head_autocast(hidden.device, self.head_dtype):
            return F.linear(transform(hidden.flatten(0, 1).index_select(0, rows)), weight, bias).float()

    def divergence(self, logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        """KL(teacher || student) per row at the temperature, times its square, over the tokenizer's real ids (both
        models may pad their rows past them)."""
        columns = min(self.vocab_size, logits.shape[-1], teacher_logits.shape[-1])
        temperature = self.temperature
        student = F.log_softmax(logits[:, :columns] / temperature, dim=-1)
        teacher = F.log_softmax(teacher_logits[:, :columns] / temperature, dim=-1)
        return F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1) * temperature**2

    def hidden_loss(
        self, hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: Optional[torch.Tensor]
    ) -> torch.Tensor:
        """The sum of 1 - cosine over real tokens between the (projected) student's and the teacher's last hidden
        states; an exact 0 on the graph when the loss is off."""
        if self.hidden_weight <= 0:
            return hidden.sum() * 0.0
        student = self.projection(hidden) if self.projection is not None else hidden
        distance = 1.0 - F.cosine_similarity(student.float(), teacher_hidden.float(), dim=-1)
        return (distance * attention_mask).sum() if attention_mask is not None else distance.sum()
