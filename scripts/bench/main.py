"""The run: check the options, prepare the data, run the sections asked for, judge and write the report; or, with
--worker, be one contestant's process."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import torch

from bench.adapt import section_adapt
from bench.args import check_args, parse_args
from bench.downstream import section_downstream, section_electra
from bench.objectives import section_objectives
from bench.quality import section_quality, section_recipe, section_recipes, section_tuned
from bench.report import command_line, machine, markdown, source_commit, write_reports
from bench.setup import SECTIONS, BenchmarkError, Setup, prepare
from bench.speed import measure_rounds, section_growth, section_precision
from bench.variants import section_variants
from bench.verdicts import verdicts
from bench.workers import WORKERS
from mlmtrain.errors import UserError
from mlmtrain.train.precision import resolve_precision

# The sections after the timed rounds, in the order they run (electra last: it reuses the downstream section's runs)
SECTION_RUNS: dict[str, Callable[[Setup], dict[str, Any]]] = {
    "quality": section_quality,
    "tuned": section_tuned,
    "recipe": section_recipe,
    "precision": section_precision,
    "recipes": section_recipes,
    "growth": section_growth,
    "variants": section_variants,
    "downstream": section_downstream,
    "objectives": section_objectives,
    "adapt": section_adapt,
}


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    sections = check_args(args)
    setup = prepare(args)
    results: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "source": source_commit(),
        "command": command_line(sys.argv),
        "machine": machine(setup.device),
        "settings": {
            key: getattr(args, key)
            for key in ("size", "seq_len", "batch", "steps", "warmup_steps", "rounds", "vocab_size", "set", "quick")
        }
        | {
            "precision": f"{setup.precision} ({resolve_precision(setup.precision, torch.device(setup.device)).name})",
            "hf_precision": setup.hf_precision,
            "device": setup.device,
            "train_text": str(setup.train_text),
            "valid_text": str(setup.valid_text),
            "tokens_per_step": args.batch * args.seq_len,
            "sections": sorted(sections, key=SECTIONS.index),
        },
    }
    if {"throughput", "limit"} & sections:
        results["rounds"] = measure_rounds(setup, sections)
    for name, section in SECTION_RUNS.items():
        if name in sections:
            results[name] = section(setup)
    if "electra" in sections:  # after downstream: it reuses that section's MLM model and untrained scores
        results["electra"] = section_electra(setup, results.get("downstream"))
    results["verdicts"] = verdicts(results, "cuda" if setup.device.startswith("cuda") else "cpu")
    return results


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:  # inside a contestant's process
        run_dir = Path(args.spec)
        result = WORKERS[args.worker](json.loads((run_dir / "spec.json").read_text()))
        (run_dir / "result.json").write_text(json.dumps(result))
        return 0
    try:
        results = benchmark(args)
        written = write_reports(results, Path(args.out), args.report_md and Path(args.report_md))
    except (BenchmarkError, UserError) as error:
        print(f"benchmark: {error}", file=sys.stderr)
        return 2
    print("\n" + markdown(results))  # the summary: every figure, its target, pass or fail
    print(f"written: {', '.join(map(str, written[:-1]))} and {written[-1]}")
    return 0
