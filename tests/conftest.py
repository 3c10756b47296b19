"""Shared fixtures: a tiny tokenized corpus (built once per session) and tiny configs that train in seconds."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from mlmtrain.config import Config, load_config

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@contextmanager
def script_module(filename: str, module_name: str) -> Iterator[ModuleType]:
    """scripts/FILENAME as a module named `module_name` (scripts are not a package), registered in sys.modules while
    in use (dataclasses look their module up there) and removed after."""
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[module_name]


WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards quietly hex bold jackdaws near "
    "my big sphinx of quartz and five boxing wizards judge every jumping vexed zebra"
).split()


def write_corpus(path: Path, documents: int, seed: int = 0) -> Path:
    """A deterministic English-like corpus: `documents` lines of varying length."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(documents):
        length = rng.randint(5, 60)
        lines.append(" ".join(rng.choice(WORDS) for _ in range(length)).capitalize() + ".")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_overrides(root: Path, **extra: object) -> list[str]:
    """--set options for a model that trains a step in milliseconds."""
    values = {
        "data.train": str(root / "train.txt"),
        "data.validation": str(root / "valid.txt"),
        "data.seq_len": 32,
        "data.num_workers": 0,
        "tokenizer.vocab_size": 200,
        "tokenizer.path": str(root / "tokenizer"),
        "data.store": str(root / "tokens"),
        "model.hidden_size": 32,
        "model.num_layers": 2,
        "model.num_heads": 2,
        "model.intermediate_size": 64,
        "model.max_position_embeddings": 64,
        "optim.warmup_steps": 2,
        "train.batch_size": 8,
        "train.max_steps": 10,
        "train.log_every": 1,
        "train.eval_every": 5,
        "train.eval_max_blocks": 8,
        "train.progress": False,
        "checkpoint.save_every": 5,
        "checkpoint.keep_last": 0,
        "report.html": False,  # the page costs a second or two per checkpoint; its own tests turn it on
    }
    values.update(extra)
    return [f"{k}={'null' if v is None else v}" for k, v in values.items()]


def copy_corpus(tiny_data: Path, tmp_path: Path) -> Path:
    """The tiny corpus (train.txt, valid.txt) in a folder of its own, with no tokenizer or store built yet."""
    import shutil

    root = tmp_path / "data"
    root.mkdir()
    for name in ("train.txt", "valid.txt"):
        shutil.copy(tiny_data / name, root / name)
    return root


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with train.txt / valid.txt, its tokenizer and token store (tokenized once per session)."""
    from mlmtrain.data.store import tokenize_corpus

    root = tmp_path_factory.mktemp("tiny-data")
    write_corpus(root / "train.txt", 400, seed=1)
    write_corpus(root / "valid.txt", 60, seed=2)
    tokenize_corpus(load_config(None, tiny_overrides(root, **{"train.run_dir": str(root / "run")})), quiet=True)
    return root


@pytest.fixture
def tiny_config(tiny_data: Path, tmp_path: Path):
    """A factory: tiny_config(**overrides) -> Config training in its own run_dir on the shared tiny store."""

    def make(**extra: object) -> Config:
        extra.setdefault("train.run_dir", str(tmp_path / "run"))
        return load_config(None, tiny_overrides(tiny_data, **extra))

    return make


@pytest.fixture
def copy_of(tmp_path: Path):
    def copy(folder: Path, name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(folder, target)
        return target

    return copy
