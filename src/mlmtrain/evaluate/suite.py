"""A scorecard: one encoder fine-tuned on each task of a suite (GLUE, or the user's own YAML list) under one fixed
protocol, several seeds each, scored with each task's metric; the median over seeds, its interval, the average.

Every (task, seed) is fine-tuned by the probe (`probe.probe_encoder`) and its figures written at once to the
scorecard's JSON file (whole or not at all), so Ctrl-C keeps what is done and a resumed suite skips it. Prints
nothing but its progress lines.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import yaml

from mlmtrain.config import published_value
from mlmtrain.errors import UserError, shown
from mlmtrain.evaluate.glue import GLUE_TASKS, REFERENCE, REFERENCE_SOURCE, REFERENCE_SPLIT, reference_for
from mlmtrain.evaluate.probe import PreparedTask, encode, predict, probe_encoder, score
from mlmtrain.evaluate.stats import t_half_width
from mlmtrain.evaluate.tasks import Task, TaskFields, load_task, named_split
from mlmtrain.probe_settings import SCORECARD_GENERATOR as GENERATOR
from mlmtrain.probe_settings import ProbeSettings
from mlmtrain.readers import load_json_text, load_yaml_text
from mlmtrain.runtime.durable import json_safe, replace_text
from mlmtrain.runtime.files import write_failure
from mlmtrain.runtime.progress import duration

SUITES = ("glue",)
# metric: whether it scores a regression (float labels) rather than classes
METRICS = {"accuracy": False, "f1": False, "mcc": False, "pearson": True, "spearman": True}
_TASK_KEYS = ("name", "task", "text_field", "pair_field", "label_field", "metric")


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite: where it is (a folder or an hf: name, as `probe --task` takes), its fields, its metrics;
    `test_split` names the split tested on when not the usual one, `other_split` a second test set that the same
    fine-tuned model is scored on with the last metric (MNLI's mismatched)."""

    name: str
    task: str
    fields: TaskFields
    metrics: tuple[str, ...]
    test_split: Optional[str] = None
    other_split: Optional[str] = None

    def described(self) -> dict[str, Any]:
        """The task as the scorecard records it: a local folder by its name (no path of this machine)."""
        return {
            "task": published_value("probe.task", self.task),
            "text_field": self.fields.text,
            "pair_field": self.fields.pair,
            "label_field": self.fields.label,
            "metrics": list(self.metrics),
            "test_split": self.test_split,
            "other_split": self.other_split,
        }

    @property
    def metric(self) -> str:
        return "/".join(self.metrics)


def glue_suite() -> list[SuiteTask]:
    return [
        SuiteTask(
            task.name,
            f"hf:glue/{task.config}",
            TaskFields(task.text_field, task.pair_field, "label"),
            task.metrics,
            task.test_split,
            task.other_split,
        )
        for task in GLUE_TASKS
    ]


