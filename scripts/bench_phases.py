"""Benchmark of phases and data mixtures: Ettin's three-phase recipe against one phase, a domain anneal, and a
mixture's shares.

a. phased against one phase, at equal wall time on the same sources and tokenizer: `configs/modern-mini-phases.yaml`
   (stable 2/3 of --budget-s at 128 tokens and 30 % masks on a 1:1 mix of wikipedia-vital-summaries and
   gutenberg-books, extension 1/6 at 512 tokens, decay 1/6 at 15 % on a 2:1 mix) against `configs/modern-mini.yaml`
   (one phase, the fast recipe, the 1:1 mix) for --budget-s each: held-out perplexity on the wikipedia validation
   text at 128 and at 512 tokens, and wikipedia-vital-topics accuracy fine-tuned over --seeds seeds, paired.
b. a domain anneal: the phased run's stable checkpoint branched into a decay on books alone, against the finished
   phased model continued on books alone (lr 1e-4, linear), each for --anneal-s: books perplexity (gutenberg
   validation text) and the books task (`scripts/make_book_task.py`: which of the test split's books a paragraph
   is from), --seeds seeds, paired.
c. the phased run's shares: each phase's target share of each source against the share its metrics drew.

    python scripts/bench_phases.py --corpora ../shared/corpora --task ../shared/tasks/wikipedia-vital-topics
        [--work-dir DIR] [--budget-s 900] [--anneal-s 300] [--seeds 3] [--vocab-size 8000] [--out REPORT.md]

Run it on a quiet machine: the runs are budgeted in wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench.stats import mean_interval  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str) -> str:
    """`mlmtrain COMMAND` as a process; its standard output (stderr goes to ours)."""
    full = [sys.executable, "-m", "mlmtrain", *command]
    print("$ mlmtrain " + shlex.join(command), file=sys.stderr, flush=True)
    return subprocess.run(full, check=True, stdout=subprocess.PIPE, text=True).stdout


def write_config(path: Path, base: str, changes: dict[str, Any]) -> Path:
    """configs/BASE with `changes` (section -> {key: value}, or phases -> list) over it."""
    tree = yaml.safe_load((ROOT / "configs" / base).read_text())
    for section, values in changes.items():
        if isinstance(values, dict):
            tree.setdefault(section, {}).update(values)
        else:
            tree[section] = values
    tree.pop("report", None)  # the real corpora: the default health thresholds
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def mix(wiki: float, books: float, corpora: Path) -> list[dict[str, Any]]:
    return [
        {"source": str(corpora / "wikipedia-vital-summaries" / "train.txt"), "name": "wiki", "weight": wiki},
        {"source": str(corpora / "gutenberg-books" / "train.txt"), "name": "books", "weight": books},
    ]


def perplexity(model: Path, data: Path, seq_len: int, blocks: int) -> float:
    out = run("eval-perplexity", "--model", str(model), "--data", str(data), "--seq-len", str(seq_len),
              "--max-blocks", str(blocks), "--json")  # fmt: skip
    return float(json.loads(out)["perplexity"])


def accuracies(model: Path, task: Path, seeds: int, examples: int) -> list[float]:
    scores = []
    for seed in range(seeds):
        out = run("probe", "--model", str(model), "--task", str(task), "--seed", str(seed),
                  "--max-train-examples", str(examples), "--json")  # fmt: skip
        scores.append(float(json.loads(out)["accuracy"]))
    return scores


def paired(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    return mean_interval([a - b for a, b in zip(ours, theirs, strict=True)])


def shown(figure: dict[str, Any]) -> str:
    return f"{figure['mean']:+.4f} ± {figure['half_width']:.4f}"


def drawn_shares(run_dir: Path, targets: dict[str, dict[str, float]]) -> list[tuple[str, str, float, float]]:
    """(phase, source, target share, drawn share) from a run's metrics lines: the difference of source_tokens
    between the line before the phase and its last."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lines = [line for line in lines if "source_tokens" in line]
    rows, before = [], {}
    for phase, shares in targets.items():
        mine = [line for line in lines if line.get("phase", "") == phase]
        drawn = {name: mine[-1]["source_tokens"].get(name, 0) - before.get(name, 0) for name in shares}
        total = sum(drawn.values()) or 1
        rows += [(phase, name, share, drawn[name] / total) for name, share in shares.items()]
        before = mine[-1]["source_tokens"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--task", type=Path, required=True)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/mlmtrain-bench-phases"))
    parser.add_argument("--budget-s", type=float, default=900)
    parser.add_argument("--anneal-s", type=float, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--probe-train-examples", type=int, default=2000)
    parser.add_argument("--eval-blocks", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    a = parser.parse_args()
    work, corpora, started = a.work_dir, a.corpora.resolve(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    work.mkdir(parents=True, exist_ok=True)
    wiki_valid = corpora / "wikipedia-vital-summaries" / "valid.txt"
    books_valid = corpora / "gutenberg-books" / "valid.txt"
    shared = {"tokenizer": {"vocab_size": a.vocab_size, "path": str(work / "tokenizer")}}
    data = {"validation": str(wiki_valid), "store": str(work / "tokens")}
    b = a.budget_s
    phases = [
        {"name": "stable", "max_time": b * 2 / 3},
        {"name": "extend", "max_time": b / 6,
         "set": {"data.seq_len": 512, "train.batch_size": 8, "model.global_rope_theta": 160000}},
        {"name": "decay", "max_time": b / 6,
         "set": {"masking.mlm_probability": 0.15, "data.train": mix(2, 1, corpora)}},
    ]  # fmt: skip
    phased_cfg = write_config(work / "phased.yaml", "modern-mini-phases.yaml", {
        **shared, "data": {**data, "train": mix(1, 1, corpora)}, "phases": phases,
        "train": {"run_dir": str(work / "phased"), "eval_every": 1000, "progress": False}})  # fmt: skip
    one_cfg = write_config(work / "one.yaml", "modern-mini.yaml", {
        **shared, "data": {**data, "train": mix(1, 1, corpora)},
        "train": {"run_dir": str(work / "one"), "max_steps": None, "max_time": b, "eval_every": 1000,
                  "progress": False}})  # fmt: skip
    run("tokenize", "--config", str(phased_cfg))
    for config, name in ((phased_cfg, "phased"), (one_cfg, "one")):
        if not (work / name / "checkpoints" / "latest").exists():
            run("pretrain", "--config", str(config))
    models = {name: work / name / "checkpoints" / "latest" for name in ("phased", "one")}
    rows = {}
    for name, model in models.items():
        rows[name] = {
            "ppl128": perplexity(model, wiki_valid, 128, a.eval_blocks),
            "ppl512": perplexity(model, wiki_valid, 512, a.eval_blocks // 4),
            "topics": accuracies(model, a.task, a.seeds, a.probe_train_examples),
            "steps": json.loads((model / "checkpoint.json").read_text()).get("step"),
        }

    # b. the domain anneal: the stable phase's end decayed on books, against the finished model continued on books
    books_task = work / "books-task"
    if not (books_task / "test.jsonl").exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_book_task.py"), "--corpus",
                        str(corpora / "gutenberg-books"), "--out", str(books_task)], check=True)  # fmt: skip
    books_only = [{"source": str(corpora / "gutenberg-books" / "train.txt"), "name": "books", "weight": 1}]
    anneal_cfg = write_config(work / "anneal.yaml", "modern-mini-phases.yaml", {
        **shared, "data": {**data, "train": mix(1, 1, corpora)},
        "phases": [phases[0], {"name": "anneal", "max_time": a.anneal_s,
                               "set": {"masking.mlm_probability": 0.15, "data.train": books_only}}],
        "train": {"run_dir": str(work / "anneal"), "eval_every": 1000, "progress": False}})  # fmt: skip
    continued_cfg = write_config(work / "continued.yaml", "continue.yaml", {
        "tokenizer": {"path": str(work / "continued-tokenizer")},
        "data": {"train": books_only[0]["source"], "validation": str(books_valid),
                 "store": str(work / "continued-tokens"), "seq_len": 128},
        "model": {"init_from": str(models["phased"])},
        "optim": {"lr": 1e-4, "schedule": "linear", "warmup_steps": 50},
        "masking": {"mlm_probability": 0.15},
        "train": {"run_dir": str(work / "continued"), "max_steps": None, "max_time": a.anneal_s,
                  "eval_every": 1000, "progress": False, "batch_size": 32}})  # fmt: skip
    if not (work / "anneal" / "checkpoints" / "latest").exists():
        run("pretrain", "--config", str(anneal_cfg), "--branch-from",
            str(work / "phased" / "checkpoints" / "phase-stable"))  # fmt: skip
    if not (work / "continued" / "checkpoints" / "latest").exists():
        run("pretrain", "--config", str(continued_cfg))
    anneals = {name: work / name / "checkpoints" / "latest" for name in ("anneal", "continued")}
    for name, model in anneals.items():
        rows[name] = {
            "books_ppl": perplexity(model, books_valid, 128, a.eval_blocks),
            "books": accuracies(model, books_task, a.seeds, a.probe_train_examples),
        }

    # c. the phased run's shares
    targets = json.loads((work / "phased" / "run.json").read_text())["mixture"]
    shares = drawn_shares(work / "phased", targets)

    report = render(a, started, rows, shares)
    print(report)
    if a.out:
        a.out.write_text(report)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def render(a: argparse.Namespace, started: str, rows: dict[str, Any], shares: list) -> str:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    lines = [
        f"# Phases and data mixtures at mini on the CPU: mlmtrain bench_phases, {started}",
        "",
        f"- date: {started}",
        f"- commit: `{commit}`",
        f"- command (from the repository root): `python scripts/bench_phases.py {shlex.join(sys.argv[1:])}`",
        f"- machine: {cpu_name()} ({os.cpu_count()} cores); {platform.platform()}",
        f"- software: Python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}",
        "",
        f"## a. Three phases against one, {a.budget_s:.0f} s each (wikipedia-vital-summaries + gutenberg-books)",
        "",
        "| recipe | steps | held-out ppl at 128 | at 512 | topics accuracy | minus one phase (paired) |",
        "|---|---|---|---|---|---|",
    ]
    one = rows["one"]["topics"]
    for name in ("one", "phased"):
        row = rows[name]
        topics = mean_interval(row["topics"])
        diff = "–" if name == "one" else shown(paired(row["topics"], one))
        lines.append(
            f"| {name} | {row['steps']:,} | {row['ppl128']:.2f} | {row['ppl512']:.2f} | "
            f"{topics['mean']:.4f} ± {topics['half_width']:.4f} | {diff} |"
        )
    lines += [
        "",
        f"## b. A domain anneal on books, {a.anneal_s:.0f} s each",
        "",
        "| model | books ppl | books task accuracy | minus continued (paired) |",
        "|---|---|---|---|",
    ]
    for name in ("continued", "anneal"):
        row = rows[name]
        books = mean_interval(row["books"])
        diff = "–" if name == "continued" else shown(paired(row["books"], rows["continued"]["books"]))
        lines.append(f"| {name} | {row['books_ppl']:.2f} | {books['mean']:.4f} ± {books['half_width']:.4f} | {diff} |")
    lines += ["", "## c. The phased run's shares: target against drawn", "", "| phase | source | target | drawn |",
              "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {phase} | {name} | {target:.4f} | {drawn:.4f} |" for phase, name, target, drawn in shares]
    spread = statistics.fmean(abs(target - drawn) for _, _, target, drawn in shares) if shares else 0.0
    lines += ["", f"Mean absolute difference of the shares: {spread:.5f}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
