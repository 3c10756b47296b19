"""The sections judged by fine-tuning on a labeled task: downstream (ours, the HF recipe and the untrained model)
and electra (MLM against ELECTRA at equal time), and the fine-tuning they and the recipes section share."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

import torch

from bench.contestants import hf_spec, run_ours, run_worker
from bench.setup import ELECTRA_RECIPE, LABELS, Setup, with_changes
from bench.stats import mean_interval
from mlmtrain.config import load_config
from mlmtrain.data.tokenizer import load_tokenizer
from mlmtrain.model.bert import build_model
from mlmtrain.runtime.progress import say


def save_initial_model(setup: Setup, folder: Path) -> Path:
    """The weights both sides start from (same seed, same build_model as `pretrain`), as a model folder."""
    if (folder / "config.json").is_file():
        return folder
    cfg = load_config(setup.config_path(), setup.ours(folder))
    tokenizer = load_tokenizer(cfg.tokenizer_dir)
    torch.manual_seed(cfg.train.seed)
    build_model(cfg.model, vocab_size=len(tokenizer), pad_id=tokenizer.pad_token_id).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def probe_command(
    setup: Setup, model: Path, seed: int, task: Optional[str] = None, pair: Optional[str] = None
) -> list[str]:
    """The `mlmtrain probe` command line that gives one of the section's fine-tuning results (on --task unless
    another task folder, with its pair field, is given)."""
    a = setup.args
    command = ["mlmtrain", "probe", "--model", str(model), "--task", str(task or a.task), "--seed", str(seed)]
    if pair:
        command += ["--pair-field", pair]
    command += ["--epochs", str(a.probe_epochs), "--lr", str(a.probe_lr), "--batch-size", str(a.probe_batch)]
    command += ["--max-length", str(a.probe_max_length), "--device", setup.device]
    if a.probe_train_examples:
        command += ["--max-train-examples", str(a.probe_train_examples)]
    if a.probe_eval_examples:
        command += ["--max-eval-examples", str(a.probe_eval_examples)]
    return command


def finetune_all(
    setup: Setup, models: dict[str, Path], task: Optional[str] = None, pair: Optional[str] = None
) -> dict[str, list[dict[str, Any]]]:
    """Each model fine-tuned for each seed, in this process, as `probe_command` runs it, on --task or on `task`
    (a pair task names its second text's field): the models share one tokenizer, so the task is read and tokenized
    once. Seeds outermost: the machine's drift touches all alike."""
    from mlmtrain.evaluate.probe import PreparedTask, encoder_config, probe_encoder
    from mlmtrain.evaluate.tasks import TaskFields, load_task
    from mlmtrain.probe_settings import ProbeSettings

    a = setup.args
    settings = ProbeSettings(
        epochs=a.probe_epochs,
        lr=a.probe_lr,
        batch_size=a.probe_batch,
        max_length=a.probe_max_length,
        max_train_examples=a.probe_train_examples or None,
        max_eval_examples=a.probe_eval_examples or None,
    )
    tokenizer = load_tokenizer(next(iter(models.values())))  # the models share one tokenizer
    task = str(task or a.task)
    prepared = PreparedTask.build(load_task(task, TaskFields(pair=pair)), tokenizer, settings)
    device = torch.device(setup.device)
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in models}
    for seed in range(a.seeds):
        settings.seed = seed
        for name, folder in models.items():
            say(f"benchmark: fine-tune {LABELS.get(name, name)} on {Path(task).name}, seed {seed}")
            result, _ = probe_encoder(str(folder), encoder_config(str(folder)), prepared, settings, device, False)
            report = {**result.as_dict(), "command": shlex.join(probe_command(setup, folder, seed, task, pair))}
            segments = 1 if prepared.task.train.pairs is None else 2  # a pair task's examples: [CLS] A [SEP] B [SEP]
            report.update(train_examples=len(prepared.train), test_examples=len(prepared.test), segments=segments)
            reports[name].append(report)
    return reports


