"""The adapt section: continued (domain-adaptive) pretraining from an existing encoder. For the same wall-clock
budget, mlmtrain with `model.init_from` and the HF recipe with the model loaded as `run_mlm.py
--model_name_or_path` loads it (our learning rate and schedule on both sides) continue on a new domain's text; with
--adapt-extend N, mlmtrain also runs with `tokenizer.extend_vocab: N`. Each, and the base as it is, is judged by
masked-LM perplexity on the domain's held-out text and on the general text, and by fine-tuning on a task of the
domain (--adapt-task) and on the general task (--task), over --seeds seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from bench.contestants import REPO, _child_env, run_ours, run_worker
from bench.downstream import finetune_all
from bench.setup import BenchmarkError, Setup, default_valid
from bench.stats import mean_interval, steady_tokens_per_s
from mlmtrain.config import load_config
from mlmtrain.data.store import tokenize_corpus
from mlmtrain.runtime.progress import say
from mlmtrain.train.init_from import resolve_init_from

CONFIG = REPO / "configs" / "continue.yaml"  # the shipped recipe for continuing a model: its lr, warm-up, schedule
WARM_LR = 1e-3  # --adapt-warm: a head that is not a language model's (SPLADE) relearns at the from-scratch rate


def _domain_texts(setup: Setup) -> tuple[Path, Path]:
    a = setup.args
    valid = a.adapt_valid or default_valid(a.adapt_train)
    if not valid:
        raise BenchmarkError(f"--adapt-train {a.adapt_train} has no valid.txt beside it: pass --adapt-valid FILE")
    return Path(a.adapt_train).resolve(), Path(valid).resolve()


def adapt_overrides(
    setup: Setup, run_dir: Path, base: str, train: Path, valid: Path, data_dir: Path, extra: Optional[dict] = None
) -> list[str]:
    """configs/continue.yaml's --set options for one run from `base` on `train` (shape and tokenizer: the base's)."""
    a = setup.args
    values: dict[str, Any] = {
        "model.init_from": base,
        "data.train": train,
        "data.validation": valid,
        "tokenizer.path": data_dir / "tokenizer",
        "data.store": data_dir / "tokens",
        "data.seq_len": a.seq_len,
        "train.batch_size": a.batch,
        "train.device": setup.device,
        "train.seed": 0,
        "train.run_dir": run_dir,
        "train.progress": False,
        "train.max_steps": None,
        "train.max_time": a.adapt_budget,
        "train.log_every": 1,  # per-step points for the steady tokens/s
        "train.eval_every": 0,  # the budget is all training; perplexity and fine-tuning judge afterwards
        "train.eval_max_blocks": a.eval_blocks,
        "checkpoint.save_every": 0,
        "checkpoint.keep_last": 1,
    }
    values.update(extra or {})
    return [f"{key}={'null' if value is None else value}" for key, value in values.items()]


def _tokenized(overrides: list[str]) -> None:
    """The run's tokenizer (the base's, or it extended) and token store, built before the clock starts."""
    tokenize_corpus(resolve_init_from(load_config(CONFIG, overrides)).cfg, quiet=True)


def run_continue(setup: Setup, name: str, overrides: list[str], precision: str) -> dict[str, Any]:
    """`python -m mlmtrain pretrain --config configs/continue.yaml` with the run's options, as a user runs it."""
    run_dir = setup.run_dir(f"adapt-{name}")
    overrides = overrides + [f"train.precision={precision}"] + list(setup.args.set)
    _tokenized(overrides)
    return run_ours(setup, run_dir, overrides, config=CONFIG) | {"model": run_dir / "checkpoints" / "latest"}


