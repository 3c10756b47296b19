"""Experiment trackers beside metrics.jsonl: TensorBoard, MLflow and Weights & Biases, each an optional package.

`check_trackers` runs before any work, so a tracker that is not installed is one line, not a failure after
tokenizing. `open_trackers` starts them (on rank 0: the `Reporter` calls it only there) with the resolved config
as parameters; every metrics line then goes to each with its step. Each tracker reads its own settings from its
own environment variables (MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, WANDB_MODE, WANDB_PROJECT, WANDB_DIR, ...).
"""

from __future__ import annotations

import importlib
import netrc
import os
import sys
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from mlmtrain.config import flatten
from mlmtrain.errors import UserError, first_line

# tracker -> (the module it needs, how to install it)
REQUIREMENTS = {
    "tensorboard": ("torch.utils.tensorboard", "pip install tensorboard"),
    "mlflow": ("mlflow", "pip install 'mlmtrain[mlflow]'"),
    "wandb": ("wandb", "pip install 'mlmtrain[wandb]'"),
}
WANDB_DEFAULT_PROJECT = "mlmtrain"  # where W&B runs go when WANDB_PROJECT is not set
MLFLOW_DB = "mlflow.db"  # the MLflow store in the run folder when MLFLOW_TRACKING_URI is not set


class Tracker(Protocol):
    name: str

    def log(self, step: int, scalars: Mapping[str, float]) -> None: ...

    def close(self, failed: bool) -> None: ...


def check_trackers(names: Sequence[str], legacy_tensorboard: bool = False) -> None:
    """A UserError naming the first tracker in `names` whose package does not import, and how to install it."""
    for name in names:
        module, install = REQUIREMENTS[name]
        try:
            importlib.import_module(module)
        except ImportError as error:
            drop = "set train.tensorboard: false" if name == "tensorboard" and legacy_tensorboard else "remove it"
            raise UserError(
                "config",
                f"train.trackers: {name} is not installed ({first_line(error)}); {install}, or {drop}",
            ) from None


def open_trackers(names: Sequence[str], run_dir: Path, config: Mapping[str, Any]) -> list[Tracker]:
    """The trackers in `names`, started for the run in `run_dir` and given the resolved `config` as parameters."""
    opened: list[Tracker] = []
    try:
        for name in names:
            opened.append(_OPEN[name](run_dir, config))
    except Exception as error:  # a tracker server refusing, W&B without a login: one line, the others closed
        for tracker in opened:
            tracker.close(failed=True)
        raise UserError("config", f"train.trackers: {name} could not start: {first_line(error)}") from error
    return opened


class _TensorBoard:
    """Event files in RUN_DIR/tensorboard; the config as a text panel."""

    name = "TensorBoard"

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard: an optional tracker

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        config_yaml = yaml.safe_dump(dict(config), sort_keys=False)
        self.writer.add_text("config", "".join(f"    {line}\n" for line in config_yaml.splitlines()))  # as code

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)

    def close(self, failed: bool) -> None:
        self.writer.close()


class _MLflow:
    """One MLflow run named after the run folder, in the store and experiment MLflow's own variables name.

    MLflow's client, not its fluent API: no global active run is started, so a caller's own run is left alone.
    """

    name = "MLflow"

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param  # mlflow: an optional tracker
        from mlflow.tracking import MlflowClient  # mlflow: an optional tracker

        self.client = MlflowClient(tracking_uri=mlflow_store(run_dir))
        experiment = _mlflow_experiment(self.client)
        run = self.client.create_run(experiment, run_name=run_dir.name, tags={"mlmtrain.run_dir": str(run_dir)})
        self.run_id = run.info.run_id
        params = [Param(key, str(value)) for key, value in flatten(dict(config)).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric  # mlflow: an optional tracker

        millis = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, millis, step) for k, v in scalars.items()])

    def close(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")


def mlflow_store(run_dir: Path) -> str:
    """MLFLOW_TRACKING_URI when set; else an SQLite store in the run folder (RUN_DIR/mlflow.db, what the mlflow extra
    installs), where MLflow 3's own default would need a database in the working directory."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(run_dir / MLFLOW_DB).resolve()}"


def _mlflow_experiment(client: Any) -> str:
    """The experiment id MLFLOW_EXPERIMENT_ID or MLFLOW_EXPERIMENT_NAME names (created if new), else Default's."""
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return os.environ["MLFLOW_EXPERIMENT_ID"]
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if not name:
        return "0"  # MLflow's Default experiment
    experiment = client.get_experiment_by_name(name)
    return experiment.experiment_id if experiment is not None else client.create_experiment(name)


class _WandB:
    """One W&B run named after the run folder; WANDB_MODE=offline keeps it on disk (wandb sync uploads it later)."""

    name = "W&B"

    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        import wandb  # wandb: an optional tracker

        project = os.environ.get("WANDB_PROJECT", WANDB_DEFAULT_PROJECT)
        offline = {} if wandb_login_known() else {"mode": "offline", "dir": str(run_dir)}
        if offline:
            print(
                f"W&B: no login found (wandb login, or WANDB_API_KEY); logging offline into {run_dir / 'wandb'}, "
                "which `wandb sync` uploads later",
                file=sys.stderr,
                flush=True,
            )
        self.run = wandb.init(project=project, name=run_dir.name, config=dict(config), **offline)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def wandb_login_known() -> bool:
    """Whether W&B can log online or was told how to log: WANDB_MODE or WANDB_API_KEY set, or a login that
    `wandb login` saved in ~/.netrc (or NETRC) for its host. Without one, wandb.init would stop the run."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):  # no ~/.netrc, or one wandb could not read either
        return False


def failing() -> bool:
    """True while an exception unwinds (close from a `finally`): the tracker run is marked failed, not finished."""
    return sys.exc_info()[0] is not None


_OPEN = {"tensorboard": _TensorBoard, "mlflow": _MLflow, "wandb": _WandB}
