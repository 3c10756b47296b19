"""One definition of a probe's settings: the command's options take their defaults and help from ProbeSettings, and
the live probe's settings are the `probe:` section's keys, whose own defaults are defined beside ProbeSettings."""

from __future__ import annotations

import dataclasses
import inspect

import typer

from mlmtrain import api
from mlmtrain.cli.app import app
from mlmtrain.config import ProbeConfig, load_config
from mlmtrain.probe_settings import LIVE_DEFAULTS, ProbeSettings


def _probe_options() -> dict[str, object]:
    """The `mlmtrain probe` command's parameters and their defaults."""
    command = typer.main.get_command(app).commands["probe"]
    return {param.name: param.default for param in command.params}


def test_every_probe_option_that_is_a_setting_defaults_to_the_settings_default() -> None:
    options = _probe_options()
    settings = {f.name: f.default for f in dataclasses.fields(ProbeSettings)}
    shared = set(options) & set(settings)
    assert shared == {
        "mode",
        "epochs",
        "lr",
        "batch_size",
        "max_length",
        "seed",
        "pooling",
        "max_train_examples",
        "max_eval_examples",
    }
    assert {name: options[name] for name in shared} == {name: settings[name] for name in shared}
    assert inspect.signature(api.probe).parameters["mode"].default == ProbeSettings.mode


def test_every_probe_option_takes_its_flag_and_help_from_the_settings() -> None:
    command = typer.main.get_command(app).commands["probe"]
    options = {param.name: param for param in command.params}
    defined = [f for f in dataclasses.fields(ProbeSettings) if "help" in f.metadata]
    assert {f.name for f in defined} == set(options) & {f.name for f in dataclasses.fields(ProbeSettings)}
    for setting in defined:
        assert options[setting.name].opts == ["--" + setting.name.replace("_", "-")]
        assert options[setting.name].help == setting.metadata["help"]


def test_the_sections_defaults_are_the_live_defaults_beside_the_settings() -> None:
    section = ProbeConfig()
    shared = [f for f in dataclasses.fields(ProbeSettings) if hasattr(section, f.name)]
    assert {f.name: getattr(section, f.name) for f in shared} == {
        f.name: LIVE_DEFAULTS.get(f.name, f.default) for f in shared
    }
    assert set(LIVE_DEFAULTS) <= {f.name for f in shared}


def test_the_live_probe_reads_every_setting_its_section_holds() -> None:
    """A key renamed on one side only would silently fall back to the command's default: the names must match."""
    section = {f.name for f in dataclasses.fields(ProbeConfig)}
    settings = {f.name for f in dataclasses.fields(ProbeSettings)}
    assert section - settings == {"task", "every", "text_field", "pair_field", "label_field"}


def test_the_live_probe_keeps_its_sections_cheaper_defaults() -> None:
    live = ProbeSettings.from_section(load_config(None).probe, seed=7)
    expected = dict(mode="linear", epochs=1, max_train_examples=2000, max_eval_examples=1000, seed=7)
    assert live == ProbeSettings(**expected, lr_key="probe.lr")  # warm-up and weight decay: the command's


def test_the_live_probe_takes_the_sections_values() -> None:
    overrides = ["probe.mode=finetune", "probe.epochs=4", "probe.lr=3e-4", "probe.batch_size=8"]
    overrides += ["probe.max_length=64", "probe.pooling=cls", "probe.max_train_examples=null"]
    live = ProbeSettings.from_section(load_config(None, overrides).probe, seed=0)
    assert (live.mode, live.epochs, live.lr, live.batch_size) == ("finetune", 4, 3e-4, 8)
    assert (live.max_length, live.pooling, live.max_train_examples, live.max_eval_examples) == (64, "cls", None, 1000)
