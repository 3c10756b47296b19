"""The objectives' registry: the config's choices, the registry's keys and each class agree, and each class says
the same of a checkpoint's model folders in each of the places that read them."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from mlmtrain.config import OBJECTIVE_RULES, TrainConfig
from mlmtrain.data.masking import VocabInfo
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.train.objectives import REGISTRY, objective_of

from .test_distill import write_teacher


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_teacher(tmp_path_factory.mktemp("teacher") / "teacher")


def test_the_config_the_registry_and_each_class_name_the_same_objectives(tiny_config, teacher: Path) -> None:
    choices = set(typing.get_args(typing.get_type_hints(TrainConfig)["objective"]))
    assert set(REGISTRY) == choices and set(OBJECTIVE_RULES) <= choices
    vocab = VocabInfo.from_tokenizer(load_tokenizer(tiny_config().tokenizer_dir))
    for name, kind in REGISTRY.items():
        assert kind.name == name
        needs = {"distill.teacher": str(teacher)} if name == "distill" else {}  # the one objective with a setting
        cfg = tiny_config(**{"train.objective": name, **needs})
        objective = objective_of(cfg, vocab)
        planned = objective.planned_models({})
        assert tuple(planned) == kind.model_folders  # what a resume reads is what a fresh run builds
        assert all(isinstance(config, kind.config_class(cfg)) for config, _ in planned.values())
        assert objective.flops_per_token > 0 and len(objective.weights) == len(kind.term_names)