def read_suite(spec: str) -> tuple[str, list[SuiteTask]]:
    """(the suite's name, its tasks): a suite mlmtrain knows (glue) or a YAML file listing tasks."""
    if spec == "glue":
        return spec, glue_suite()
    path = Path(spec)
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise UserError(
            "argument",
            f"--suite {shown(spec)} is neither a suite mlmtrain knows ({', '.join(SUITES)}) nor a .yaml file",
        )
    if not path.is_file():
        raise UserError("argument", f"--suite {spec}: no such file; pass a .yaml file listing tasks, or --suite glue")
    try:
        loaded = load_yaml_text(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UserError("suite", f"cannot read {path}: {str(error).splitlines()[0]}; fix the file") from None
    entries = loaded.get("tasks") if isinstance(loaded, dict) else None
    if not isinstance(entries, list) or not entries or set(loaded) != {"tasks"}:
        raise UserError("suite", f"{path} must hold one key, tasks: a list of tasks (name, task, metric, fields)")
    tasks = [_suite_task(entry, number, path) for number, entry in enumerate(entries, 1)]
    names = [task.name for task in tasks]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise UserError("suite", f"{path}: two tasks are named {twice!r}; give each a name of its own")
    return str(path), tasks


def _suite_task(entry: Any, number: int, path: Path) -> SuiteTask:
    where = f"{path} task {number}"
    if not isinstance(entry, dict):
        raise UserError("suite", f"{where} is {shown(entry)}, not a mapping with name, task and metric")
    unknown = sorted(str(key) for key in entry if key not in _TASK_KEYS)
    if unknown:
        raise UserError("suite", f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(_TASK_KEYS)}")
    for key in ("name", "task", "metric"):
        if key not in entry:
            raise UserError("suite", f"{where} has no {key}; add {key}: ...")
    for key, required in (("name", True), ("task", True), ("text_field", True), ("label_field", True)):
        value = entry.get(key, "x")
        if not isinstance(value, str) or required and not value.strip():
            raise UserError("suite", f"{where}: {key} must be text (got {shown(value)})")
    if entry.get("pair_field") is not None and not isinstance(entry["pair_field"], str):
        raise UserError("suite", f"{where}: pair_field must be text or null (got {shown(entry['pair_field'])})")
    metrics = entry["metric"] if isinstance(entry["metric"], list) else [entry["metric"]]
    bad = next((m for m in metrics if m not in METRICS), None) if metrics else "nothing"
    if bad is not None:
        raise UserError("suite", f"{where}: metric {shown(bad)} is not one of {' | '.join(METRICS)}")
    fields = TaskFields(entry.get("text_field", "text"), entry.get("pair_field"), entry.get("label_field", "label"))
    return SuiteTask(entry["name"], entry["task"], fields, tuple(metrics))


# ---------------------------------------------------------------------------------------------
# The scorecard file


@dataclass
class Scorecard:
    """The scorecard as its JSON file holds it (`record`), written to `path` after each (task, seed)."""

    path: Path
    record: dict[str, Any]
    after_save: Callable[[], None] = lambda: None  # e.g. list the file in its checkpoint's record

    def runs(self, name: str) -> list[dict[str, Any]]:
        return self.record["tasks"][name]["runs"]

    def save(self) -> None:
        try:
            replace_text(self.path, json.dumps(json_safe(self.record), indent=1) + "\n")
        except OSError as error:
            raise UserError(
                "argument", f"cannot write the scorecard {self.path}: {write_failure(error, self.path)}"
            ) from None
        self.after_save()


def _read(path: Path) -> dict[str, Any]:
    try:
        loaded = load_json_text(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def protocol(settings: ProbeSettings, seeds: Sequence[int]) -> dict[str, Any]:
    """What every task is fine-tuned under: the probe's settings (less how it shows progress) and the seeds."""
    kept = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    for name in ("progress", "lr_key", "pooling", "seed"):
        kept.pop(name)
    return {**kept, "seeds": list(seeds)}


def open_scorecard(
    path: Path, model: str, weights: str, suite: str, tasks: list[SuiteTask], plan: dict[str, Any], resume: bool
) -> Scorecard:
    """The scorecard to fill: a new one, or (resume) the one at `path`, refused unless it scored the same model (by
    its `weights`' fingerprint, not its name: a checkpoints/latest may have moved on) on the same tasks under the same
    protocol. An unfinished one is never started afresh without --resume."""
    record = {
        "generator": GENERATOR,
        "model": published_value("model.init_from", model),  # by name, as a checkpoint keeps every path
        "weights": weights,  # what the model is: runtime.model_folder.weights_fingerprint
        "suite": published_value("probe.task", suite),
        "protocol": plan,
        "tasks": {task.name: {**task.described(), "metric": task.metric, "runs": []} for task in tasks},
        "average": None,
        "finished": False,
    }
    existing = _read(path) if path.exists() else {}
    if path.exists() and existing.get("generator") != GENERATOR:
        raise UserError("argument", f"{path} exists and is not a scorecard mlmtrain wrote; pass --out NEW_FILE.json")
    if not resume:
        if existing and not existing.get("finished"):
            raise UserError(
                "argument",
                f"{path} holds an unfinished scorecard; pass --resume to finish it (or --out NEW_FILE.json)",
            )
        return Scorecard(path, record)
    if not existing:
        raise UserError("argument", f"--resume: there is no scorecard at {path} to finish; run without --resume")
    if existing.get("weights") != weights:
        raise UserError(
            "argument",
            f"--resume: {path} scored other weights ({shown(existing.get('model'), 60)}) than {model} holds now (a "
            "checkpoints/latest that moved on, a folder written again), and a scorecard never mixes two models' "
            "seeds; resume with --model naming the model it scored, or pass --out NEW_FILE.json to start afresh",
        )
    for key, what in (("protocol", "protocol"), ("suite", "suite")):
        if existing.get(key) != record[key]:
            raise UserError(
                "argument",
                f"--resume: {path} was made with another {what} ({shown(existing.get(key), 60)}); run the same "
                "command as before, or without --resume to start afresh",
            )
    if _described(existing) != _described(record):
        raise UserError("argument", f"--resume: {path} lists other tasks than {suite}; run without --resume")
    return Scorecard(path, existing)


def _described(record: dict[str, Any]) -> dict[str, Any]:
    """Each task as the scorecard describes it (where, fields, metrics), without its scores."""
    tasks = record.get("tasks") if isinstance(record.get("tasks"), dict) else {}
    keys = ("task", "text_field", "pair_field", "label_field", "metrics", "test_split", "other_split", "metric")
    return {
        name: {key: task.get(key) for key in keys} if isinstance(task, dict) else None for name, task in tasks.items()
    }


# ---------------------------------------------------------------------------------------------
# Running the suite


def check_metrics(task: SuiteTask, loaded: Task) -> None:
    """A UserError when a metric does not fit the task's labels (Pearson on classes, F1 of class 1 on three)."""
    for metric in task.metrics:
        if METRICS[metric] != loaded.regression:
            if loaded.regression:
                kind, fix = "float labels (a regression)", "use pearson or spearman"
            else:  # labels that are numbers, written as floats, make the task a regression
                named = ", ".join(map(repr, loaded.classes[:3])) + (", ..." if len(loaded.classes) > 3 else "")
                kind = f"{len(loaded.classes)} classes ({named})"
                fix = "use accuracy, f1 or mcc"
                if all(isinstance(label, int) and not isinstance(label, bool) for label in loaded.classes):
                    fix = f"write the labels as floats (3.0, not 3) to score a regression, or {fix}"
            raise UserError("suite", f"task {task.name!r}: metric {metric} does not fit its {kind}; {fix}")
        if metric == "f1" and len(loaded.classes) != 2:
            raise UserError(
                "suite",
                f"task {task.name!r}: metric f1 (of class 1) needs two classes, and it has {len(loaded.classes)}; "
                "use accuracy or mcc",
            )


def load_suite_task(task: SuiteTask) -> Task:
    """The task read and its metrics checked; an error names the suite's task."""
    try:
        loaded = load_task(task.task, task.fields, test_split=task.test_split)
    except UserError as error:
        raise UserError(error.topic, f"task {task.name!r}: {error.message}") from error
    check_metrics(task, loaded)
    return loaded


def seed_figures(
    task: SuiteTask,
    model: str,
    config: Any,
    prepared: PreparedTask,
    other: Optional[Any],
    settings: ProbeSettings,
    device: torch.device,
) -> list[float]:
    """The task's figures for one seed (in its metrics' order): one fine-tuning, scored on the test split (and on
    the other split with the last metric)."""
    result, trained = probe_encoder(model, config, prepared, settings, device, baseline=False)
    figures = [float(result.scores[metric]) for metric in task.metrics]
    if other is not None:
        outputs = predict(trained, other, prepared, settings.batch_size, device)
        figures[-1] = float(score(prepared.task, outputs, other.targets)[task.metrics[-1]])
    return figures


def summarise(scorecard: Scorecard, tasks: list[SuiteTask], seeds: Sequence[int]) -> None:
    """Each task's median over its seeds (of its score, the mean of its figures, as GLUE averages a task's two),
    the median of each figure and a 95 % interval of the mean score; the average once every task is done."""
    done = True
    for task in tasks:
        entry = scorecard.record["tasks"][task.name]
        runs = entry["runs"]
        scores = [run["score"] for run in runs]
        entry["score"] = statistics.median(scores) if scores else None
        by_figure = zip(*(run["figures"] for run in runs), strict=True)  # one list per figure, a value per seed
        entry["figures"] = [statistics.median(values) for values in by_figure] if runs else None
        half = t_half_width(scores)
        mean = statistics.fmean(scores) if scores else math.nan
        entry["ci95"] = [mean - half, mean + half] if math.isfinite(half) else None
        done = done and len(runs) == len(seeds)
    finished = [scorecard.record["tasks"][task.name]["score"] for task in tasks]
    scorecard.record["average"] = statistics.fmean(finished) if done else None
    scorecard.record["finished"] = done


def reference_record(config: Any, tasks: list[SuiteTask]) -> Optional[dict[str, Any]]:
    """The published GLUE figures of the BERT miniature of the model's shape (fractions, as the scorecard's), for
    the GLUE suite; None for another suite or shape."""
    if [task.name for task in tasks] != [task.name for task in GLUE_TASKS]:
        return None
    name = reference_for(getattr(config, "num_hidden_layers", None), getattr(config, "hidden_size", None))
    if name is None:
        return None
    _, figures, average = REFERENCE[name]
    return {
        "name": name,
        "split": REFERENCE_SPLIT,
        "source": REFERENCE_SOURCE,
        "tasks": {task: [value / 100 for value in values] for task, values in figures.items()},
        "average": average / 100,
    }


def run_suite(
    scorecard: Scorecard,
    tasks: list[SuiteTask],
    seeds: Sequence[int],
    model: str,
    config: Any,
    tokenizer: Any,
    settings: ProbeSettings,
    device: torch.device,
    tell: Callable[[str], None],
) -> dict[str, Any]:
    """Fine-tune every (task, seed) not yet in the scorecard, writing it after each; returns the scorecard."""
    todo = [task for task in tasks if len(scorecard.runs(task.name)) < len(seeds)]
    loaded = {task.name: load_suite_task(task) for task in todo}  # every task read and checked before any training
    for name, task in loaded.items():  # a task known by its examples: a resume never mixes two datasets' seeds
        entry, data = scorecard.record["tasks"][name], task.fingerprint()
        if entry["runs"] and entry.get("data") != data:
            raise UserError(
                "argument",
                f"--resume: task {name!r} holds other examples than when {scorecard.path} scored its first seeds (its "
                "files changed), and a task's median never mixes two datasets; restore them, or pass --out "
                "NEW_FILE.json to start afresh",
            )
        entry["data"] = data
    # the work of one seed, in examples fine-tuned on: what the time left is estimated by
    work = {
        name: len(task.train.subset(settings.max_train_examples)) * settings.epochs for name, task in loaded.items()
    }
    left = sum(work[task.name] * (len(seeds) - len(scorecard.runs(task.name))) for task in todo)
    spent, done_work = 0.0, 0
    for number, task in enumerate(tasks, 1):
        if task not in todo:
            continue
        prepared = PreparedTask.build(loaded[task.name], tokenizer, settings)
        other = None
        if task.other_split is not None:
            split = named_split(loaded[task.name], task.task, task.other_split).subset(settings.max_eval_examples)
            other = encode(loaded[task.name], split, tokenizer, settings.max_length)
        finished = {run["seed"] for run in scorecard.runs(task.name)}
        for place, seed in enumerate(seeds, 1):
            if seed in finished:
                continue
            eta = f", about {duration(spent / done_work * left)} left" if done_work else ""
            tell(f"scorecard: task {number} of {len(tasks)} ({task.name}), seed {place} of {len(seeds)}{eta}")
            started = time.perf_counter()
            figures = seed_figures(
                task, model, config, prepared, other, dataclasses.replace(settings, seed=seed), device
            )
            seconds = time.perf_counter() - started
            run = {"seed": seed, "score": statistics.fmean(figures), "figures": figures, "seconds": round(seconds, 3)}
            scorecard.runs(task.name).append(run)
            summarise(scorecard, tasks, seeds)
            scorecard.save()
            spent, done_work, left = spent + seconds, done_work + work[task.name], left - work[task.name]
    summarise(scorecard, tasks, seeds)
    scorecard.record["reference"] = reference_record(config, tasks)
    scorecard.save()
    return scorecard.record