def section_electra(setup: Setup, downstream: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Section 9: MLM (ours) and ELECTRA, the same encoder size on the same tokenizer and token store, each pretrain
    for --downstream-budget seconds; the two and the untrained encoder are fine-tuned alike for --seeds seeds.
    After the downstream section of the same run, its MLM model and untrained scores are reused, not redone."""
    a = setup.args
    initial = save_initial_model(setup, setup.run_dir("downstream-initial"))
    pretrained: dict[str, dict[str, Any]] = {}
    objectives = (("electra", "electra"),) if downstream else (("ours", "mlm"), ("electra", "electra"))
    electra_recipe = with_changes(ELECTRA_RECIPE, a.electra_set)
    for name, objective in objectives:
        say(f"benchmark: electra: {objective} pretraining for {a.downstream_budget:g} s")
        run_dir = setup.run_dir(f"objective-{objective}")
        budget = {
            "train.objective": objective,
            "train.max_steps": None,
            "train.max_time": a.downstream_budget,
            "train.log_every": 1,
            "train.eval_every": 0,  # the budget is all training; fine-tuning judges
        }
        if objective == "electra":
            budget |= electra_recipe
        run = run_ours(setup, run_dir, setup.ours(run_dir, extra=budget))
        tokens, seconds = run["points"][-1]
        pretrained[name] = {"steps": run["steps"], "tokens_per_s": tokens / seconds, "command": run["command"]}
    models = {
        "ours": setup.run_dir("objective-mlm") / "checkpoints" / "latest",
        "electra": setup.run_dir("objective-electra") / "checkpoints" / "latest",
        "untrained": initial,
    }
    if downstream:  # the downstream section fine-tuned the same MLM budget and the untrained model already
        models = {"electra": models["electra"]}
    reports = finetune_all(setup, models)
    rows = {name: {**mean_interval([run["accuracy"] for run in runs]), **pretrained.get(name, {})}
            for name, runs in reports.items()}  # fmt: skip
    if downstream:
        rows["untrained"] = downstream["untrained"]["score"]
        rows["ours"] = {**downstream["ours"]["score"], "steps": downstream["ours"]["pretrain_steps"]}
        rows["ours"]["tokens_per_s"] = downstream["ours"]["pretrain_tokens_per_s"]
    return {
        "budget_s": a.downstream_budget,
        "task": str(a.task),
        "seeds": a.seeds,
        "epochs": a.probe_epochs,
        "probe_command": reports["electra"][0]["command"],
        "electra_recipe": electra_recipe,
        "rows": rows,
        "electra_minus_mlm": rows["electra"]["mean"] - rows["ours"]["mean"],
    }


def section_downstream(setup: Setup) -> dict[str, Any]:
    """Section 10: ours and the HF recipe (our schedule) pretrain for the same budget from the same initial weights; the
    two and the untrained initial model are fine-tuned alike for --seeds seeds and scored on the task's test split."""
    a = setup.args
    initial = save_initial_model(setup, setup.run_dir("downstream-initial"))
    say(f"benchmark: downstream: mlmtrain pretrain for {a.downstream_budget:g} s")
    run_dir = setup.run_dir("downstream-ours")
    budget = {"train.max_steps": None, "train.max_time": a.downstream_budget, "train.eval_every": 0}
    ours = run_ours(setup, run_dir, setup.ours(run_dir, extra=budget))
    say(f"benchmark: downstream: the HF recipe (our schedule) for {a.downstream_budget:g} s")
    hf_dir = setup.run_dir("downstream-hf")
    spec = hf_spec(setup, hf_dir, "downstream", budget=a.downstream_budget, save=str(hf_dir / "model"))
    hf = run_worker("hf", spec, hf_dir)
    models = {"ours": run_dir / "checkpoints" / "latest", "hf": hf_dir / "model", "untrained": initial}
    reports = finetune_all(setup, models)
    sides = {}
    for name, runs in reports.items():
        metric = "accuracy" if "accuracy" in runs[0] else "pearson"
        sides[name] = {
            "metric": metric,
            "score": mean_interval([run[metric] for run in runs]),
            "macro_f1": mean_interval([run["macro_f1"] for run in runs]) if metric == "accuracy" else None,
            "best_epochs": [run["best_epoch"] for run in runs],
            "seconds": [run["seconds"] for run in runs],
        }
    sides["ours"]["pretrain_steps"], sides["hf"]["pretrain_steps"] = ours["steps"], hf["steps"]
    tokens, seconds = ours["points"][-1]
    sides["ours"]["pretrain_tokens_per_s"] = tokens / seconds
    first = reports["ours"][0]
    return {
        "budget_s": a.downstream_budget,
        "task": a.task,
        "seeds": a.seeds,
        "finetune": {
            "epochs": a.probe_epochs,
            "lr": a.probe_lr,
            "batch_size": a.probe_batch,
            "max_length": a.probe_max_length,
            "train_examples": first["train_examples"],
            "test_examples": first["test_examples"],
        },
        "majority_accuracy": first.get("majority_accuracy"),
        "probe_command": first["command"],
        **sides,
    }
