"""The report: the Markdown of every section under a header that makes it a self-contained measurement (date,
commit, exact command, machine, software), the machine it ran on, and the files written (results/benchmark-<time>
.json and .md, and --report-md's copy)."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

import torch

from bench.cpu_limit import REPEATS
from bench.setup import LABELS, REPO, BenchmarkError
from mlmtrain.train.precision import cpuinfo_field

SOFTWARE = ("torch", "transformers", "tokenizers", "datasets", "accelerate")
# the environment that changes what a run measures, shown in front of its command
COMMAND_ENVIRONMENT = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _number(value: Optional[float], digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _percent(share: Optional[float]) -> str:
    """3 significant digits: a CPU's MFU against a GPU's peak is tiny but still tells sizes apart."""
    return "–" if share is None else f"{100 * share:.3g}%"


def markdown(results: dict[str, Any]) -> str:
    """The report as Markdown: the header, then each section's tables, then the targets (one file per measurement
    in docs/benchmarks/)."""
    lines = _header_lines(results)
    for key, section_lines in SECTION_LINES:
        if results.get(key):
            lines += section_lines(results[key])
    if results["verdicts"]:  # a section with no target of its own (variants) adds no empty table
        lines += ["## Targets", ""]
        lines += _table(["figure", "value", "target", "result"], [v.row() for v in results["verdicts"]])
    return "\n".join(lines) + "\n"


def _header_lines(results: dict[str, Any]) -> list[str]:
    """What makes the report stand alone: when, which code, the exact command, on what machine and software."""
    s, m = results["settings"], results["machine"]
    source = results["source"]
    commit = f"`{source['commit']}`" if source["commit"] else "unknown (not a git checkout)"
    if source["uncommitted_changes"]:
        commit += ", with uncommitted changes"
    memory = f", {m['memory_gib']:.0f} GiB" if m.get("memory_gib") else ""
    software = ", ".join(f"{name} {m['versions'][name]}" for name in SOFTWARE if m["versions"].get(name))
    model = f"{s['size']}, "
    timed = f"vocab {s['vocab_size']}, "
    if {"throughput", "limit"} & set(s.get("sections") or ["throughput"]):  # the timed rounds' settings
        timed = f"{s['steps']} steps ({s['warmup_steps']} warm-up), {s['rounds']} rounds, " + timed
    if s.get("sections") == ["adapt"]:  # every model there has the base's shape and vocabulary; nothing is timed
        model, timed = "the base's shape and vocabulary, ", ""
    return [
        f"# mlmtrain benchmark, {results['created']}",
        "",
        f"- date: {results['created']}",
        f"- commit: {commit}",
        f"- command (from the repository root): `{results['command']}`",
        f"- machine: {m['cpu']} ({m['cpu_count']} cores{memory}, {m['torch_threads']} torch threads)"
        + (f", {m['gpu']}" if m.get("gpu") else "")
        + f"; {m['platform']}",
        f"- software: Python {m['python']}, {software}",
        f"- settings: {model}seq_len {s['seq_len']}, batch {s['batch']}, {s['precision']} on {s['device']}, {timed}"
        f"data {s['train_text']}" + (f", our --set {' '.join(s['set'])}" if s["set"] else ""),
        "",
    ]


def _rounds_lines(rounds: dict[str, Any]) -> list[str]:
    mfu, work = rounds["mfu"], rounds.get("work", {})
    own, share = work.get("flops_per_token", {}), work.get("share", {})
    rows = [
        [
            LABELS[name],
            _number(rounds[name]["median"]),
            f"{_number(rounds[name]['min'])}–{_number(rounds[name]['max'])}",
            _number(rounds[name]["peak_rss_mb"]),
            _number(rounds[name]["peak_device_mb"]),
            _percent(mfu.get(name)),
            _number(own[name] / 1e6, 1) if name in own else "–",
            _percent(share.get(name)),
        ]
        for name in ("ours", "equal", "hf", "bare")
        if name in rounds
    ]
    lines = ["## Throughput (tokens/s, steady state)", ""]
    header = ["contestant", "median", "min–max", "peak RSS MiB", "peak device MiB", "MFU"]
    lines += _table(header + ["own MFLOPs a token", "share of the limit, own FLOPs"], rows)
    lines += ["", f"MFU = {mfu['formula']}; flops_per_token = {mfu['flops_per_token']:.4g}"]
    if own:
        lines += [
            "",
            "own FLOPs a token: what each contestant's step runs (ours: the sparse head and, where its loop takes "
            "that path (the CPU, packed blocks), the last layer on the selected rows; the HF recipe: the head on every "
            "position); its share of the limit is its FLOP/s over the limit of its precision",
        ]
    if "cpu_limit" in mfu:
        lines += ["", cpu_limit_line(mfu["cpu_limit"])]
    for line in (summary_line(rounds), work_line(rounds)):
        lines += ["", line] if line else []
    return lines + [""]


def cpu_limit_line(limit: dict[str, Any]) -> str:
    """ "CPU limit: X GFLOP/s fp32 (Y bf16)" and how it was measured."""
    gflops = limit["gflops"]
    bf16 = f" ({_number(gflops['bf16'])} bf16)" if gflops.get("bf16") else " (no bf16 on this CPU)"
    return (
        f"CPU limit: {_number(gflops['fp32'])} GFLOP/s fp32{bf16}: the model's matrix products "
        f"({'; '.join(limit['products'])}), fastest of {REPEATS} each, on {limit['threads']} torch threads, "
        f"best of {limit.get('measurements', 1)} measurements (one after each round)"
    )


def summary_line(rounds: dict[str, Any]) -> str:
    """The targets' figures in one line: ours / HF recipe tokens/s as ours trains and at the HF recipe's masking rate,
    with each side's MFU beside it, ours / bare step."""
    mfu, parts = rounds["mfu"], []
    if "ratio" in rounds:
        rate = ""
        if "ours_masking" in rounds:  # with a rate schedule, its first and last
            end = rounds.get("ours_masking_end")
            rate = f", {_rate(rounds['ours_masking'])}{f' → {_rate(end)}' if end is not None else ''} masked"
        parts.append(
            f"ours / HF recipe {rounds['ratio']:.2f}x tokens/s{rate} (MFU ours {_percent(mfu['ours'])}, "
            f"HF recipe {_percent(mfu['hf'])})"
        )
        if "equal" in rounds:
            parts.append(f"{rounds['equal_ratio']:.2f}x at the HF recipe's {_rate(rounds['hf_masking'])} masked")
    if "ours_over_limit" in rounds:
        parts.append(f"ours / bare step {100 * rounds['ours_over_limit']:.1f} %")
    return "; ".join(parts)


