"""The package's layout is its architecture: each sub-package imports only those below it (README's code map)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mlmtrain"
# README's "Where the code lives", bottom-up: a module may import its own level and the levels below it
LEVELS = {
    "errors": 0,
    "readers": 0,
    "config": 0,
    "probe_settings": 0,
    "runtime": 1,
    "data": 2,
    "model": 3,
    "evaluate": 4,
    "report": 4,
    "train": 5,
    "tools": 6,
}
TOP = {"cli": 7, "api": 8, "__init__": 8, "__main__": 8}


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