def perplexity(setup: Setup, model: Path, text: Path) -> float:
    """`mlmtrain eval-perplexity` of a model on a text: the same blocks and fixed masks for every model."""
    a = setup.args
    command = [sys.executable, "-m", "mlmtrain", "eval-perplexity", "--model", str(model), "--data", str(text)]
    command += ["--seq-len", str(a.seq_len), "--max-blocks", str(a.eval_blocks), "--device", setup.device, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=_child_env())
    if done.returncode != 0:
        raise BenchmarkError(f"eval-perplexity of {model} failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(done.stdout)["perplexity"])


def _scores(reports: list[dict[str, Any]], base: Optional[list[dict[str, Any]]]) -> dict[str, Any]:
    """Test accuracy over seeds and, paired seed by seed, its difference from the base's."""
    accuracy = [run["accuracy"] for run in reports]
    row = mean_interval(accuracy)
    if base is not None:
        row["minus_base"] = mean_interval([x - run["accuracy"] for x, run in zip(accuracy, base, strict=True)])
    return row


def section_adapt(setup: Setup) -> dict[str, Any]:
    """The base (optionally first warmed on the general text), then each contestant for --adapt-budget seconds on
    the domain's text; perplexities, tokens/s and fine-tuned accuracies per contestant."""
    a = setup.args
    train, valid = _domain_texts(setup)
    base, warm = a.adapt_base, None
    if a.adapt_warm:  # a base whose head is not a language model's: a short general-domain MLM run first
        say(f"benchmark: adapt: warming the base on the general text for {a.adapt_warm:g} s")
        data_dir = setup.work_dir / "adapt-data-general"
        extra = {"train.max_time": a.adapt_warm, "optim.lr": WARM_LR}
        overrides = adapt_overrides(setup, setup.run_dir("adapt-warm"), base, setup.train_text, setup.valid_text,
                                    data_dir, extra)  # fmt: skip
        warm = run_continue(setup, "warm", overrides, setup.precision)
        base = str(warm["model"])
    contestants: dict[str, dict[str, Any]] = {}
    domain_data = setup.work_dir / "adapt-data-domain"
    say(f"benchmark: adapt: mlmtrain (model.init_from) for {a.adapt_budget:g} s")
    ours_overrides = adapt_overrides(setup, setup.run_dir("adapt-ours"), base, train, valid, domain_data)
    contestants["ours"] = run_continue(setup, "ours", ours_overrides, setup.precision)
    say(f"benchmark: adapt: the HF recipe (--model_name_or_path, our schedule) for {a.adapt_budget:g} s")
    hf_dir = setup.run_dir("adapt-hf")
    hf_overrides = adapt_overrides(setup, hf_dir, base, train, valid, domain_data)
    spec = {
        "config": str(CONFIG),
        "overrides": hf_overrides + [f"train.precision={setup.hf_precision}"],
        "mode": "adapt",
        "base": base,
        "budget": a.adapt_budget,
        "train_text": str(train),
        "hf_cache": str(setup.work_dir / "hf-datasets"),
        "save": str(hf_dir / "model"),
    }
    contestants["hf"] = {**run_worker("hf", spec, hf_dir), "model": hf_dir / "model"}
    if a.adapt_extend:
        say(f"benchmark: adapt: mlmtrain with tokenizer.extend_vocab {a.adapt_extend} for {a.adapt_budget:g} s")
        extend_data = setup.work_dir / f"adapt-data-extend-{a.adapt_extend}"
        extra = {"tokenizer.extend_vocab": a.adapt_extend}
        overrides = adapt_overrides(setup, setup.run_dir("adapt-extend"), base, train, valid, extend_data, extra)
        contestants["extend"] = run_continue(setup, "extend", overrides, setup.precision)
    models = {"base": Path(base).resolve() if Path(base).exists() else Path(base)}
    models |= {name: Path(run["model"]) for name, run in contestants.items()}
    rows: dict[str, dict[str, Any]] = {name: {} for name in models}
    for name, model in models.items():
        say(f"benchmark: adapt: perplexity of {name}")
        rows[name]["domain_ppl"] = perplexity(setup, model, valid)
        rows[name]["general_ppl"] = perplexity(setup, model, setup.valid_text)
    for name, run in contestants.items():
        rows[name] |= {"steps": run["steps"], "command": run.get("command")}
        rows[name]["tokens_per_s"] = steady_tokens_per_s(run["points"], min(a.warmup_steps, len(run["points"]) - 1))
    # the tasks given; with none, the section measures speed and perplexity only
    tasks = {key: task for key, task in {"domain": a.adapt_task, "general": a.task}.items() if task}
    for key, task in tasks.items():
        shared = {name: model for name, model in models.items() if name != "extend"}  # one tokenizer: the base's
        reports = finetune_all(setup, shared, task=task)
        if "extend" in models:  # its own tokenizer: a task tokenized apart
            reports |= finetune_all(setup, {"extend": models["extend"]}, task=task)
        for name in models:
            rows[name][key] = _scores(reports[name], None if name == "base" else reports["base"])
        rows["base"][f"{key}_probe_command"] = reports["base"][0]["command"]
        rows["base"][f"{key}_majority"] = reports["base"][0].get("majority_accuracy")
        rows["base"][f"{key}_examples"] = [reports["base"][0]["train_examples"], reports["base"][0]["test_examples"]]
    return {
        "base": a.adapt_base,
        "warm": warm and {"seconds": a.adapt_warm, "lr": WARM_LR, "steps": warm["steps"], "command": warm["command"]},
        "budget_s": a.adapt_budget,
        "train": str(train),
        "valid": str(valid),
        "tasks": {key: str(task) for key, task in tasks.items()},
        "seeds": a.seeds,
        "epochs": a.probe_epochs,
        "extend_vocab": a.adapt_extend,
        "rows": rows,
        "tokens_per_s_ratio": rows["ours"]["tokens_per_s"] / rows["hf"]["tokens_per_s"],
    }