def work_line(rounds: dict[str, Any]) -> str:
    """Where each ratio comes from: ours' less work a token (own FLOPs) times its more FLOP/s."""
    work = rounds.get("work", {})
    parts = []
    for name, label in (("ours", "as ours trains"), ("equal", "at the HF recipe's masking rate")):
        if f"{name}_less_work" not in work:
            continue
        share = work["share"]
        shares = (
            f" ({_percent(share[name])} and {_percent(share['hf'])} of the limit)"
            if share.get(name) is not None and share.get("hf") is not None
            else ""
        )
        parts.append(
            f"{label}, {work['flops_per_token'][name] / 1e6:.1f} against {work['flops_per_token']['hf'] / 1e6:.1f} "
            f"MFLOPs a token: {work[f'{name}_less_work']:.2f}x less work at "
            f"{work[f'{name}_more_flops_per_s']:.2f}x the FLOP/s{shares}"
        )
    return ("Where the ratio comes from, ours against the HF recipe: " + "; ".join(parts)) if parts else ""


def _rate(share: float) -> str:
    return f"{100 * share:g} %"


def _recipe_lines(recipe: dict[str, Any]) -> list[str]:
    hf_by_step = {point["step"]: point["eval_ppl"] for point in recipe["hf"]}
    rows = [[str(p["step"]), f"{p['eval_ppl']:.2f}", _number(hf_by_step.get(p["step"]), 2)] for p in recipe["ours"]]
    lines = [
        f"## Same recipe (our hyperparameters on both sides, warm-up {recipe['warmup_steps']} steps): "
        "validation perplexity by step",
        "",
    ]
    return lines + _table(["step", "mlmtrain pretrain", "HF Trainer recipe"], rows) + [""]


