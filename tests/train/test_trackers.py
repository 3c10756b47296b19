"""train.trackers: one tiny run logs to TensorBoard, MLflow (a local file store named by MLFLOW_TRACKING_URI) and
W&B (offline), each read back from what it wrote: the resolved config as parameters, every metrics line at its
step. A tracker whose package is missing is one line before any work; only rank 0 opens trackers."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from mlmtrain.cli.app import main as cli_main
from mlmtrain.config import load_config
from mlmtrain.errors import UserError
from mlmtrain.runtime.progress import Reporter
from mlmtrain.train.loop import pretrain

from ..helpers import assert_one_error_line, copy_corpus, free_port, run_cli, set_options, tiny_overrides

INSTALLED = [name for name in ("tensorboard", "mlflow", "wandb") if importlib.util.find_spec(name) is not None]


@pytest.fixture(scope="module")
def tracked(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One tiny pretrain with every installed tracker: its run folder, metrics lines and the trackers' folders."""
    root = tmp_path_factory.mktemp("tracked")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_TRACKING_URI", (root / "mlruns").as_uri())
        env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for this to use a plain folder as its store
        env.setenv("MLFLOW_EXPERIMENT_NAME", "mlmtrain-tests")
        env.setenv("WANDB_MODE", "offline")
        env.setenv("WANDB_DIR", str(root))
        env.setenv("WANDB_SILENT", "true")
        env.setenv("WANDB_CONSOLE", "off")
        trackers = "[" + ", ".join(INSTALLED) + "]"
        run_dir = root / "tiny-run"
        pretrain(load_config(None, tiny_overrides(tiny_data, **{"train.run_dir": run_dir, "train.trackers": trackers})))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"root": root, "run_dir": run_dir, "lines": lines}


