"""The objectives section: MLM, MLM+NSP, MLM+SOP and ELECTRA pretrain for the same FLOP budget on one tokenizer and
token store, from one seed; each, and the untrained encoder, is then fine-tuned on a single-text task and on a
sentence-pair task, so the pair objectives are judged where they should help."""

from __future__ import annotations

from typing import Any

from bench.contestants import read_metrics, run_ours
from bench.downstream import finetune_all, save_initial_model
from bench.setup import ELECTRA_RECIPE, Setup, with_changes
from bench.stats import mean_interval
from mlmtrain.runtime.progress import say

# name in the report -> train.objective; MLM first: every other is compared with it
OBJECTIVES = {"mlm": "mlm", "nsp": "mlm+nsp", "sop": "mlm+sop", "electra": "electra"}
PAIR_FIELD = "pair"  # the pair task's second text (scripts/make_pair_task.py writes it)


def pretrain_objective(setup: Setup, name: str, electra_recipe: dict[str, Any]) -> dict[str, Any]:
    """One objective's run to --flops-budget training FLOPs (train.max_flops stops it and stretches its schedule)."""
    a = setup.args
    objective = OBJECTIVES[name]
    say(f"benchmark: objectives: {objective} pretraining for {a.flops_budget:g} FLOPs")
    run_dir = setup.run_dir(f"objectives-{name}")
    budget = {
        "train.objective": objective,
        "train.max_steps": None,
        "train.max_flops": a.flops_budget,
        "train.log_every": 1,
        "train.eval_every": 0,  # the budget is all training; fine-tuning judges
    }
    if objective == "electra":
        budget |= electra_recipe
    run = run_ours(setup, run_dir, setup.ours(run_dir, extra=budget))
    last = read_metrics(run_dir / "metrics.jsonl")[0][-1]
    return {
        "objective": objective,
        "steps": run["steps"],
        "tokens": last["tokens"],
        "flops": last["flops"],
        "seconds": last["elapsed_s"],
        "command": run["command"],
        "checkpoint": str(run_dir / "checkpoints" / "latest"),
    }


def score_rows(reports: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per model: test accuracy over seeds (mean, 95 % interval) and, paired seed by seed, its difference from MLM's
    (the seeds are the same fine-tuning runs on each side, so the paired interval is the one that tells)."""
    mlm = [run["accuracy"] for run in reports["mlm"]]
    rows = {}
    for name, runs in reports.items():
        accuracy = [run["accuracy"] for run in runs]
        rows[name] = {**mean_interval(accuracy), "majority_accuracy": runs[0].get("majority_accuracy")}
        if name != "mlm":
            rows[name]["minus_mlm"] = mean_interval([x - y for x, y in zip(accuracy, mlm, strict=True)])
    return rows


def section_objectives(setup: Setup) -> dict[str, Any]:
    """MLM, MLM+NSP, MLM+SOP and ELECTRA at equal FLOPs, each fine-tuned with the untrained encoder on --task and on
    --pair-task for --seeds seeds: accuracy with its interval per objective per task, and each one minus MLM."""
    a = setup.args
    initial = save_initial_model(setup, setup.run_dir("downstream-initial"))
    electra_recipe = with_changes(ELECTRA_RECIPE, a.electra_set)
    pretrained = {name: pretrain_objective(setup, name, electra_recipe) for name in OBJECTIVES}
    models = {"untrained": initial} | {name: setup.run_dir(f"objectives-{name}") / "checkpoints" / "latest"
                                      for name in OBJECTIVES}  # fmt: skip
    tasks = {"single": (a.task, None), "pair": (a.pair_task, PAIR_FIELD)}
    results: dict[str, Any] = {}
    for key, (folder, pair) in tasks.items():
        reports = finetune_all(setup, models, task=folder, pair=pair)
        first = reports["mlm"][0]
        results[key] = {
            "task": str(folder),
            "train_examples": first["train_examples"],
            "test_examples": first["test_examples"],
            "segments": first["segments"],
            "probe_command": first["command"],
            "rows": score_rows(reports),
        }
    return {
        "flops_budget": a.flops_budget,
        "seeds": a.seeds,
        "epochs": a.probe_epochs,
        "electra_recipe": electra_recipe,
        "pretrained": pretrained,
        **results,
    }
