"""Shared fixtures: a tiny tokenized corpus and a finished tiny run (each built once per session), tiny configs that
train in seconds, one torch thread and a ticking clock for time budgets. Shared functions live in helpers.py."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlmtrain.config import Config, load_config

from .helpers import FINISHED, mixture_config, one_thread, tiny_overrides, write_corpus


def tiny_files(root: Path) -> dict[str, tuple[int, int]]:
    """The tiny corpus, tokenizer and store under `root`, each file with its size and modification time."""
    found = {}
    paths = [root / "train.txt", root / "valid.txt", *(root / "tokenizer").rglob("*"), *(root / "tokens").rglob("*")]
    for path in paths:
        if path.is_file():
            found[str(path.relative_to(root))] = (path.stat().st_size, path.stat().st_mtime_ns)
    return found


TINY_AS_BUILT: dict[Path, dict[str, tuple[int, int]]] = {}


def build_tiny_data(root: Path) -> None:
    """train.txt / valid.txt, their tokenizer and token store in `root`, built afresh."""
    from mlmtrain.data.store import tokenize_corpus

    for folder in ("tokenizer", "tokens"):
        shutil.rmtree(root / folder, ignore_errors=True)
    write_corpus(root / "train.txt", 400, seed=1)
    write_corpus(root / "valid.txt", 60, seed=2)
    tokenize_corpus(load_config(None, tiny_overrides(root, **{"train.run_dir": str(root / "run")})), quiet=True)
    TINY_AS_BUILT[root] = tiny_files(root)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with train.txt / valid.txt, its tokenizer and token store (tokenized once per session)."""
    root = tmp_path_factory.mktemp("tiny-data")
    build_tiny_data(root)
    return root


@pytest.fixture(autouse=True)
def tiny_data_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test reads the session's tiny data and never rewrites it: trained_run and every later test train on it."""
    yield
    if "tiny_data" in request.fixturenames:
        root = request.getfixturevalue("tiny_data")
        if tiny_files(root) != TINY_AS_BUILT[root]:
            build_tiny_data(root)  # as it was, for the tests after this one
            pytest.fail(
                "this test rewrote the session's tiny tokenizer, store or corpus: give it its own tokenizer.path and "
                "data.store (or copy_corpus)"
            )


@pytest.fixture(scope="module")
def mixture_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """Two training sources of other sizes (a: 300 documents, b: 40), their tokenizer and store, built once per
    module: (the folder, the overrides that train on them, a weighing 3 and b 1)."""
    from mlmtrain.data.store import tokenize_corpus

    root = tmp_path_factory.mktemp("mixture")
    write_corpus(root / "a.txt", 300, seed=1)
    write_corpus(root / "b.txt", 40, seed=5)
    write_corpus(root / "valid.txt", 40, seed=2)
    overrides = {
        "data.train": f"[{{source: {root / 'a.txt'}, weight: 3}}, {{source: {root / 'b.txt'}, weight: 1}}]",
        "data.validation": str(root / "valid.txt"),
        "tokenizer.path": str(root / "tokenizer"),
        "data.store": str(root / "tokens"),
    }
    tokenize_corpus(mixture_config(root, **overrides), quiet=True)
    return root, overrides


@pytest.fixture
def tiny_config(tiny_data: Path, tmp_path: Path):
    """A factory: tiny_config(**overrides) -> Config training in its own run_dir on the shared tiny store."""

    def make(**extra: object) -> Config:
        extra.setdefault("train.run_dir", str(tmp_path / "run"))
        return load_config(None, tiny_overrides(tiny_data, **extra))

    return make


@pytest.fixture(scope="session")
def trained_run(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a finished FINISHED run on the tiny store, trained once per session: read it, never change
    it (a test that changes a run takes `finished_run`, its own copy)."""
    from mlmtrain.train.loop import pretrain

    run_dir = tmp_path_factory.mktemp("trained-once") / "run"
    pretrain(load_config(None, tiny_overrides(tiny_data, **{**FINISHED, "train.run_dir": str(run_dir)})))
    return run_dir


@pytest.fixture
def finished_run(trained_run: Path, tmp_path: Path) -> Path:
    """A copy of that run of the test's own, where tiny_config trains (links as links, the times its checkpoints
    recorded kept)."""
    return Path(shutil.copytree(trained_run, tmp_path / "run", symlinks=True))


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Every test's torch on one thread: on 2 shared cores a second thread mostly waits for the first, and a tiny
    model's step takes up to 10x longer with two (subprocesses get OMP_NUM_THREADS=1 from CHILD_ENV likewise)."""
    with one_thread():
        yield


@pytest.fixture
def ticking_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training loop reads a clock that advances 20 ms at each reading instead of with the wall: a time budget
    ends at the same step however loaded the machine is, in a fraction of the time it names."""
    from mlmtrain.train import loop

    now = [time.perf_counter()]  # from the real reading on: the loop's windows started on the real clock still agree

    def perf_counter() -> float:
        now[0] += 0.02
        return now[0]

    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=perf_counter))


@pytest.fixture
def copy_of(tmp_path: Path):
    def copy(folder: Path, name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(folder, target)
        return target

    return copy
