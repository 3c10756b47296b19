"""The package's layout is its architecture: each sub-package imports only those below it (README's code map)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

import mlmtrain

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mlmtrain"
# README's "Where the code lives", bottom-up: a module imports its own sub-package and the levels below its own;
# only the base modules of level 0 import one another, and modules side by side on a level never do
LEVELS = {
    "errors": 0,
    "readers": 0,
    "probe_settings": 0,
    "config": 0,
    "runtime": 1,
    "data": 2,
    "model": 3,
    "evaluate": 4,
    "report": 4,
    "train": 5,
    "tools": 6,
    "cli": 7,  # parses arguments and prints
    "api": 7,  # the top of the library: it may import everything below cli/, and nothing below imports it
    "__init__": 8,  # the package: names the API lazily
    "__main__": 8,
}
BASE = "errors"  # what `from mlmtrain import NAME` reaches when NAME is a constant of the package itself


def _submodules() -> set[str]:
    return {path.stem for path in PACKAGE.glob("*.py")} | {
        path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()
    }


def _named_from_package(name: str) -> str:
    """The level name that `from mlmtrain import NAME` imports: a sub-package or module, the module a lazily
    resolved name comes from (the API's functions: api), else the package's own constants (`__version__`)."""
    if name in _submodules():
        return name
    module = getattr(getattr(mlmtrain, name, None), "__module__", None) or ""
    return module.split(".")[1] if module.startswith("mlmtrain.") else BASE


def imported(source: str, path: Path) -> list[tuple[str, str]]:
    """(what the source names, the level name it reaches) for each import of mlmtrain in the module source of
    `path` (relative to the package): `import mlmtrain.x`, `from mlmtrain.x import y`, `from mlmtrain import x`
    and relative imports."""
    package = ["mlmtrain", *path.parent.parts]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mlmtrain" and len(parts) > 1:
                    found.append((alias.name, parts[1]))
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            parts = module.split(".")
            if parts[0] != "mlmtrain":
                continue
            if len(parts) > 1:
                found.append((module, parts[1]))
            else:
                found += [(f"mlmtrain.{alias.name}", _named_from_package(alias.name)) for alias in node.names]
    return found


def upward_imports_of(source: str, path: Path) -> list[str]:
    """Each import in `source` (the module at `path`, relative to the package) that the layout forbids."""
    importer = path.with_suffix("").parts[0]
    found = []
    for name, target in imported(source, path):
        same_room = target == importer or LEVELS[target] == LEVELS[importer] == 0
        if not same_room and LEVELS[target] >= LEVELS[importer]:
            found.append(f"{path} imports {name}")
    return found


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        found += upward_imports_of(path.read_text(encoding="utf-8"), relative)
    return found


def test_no_sub_package_imports_one_above_it() -> None:
    assert upward_imports() == []


def test_every_sub_package_has_a_level() -> None:
    assert _submodules() == set(LEVELS)


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("evaluate/x.py", "from mlmtrain.train.loop import pretrain"),
        ("evaluate/x.py", "import mlmtrain.train.loop"),
        ("evaluate/x.py", "import mlmtrain.train.loop as loop"),
        ("evaluate/x.py", "from mlmtrain.train import loop"),
        ("evaluate/x.py", "from mlmtrain import train"),
        ("evaluate/x.py", "from ..train import loop"),
        ("evaluate/x.py", "from ..report.page import write_report"),  # side by side: neither imports the other
        ("tools/x.py", "from mlmtrain import evaluate_perplexity"),  # the API's function, named lazily
        ("tools/x.py", "def later():\n    from mlmtrain import api"),  # inside a function too
        ("api.py", "from mlmtrain.cli.commands import run_eval_command"),
        ("api.py", "from mlmtrain import cli"),
        ("cli/x.py", "import mlmtrain.api"),
        ("config.py", "from mlmtrain.runtime import files"),
    ],
)
def test_each_form_of_an_upward_import_is_caught(path: str, source: str) -> None:
    assert len(upward_imports_of(source, Path(path))) == 1


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("train/x.py", "from mlmtrain.evaluate.probe import LiveProbe\nimport mlmtrain.runtime.files"),
        ("train/x.py", "from . import checkpoint\nfrom .guard import locked"),
        ("config.py", "from mlmtrain.errors import UserError\nfrom mlmtrain import probe_settings"),
        ("cli/x.py", "from mlmtrain import __version__, UserError\nfrom mlmtrain.tools import masked_lm"),
        ("__init__.py", "from mlmtrain import api"),
        ("api.py", "import mlmtrain"),
    ],
)
def test_imports_downward_pass(path: str, source: str) -> None:
    assert upward_imports_of(source, Path(path)) == []


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
