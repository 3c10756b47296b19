"""The quality sections: time to a target perplexity against the HF recipe with its defaults (quality) and given
our schedule (tuned), both sides on one recipe step by step (recipe), and three recipes at equal time (recipes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from bench.contestants import hf_spec, run_ours, run_worker
from bench.downstream import finetune_all
from bench.setup import CLASSIC_RECIPE, FAST_RECIPE, BenchmarkError, Setup, with_changes
from bench.stats import mean_interval, same_step, time_to_target
from mlmtrain.runtime.progress import say


def _ours_for_time(setup: Setup, name: str, recipe: Optional[dict] = None) -> dict[str, Any]:
    """`pretrain` for --quality-budget seconds (train.max_time: the schedule stretches to fit), evaluated every
    --eval-every steps; `recipe` overrides come before the pass-through --set options."""
    a = setup.args
    timed = (recipe or {}).get("train.max_time", a.quality_budget) is not None  # a variant may lift it
    say(f"benchmark: {name}: mlmtrain pretrain for {f'{a.quality_budget:g} s' if timed else 'its budget'}")
    run_dir = setup.run_dir(name)
    # train.max_time counts evaluation too, so ours trains a little less than the budget: conservative for ours.
    budget = {
        "train.max_steps": None,
        "train.max_time": a.quality_budget,
        "train.log_every": 1,
        "train.eval_every": a.eval_every,
    }
    run = run_ours(setup, run_dir, setup.ours(run_dir, extra={**budget, **(recipe or {})}))
    return dict(run, checkpoint=str(run_dir / "checkpoints" / "latest"))


def _hf_for_time(setup: Setup, name: str, mode: str, save: bool = False) -> dict[str, Any]:
    """The HF recipe for --quality-budget training seconds: its defaults (quality) or our hyperparameters (tuned)."""
    a = setup.args
    say(
        f"benchmark: {name}: the HF recipe ({'its defaults' if mode == 'quality' else 'our schedule'}) for "
        f"{a.quality_budget:g} s"
    )
    run_dir = setup.run_dir(name)
    # a model folder for the probe; under checkpoints/ as ours, so the probe's run folder is named after the run
    save = {"save": str(run_dir / "checkpoints" / "final")} if save else {}
    run = run_worker("hf", hf_spec(setup, run_dir, mode, budget=a.quality_budget, **save), run_dir)
    return dict(run, checkpoint=save.get("save"))


def _race(setup: Setup, ours: dict[str, Any], hf: dict[str, Any], target: Optional[float], source: str) -> dict:
    """Seconds each side needs to reach `target` (default: the HF side's lowest perplexity within its budget)."""
    if not ours["evals"] or not hf["evals"]:
        raise BenchmarkError("a side logged no evaluation; raise --quality-budget or lower --eval-every")
    target = target or min(point["eval_ppl"] for point in hf["evals"])
    sides = {
        name: {"steps": run["steps"], "evals": run["evals"], "seconds_to_target": time_to_target(run["evals"], target)}
        for name, run in (("ours", ours), ("hf", hf))
    }
    seconds_ours, seconds_hf = sides["ours"]["seconds_to_target"], sides["hf"]["seconds_to_target"]
    return {
        "budget_s": setup.args.quality_budget,
        "eval_every": setup.args.eval_every,
        "eval_blocks": setup.args.eval_blocks,
        "target_ppl": target,
        "target_from": source,
        **sides,
        "time_ratio": seconds_ours / seconds_hf if seconds_ours is not None and seconds_hf else None,
        "same_step": same_step(ours["evals"], hf["evals"]),
    }


def section_quality(setup: Setup) -> dict[str, Any]:
    """Section 3: both sides as users run them (the HF recipe with its defaults) for --quality-budget training
    seconds; the time each needs to reach the HF recipe's best perplexity (or --target-ppl)."""
    ours, hf = _ours_for_time(setup, "quality-ours"), _hf_for_time(setup, "quality-hf", "quality")
    source = "--target-ppl" if setup.args.target_ppl else "the HF recipe's lowest perplexity within its budget"
    return _race(setup, ours, hf, setup.args.target_ppl, source)


def section_tuned(setup: Setup) -> dict[str, Any]:
    """Section 4: as quality, but the HF recipe gets our learning rate, warm-up and schedule (stretched over its
    time budget as ours is), not its weak defaults; target: its best perplexity in the budget."""
    ours, hf = _ours_for_time(setup, "tuned-ours"), _hf_for_time(setup, "tuned-hf", "tuned")
    return _race(setup, ours, hf, None, "the HF recipe's lowest perplexity within its budget, given our schedule")


def section_recipe(setup: Setup) -> dict[str, Any]:
    """Section 5: both sides with OUR hyperparameters for --recipe-steps steps, evaluated alike: per step, our
    sparse head, masking and loop must learn at least as well as the HF recipe (issue 4: ppl not worse)."""
    a = setup.args
    # the same recipe on both sides: the classic one (15 % masks as the HF collator draws them, dropout 0.1, linear
    # decay) with a warm-up that fits the short run
    extra = {**CLASSIC_RECIPE, "optim.warmup_steps": max(1, a.recipe_steps // 10)}
    say(f"benchmark: recipe: mlmtrain pretrain, {a.recipe_steps} steps")
    run_dir = setup.run_dir("recipe-ours")
    steps = {"train.max_steps": a.recipe_steps, "train.log_every": 1, "train.eval_every": a.eval_every}
    ours = run_ours(setup, run_dir, setup.ours(run_dir, extra={**extra, **steps}))
    say(f"benchmark: recipe: the HF Trainer with our hyperparameters, {a.recipe_steps} steps")
    run_dir = setup.run_dir("recipe-hf")
    hf = run_worker("hf", hf_spec(setup, run_dir, "recipe", extra=extra, steps=a.recipe_steps), run_dir)
    return {
        "steps": a.recipe_steps,
        "warmup_steps": extra["optim.warmup_steps"],
        "ours": ours["evals"],
        "hf": hf["evals"],
        "same_step": same_step(ours["evals"], hf["evals"]),
    }


def section_recipes(setup: Setup) -> dict[str, Any]:
    """Section 7: the classic recipe, the fast recipe (FAST_RECIPE + --fast-set) and the HF recipe given our
    schedule, each for --quality-budget seconds: validation perplexity (classic 15 % masks for all) and, where
    `mlmtrain probe` exists, the downstream probe of each final model."""
    fast = with_changes(FAST_RECIPE, setup.args.fast_set)
    runs = {
        "classic": _ours_for_time(setup, "recipes-classic", CLASSIC_RECIPE),
        "fast": _ours_for_time(setup, "recipes-fast", fast),
        "hf": _hf_for_time(setup, "recipes-hf", "tuned", save=True),
    }
    rows = {}
    for name, run in runs.items():
        if not run["evals"]:
            raise BenchmarkError(f"recipes: {name} logged no evaluation; raise --quality-budget or lower --eval-every")
        last = run["evals"][-1]
        rows[name] = {"steps": run["steps"], "train_seconds": last["train_seconds"], "eval_ppl": last["eval_ppl"]}
    probes = {name: None for name in runs}
    if setup.args.task:  # the downstream judgement of each final model, fine-tuned alike
        reports = finetune_all(setup, {name: Path(run["checkpoint"]) for name, run in runs.items()})
        probes = {name: mean_interval([r["accuracy"] for r in runs_of]) for name, runs_of in reports.items()}
    for name in rows:
        rows[name]["probe"] = probes[name]
    return {"budget_s": setup.args.quality_budget, "fast_recipe": fast, "rows": rows}
