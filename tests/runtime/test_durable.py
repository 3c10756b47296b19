"""What must reach the disk before a folder counts as complete: every token-store shard, the files of a checkpoint,
its completion marker, and the folder that a finished store or checkpoint was renamed into."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import mlmtrain.data.store
from mlmtrain.config import load_config
from mlmtrain.data.store import tokenize_corpus
from mlmtrain.train.loop import pretrain

from ..helpers import store_files, tiny_overrides, write_corpus


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path behind every os.fsync call, in order (the real fsync still runs)."""
    paths: list[str] = []
    real = os.fsync

    def record(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", record)
    return paths


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name what was flushed")
def test_every_store_shard_and_the_marker_are_flushed(tmp_path: Path, synced: list[str], monkeypatch) -> None:
    monkeypatch.setattr(mlmtrain.data.store, "SHARD_TOKENS", 500)  # several shards from a tiny corpus
    write_corpus(tmp_path / "train.txt", 300, seed=4)
    write_corpus(tmp_path / "valid.txt", 40, seed=5)
    cfg = load_config(None, tiny_overrides(tmp_path, **{"train.run_dir": str(tmp_path / "run")}))
    store = tokenize_corpus(cfg, quiet=True)
    shards = sorted(p.name for p in store.glob("*.bin"))
    train_shard, train_index = store_files(store)
    assert len([s for s in shards if s.startswith(train_shard.name[:-9])]) > 1
    flushed_names = {Path(p).name for p in synced}
    for name in [*shards, "meta.json", train_index.name, store_files(store, "validation")[1].name, "COMPLETE"]:
        assert name in flushed_names, name
    # the marker is flushed after the files, and the folder holding the renamed store after the marker
    marker = max(i for i, p in enumerate(synced) if p.endswith("/COMPLETE"))
    assert any(p.endswith("meta.json") for p in synced[:marker])
    assert str(store.parent.resolve()) in synced[marker + 1 :]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name what was flushed")
def test_a_checkpoint_is_flushed_before_and_after_it_is_marked(tiny_config, synced: list[str]) -> None:
    cfg = tiny_config(**{"train.max_steps": 2, "train.eval_every": 0, "checkpoint.save_every": 0})
    final = pretrain(cfg)
    marker = max(i for i, p in enumerate(synced) if p.endswith("/COMPLETE"))
    before = {Path(p).name for p in synced[:marker]}
    assert {"model.safetensors", "training_state.pt", "config.json", "tokenizer.json"} <= before
    assert str(final.parent.resolve()) in synced[marker + 1 :]  # checkpoints/ after the rename into step-N
