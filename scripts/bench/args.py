"""The command line: the options, their defaults (the measurement, --quick, and the downstream sections alone),
and the checks that refuse a run that could not finish before it starts."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Optional

import bench
from bench.setup import DEFAULT_SECTIONS, REPO, SECTIONS, BenchmarkError, default_valid
from bench.workers import WORKERS
from mlmtrain.model.bert import H200_DENSE_BF16_TFLOPS

# The sections that pretrain for minutes and fine-tune: alone, they take DOWNSTREAM_ONLY's defaults
FINETUNED = ("downstream", "electra", "objectives")


# Option defaults: the measurement, and --quick, which runs every code path on tiny sizes.
DEFAULTS = {
    "size": "mini",
    "seq_len": 128,
    "batch": 32,
    "steps": 50,
    "warmup_steps": 10,
    "growth_steps": 20,
    "rounds": 3,
    "quality_budget": 300.0,
    "eval_every": 50,
    "eval_blocks": 128,
    "recipe_steps": 150,
    "vocab_size": 30522,
    "probe_epochs": 3,
    "downstream_budget": 600.0,
    "flops_budget": 3e13,
    "adapt_budget": 300.0,
    "adapt_extend": 0,
    "adapt_warm": 0.0,
    "seeds": 3,
    "probe_lr": 3e-4,
    "probe_batch": 32,
    "probe_max_length": 128,
    "probe_train_examples": 2000,
    "probe_eval_examples": 0,
}


# --sections downstream, electra and/or objectives alone: a size and vocabulary at which 2 cores get past unigram
# statistics in the budget (30,522 words and three minutes do not; mini with 8,000 words in ten minutes did not
# either: see docs/benchmarks/log.md), and a fine-tuning long enough to tell encoders apart (all train examples; 64
# tokens hold a summary's opening sentences). With other sections the shared values hold.
DOWNSTREAM_ONLY = {
    "size": "tiny",
    "vocab_size": 8000,
    "downstream_budget": 900.0,
    "probe_train_examples": 0,
    "probe_max_length": 64,
}


QUICK = {
    "size": "tiny",
    "seq_len": 32,
    "batch": 8,
    "steps": 8,
    "warmup_steps": 3,
    "growth_steps": 6,
    "rounds": 2,
    "quality_budget": 10.0,
    "eval_every": 5,
    "eval_blocks": 16,
    "recipe_steps": 10,
    "vocab_size": 2000,
    "probe_epochs": 1,
    "downstream_budget": 5.0,
    "flops_budget": 1e10,
    "adapt_budget": 5.0,
    "adapt_extend": 0,
    "adapt_warm": 0.0,
    "seeds": 2,
    "probe_lr": 1e-4,
    "probe_batch": 8,
    "probe_max_length": 32,
    "probe_train_examples": 64,
    "probe_eval_examples": 32,
}


PRECISION_HELP = (
    "both sides (bf16-head: ours only, the HF recipe fp32); default: ours train.precision auto, the HF recipe bf16 on "
    "CUDA and fp32 on CPU"
)


def _default(key: str) -> str:
    """An option's default as its help states it, read from the values parse_args applies (so the two agree)."""
    text = f"default {_shown(DEFAULTS[key])}"
    if key in DOWNSTREAM_ONLY:
        text += f"; {_shown(DOWNSTREAM_ONLY[key])} for --sections {','.join(FINETUNED)} alone"
    return text


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=bench.__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add = parser.add_argument

    def defaulted(flag: str, kind: type, text: str) -> None:
        """An option that parse_args fills from DEFAULTS (DOWNSTREAM_ONLY, QUICK) when not given; its help says so."""
        add(flag, type=kind, help=f"{text} ({_default(flag[2:].replace('-', '_'))})")

    add("--size", choices=("tiny", "mini", "small", "medium", "base"), help=f"configs/<size>.yaml ({_default('size')})")
    defaulted("--seq-len", int, "tokens per block")
    defaulted("--batch", int, "sequences per optimizer step")
    defaulted("--steps", int, "steps per timed run")
    defaulted("--warmup-steps", int, "steps left out of the timing")
    defaulted("--growth-steps", int, "steps per bare-step run in the growth section")
    defaulted("--rounds", int, "interleaved rounds of each contestant")
    add("--precision", choices=("auto", "fp32", "bf16", "bf16-head"), help=PRECISION_HELP)
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add("--train", help="training text: a file, glob or builtin:python-docs (the default)")
    add("--valid", help="validation text (default valid.txt beside --train, else 5 %% of the training documents)")
    defaulted("--vocab-size", int, "WordPiece vocabulary")
    sections = f"comma-separated subset of {','.join(SECTIONS)} (default: all but {', '.join(FINETUNED)})"
    add("--sections", default=",".join(DEFAULT_SECTIONS), help=sections)
    defaulted("--quality-budget", float, "training seconds a side: quality, tuned, recipes, variants")
    defaulted("--eval-every", int, "steps between evaluations: quality, tuned, recipes, variants")
    defaulted("--eval-blocks", int, "validation blocks per evaluation")
    defaulted("--recipe-steps", int, "steps per side in the recipe and precision sections")
    add(
        "--fast-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change the fast recipe (recipes, variants)",
    )
    add("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
        help="variants: the fast recipe changed, e.g. mb:model.architecture=modernbert (repeatable); "
             "train.max_flops=fast (or max_tokens, max_steps): for the fast run's compute, not its time")  # fmt: skip
    add("--reference", action="append", default=[], metavar="NAME:FOLDER",
        help="variants: a masked LM trained elsewhere on this run's tokenizer (a distillation teacher, say), not "
             "trained here: evaluated and fine-tuned alike, as a row of its own (repeatable)")  # fmt: skip
    add("--electra-set", action="append", default=[], metavar="KEY=VALUE", help="change ELECTRA's recipe (electra)")
    add("--target-ppl", type=float, help="default: the lowest perplexity the HF recipe reached in its budget")
    add(
        "--peak-tflops",
        type=float,
        default=H200_DENSE_BF16_TFLOPS,
        help="a GPU's peak for MFU (default H200 dense bf16); on a CPU the benchmark measures its limit",
    )
    defaulted("--probe-epochs", int, "downstream, electra, objectives, recipes, variants: fine-tuning epochs")
    add("--task", help="downstream, electra, objectives, recipes, variants: a labeled task folder (train/valid/test)")
    add("--pair-task", help="objectives: a sentence-pair task folder (text, pair, label; scripts/make_pair_task.py)")
    defaulted("--flops-budget", float, "objectives: pretraining FLOPs a side (train.max_flops)")
    add("--adapt-base", help="adapt: the encoder to continue, a masked-LM folder or hub name (model.init_from)")
    add("--adapt-train", help="adapt: the new domain's training text (a valid.txt beside it is its held-out text)")
    add("--adapt-valid", help="adapt: the new domain's held-out text (default valid.txt beside --adapt-train)")
    add(
        "--adapt-task",
        help="adapt: a labeled task folder of the new domain (scripts/make_book_task.py builds one); "
        "with neither it nor --task, adapt measures speed and perplexity only",
    )
    defaulted("--adapt-budget", float, "adapt: continued-pretraining seconds a side")
    defaulted("--adapt-extend", int, "adapt: also run tokenizer.extend_vocab N at the same budget; 0: not")
    defaulted("--adapt-warm", float, "adapt: seconds of MLM on --train first, for a base whose head is no LM's")
    defaulted("--downstream-budget", float, "downstream, electra: pretraining seconds a side")
    defaulted("--seeds", int, "downstream, electra, objectives, recipes, variants: fine-tuning seeds per model")
    defaulted("--probe-lr", float, "every section that fine-tunes: fine-tuning learning rate")
    defaulted("--probe-batch", int, "every section that fine-tunes: fine-tuning batch")
    defaulted("--probe-max-length", int, "every section that fine-tunes: tokens per example")
    defaulted("--probe-train-examples", int, "every section that fine-tunes: train examples, a fixed sample; 0: all")
    add(
        "--probe-eval-examples",
        type=int,
        help="every section that fine-tunes: valid/test examples; 0: all (default all)",
    )
    add("--set", action="append", default=[], metavar="KEY=VALUE", help="our side only, e.g. train.compile=true")
    add("--quick", action="store_true", help="tiny everything, for a smoke test")
    add("--out", default=str(REPO / "results"), help="folder for benchmark-<time>.json and .md")
    add("--report-md", metavar="PATH", help="the Markdown report also as PATH, a new file (a measurement file)")
    add("--work-dir", default=str(REPO / "runs" / "benchmark"), help="tokenizer, store and runs (reused)")
    add("--worker", choices=tuple(WORKERS), help=argparse.SUPPRESS)
    add("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else DEFAULTS
    if not args.quick and set(args.sections.replace(" ", "").split(",")) <= set(FINETUNED):
        defaults = {**defaults, **DOWNSTREAM_ONLY}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.train is None:
        args.train = "builtin:python-docs"
    if args.valid is None:
        args.valid = default_valid(args.train)
    return args


def check_args(args: argparse.Namespace) -> set[str]:
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - set(SECTIONS)
    if unknown or not sections:
        raise BenchmarkError(f"--sections takes a subset of {','.join(SECTIONS)} (got {args.sections!r})")
    if not 1 <= args.warmup_steps < args.steps - 1:
        raise BenchmarkError(f"--warmup-steps must be >= 1 and leave 2 timed steps of --steps={args.steps}")
    if args.growth_steps < 4:
        raise BenchmarkError("--growth-steps must be >= 4")
    if args.rounds < 1:
        raise BenchmarkError("--rounds must be >= 1")
    if args.report_md and os.path.lexists(args.report_md):
        raise BenchmarkError(f"--report-md {args.report_md} exists; give a new file name (a report is never replaced)")
    if args.task and not Path(args.task).is_dir():
        raise BenchmarkError(f"--task {args.task} is not a folder: pass a labeled task folder (train/valid/test files)")
    finetuned = set(FINETUNED) & sections
    if finetuned and not args.task:
        raise BenchmarkError(f"{min(finetuned)} needs a labeled task folder: pass --task FOLDER")
    if "adapt" in sections and (args.task or args.adapt_task):  # adapt fine-tunes on the tasks it is given
        finetuned.add("adapt")
    if "variants" in sections and args.task:  # variants fine-tunes when given a task
        finetuned.add("variants")
    if finetuned and args.seeds < 2:
        raise BenchmarkError("--seeds must be >= 2: the interval over seeds needs two")
    if "objectives" in sections and not (args.pair_task and Path(args.pair_task).is_dir()):
        given = f" ({args.pair_task} is not a folder)" if args.pair_task else ""
        raise BenchmarkError(
            f"objectives needs a sentence-pair task folder{given}: pass --pair-task FOLDER "
            "(scripts/make_pair_task.py builds one)"
        )
    if "objectives" in sections:  # read before the pretraining, not found wanting after it
        from mlmtrain.evaluate.tasks import TaskFields, load_task

        load_task(args.pair_task, TaskFields(pair="pair"))
    if "adapt" in sections:
        _check_adapt(args)
    if "variants" in sections:
        from bench.variants import parse_reference, parse_variant

        if not args.variant:
            raise BenchmarkError("variants needs at least one --variant NAME:KEY=VALUE[,KEY=VALUE...]")
        names = [parse_variant(text)[0] for text in args.variant]
        names += [parse_reference(text)[0] for text in args.reference]
        if len(set(names)) < len(names):
            raise BenchmarkError(f"--variant and --reference names must differ (got {', '.join(names)})")
    elif args.reference:
        raise BenchmarkError("--reference is for the variants section: add variants to --sections")
    if "objectives" in sections and not args.flops_budget > 0:
        raise BenchmarkError(f"--flops-budget must be > 0 (got {args.flops_budget:g})")
    if {"throughput", "quality", "tuned", "recipe", "recipes", "downstream", "adapt"} & sections:
        missing = [name for name in ("datasets", "accelerate") if importlib.util.find_spec(name) is None]
        if missing:
            raise BenchmarkError(
                f"the Hugging Face recipe needs {' and '.join(missing)}, not installed in {sys.executable}; "
                'install them (pip install -e ".[bench]", or pip install datasets accelerate); '
                "or run --sections limit,growth only"
            )
    return sections


def _check_adapt(args: argparse.Namespace) -> None:
    """The adapt section's inputs, all read before any training: the base, the domain's text and task."""
    if not args.adapt_base:
        raise BenchmarkError("adapt needs the encoder to continue: pass --adapt-base MODEL (a folder or hub name)")
    if not (args.adapt_train and Path(args.adapt_train).is_file()):
        raise BenchmarkError(
            f"adapt needs the new domain's text as a file: pass --adapt-train FILE (got {args.adapt_train})"
        )
    valid = args.adapt_valid or default_valid(args.adapt_train)
    if not (valid and Path(valid).is_file()):
        raise BenchmarkError(
            "adapt needs the domain's held-out text: put valid.txt beside --adapt-train or pass --adapt-valid"
        )
    if args.adapt_task and not Path(args.adapt_task).is_dir():
        raise BenchmarkError(
            f"--adapt-task {args.adapt_task} is not a folder: pass a labeled task of the new domain as --adapt-task "
            "FOLDER (scripts/make_book_task.py), or leave it out to measure speed and perplexity only"
        )
    if not args.adapt_budget > 0 or args.adapt_warm < 0 or args.adapt_extend < 0:
        raise BenchmarkError("--adapt-budget must be > 0, --adapt-warm and --adapt-extend >= 0")
    from mlmtrain.evaluate.tasks import TaskFields, load_task
    from mlmtrain.train.base_model import check_base

    if args.adapt_task:
        load_task(args.adapt_task, TaskFields())
    check_base(args.adapt_base)  # a base that is no BERT masked LM is refused before the race
