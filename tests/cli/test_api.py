"""The Python API: `import mlmtrain` stays light, the names resolve lazily, dict overrides are validated like --set,
and every example in docs/python-api.md runs as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mlmtrain
from mlmtrain import UserError, load_config

REPO = Path(__file__).resolve().parents[2]


def test_import_loads_no_torch() -> None:
    code = "import sys, mlmtrain; mlmtrain.load_config; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_every_api_name_resolves_and_is_listed() -> None:
    for name in mlmtrain.__all__:
        assert getattr(mlmtrain, name) is not None
        assert name in dir(mlmtrain)
    with pytest.raises(AttributeError):
        mlmtrain.no_such_function  # noqa: B018


def test_api_names_are_the_functions_after_every_module_is_imported() -> None:
    """A submodule of the same name would replace the function on the package once imported."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(mlmtrain.__path__):
        if module.name != "__main__":
            importlib.import_module(f"mlmtrain.{module.name}")
    for name in ("load_config", "tokenize", "pretrain", "evaluate_perplexity", "fill_mask", "probe", "write_report"):
        assert callable(getattr(mlmtrain, name)), name


def test_dict_overrides_take_python_values_and_are_validated() -> None:
    cfg = load_config(None, {"optim.lr": 3e-4, "train.max_steps": 7, "data.train": ["a.txt", "b.txt"]})
    assert (cfg.optim.lr, cfg.train.max_steps, cfg.data.train) == (3e-4, 7, ["a.txt", "b.txt"])
    with pytest.raises(UserError, match="optim.lr must be"):
        load_config(None, {"optim.lr": "fast"})
    with pytest.raises(UserError, match="unknown key 'optim.learning_rate'"):
        load_config(None, {"optim.learning_rate": 1e-3})
    with pytest.raises(UserError, match="section.key"):
        load_config(None, {"lr": 1e-3})


def test_probe_refuses_an_unknown_setting() -> None:
    with pytest.raises(UserError, match="no setting 'learning_rate'"):
        mlmtrain.probe("some-model", "some-task/", learning_rate=1e-3)


def _task(folder: Path) -> None:
    """A two-class task whose label is which half of the alphabet the words come from."""
    import random

    rng = random.Random(0)
    words = {
        0: "apple banana cherry dog egg fig grape".split(),
        1: "tiger umbrella violin whale xray yak zebra".split(),
    }
    folder.mkdir()
    for split, count in (("train", 60), ("valid", 20), ("test", 20)):
        rows = []
        for index in range(count):
            label = index % 2
            rows.append(json.dumps({"text": " ".join(rng.choices(words[label], k=8)), "label": label}))
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.slow
def test_the_docs_examples_run(tmp_path: Path) -> None:
    """The blocks of docs/python-api.md, in order and in one namespace, from a folder holding the files they name."""
    blocks = _python_blocks(REPO / "docs" / "python-api.md")
    assert len(blocks) == 3
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    _task(tmp_path / "my-task")
    script = tmp_path / "examples.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("perplexity ") and "masked tokens" in lines[0]
    assert len([line for line in lines if re.fullmatch(r"\d\.\d{3} \S+", line)]) == 3  # fill_mask's top 3
    assert re.fullmatch(r"[\d.]+ against [\d.]+ untrained", lines[4])
    assert (tmp_path / "runs" / "notebook" / "checkpoints" / "latest" / "config.json").is_file()
    assert all((tmp_path / "runs" / f"lr-{lr}" / "metrics.jsonl").is_file() for lr in (1e-3, 3e-3))
