"""Training on a data mixture and with a batch warm-up, end to end: each source's tokens in the metrics against the
targets in run.json, a pause and resume identical to a run never stopped, two torchrun processes with loader
workers identical to one process, a source added later encoded alone, and the bad inputs refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlmtrain.config import load_config
from mlmtrain.data.store import tokenize_corpus
from mlmtrain.train.loop import pretrain

from ..helpers import (
    assert_one_error_line,
    finish_torchrun,
    metrics,
    run_cli,
    set_options,
    step_losses,
    tiny_overrides,
    torchrun,
    write_corpus,
)

# the batch grows from 2 to 8 blocks over the first 1,000 tokens (blocks of 32): steps of 2, 4, 6 and 8 blocks
WARMUP = {"train.batch_size_start": 2, "train.micro_batch_size": 2, "train.batch_warmup_tokens": 1000}
EXACT = {"model.hidden_dropout": 0.0, "model.attention_dropout": 0.0, "train.precision": "fp32"}


def config(data, run_dir: Path, **extra: object):
    root, overrides = data
    return load_config(None, tiny_overrides(root, **{**overrides, "train.run_dir": str(run_dir), **extra}))


def train_lines(run_dir: Path) -> list[dict]:
    return [line for line in metrics(run_dir) if "loss" in line]


def test_a_mixture_logs_each_sources_tokens_and_resumes_exactly(mixture_data, tmp_path: Path, capsys) -> None:
    whole = config(mixture_data, tmp_path / "whole", **{"train.max_steps": 40, **WARMUP})
    pretrain(whole)
    lines = train_lines(tmp_path / "whole")
    # the batch warm-up: each step's tokens grow with the tokens before it, in whole micro-batches of 2 blocks
    steps = [b["tokens"] - a["tokens"] for a, b in zip([{"tokens": 0}, *lines], lines, strict=False)]
    assert steps[:5] == [2 * 32, 4 * 32, 4 * 32, 4 * 32, 6 * 32] and set(steps[8:]) == {8 * 32}
    assert all(sum(line["source_tokens"].values()) == line["tokens"] for line in lines)
    last = lines[-1]["source_tokens"]
    assert abs(last["a"] / lines[-1]["tokens"] - 0.75) <= 1 / 8  # within a block a step of each share
    run = json.loads((tmp_path / "whole" / "run.json").read_text())
    assert run["mixture"] == {"": {"a": 0.75, "b": 0.25}}
    out = capsys.readouterr().err
    assert "data mixture: a 75.0%, b 25.0% of each step's blocks (by weight)" in out
    assert "the source b has given all its" in out  # b (40 documents) runs out, and repeats

    paused = config(mixture_data, tmp_path / "paused", **{"train.max_steps": 40, "train.pause_after": 3, **WARMUP})
    pretrain(paused)  # stopped inside the warm-up
    pretrain(paused, resume="auto")
    assert step_losses(tmp_path / "paused") == step_losses(tmp_path / "whole")
    assert [line["source_tokens"] for line in train_lines(tmp_path / "paused")] == [
        line["source_tokens"] for line in lines
    ]


def test_temperature_draws_by_size(mixture_data, tmp_path: Path, capsys) -> None:
    cfg = config(mixture_data, tmp_path / "run", **{"train.max_steps": 4, "data.mixture_temperature": 0.5})
    pretrain(cfg)
    shares = json.loads((tmp_path / "run" / "run.json").read_text())["mixture"][""]
    sizes = {name: json.loads(path.read_text())["tokens"] for name, path in _units(mixture_data[0]).items()}
    root = {name: size**0.5 for name, size in sizes.items()}
    assert shares == pytest.approx({name: value / sum(root.values()) for name, value in root.items()})
    assert "(by tokens^0.5, data.mixture_temperature)" in capsys.readouterr().err


def _units(root: Path) -> dict[str, Path]:
    meta = json.loads((root / "tokens" / "meta.json").read_text())
    return {
        entry["name"]: root / "tokens" / f"{unit}.json"
        for unit, entry in meta["units"].items()
        if entry["split"] == "train"
    }


def test_a_source_added_later_is_encoded_alone(mixture_data, tmp_path: Path, capsys) -> None:
    root, overrides = mixture_data
    write_corpus(tmp_path / "c.txt", 30, seed=9)
    store = tmp_path / "tokens"  # the tokenizer stays (another corpus would train another one, and need all again)
    kept = {"data.store": str(store), "tokenizer.path": str(tmp_path / "tok")}
    kept["tokenizer.pretrained"] = str(root / "tokenizer")
    tokenize_corpus(config(mixture_data, tmp_path / "run", **kept), quiet=True)
    before = {name: os.stat(path).st_ino for name, path in _units_in(store).items()}
    train = overrides["data.train"][:-1] + f", {{source: {tmp_path / 'c.txt'}, weight: 1}}]"
    tokenize_corpus(config(mixture_data, tmp_path / "run", **kept, **{"data.train": train}))
    out = capsys.readouterr().err
    assert "train a:" in out and "train b:" in out and "already encoded" in out and "encode train c" not in out
    after = {name: os.stat(path).st_ino for name, path in _units_in(store).items()}
    assert set(after) == {"validation", "a", "b", "c"}
    assert all(after[name] == before[name] for name in before)  # the same files, linked: not encoded again


def _units_in(store: Path) -> dict[str, Path]:
    meta = json.loads((store / "meta.json").read_text())
    return {entry["name"]: store / f"{unit}-00000.bin" for unit, entry in meta["units"].items()}


@pytest.mark.slow
def test_two_processes_with_loader_workers_train_as_one_process(mixture_data, tmp_path: Path) -> None:
    root, overrides = mixture_data
    settings = {**overrides, **WARMUP, **EXACT, "train.max_steps": 12, "train.micro_batch_size": 1}
    two = tmp_path / "two"  # micro-batches of 1 block on each of 2 processes, and of 2 blocks in one: steps alike
    finish_torchrun(torchrun(root, two, **settings, **{"data.num_workers": 2}))
    one = {**settings, "train.micro_batch_size": 2, "train.run_dir": str(tmp_path / "one")}
    pretrain(load_config(None, tiny_overrides(root, **one)))
    assert step_losses(two) == pytest.approx(step_losses(tmp_path / "one"), rel=1e-5)
    shares = [line["source_tokens"] for line in train_lines(two)]
    assert shares == [line["source_tokens"] for line in train_lines(tmp_path / "one")]


BAD_MIXTURES = [
    ("[{source: A, weight: 0}]", "data.train[0].weight", "must be a finite number > 0"),
    ("[{source: A, weight: .nan}]", "data.train[0].weight", "finite number > 0"),
    ("[{source: A, weight: .inf}]", "data.train[0].weight", "finite number > 0"),
    ("[{source: A}, B]", "data.train[1]", "write every entry of a mixture as"),
    ("[{source: A, share: 2}]", "data.train[0]", "takes source, weight and name"),
    ("[{weight: 2}]", "data.train[0].source", "must name a source"),
    ("[{source: A}, {source: A}]", "names the source a twice", "give each entry a name"),
    ("[{source: A, name: 'a b'}]", "data.train[0].name", "letters, digits"),
]


@pytest.mark.parametrize(("train", "key", "fix"), BAD_MIXTURES)
def test_a_bad_mixture_is_one_line(train: str, key: str, fix: str, tiny_data: Path, tmp_path, capsys) -> None:
    train = train.replace("A", str(tmp_path / "a.txt")).replace("B", str(tmp_path / "b.txt"))
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, tmp_path / "run", **{"data.train": train}))
    assert code == 2
    assert_one_error_line(lines, key, fix)
    assert not (tmp_path / "run").exists()


BAD_SETTINGS = [
    ({"data.mixture_temperature": 0}, "data.mixture_temperature", "must be in (0, 1]"),
    ({"data.mixture_temperature": 1.5}, "data.mixture_temperature", "must be in (0, 1]"),
    ({"data.packing": False}, "data.train", "set data.packing: true"),
    ({"data.use_store": False}, "data.train", "set data.use_store: true"),
    ({"train.objective": "mlm+nsp"}, "data.train is a mixture", "name one source in data.train"),
    ({"train.batch_size_start": 16, "train.batch_warmup_tokens": 100}, "train.batch_size_start", "must be <="),
    ({"train.batch_size_start": 2}, "train.batch_size_start", "set train.batch_warmup_tokens"),
    ({"train.batch_warmup_tokens": 100}, "train.batch_warmup_tokens", "set it (e.g. 2)"),
    ({"train.batch_size_start": 3, "train.batch_warmup_tokens": 9}, "train.batch_size_start", "divisor of both"),
    (
        {"train.batch_size_start": 3, "train.batch_warmup_tokens": 9, "train.micro_batch_size": 2},
        "train.batch_size_start",
        "multiple of train.micro_batch_size",
    ),
]


@pytest.mark.parametrize(("settings", "key", "fix"), BAD_SETTINGS)
def test_mixture_and_warm_up_settings_that_cannot_work_are_one_line(
    settings: dict, key: str, fix: str, mixture_data, tmp_path: Path, capsys
) -> None:
    root, overrides = mixture_data
    code, lines = run_cli(capsys, "pretrain", *set_options(root, tmp_path / "run", **{**overrides, **settings}))
    assert code == 2
    assert_one_error_line(lines, key, fix)
    assert not (tmp_path / "run").exists()


def test_a_temperature_without_a_mixture_is_one_line(tiny_data: Path, tmp_path: Path, capsys) -> None:
    options = set_options(tiny_data, tmp_path / "run", **{"data.mixture_temperature": 0.5})
    code, lines = run_cli(capsys, "pretrain", *options)
    assert code == 2
    assert_one_error_line(lines, "data.mixture_temperature", "write data.train as a list of {source: ..., weight")


def test_an_empty_source_of_a_mixture_is_named(mixture_data, tmp_path: Path, capsys) -> None:
    root, overrides = mixture_data
    (tmp_path / "empty.txt").write_text("\n \n")
    train = overrides["data.train"][:-1] + f", {{source: {tmp_path / 'empty.txt'}, weight: 1}}]"
    settings = {**overrides, "data.train": train, "data.store": str(tmp_path / "tokens")}
    code, lines = run_cli(capsys, "tokenize", *set_options(root, tmp_path / "run", **settings))
    assert code == 2
    assert_one_error_line(lines, "the source empty is empty", "point data.train at text")
