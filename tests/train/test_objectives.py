"""The objectives' registry: the registry's keys and each class agree, each class says the same of a checkpoint's
model folders in each of the places that read them, and a name no objective has is refused with the registry's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlmtrain import UserError, pretrain, write_report
from mlmtrain.config import load_config
from mlmtrain.data.masking import VocabInfo
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.report.curves import Curve
from mlmtrain.train.objectives import REGISTRY, check_config, objective_of
from mlmtrain.train.objectives.mlm import MaskedLanguageModel

from ..helpers import metrics
from .test_distill import write_teacher


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_teacher(tmp_path_factory.mktemp("teacher") / "teacher")


def test_the_registry_and_each_class_name_the_same_objectives(tiny_config, teacher: Path) -> None:
    vocab = VocabInfo.from_tokenizer(load_tokenizer(tiny_config().tokenizer_dir))
    for name, kind in REGISTRY.items():
        assert kind.name == name
        needs = {"distill.teacher": str(teacher)} if name == "distill" else {}  # the one objective with a setting
        cfg = tiny_config(**{"train.objective": name, **needs})
        objective = objective_of(cfg, vocab)
        planned = objective.planned_models({})
        assert tuple(planned) == kind.model_folders  # what a resume reads is what a fresh run builds
        assert [config.model_type for config, _ in planned.values()][0] == kind.model_type
        assert objective.flops_per_token > 0 and len(objective.weights) == len(kind.term_names)


def test_a_train_objective_no_objective_has_is_refused_with_the_registry() -> None:
    with pytest.raises(
        UserError, match=r"train.objective must be one of mlm, electra, .* \(got 'electa'\); did you mean electra"
    ):
        check_config(load_config(None, {"train.objective": "electa"}))


# ---------------------------------------------------------------------------------------------
# A new objective is one module and one registry line


class _BothTerms(torch.nn.Module):
    """The masked LM's loss sum as two terms: itself, and again (weighted 0)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        total = self.inner(*args, **kwargs).reshape(-1)[0]
        return torch.stack((total, total.detach() * 2))


class Twice(MaskedLanguageModel):
    """An objective the package has never seen, defined here alone: MLM, with a second loss term logged beside it."""

    name = "mlm-twice"
    summary = "MLM with its loss logged twice"
    term_names = ("mlm_loss", "twice_loss")
    curves = (Curve("twice-accuracy", "Accuracy, twice over", ("eval_acc",), "accuracy"),)

    def step_module(self, trained: object) -> torch.nn.Module:
        return _BothTerms(super().step_module(trained))

    @property
    def weights(self) -> tuple[float, ...]:
        return (1.0, 0.0)

    def counts(self, batch: dict) -> list[float]:
        return super().counts(batch) * 2


def test_an_objective_defined_outside_the_package_trains_resumes_and_is_drawn(
    tiny_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One class and one registry line: the config takes its name, a run trains and resumes with it, its terms are
    logged, and the report draws them (with every *_loss) and the curve it declares, each figure naming its keys."""
    monkeypatch.setitem(REGISTRY, Twice.name, Twice)
    options = {"train.objective": Twice.name, "train.max_steps": 2, "train.eval_every": 2, "report.html": False}
    pretrain(tiny_config(**options))
    resumed = pretrain(tiny_config(**{**options, "train.max_steps": 3}), resume="auto")
    assert resumed.name == "step-3"
    lines = [line for line in metrics(tmp_path / "run") if "loss" in line]
    assert all(line["mlm_loss"] * 2 == pytest.approx(line["twice_loss"]) for line in lines) and len(lines) == 3
    page = Path(write_report([tmp_path / "run"])).read_text(encoding="utf-8")
    assert "<figcaption>Training loss terms: mlm_loss, twice_loss</figcaption>" in page
    assert "<figcaption>Accuracy, twice over: eval_acc</figcaption>" in page
