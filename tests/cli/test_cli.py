"""The command line: help for every command, the version, and one-line errors with exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = [
    ["tokenize"],
    ["pretrain"],
    ["eval-perplexity"],
    ["fill-mask"],
    ["mask-demo"],
    ["report"],
    ["push"],
    ["average"],
    ["config", "show"],
    ["config", "fields"],
]


def mlmtrain(*args: str, cwd: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mlmtrain", *args], capture_output=True, text=True, cwd=cwd, input=input, timeout=300
    )


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
@pytest.mark.oldpins
def test_help_of_every_command(command: list[str]) -> None:
    done = mlmtrain(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout


def test_every_option_is_documented() -> None:
    import typer

    from mlmtrain.cli.app import app

    options = []

    def walk(command) -> None:
        for param in command.params:
            if param.param_type_name == "option":
                options.append(param)
                assert param.help, f"{command.name} {param.opts} has no help"
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    assert len(options) > 20


def test_help_speaks_in_words_and_every_summary_is_whole() -> None:
    """`mlmtrain --help` lists each command in a whole line (no summary cut short with "..."), and no --help shows a
    Python type (<list[str]>, <path>) or Typer's braces ({run_dirs}) where a placeholder belongs."""
    import re

    from typer.testing import CliRunner

    from mlmtrain.cli.app import app

    runner = CliRunner()
    top = runner.invoke(app, ["--help"], terminal_width=80).output
    listed = top.split("Commands:")[1].strip().splitlines()
    assert len(listed) == 10 and not any(line.rstrip().endswith("...") for line in listed), top
    for command in COMMANDS:
        text = runner.invoke(app, [*command, "--help"], terminal_width=100).output
        assert not re.search(r"<[a-z]+(\[[^\]]*\])?>|\{[a-z_]+\}", text), text
    report = runner.invoke(app, ["report", "--help"], terminal_width=100).output
    assert "[OPTIONS] RUN_DIR..." in report and "RUN_DIR...  Run folders" in report
    assert "--set KEY=VALUE" in report and "--x steps|tokens|time|flops" in report


def test_version() -> None:
    done = mlmtrain("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("mlmtrain ")


def test_bare_command_shows_help() -> None:
    done = mlmtrain()
    assert done.returncode == 0
    assert "pretrain" in done.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["config", "show", "--set", "optim.lr=-1"], "optim.lr must be > 0"),
        (["config", "show", "--config", "missing.yaml"], "does not exist"),
        (["pretrain", "--bogus"], "No such option"),
        (["eval-perplexity"], "Missing option"),
        (["tokenize", "--set", "data.train=/no/such/file.txt"], "/no/such/file.txt"),
        (["config", "show", "--set", "data.train=&a [*a]"], "contains itself"),
    ],
)
@pytest.mark.oldpins
def test_user_errors_are_one_line_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    done = mlmtrain(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mlmtrain: ")
    assert needle in lines[0]
    assert "Traceback" not in done.stderr


def test_config_show_prints_resolved_yaml() -> None:
    done = mlmtrain("config", "show", "--set", "optim.lr=0.002")
    assert done.returncode == 0
    assert "lr: 0.002" in done.stdout


@pytest.mark.oldpins
def test_a_folder_named_mlmtrain_where_python_runs_never_shadows_the_package(tmp_path: Path) -> None:
    """A clone of the repository is a folder named mlmtrain: run from the folder that holds it, `python -m mlmtrain`
    and the Python API still find the installed package (the src layout)."""
    (tmp_path / "mlmtrain" / "docs").mkdir(parents=True)
    done = mlmtrain("--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("mlmtrain "), done.stderr
    api = subprocess.run(
        [sys.executable, "-c", "from mlmtrain import load_config; print(load_config(None).train.max_steps)"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert api.returncode == 0 and api.stdout.strip() == "1000", api.stderr
