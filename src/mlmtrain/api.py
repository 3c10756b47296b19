"""The Python API: what the commands do, as functions that return their results instead of printing them.

`from mlmtrain import load_config, pretrain, evaluate_perplexity` (names are imported lazily, so the command line
starts fast). Mistakes raise `mlmtrain.UserError`, whose message is the line the command would print. Each function
calls the one the command calls (`tools`, `train.loop`, `report.page`); none goes through `cli`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional, Union

from mlmtrain import _API
from mlmtrain.config import Config
from mlmtrain.probe_settings import ProbeSettings

__all__ = list(_API)  # the names, listed once where `import mlmtrain` offers them

PathLike = Union[str, Path]


def load_config(path: Optional[PathLike] = None, overrides: Union[list[str], dict[str, Any], None] = ()) -> Config:
    """A config from a YAML file (None: the defaults) and `overrides` (`section.key=value` strings as `--set` takes
    them, or a dict of `{"section.key": value}`), every key and the objective's rules checked, as the commands read
    it."""
    from mlmtrain.tools.arguments import training_config

    return training_config(path, overrides)


def tokenize(config: Config) -> Path:
    """`mlmtrain tokenize`: train (or reuse) the tokenizer and encode the corpus into the token store; its folder."""
    from mlmtrain.tools.tokens import tokenize as run_tokenize

    return run_tokenize(config)


def pretrain(
    config: Config, resume: Optional[str] = None, overwrite: bool = False, branch_from: Optional[str] = None
) -> Path:
    """`mlmtrain pretrain`: train as the config says (tokenizing first if needed); returns the last checkpoint's
    folder (RUN_DIR/checkpoints/step-N).

    `resume` is 'auto' or a checkpoint folder, as `--resume` takes it; `branch_from` a checkpoint of another run to
    start this new run from, as `--branch-from` takes it."""
    from mlmtrain.train.loop import pretrain as run_pretrain

    return Path(run_pretrain(config, resume=resume, overwrite=overwrite, branch_from=branch_from))


def evaluate_perplexity(
    model: PathLike,
    data: Optional[str] = None,
    *,
    config: Optional[PathLike] = None,
    overrides: Union[list[str], dict[str, Any], None] = None,
    seq_len: Optional[int] = None,
    seed: Optional[int] = None,
    batch_size: int = 32,
    max_blocks: Optional[int] = None,
    pseudo: bool = False,
    max_tokens: Optional[int] = None,
    device: str = "auto",
) -> Any:
    """`mlmtrain eval-perplexity`: an `EvalResult` (perplexity, accuracy, loss, masked_tokens, ci95, …) of a
    masked-LM folder on `data` (a source as `--data` takes it) or on the validation split of `config`."""
    from mlmtrain.tools.masked_lm import evaluate_perplexity as run_evaluation

    evaluation = run_evaluation(
        model=model,
        data=data,
        config=Path(config) if config is not None else None,
        overrides=overrides or [],
        seq_len=seq_len,
        seed=seed,
        batch_size=batch_size,
        max_blocks=max_blocks,
        pseudo=pseudo,
        max_tokens=max_tokens,
        device=device,
    )
    return evaluation.result


def fill_mask(model: PathLike, text: str, top_k: int = 5, device: str = "auto") -> list[list[dict[str, Any]]]:
    """`mlmtrain fill-mask` for one text: for each [MASK] in it, the pipeline's top-k candidates (dicts with
    `token_str`, `score`, `token` and `sequence`), best first."""
    from mlmtrain.tools.masked_lm import fill_mask as fill_masks

    ((_, predictions),) = fill_masks(model, [text], top_k, device)
    return predictions


def probe(
    model: PathLike,
    task: Optional[str] = None,
    *,
    train: Optional[str] = None,
    valid: Optional[str] = None,
    test: Optional[str] = None,
    mode: str = ProbeSettings.mode,
    text_field: str = "text",
    pair_field: Optional[str] = None,
    label_field: str = "label",
    baseline: bool = False,
    save: Optional[PathLike] = None,
    device: str = "auto",
    **settings: Any,
) -> dict[str, Any]:
    """`mlmtrain probe`: fine-tune (or, with mode='linear', linear-probe) the encoder on a labeled task; the
    report as a dict (test and valid scores, settings, seconds; `baseline` adds the untrained model's).

    `settings` are the command's options by name: epochs, lr, batch_size, max_length, seed, pooling,
    max_train_examples, max_eval_examples."""
    from mlmtrain.evaluate.tasks import TaskFields
    from mlmtrain.tools.probe import probe as run_probe

    return run_probe(
        model=str(model),
        task=task,
        train=train,
        valid=valid,
        test=test,
        fields=TaskFields(text_field, pair_field, label_field),
        settings=_probe_settings(mode, settings),
        baseline=baseline,
        save=Path(save) if save is not None else None,
        device=device,
    )


def scorecard(
    model: PathLike,
    suite: str = "glue",
    *,
    seeds: Optional[int] = None,
    out: Optional[PathLike] = None,
    resume: bool = False,
    device: str = "auto",
    **settings: Any,
) -> dict[str, Any]:
    """`mlmtrain probe --suite`: fine-tune the encoder on every task of `suite` ('glue' or a .yaml list of tasks)
    for `seeds` seeds (5 by default); the scorecard as a dict (`average`, `tasks` by name with `metric`, `score`,
    `figures`, `ci95` and every seed's `runs`; `reference`, `path`), also written to its JSON file.

    `settings` are the fine-tuning options by name, as `probe` takes them (epochs, lr, batch_size, max_length,
    seed, max_train_examples, max_eval_examples): one protocol for every task."""
    from mlmtrain.tools.scorecard import scorecard as run_scorecard

    return run_scorecard(
        str(model),
        suite,
        _probe_settings(ProbeSettings.mode, settings),
        seeds=seeds,
        out=Path(out) if out is not None else None,
        resume=resume,
        device=device,
    )


def _probe_settings(mode: str, settings: dict[str, Any]) -> ProbeSettings:
    """ProbeSettings from the API's keywords; a UserError naming a keyword that is no setting."""

    from mlmtrain.errors import UserError

    known = {f.name for f in dataclasses.fields(ProbeSettings)} - {"mode", "progress"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UserError("argument", f"takes no setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return ProbeSettings(mode=mode, **settings)


def write_report(
    run_dirs: Union[PathLike, list[PathLike]],
    out: Optional[PathLike] = None,
    axis: str = "steps",
    png_dir: Optional[PathLike] = None,
) -> Path:
    """`mlmtrain report`: write the HTML page of one run folder (or several, overlaid); returns its path."""
    from mlmtrain.report.page import write_report as write_page

    folders = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(d) for d in run_dirs]
    written = write_page(
        folders, out=Path(out) if out else None, axis=axis, png_dir=Path(png_dir) if png_dir else None, overrides=[]
    )
    return Path(written)


def average_checkpoints(
    checkpoints: Union[PathLike, list[PathLike]], out: PathLike, last: Optional[int] = None
) -> Path:
    """`mlmtrain average`: write the mean of the checkpoints' weights as a new model folder `out`; returns it.
    `checkpoints` are checkpoint folders, or with `last` one run folder whose `last` newest checkpoints to average."""
    from mlmtrain.tools.average import average_checkpoints as run_average

    folders = [Path(checkpoints)] if isinstance(checkpoints, (str, Path)) else [Path(c) for c in checkpoints]
    return run_average(folders, Path(out), last).folder
