"""The package's layout is its architecture: each sub-package imports only those below it (README's code map)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mlmtrain"
# README's "Where the code lives", bottom-up: a module may import its own level and the levels below it
LEVELS = {
    "errors": 0,
    "readers": 0,
    "config": 0,
    "runtime": 1,
    "data": 2,
    "model": 3,
    "evaluate": 4,
    "report": 4,
    "train": 5,
}
TOP = {"cli": 6, "api": 7, "__init__": 7, "__main__": 7}


def upward_imports() -> list[str]:
    levels = {**LEVELS, **TOP}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.relative_to(PACKAGE).with_suffix("").parts[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mlmtrain."):
                target = node.module.split(".")[1]
                if levels[target] > levels[source]:
                    found.append(f"{path.relative_to(PACKAGE)} imports {node.module}")
    return found


def test_no_sub_package_imports_one_above_it() -> None:
    assert upward_imports() == []


def test_every_sub_package_has_a_level() -> None:
    names = {path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    names |= {path.stem for path in PACKAGE.glob("*.py")}
    assert names == set(LEVELS) | set(TOP)


def _names_an_objective(node: ast.AST, objectives: set[str]) -> bool:
    """Whether `node` is an objective's name as a string, or a literal collection holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_objective(element, objectives) for element in node.elts)
    return isinstance(node, ast.Constant) and node.value in objectives


def objective_tests_outside_the_registry() -> list[str]:
    """Each place outside `train/objectives/` that tells objectives apart by name: a comparison with an objective's
    name (`objective == "mlm"`, `in ("mlm+nsp", "mlm+sop")`, `model_type == "electra"`), a comparison of
    train.objective with any string, or a constant collection of objective names (`PAIR_OBJECTIVES`)."""
    from mlmtrain.config import TrainConfig

    objectives = set(typing.get_args(typing.get_type_hints(TrainConfig)["objective"]))
    registry = PACKAGE / "train" / "objectives"
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(registry):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                by_name = any(_names_an_objective(operand, objectives) for operand in operands)
                of_objective = any("objective" in ast.unparse(operand) for operand in operands) and any(
                    isinstance(operand, ast.Constant) and isinstance(operand.value, str) for operand in operands
                )
                if by_name or of_objective:
                    found.append(f"{where}: {ast.unparse(node)}")
            elif isinstance(node, (ast.Name, ast.alias)) and "OBJECTIVES" in (getattr(node, "id", None) or node.name):
                found.append(f"{where}: {getattr(node, 'id', None) or node.name}")
    return found


def test_no_objective_is_told_apart_by_its_name_outside_the_registry() -> None:
    """An objective's behaviour is its class's (train/objectives/): a new objective is one module and one registry
    line, not a branch in each module that asks which objective runs."""
    assert objective_tests_outside_the_registry() == []
