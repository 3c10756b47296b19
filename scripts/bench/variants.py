"""The variants section: the fast recipe against variants of it (`--variant NAME:KEY=VALUE,...`: another
architecture, a weight average, attention within documents, a masking-rate schedule, ...), each trained for
--quality-budget seconds on the same tokenizer and data; judged by the final validation perplexity on the classic
15 % evaluation masks and, with --task, by fine-tuning over --seeds seeds, each variant paired seed by seed with the
fast recipe. `--reference NAME:FOLDER` adds a model trained elsewhere on the same tokenizer (a distillation teacher:
the ceiling its students are measured against), scored by the same evaluator and fine-tuned alike.
A variant may instead take the fast recipe's compute: `train.max_flops=fast` (or max_tokens, max_steps) trains it
for the FLOPs (tokens, steps) the fast run spent, with no time budget: equal compute, not equal time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.downstream import finetune_all
from bench.quality import _ours_for_time
from bench.setup import FAST_RECIPE, BenchmarkError, Setup, with_changes
from bench.stats import mean_interval


def parse_variant(text: str) -> tuple[str, list[str]]:
    """'NAME:KEY=VALUE,KEY=VALUE' -> (NAME, ['KEY=VALUE', ...]); a BenchmarkError for any other form."""
    name, _, changes = text.partition(":")
    items = [item.strip() for item in changes.split(",") if item.strip()]
    if not name or name == "fast" or not items or not all("=" in item for item in items):
        raise BenchmarkError(
            f"--variant {text!r}: give NAME:KEY=VALUE[,KEY=VALUE...] with a name other than 'fast', "
            "e.g. modernbert:model.architecture=modernbert"
        )
    return name, items


def parse_reference(text: str) -> tuple[str, Path]:
    """'NAME:FOLDER' -> (NAME, FOLDER) for a folder that holds a model; a BenchmarkError for anything else."""
    name, _, folder = text.partition(":")
    if not name or name == "fast" or not folder:
        raise BenchmarkError(f"--reference {text!r}: give NAME:FOLDER with a name other than 'fast', e.g. teacher:t/")
    if not (Path(folder) / "config.json").is_file():
        raise BenchmarkError(f"--reference {text!r}: {folder} holds no model (no config.json); give a model folder")
    return name, Path(folder)


def score_reference(setup: Setup, name: str, folder: Path, recipe: dict[str, Any]) -> dict[str, Any]:
    """A reference's row: its perplexity by the evaluator, blocks, masks and batch every run of the section uses
    (`recipe`'s config: the fast one); refused when its tokenizer is not the section's, which every model shares."""
    from transformers import AutoModelForMaskedLM

    from bench.workers import _evaluator
    from mlmtrain.config import load_config
    from mlmtrain.data.tokenizer import load_tokenizer, tokenizer_fingerprint

    cfg = load_config(setup.config_path(), setup.ours(setup.run_dir(f"reference-{name}"), extra=recipe))
    ours = load_tokenizer(setup.data_dir / "tokenizer")
    if tokenizer_fingerprint(load_tokenizer(folder)) != tokenizer_fingerprint(ours):
        raise BenchmarkError(
            f"--reference {name}:{folder} was trained with another tokenizer than {setup.data_dir / 'tokenizer'}; "
            "train it on that one (tokenizer.path), so the fine-tuning and the evaluation read the same ids"
        )
    model = AutoModelForMaskedLM.from_pretrained(str(folder), trust_remote_code=False).eval()
    result = _evaluator(cfg, ours)(model)
    return {"reference": str(folder), "eval_ppl": result.perplexity}


# a budget key a variant may set to `fast`: the fast run's final figure of that metrics field
FAST_BUDGETS = {"train.max_flops": "flops", "train.max_tokens": "tokens", "train.max_steps": "steps"}


def with_fast_budget(recipe: dict[str, Any], fast_run: dict[str, Any]) -> dict[str, Any]:
    """`recipe` with each budget key set to `fast` replaced by the fast run's figure, and then no time budget (the
    compute budget alone ends the run); a recipe without one is returned as it is."""
    budgets = {key: fast_run[field] for key, field in FAST_BUDGETS.items() if recipe.get(key) == "fast"}
    return recipe | budgets | {"train.max_time": None} if budgets else recipe


def section_variants(setup: Setup) -> dict[str, Any]:
    """The fast recipe (FAST_RECIPE + --fast-set) and each --variant on top of it, for --quality-budget seconds (or
    for the fast run's compute: `train.max_flops=fast`)."""
    a = setup.args
    fast = with_changes(FAST_RECIPE, a.fast_set)
    recipes = {"fast": fast} | {name: with_changes(fast, items) for name, items in map(parse_variant, a.variant)}
    references = dict(map(parse_reference, a.reference))
    # scored before any training: a wrong reference stops the section at once
    scored = {name: score_reference(setup, name, folder, fast) for name, folder in references.items()}
    runs = {"fast": _ours_for_time(setup, "variant-fast", fast)}
    for name, recipe in list(recipes.items())[1:]:  # after the fast run: a variant may take its compute
        recipes[name] = with_fast_budget(recipe, runs["fast"])
        runs[name] = _ours_for_time(setup, f"variant-{name}", recipes[name])
    rows: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        if not run["evals"]:
            raise BenchmarkError(f"variants: {name} logged no evaluation; raise --quality-budget or lower --eval-every")
        last = run["evals"][-1]
        rows[name] = {
            "changes": {key: value for key, value in recipes[name].items() if fast.get(key) != value},
            "steps": run["steps"],
            "tokens": run["tokens"],
            "flops": run["flops"],
            "train_seconds": last["train_seconds"],
            "eval_ppl": last["eval_ppl"],
            **({"ema_eval_ppl": last["ema_eval_ppl"]} if "ema_eval_ppl" in last else {}),  # the average's, too
            "command": run.get("command"),
        }
    rows |= scored
    if a.task:  # every model fine-tuned alike, seed by seed: each variant's difference is paired with the fast one's
        reports = finetune_all(setup, {name: Path(run["checkpoint"]) for name, run in runs.items()} | references)
        base = [report["accuracy"] for report in reports["fast"]]
        for name, runs_of in reports.items():
            accuracy = [report["accuracy"] for report in runs_of]
            rows[name]["probe"] = mean_interval(accuracy)
            if name != "fast":
                rows[name]["probe"]["minus_fast"] = mean_interval([x - y for x, y in zip(accuracy, base, strict=True)])
    return {"budget_s": a.quality_budget, "fast_recipe": fast, "seeds": a.seeds, "task": a.task, "rows": rows}