def series(lines: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of every metrics line that has `key`."""
    return [(line["step"], float(line[key])) for line in lines if isinstance(line.get(key), (int, float))]


def assert_same_series(logged: list[tuple[int, float]], expected: list[tuple[int, float]], key: str) -> None:
    assert [step for step, _ in logged] == [step for step, _ in expected], key
    assert [value for _, value in logged] == pytest.approx([value for _, value in expected], rel=1e-6), key


@pytest.mark.extras  # the extra alone installs what it needs
def test_mlflow_run_holds_the_config_and_every_metrics_line(tracked: dict[str, Any], monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tracked["root"] / "mlruns").as_uri())  # not set_tracking_uri: global
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    runs = mlflow.search_runs(experiment_names=["mlmtrain-tests"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == "tiny-run" and run.info.status == "FINISHED"
    params = run.data.params
    assert params["train.batch_size"] == "8" and params["model.hidden_size"] == "32"
    assert params["train.trackers"] == str(INSTALLED)
    client = MlflowClient(tracking_uri=(tracked["root"] / "mlruns").as_uri())
    for key in ("loss", "lr", "eval_ppl"):
        logged = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert_same_series(logged, series(tracked["lines"], key), key)
    assert [step for step, _ in series(tracked["lines"], "loss")] == list(range(1, 11))


def wandb_records(run_file: Path) -> list[Any]:
    """The records of a W&B run file (.wandb): a 7-byte header, then 32 KiB blocks of records, each a 7-byte header
    (crc32, length, kind: 1 whole, 2 first, 3 middle, 4 last part) and a protobuf `Record` or part of one."""
    from wandb.proto import wandb_internal_pb2

    data, block, position, records, pending = run_file.read_bytes(), 32768, 7, [], b""
    while position + 7 <= len(data):
        left = block - position % block
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or (length == 0 and kind == 0):  # the block's padding
            position += left
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.mark.extras  # the extra alone installs what it needs
def test_wandb_offline_run_holds_the_config_and_every_metrics_line(tracked: dict[str, Any]) -> None:
    pytest.importorskip("wandb")
    (run_file,) = (tracked["root"] / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == "tiny-run" and run.project == "mlmtrain"
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["train"]["batch_size"] == 8 and config["model"]["hidden_size"] == 32
    history: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    history.setdefault(key, []).append((record.history.step.num, json.loads(item.value_json)))
    for key in ("loss", "lr", "eval_ppl"):
        assert_same_series(history[key], series(tracked["lines"], key), key)
    assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [0]


def test_tensorboard_events_hold_every_metrics_line(tracked: dict[str, Any]) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked["run_dir"] / "tensorboard"))
    events.Reload()
    for key in ("loss", "eval_ppl"):
        assert_same_series([(e.step, e.value) for e in events.Scalars(key)], series(tracked["lines"], key), key)
    assert "config/text_summary" in events.Tags()["tensors"]  # the resolved config, as text


@pytest.mark.parametrize("settings", [{"train.trackers": "[mlflow, wandb]"}, {"train.tensorboard": True}])
def test_a_tracker_that_is_not_installed_is_one_line_before_any_work(
    settings: dict[str, Any], tiny_data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    for module in ("mlflow", "wandb", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it fails
    root = copy_corpus(tiny_data, tmp_path)  # no tokenizer, no store yet
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(root, **{"train.run_dir": run_dir, **settings})
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        cli_main(["pretrain", *[arg for override in overrides for arg in ("--set", override)]])
    lines = capsys.readouterr().err.strip().splitlines()
    assert done.value.code == 2 and len(lines) == 1, lines
    name = "tensorboard" if "train.tensorboard" in settings else "mlflow"
    assert f"{name} is not installed" in lines[0] and "pip install" in lines[0]
    assert not run_dir.exists() and not (root / "tokenizer").exists()  # nothing done, nothing written


def test_trackers_are_validated() -> None:
    with pytest.raises(UserError, match="train.trackers"):
        load_config(None, ["train.trackers=[neptune]"])
    with pytest.raises(UserError, match="train.trackers must not name a tracker twice"):
        load_config(None, ["train.trackers=[mlflow, mlflow]"])
    legacy = load_config(None, ["train.tensorboard=true", "train.trackers=[mlflow]"])
    assert legacy.train.active_trackers == ["mlflow", "tensorboard"]


def test_only_the_main_process_opens_trackers(tmp_path: Path, monkeypatch) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    other_rank = Reporter(tmp_path / "run", 10, enabled=False, trackers=["mlflow"], params={"train": {"seed": 0}})
    other_rank.log({"step": 1, "loss": 2.0})
    other_rank.close()
    assert (
        not (tmp_path / "mlruns").exists()
        or mlflow.search_runs(search_all_experiments=True, output_format="list") == []
    )


def test_a_tracker_that_fails_mid_run_is_dropped_with_one_warning(tmp_path: Path, monkeypatch, capsys) -> None:
    pytest.importorskip("mlflow")
    import shutil

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    reporter = Reporter(tmp_path / "run", 10, show_bar=False, trackers=["mlflow"], params={"train": {"seed": 0}})
    reporter.log({"step": 1, "loss": 2.0})
    shutil.rmtree(tmp_path / "mlruns")  # the store is gone, as a tracking server that went away
    reporter.log({"step": 2, "loss": 1.5})
    reporter.log({"step": 3, "loss": 1.0})
    reporter.close()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "MLflow stopped taking metrics" in line]
    assert len(warnings) == 1
    logged = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3]


@pytest.mark.skipif("mlflow" not in INSTALLED, reason="mlflow is not installed")
def test_a_tracker_that_cannot_start_leaves_no_run_behind(tiny_data: Path, tmp_path: Path, monkeypatch) -> None:
    """MLflow 3 refuses a plain folder store without MLFLOW_ALLOW_FILE_STORE: one line, and the same command runs
    once that is set (the folder was not left looking like a run that needs --resume or --overwrite)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    run_dir = tmp_path / "run"
    cfg = load_config(None, tiny_overrides(tiny_data, **{"train.run_dir": run_dir, "train.trackers": "[mlflow]"}))
    with pytest.raises(UserError, match="mlflow could not start"):
        pretrain(cfg)
    assert not (run_dir / "metrics.jsonl").exists()
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert pretrain(cfg).name == "step-10"


@pytest.mark.extras  # as documented: pip install -e ".[mlflow]" (or ".[wandb]") and nothing else
@pytest.mark.skipif(not {"mlflow", "wandb"} <= set(INSTALLED), reason="needs mlflow and wandb")
def test_with_no_settings_mlflow_and_wandb_log_into_the_run_folder(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """As a fresh install finds them: no MLFLOW_TRACKING_URI (MLflow 3's own default wants a database in the working
    folder) and no W&B login: MLflow gets an SQLite store in the run folder, W&B logs offline there, and both say
    where."""
    from mlflow.tracking import MlflowClient

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE", "WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)  # MLflow's default store would land here
    run_dir = tmp_path / "run"
    pretrain(
        load_config(None, tiny_overrides(tiny_data, **{"train.run_dir": run_dir, "train.trackers": "[mlflow, wandb]"}))
    )
    assert "logging offline into" in capsys.readouterr().err
    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs(["0"])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == list(range(1, 11))
    assert any((run_dir / "wandb").glob("offline-run-*"))
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()


@pytest.mark.skipif("mlflow" not in INSTALLED, reason="mlflow is not installed")
def test_a_password_in_the_tracking_uri_is_neither_printed_nor_written(
    tiny_data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """A tracking server that cannot be reached: MLflow's error quotes the URL it was given, password included."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://user:s3cret@127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once instead of retried for minutes
    run_dir = tmp_path / "run"
    code, lines = run_cli(capsys, "pretrain", *set_options(tiny_data, run_dir, **{"train.trackers": "[mlflow]"}))
    assert code == 2
    line = assert_one_error_line(lines, "train.trackers: mlflow could not start", "http://user:***@127.0.0.1")
    assert "s3cret" not in "\n".join(lines), line
    assert not any(b"s3cret" in path.read_bytes() for path in run_dir.rglob("*") if path.is_file())
