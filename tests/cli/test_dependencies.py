"""The declared dependencies are true: every package the code imports is declared (dependencies or an extra),
CI's old-pins job installs exactly the declared lower bounds, and CI runs the test command README gives."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
DISTRIBUTION = {  # import -> pip
    "yaml": "pyyaml",
    "huggingface_hub": "huggingface-hub",
    "mlflow": "mlflow-skinny",
    "snappy": "python-snappy",
}


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def imported_packages(folder: Path) -> set[str]:
    """Top-level names of the third-party modules imported anywhere under `folder` (lazy imports included)."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    local = {"mlmtrain", *(path.stem for path in folder.iterdir())}  # the folder's own modules and packages
    return {name for name in names if name not in sys.stdlib_module_names and name not in local}


def test_every_package_the_package_imports_is_declared() -> None:
    required = requirement_names(PYPROJECT["dependencies"])
    optional = set().union(*(requirement_names(r) for r in PYPROJECT["optional-dependencies"].values()))
    imported = {DISTRIBUTION.get(name, name) for name in imported_packages(REPO / "src" / "mlmtrain")}
    assert imported - required - optional == set()
    scripts = {DISTRIBUTION.get(name, name) for name in imported_packages(REPO / "scripts")}
    assert scripts - required - optional == set()


def test_the_old_pins_job_installs_exactly_the_declared_lower_bounds() -> None:
    pins = {}
    for line in (REPO / ".ci" / "oldest-pins.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = version
    lower = {}
    for requirement in PYPROJECT["dependencies"]:
        name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement).groups()
        lower[name.lower()] = version
    assert lower.pop("torch")  # CI installs torch==2.13.0, its local CPU build; the bound comes from the code
    assert {name: re.sub(r"(\.0)+$", "", version) for name, version in pins.items()} == {
        name: re.sub(r"(\.0)+$", "", version) for name, version in lower.items()
    }


def test_ci_runs_the_test_command_readme_gives() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    tests_section = readme.split("## Tests", 1)[1].split("\n## ", 1)[0]
    command = re.search(r"```bash\n(.+?)\n```", tests_section, re.S).group(1).strip()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert command.replace("pip install ", "pip install -q ", 1) in ci
    assert "python -m pytest -q -m oldpins" in ci and "set -euo pipefail" in ci