def _growth_lines(growth: dict[str, Any]) -> list[str]:
    rows = [
        [
            r["size"],
            str(r["seq_len"]),
            f"{r['parameters'] / 1e6:.1f}M",
            _number(r["tokens_per_s"]),
            _number(r["peak_device_mb"]),
            _number(r["peak_rss_mb"]),
        ]
        for r in growth["rows"]
    ]
    lines = [f"## Cost growth (bare step, batch {growth['batch']}, {growth['steps']} steps)", ""]
    return lines + _table(["size", "seq_len", "parameters", "tokens/s", "peak device MiB", "peak RSS MiB"], rows) + [""]


def _electra_lines(electra: dict[str, Any]) -> list[str]:
    rows = []
    for name in ("untrained", "ours", "electra"):
        row = electra["rows"][name]
        low_high = "–" if row["ci95"] is None else f"{row['ci95'][0]:.4f} to {row['ci95'][1]:.4f}"
        rows.append(
            [
                LABELS[name],
                f"{row['mean']:.4f}",
                low_high,
                _number(row.get("tokens_per_s")),
                _number(row.get("steps")),
            ]
        )
    lines = [
        f"## MLM and ELECTRA at equal time ({electra['budget_s']:g} s of pretraining each), fine-tuned on "
        f"{Path(electra['task']).name}: test accuracy over {electra['seeds']} seeds",
        "",
    ]
    lines += _table(["encoder", "mean accuracy", "95% interval", "pretraining tokens/s", "steps"], rows)
    recipe = ", ".join(f"{key}={value}" for key, value in electra.get("electra_recipe", {}).items())
    return lines + ["", f"ELECTRA's changes to the shipped recipe: {recipe or 'none'}", ""]


def _interval(summary: dict[str, Any], sign: bool = False) -> str:
    """A mean ± its 95 % half-width over seeds, 4 decimals (a signed one for differences)."""
    return f"{summary['mean']:{'+' if sign else ''}.4f} ± {summary['half_width']:.4f}"


def _objectives_lines(objectives: dict[str, Any]) -> list[str]:
    """One row per encoder: its pretraining (steps, tokens, FLOPs) and, per task, accuracy and its paired
    difference from MLM, each with the 95 % interval over seeds."""
    tasks = [objectives[key] for key in ("single", "pair")]
    rows = []
    for name in ("untrained", "mlm", "nsp", "sop", "electra"):
        run = objectives["pretrained"].get(name, {})
        row = [LABELS[name], _number(run.get("steps")), _number(run.get("tokens")), f"{run.get('flops', 0):.3g}"]
        for task in tasks:
            score = task["rows"][name]
            row += [_interval(score), _interval(score["minus_mlm"], sign=True) if "minus_mlm" in score else "–"]
        rows.append(row)
    header = ["encoder", "steps", "tokens", "FLOPs"]
    for task in tasks:
        header += [f"{Path(task['task']).name} accuracy", "minus MLM (paired)"]
    lines = [
        f"## Objectives at equal FLOPs ({objectives['flops_budget']:.3g} training FLOPs each), fine-tuned over "
        f"{objectives['seeds']} seeds: test accuracy, mean ± 95% interval",
        "",
    ]
    lines += _table(header, rows)
    recipe = ", ".join(f"{key}={value}" for key, value in objectives["electra_recipe"].items())
    majority = [task["rows"]["mlm"]["majority_accuracy"] for task in tasks]
    shown = ", ".join(f"{Path(t['task']).name} {m:.4f}" for t, m in zip(tasks, majority, strict=True) if m is not None)
    return lines + [
        "",
        f"Fine-tuning: {objectives['epochs']} epochs; {tasks[0]['train_examples']} / {tasks[1]['train_examples']} "
        f"train and {tasks[0]['test_examples']} / {tasks[1]['test_examples']} test examples; best epoch on valid. "
        f"Majority-class accuracy: {shown or '–'}. ELECTRA's changes to the shipped recipe: {recipe or 'none'}.",
        "",
    ]


