"""The package's layout is its architecture: each sub-package imports only those below it (README's code map)."""

from __future__ import annotations

import ast
import re
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


# ---------------------------------------------------------------------------------------------
# Import cycles, function-local imports included


def _module_name(path: Path) -> str:
    """mlmtrain.x.y of a module file under the package (a package's __init__ is the package itself)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(["mlmtrain", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _runs(node: ast.AST) -> bool:
    """Whether an import statement runs: one under `if TYPE_CHECKING:` never does."""
    return not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))


def _imports_that_run(tree: ast.AST) -> list[ast.stmt]:
    """Every import statement of a module that runs, at its top or inside a function."""
    found, pending = [], [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        pending += [child for child in ast.iter_child_nodes(node) if _runs(child)]
    return found


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """{module: the mlmtrain modules it imports, anywhere in it}, for {module name: source}; `from a import b`
    counts as importing a.b where that is a module, else a."""
    graph: dict[str, set[str]] = {name: set() for name in sources}

    def known(name: str) -> str:
        while name not in sources and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    for name, source in sources.items():
        package = name if f"{name}.__init__" in sources or any(n.startswith(name + ".") for n in sources) else None
        package = package or name.rsplit(".", 1)[0]
        for node in _imports_that_run(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in sources else base for alias in node.names
                ]
            graph[name] |= {known(t) for t in targets if t.startswith("mlmtrain.")} - {name, "mlmtrain"}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another in a circle (strongly connected, more than one module)."""
    order, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return cycles


def _package_sources() -> dict[str, str]:
    return {_module_name(path): path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_modules_import_one_another_in_a_circle() -> None:
    """A circle hidden by imports inside functions is still a circle: neither module can be read without the other."""
    assert import_cycles(import_graph(_package_sources())) == []


def test_a_circle_through_an_import_inside_a_function_is_found() -> None:
    sources = {
        "mlmtrain.train.a": "from mlmtrain.train import b\n",
        "mlmtrain.train.b": "def later():\n    from mlmtrain.train.a import x\n",
        "mlmtrain.train.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlmtrain.train.a import x\n",
    }
    assert import_cycles(import_graph(sources)) == [["mlmtrain.train.a", "mlmtrain.train.b"]]


# the modules whose functions import mlmtrain modules on first use: the command line and the API, which load torch
# only for the command that needs it (`mlmtrain --help` starts in a fraction of a second)
LAZY = ("mlmtrain", "mlmtrain.api", "mlmtrain.cli")


def function_local_imports(sources: dict[str, str]) -> list[str]:
    """Each import inside a function: of an mlmtrain module outside the command line and the API (they belong at the
    top of the module), and of anything without a comment on its line or the line before saying what it defers."""
    found = []
    for name, source in sources.items():
        lines = source.splitlines()
        for function in ast.walk(ast.parse(source)):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0:
                    continue
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
                ours = any(module.startswith("mlmtrain") or module.startswith(".") for module in modules)
                said = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                if (ours and not name.startswith(LAZY[1:]) and name != LAZY[0]) or not (ours or said):
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_an_import_inside_a_function_defers_a_heavy_dependency_and_says_which() -> None:
    assert function_local_imports(_package_sources()) == []


# ---------------------------------------------------------------------------------------------
# One model table: architectures and families are told apart by their tables alone

TABLES = (PACKAGE / "model" / "architectures.py", PACKAGE / "model" / "families.py")
FAMILY_NAMES = {"BERT", "ROBERTA", "DISTILBERT", "MODERNBERT", "DEBERTA"}  # the families' constants (families.py)
MODEL_WORDS = re.compile(r"\b(architecture|family|model_type)\b")  # what names an architecture or a family


def _names_a_model_kind(node: ast.AST) -> bool:
    """Whether `node` is a string or a family's constant, or a literal collection holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_model_kind(element) for element in node.elts)
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or (
        isinstance(node, ast.Name) and node.id in FAMILY_NAMES
    )


def model_tests_outside_the_tables(sources: dict[Path, str]) -> list[str]:
    """Each comparison outside the two tables of an architecture or a family with a name (`architecture == "bert"`,
    `family in (None, BERT)`, `model_type == "roberta"`): what differs between them belongs in their tables."""
    found = []
    for path, source in sources.items():
        if path in TABLES:
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            named = [ast.unparse(operand) for operand in operands if not isinstance(operand, ast.Constant)]
            of_a_model = any(MODEL_WORDS.search(text) for text in named)
            if of_a_model and any(_names_a_model_kind(operand) for operand in operands):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_architecture_or_family_is_told_apart_by_its_name_outside_the_tables() -> None:
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}
    assert model_tests_outside_the_tables(sources) == []


@pytest.mark.parametrize(
    "source",
    ['cfg.model.architecture == "bert"', "family not in (None, BERT)", 'saved.get("model_type") != "electra"'],
)
def test_each_form_of_a_model_test_is_caught(source: str) -> None:
    assert len(model_tests_outside_the_tables({PACKAGE / "train" / "x.py": source})) == 1
