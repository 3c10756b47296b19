"""A YAML file someone hands mlmtrain cannot hang it: a "billion laughs" (nine levels of anchors, each a list of
nine aliases of the one below) is cheap to build and endless to write out, so every command that reads YAML (a
--config, a run's or a checkpoint's mlmtrain.yaml) refuses it in one line naming the file, in a real process under
a timeout. Also the loader's other limits, and wrong types named with the type the key wants.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlmtrain.errors import UserError
from mlmtrain.readers import MAX_VALUES, load_yaml_text

from ..helpers import CHILD_ENV, assert_one_error_line, run_cli, set_options


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A flow list of `levels` nested anchors, each holding the one below and width - 1 aliases of it."""
    value = "&a0 [" + ", ".join(["x"] * width) + "]"
    for level in range(1, levels + 1):
        value = f"&a{level} [{value}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return value


def bomb_config(path: Path, saved: str = "optim:\n  lr: 0.001\n") -> Path:
    """A config (or a copy of a saved mlmtrain.yaml, `saved`) whose optim.lr is the alias bomb."""
    text, replaced = re.subn(r"(?m)^optim:\n  lr: .*$", lambda _: f"optim:\n  lr: {alias_bomb()}", saved, count=1)
    assert replaced == 1
    path.write_text(text)
    return path


def _mlmtrain(*args: str, cwd: Path) -> list[str]:
    """`python -m mlmtrain ARGS` under a minute: it fails with exit 2; its stderr lines."""
    done = subprocess.run(
        [sys.executable, "-m", "mlmtrain", *args], capture_output=True, text=True, cwd=cwd, env=CHILD_ENV, timeout=60
    )
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["config show", "pretrain", "tokenize", "eval-perplexity", "mask-demo"])
def test_an_alias_bomb_in_a_config_is_one_line_naming_the_file(
    command: str, trained_run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    bomb = bomb_config(tmp_path / "bomb.yaml")
    extra = {
        "eval-perplexity": ["--model", str(trained_run / "checkpoints" / "latest")],
        "mask-demo": ["the quick brown fox"],
    }.get(command, [])
    lines = _mlmtrain(*command.split(), *extra, "--config", str(bomb), cwd=tmp_path)
    assert_one_error_line(lines, str(bomb), "aliases")


@pytest.mark.slow
def test_a_run_whose_mlmtrain_yaml_is_an_alias_bomb_is_one_line_in_report(trained_run: Path, tmp_path: Path) -> None:
    other = shutil.copytree(trained_run, tmp_path / "other", symlinks=True)
    saved = bomb_config(other / "mlmtrain.yaml", (trained_run / "mlmtrain.yaml").read_text())
    lines = _mlmtrain("report", str(trained_run), str(other), "--out", str(tmp_path / "both.html"), cwd=tmp_path)
    assert_one_error_line(lines, str(saved), "aliases")
    assert not (tmp_path / "both.html").exists()


@pytest.mark.slow
def test_a_checkpoint_whose_mlmtrain_yaml_is_an_alias_bomb_is_one_line_on_resume(
    finished_run: Path, tiny_data: Path, tmp_path: Path
) -> None:
    checkpoint = (finished_run / "checkpoints" / "latest").resolve()
    saved = bomb_config(checkpoint / "mlmtrain.yaml", (checkpoint / "mlmtrain.yaml").read_text())
    options = set_options(tiny_data, finished_run, **{"train.max_steps": 6, "train.eval_every": 0})
    lines = _mlmtrain("pretrain", "--resume", str(checkpoint), *options, cwd=tmp_path)
    assert_one_error_line(lines, str(saved), "aliases")


def test_aliases_that_stay_small_still_read_and_the_limit_counts_values_written_out() -> None:
    assert load_yaml_text("a: &lr 0.001\nb: *lr\n", "x.yaml") == {"a": 0.001, "b": 0.001}
    assert len(load_yaml_text(f"v: {alias_bomb(levels=2, width=9)}", "x.yaml")["v"]) == 9
    with pytest.raises(UserError, match=rf"x.yaml holds [\d,]+ values .* more than the {MAX_VALUES:,}"):
        load_yaml_text(f"v: {alias_bomb(levels=5, width=10)}", "x.yaml")


def test_yaml_nested_beyond_the_parsers_depth_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("optim:\n  lr: " + "[" * 5000 + "]" * 5000 + "\n")
    code, lines = run_cli(capsys, "config", "show", "--config", str(deep))
    assert code == 2
    assert_one_error_line(lines, str(deep), "nested too deep")


@pytest.mark.parametrize(
    "setting,key,wanted",
    [
        ("data.seq_len=yes", "data.seq_len", "must be int"),
        ("train.max_steps=true", "train.max_steps", "must be int or null"),
        ("optim.lr=on", "optim.lr", "must be float"),
    ],
)
def test_a_boolean_where_a_number_belongs_says_yaml_made_it_one(
    setting: str, key: str, wanted: str, capsys: pytest.CaptureFixture
) -> None:
    code, lines = run_cli(capsys, "config", "show", "--set", setting)
    assert code == 2
    assert_one_error_line(lines, f"{key} {wanted} (got true: YAML reads", "yes/no and on/off as booleans")