def _share(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _adapt_lines(adapt: dict[str, Any]) -> list[str]:
    """One row per encoder: steps and tokens/s in the budget, perplexity on the domain's and the general held-out
    text, and per task the accuracy and its paired difference from the base, with the 95 % interval over seeds."""
    rows = []
    for name in ("base", "ours", "hf", "extend"):
        row = adapt["rows"].get(name)
        if row is None:
            continue
        cells = [LABELS[name], _number(row.get("steps")), _number(row.get("tokens_per_s"))]
        cells += [f"{row['domain_ppl']:.2f}", f"{row['general_ppl']:.2f}"]
        for task in adapt["tasks"]:
            cells += [
                _interval(row[task]),
                _interval(row[task]["minus_base"], sign=True) if "minus_base" in row[task] else "–",
            ]
        rows.append(cells)
    names = {key: Path(task).name for key, task in adapt["tasks"].items()}
    header = ["encoder", "steps", "tokens/s", f"{Path(adapt['valid']).parent.name} ppl", "general ppl"]
    for key in names:
        header += [f"{names[key]} accuracy", "minus base (paired)"]
    warm = adapt.get("warm")
    lines = [
        f"## Continued pretraining at equal time ({adapt['budget_s']:g} s a side from {adapt['base']})"
        + (f", fine-tuned over {adapt['seeds']} seeds: test accuracy, mean ± 95% interval" if names else ""),
        "",
    ]
    lines += _table(header, rows)
    base = adapt["rows"]["base"]
    notes = [
        "",
        f"tokens/s: ours / HF recipe = {adapt['tokens_per_s_ratio']:.2f}. Perplexity: `mlmtrain eval-perplexity` on "
        f"{adapt['valid']} and on the general validation text, the same blocks and masks for every model"
        + (
            " (the extended vocabulary tokenizes the text otherwise: its perplexity is over other tokens)."
            if adapt["extend_vocab"]
            else "."
        ),
    ]
    if names:
        notes.append(
            f"Fine-tuning: {adapt['epochs']} epochs; "
            + "; ".join(
                f"{key}: train/test examples {base[f'{key}_examples']}, majority-class accuracy "
                f"{_share(base[f'{key}_majority'])}"
                for key in names
            )
            + "."
        )
    if warm:
        notes.append(
            f"The base was first warmed {warm['seconds']:g} s on the general text at lr {warm['lr']:g} "
            f"({warm['steps']} steps)."
        )
    return lines + notes + [""]


def _downstream_lines(downstream: dict[str, Any]) -> list[str]:
    tune = downstream["finetune"]
    rows = []
    for name in ("ours", "hf", "untrained"):
        side = downstream[name]
        score, f1 = side["score"], side["macro_f1"]
        rows.append(
            [
                LABELS[name],
                str(side.get("pretrain_steps", 0)),
                f"{score['mean']:.4f} ± {score['half_width']:.4f}",
                f"{f1['mean']:.4f} ± {f1['half_width']:.4f}" if f1 else "–",
                ", ".join(f"{v:.4f}" for v in score["values"]),
            ]
        )
    lines = [
        f"## Downstream ({downstream['budget_s']:g} s of pretraining per side; fine-tuned on {downstream['task']})",
        "",
    ]
    lines += _table(
        [
            "model",
            "pretrain steps",
            f"test {downstream['ours']['metric']} (95% over seeds)",
            "macro-F1",
            "per seed",
        ],
        rows,
    )
    majority = downstream["majority_accuracy"]
    return lines + [
        "",
        f"Fine-tuning: {tune['epochs']} epochs, lr {tune['lr']:g}, batch {tune['batch_size']}, max length "
        f"{tune['max_length']}, {tune['train_examples']} train / {tune['test_examples']} test examples, "
        f"{downstream['seeds']} seeds; best epoch on valid."
        + (f" Majority-class accuracy {majority:.4f}." if majority is not None else ""),
        "",
    ]


def _race_lines(race: dict[str, Any], title: str) -> list[str]:
    rows = []
    for name in ("ours", "hf"):
        side = race[name]
        last = side["evals"][-1]
        seconds = _number(side["seconds_to_target"], 1)
        rows.append(
            [LABELS[name], str(side["steps"]), f"{last['train_seconds']:.0f}", f"{last['eval_ppl']:.2f}", seconds]
        )
    lines = [f"## {title} (target ppl {race['target_ppl']:.2f}: {race['target_from']})", ""]
    lines += _table(["side", "steps", "train s", "final ppl", "train s to target"], rows)
    same = race["same_step"]
    if same:
        lines += ["", f"At step {same['step']}: ours ppl {same['ours_ppl']:.2f}, HF ppl {same['hf_ppl']:.2f}."]
    return lines + [""]


def _precision_lines(precision: dict[str, Any]) -> list[str]:
    other = precision["other"]
    other_by_step = {point["step"]: point["eval_ppl"] for point in precision["evals"][other]}
    rows = [
        [str(p["step"]), f"{p['eval_ppl']:.2f}", _number(other_by_step.get(p["step"]), 2)]
        for p in precision["evals"]["fp32"]
    ]
    rates = precision["tokens_per_s"]
    support = precision["cpu_bf16_support"]
    lines = [
        f"## {other} against fp32 (ours, same seed, {precision['steps']} steps): validation perplexity by step",
        "",
    ]
    lines += _table(["step", "fp32", other], rows)
    lines += [
        "",
        f"tokens/s: fp32 {_number(rates['fp32'])}, {other} {_number(rates[other])} ({precision['speedup']:.2f}x)"
        + (f"; this CPU's bf16 support: {support}" if support else ""),
        "",
    ]
    return lines


def _recipes_lines(recipes: dict[str, Any]) -> list[str]:
    names = {"classic": "mlmtrain, classic recipe", "fast": "mlmtrain, fast recipe", "hf": "HF recipe, our schedule"}
    rows = []
    for name, row in recipes["rows"].items():
        probe = "–" if row["probe"] is None else f"{row['probe']['mean']:.4f}"
        rows.append([names[name], str(row["steps"]), f"{row['train_seconds']:.0f}", f"{row['eval_ppl']:.2f}", probe])
    fast = ", ".join(f"{key}={value}" for key, value in recipes["fast_recipe"].items())
    lines = [f"## Recipes at equal wall time ({recipes['budget_s']:g} s each; fast recipe: {fast})", ""]
    lines += _table(["recipe", "steps", "train s", "final ppl (15 % masks)", "probe test accuracy"], rows)
    lines += ["", "probe: fine-tuned as `mlmtrain probe` does on --task, mean over --seeds; – without the task.", ""]
    return lines


def _variants_lines(variants: dict[str, Any]) -> list[str]:
    """One row per recipe: its changes to the fast recipe, steps, final perplexity and, with a task, the accuracy and
    its paired difference from the fast recipe's, each a mean ± 95 % interval over seeds."""
    rows = []
    for name, row in variants["rows"].items():
        probe = row.get("probe")
        ppl = f"{row['eval_ppl']:.2f}" + (f" (average {row['ema_eval_ppl']:.2f})" if "ema_eval_ppl" in row else "")
        if "reference" in row:  # trained elsewhere: no steps, seconds or FLOPs of this run
            cells = [name, f"reference: {row['reference']} (not trained here)", "–", "–", "–", ppl]
        else:
            changes = ", ".join(f"{key}={value}" for key, value in row["changes"].items()) or "–"
            flops = f"{row['flops']:.3g}" if row.get("flops") else "–"  # reports written before FLOPs were kept
            cells = [name, changes, _number(row["steps"]), f"{row['train_seconds']:.0f}", flops, ppl]
        if variants["task"]:
            cells += [_interval(probe), _interval(probe["minus_fast"], sign=True) if "minus_fast" in probe else "–"]
        rows.append(cells)
    fast = ", ".join(f"{key}={value}" for key, value in variants["fast_recipe"].items())
    header = ["recipe", "changes to the fast recipe", "steps", "train s", "FLOPs", "final ppl (15 % masks)"]
    if variants["task"]:
        header += [f"{Path(variants['task']).name} accuracy", "minus fast (paired)"]
    lines = [f"## Variants of the fast recipe at equal wall time ({variants['budget_s']:g} s each; fast: {fast})", ""]
    if any("train.max_time" in row.get("changes", {}) for row in variants["rows"].values()):
        lines += ["A variant with `train.max_time=None` trained for the fast run's compute (its FLOPs, tokens or "
                  "steps, as its changes say) with no time budget: equal compute, not equal time.", ""]  # fmt: skip
    lines += _table(header, rows)
    if any("ema_eval_ppl" in row for row in variants["rows"].values()):
        lines += ["", "With `train.ema`, the moving average's perplexity follows the live weights'; the model "
                  "fine-tuned is the one the checkpoint saved (the average with `checkpoint.save_ema`)."]  # fmt: skip
    if variants["task"]:
        lines += ["", f"Fine-tuned as `mlmtrain probe` does, {variants['seeds']} seeds: test accuracy, mean ± 95 % "
                  "interval; the difference is paired seed by seed."]  # fmt: skip
    return lines + [""]


# Each section's Markdown, in the report's order (the sections a run did not ask for are left out)
SECTION_LINES: tuple[tuple[str, Callable[[dict[str, Any]], list[str]]], ...] = (
    ("rounds", _rounds_lines),
    ("quality", lambda race: _race_lines(race, "Time to quality")),
    ("tuned", lambda race: _race_lines(race, "Time to quality, HF recipe given our schedule")),
    ("recipe", _recipe_lines),
    ("precision", _precision_lines),
    ("recipes", _recipes_lines),
    ("growth", _growth_lines),
    ("electra", _electra_lines),
    ("downstream", _downstream_lines),
    ("objectives", _objectives_lines),
    ("adapt", _adapt_lines),
    ("variants", _variants_lines),
)


def machine(device: str) -> dict[str, Any]:
    cpu = cpuinfo_field("model name") or platform.processor() or platform.machine()
    versions = {}
    for name in SOFTWARE:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    info = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": versions,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def _memory_gib() -> Optional[float]:
    """The machine's physical memory, where the system tells it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, ValueError, OSError):
        return None


def source_commit() -> dict[str, Any]:
    """The commit measured (`git rev-parse HEAD` of this checkout) and whether tracked files differ from it; both
    None where there is no git or no checkout."""
    head = _git("rev-parse", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"commit": head, "uncommitted_changes": None if changed is None else bool(changed)}


def _git(*args: str) -> Optional[str]:
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def command_line(argv: list[str]) -> str:
    """The command as one types it in the repository root: the script by its path in the checkout, after the
    environment settings that change what it measures."""
    script = Path(argv[0]).resolve()
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    environment = [f"{name}={os.environ[name]}" for name in COMMAND_ENVIRONMENT if name in os.environ]
    return shlex.join([*environment, "python", str(shown), *argv[1:]])


def write_reports(results: dict[str, Any], out_dir: Path, report_md: Optional[Path] = None) -> list[Path]:
    """results/benchmark-<time>.json and .md, and the Markdown again at `report_md` (a new file) when asked."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"benchmark-{time.strftime('%Y%m%d-%H%M%S')}"
    data = dict(results, verdicts=[dict(vars(v), passed=v.passed) for v in results["verdicts"]])
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    text = markdown(results)
    stem.with_suffix(".md").write_text(text)
    written = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    if report_md is not None:
        report_md.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(report_md, "x", encoding="utf-8") as out:  # "x": a file that appeared meanwhile stays
                out.write(text)
        except FileExistsError:
            raise BenchmarkError(
                f"--report-md {report_md} appeared during the run and was left as it is; the report is {written[1]}"
            ) from None
        written.append(report_md)
    return written
