"""mlmtrain's speed claims, measured in one run: against the Hugging Face recipe, against the bare-step limit,
in time to a target perplexity, and in how cost grows with sequence length and model size.

    python scripts/benchmark.py                                   # every section: mini, seq 128, batch 32
    python scripts/benchmark.py --quick                           # a smoke test: tiny sizes, a minute or two
    python scripts/benchmark.py --sections throughput,limit --size base --batch 256 --precision bf16
    python scripts/benchmark.py --sections recipes --fast-set masking.mlm_probability=0.4

1. throughput: steady-state training tokens/s of `mlmtrain pretrain` against `transformers.Trainer` +
   `DataCollatorForLanguageModeling` + `BertForMaskedLM` on text grouped into blocks as run_mlm.py does it.
2. limit: tokens/s of the loop's own `train_step` (forward with the sparse head, backward, clip, lr, AdamW) on
   micro-batches fetched beforehand; ours / limit is what the loop and the data path leave of it.
3. quality: training seconds (evaluation excluded) each side needs to reach a target validation perplexity, from
   the same initial weights, each with its default recipe, scored by one evaluator (`evaluate_blocks`, fixed masks).
4. tuned: as quality, but the HF recipe gets our learning rate, warm-up and schedule (over its time budget), and
   the target is the perplexity it reaches in the budget.
5. recipe: both sides with OUR hyperparameters for the same steps, validation perplexity by step (per step, our
   sparse head, masking and loop must learn at least as well as the recipe).
6. precision: ours in fp32 and in bf16 for the same steps and seed: the speed-up, and perplexity within ~2 %.
7. recipes: the classic BERT recipe, the fast recipe (FAST_RECIPE) and the HF recipe given our schedule at equal wall
   time: validation perplexity on the classic 15 % masks, and the downstream probe where `mlmtrain probe` exists.
8. growth: tokens/s and peak memory of the bare step for several seq_len and model sizes.
9. electra (on request, not in the default list): MLM and ELECTRA models of the same encoder size, from the same
   tokenizer and token store, each pretrain for --downstream-budget seconds; then each, and the untrained
   encoder, is fine-tuned on --task as `mlmtrain probe` does, with identical settings over --seeds seeds: test
   accuracy mean with its 95 % interval (Student's t over seeds), and each objective's tokens/s.
10. downstream (only on request: it runs for an hour on 2 CPU cores): from the same initial weights, ours and the HF
   recipe (our lr, warm-up and schedule, stretched over the budget) each pretrain for --downstream-budget seconds;
   then both and the untrained initial model are fine-tuned alike (`mlmtrain probe`) on a labeled task for --seeds
   seeds and scored on its test split.

Every contestant runs in a process of its own (its own allocator and peak memory) and is timed the same way: wall
time from the end of warm-up step k to the end of the last step n, tokens/s = (tokens_n - tokens_k) / (t_n - t_k).
Rounds interleave the contestants, rotating who goes first, so slow drift of the machine hits all alike.
Results: results/benchmark-<time>.json and .md; docs/benchmarks/methodology.md says what each number means.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import itertools
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

import torch
from transformers import TrainerCallback

from mlmtrain.config import Config, DataConfig, load_config
from mlmtrain.distributed import init_distributed
from mlmtrain.errors import UserError
from mlmtrain.evaluate import evaluate_blocks
from mlmtrain.masking import VocabInfo, evaluation_masking
from mlmtrain.model import H200_DENSE_BF16_TFLOPS, build_model, flops_per_token
from mlmtrain.optim import build_optimizer, learning_rate
from mlmtrain.precision import cpu_bf16_support, cpu_vendor, cpuinfo_field, resolve_precision
from mlmtrain.progress import say
from mlmtrain.step import build_parts, train_step
from mlmtrain.tokenizer import load_tokenizer
from mlmtrain.tokens import tokenize_corpus
from mlmtrain.train import eval_set

REPO = Path(__file__).resolve().parent.parent
SECTIONS = (
    "throughput",
    "limit",
    "quality",
    "tuned",
    "recipe",
    "precision",
    "recipes",
    "growth",
    "downstream",
    "electra",
)
DEFAULT_SECTIONS = SECTIONS[:8]  # downstream and electra pretrain for many minutes and fine-tune: only when asked
HF_MLM_PROBABILITY = 0.15  # what run_mlm.py hands DataCollatorForLanguageModeling
LABELS = {
    "ours": "mlmtrain pretrain",
    "hf": "HF Trainer recipe",
    "bare": "bare step (limit)",
    "untrained": "untrained (initial weights)",
    "electra": "mlmtrain pretrain, ELECTRA",
    "classic": "mlmtrain, classic BERT recipe",
    "fast": "mlmtrain, fast recipe",
}
# The recipes section races three recipes on the shipped config's model. The fast recipe (the shipped default of
# the CPU-sized configs since it won this race): no dropout (Cramming, ModernBERT), 40 % of the tokens masked with a
# fixed count per block (Wettig et al.; Cramming's fixed count), Cramming's one-cycle triangle over the budget.
# --fast-set KEY=VALUE changes it for a run (e.g. masking.mlm_probability=0.25, Cramming's rate).
FAST_RECIPE = {
    "model.dropout": 0.0,
    "masking.mlm_probability": 0.4,
    "masking.fixed_count": True,
    "optim.schedule": "one-cycle",
}
# The electra section's ELECTRA contestant: the shipped config's recipe, but the ELECTRA paper's 15 % of the tokens
# replaced. With the fast recipe's 40 %, the discriminator judged blocks of which 40 % were generator samples and
# stayed at the base rate for the whole budget (docs/benchmarks/log.md).
# --electra-set KEY=VALUE changes it for a run (e.g. masking.mlm_probability=0.4, electra.generator_size=0.5).
ELECTRA_RECIPE = {"masking.mlm_probability": 0.15}
# The classic BERT recipe it is judged against: dropout 0.1, 15 % of the tokens masked, linear decay.
CLASSIC_RECIPE = {
    "model.dropout": 0.1,
    "masking.mlm_probability": 0.15,
    "masking.fixed_count": False,
    "optim.schedule": "linear",
}

# Issue 7's targets. CPU: 2 cores, fp32, mini; GPU: H200, bf16, base. Other settings print them for orientation.
TARGETS = {
    "cpu": {
        "throughput_ratio": 3.0,
        "limit_share": 0.95,
        "time_ratio": 1 / 3,
        "tuned_time_ratio": 1 / 4,
        "same_step_ppl_ratio": 1.0,
        "bf16_ppl_drift": 0.02,
    },
    "cuda": {
        "throughput_ratio": 2.0,
        "limit_share": 0.95,
        "time_ratio": 1 / 3,
        "tuned_time_ratio": 1 / 4,
        "same_step_ppl_ratio": 1.0,
        "bf16_ppl_drift": 0.02,
        "mfu": 0.45,
    },
}

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
    "seeds": 3,
    "probe_lr": 3e-4,
    "probe_batch": 32,
    "probe_max_length": 128,
    "probe_train_examples": 2000,
    "probe_eval_examples": 0,
}
# --sections downstream and/or electra alone: a size and vocabulary at which 2 cores get past unigram statistics in
# the budget (30,522 words and three minutes do not; mini with 8,000 words in ten minutes did not either: see
# docs/benchmarks/log.md), and a fine-tuning long enough to tell encoders apart (all train examples; 64 tokens hold a
# summary's opening sentences). With other sections the shared values hold.
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
    "seeds": 2,
    "probe_lr": 1e-4,
    "probe_batch": 8,
    "probe_max_length": 32,
    "probe_train_examples": 64,
    "probe_eval_examples": 32,
}
# Growth: seq_len varies at one size, size varies at one seq_len.
GROWTH = {"seq_lens": (128, 256, 512), "seq_size": "mini", "sizes": ("tiny", "mini", "small"), "size_seq": 128}
QUICK_GROWTH = {"seq_lens": (32, 64), "seq_size": "tiny", "sizes": ("tiny", "mini"), "size_seq": 32}


class BenchmarkError(Exception):
    """A benchmark that cannot run or whose contestant failed; main prints it as one line."""


# ---------------------------------------------------------------------------------------------
# What every contestant shares


@dataclass
class Setup:
    """The resolved options and the data both sides read: one tokenizer and token store, one text file."""

    args: argparse.Namespace
    device: str
    precision: str  # ours: train.precision (auto unless --precision)
    hf_precision: str  # the HF recipe's: bf16 on CUDA (its --bf16), else fp32 (its default), unless --precision
    train_text: Path
    valid_text: Path
    data_dir: Path  # tokenizer/ and tokens/, built once by `tokenize`

    @property
    def work_dir(self) -> Path:
        return Path(self.args.work_dir)

    def config_path(self, size: Optional[str] = None) -> Path:
        return REPO / "configs" / f"{size or self.args.size}.yaml"

    def run_dir(self, name: str) -> Path:
        return self.work_dir / "runs" / name

    def overrides(self, run_dir: Path, seq_len: Optional[int] = None, extra: Optional[dict] = None) -> list[str]:
        """--set options every contestant shares (the HF side reads the same config for sizes and data)."""
        values: dict[str, Any] = {
            "data.train": self.train_text,
            "data.validation": self.valid_text,
            "tokenizer.path": self.data_dir / "tokenizer",
            "data.store": self.data_dir / "tokens",
            "tokenizer.vocab_size": self.args.vocab_size,
            "data.seq_len": seq_len or self.args.seq_len,
            "train.batch_size": self.args.batch,
            "train.precision": self.precision,
            "train.device": self.device,
            "train.seed": 0,
            "train.run_dir": run_dir,
            "train.progress": False,
            "train.eval_max_blocks": self.args.eval_blocks,
            "checkpoint.save_every": 0,  # one checkpoint, after the last step (outside the timed window)
            "checkpoint.keep_last": 1,
        }
        values.update(extra or {})
        return [f"{key}={_yaml_scalar(value)}" for key, value in values.items()]

    def hf(self, run_dir: Path, extra: Optional[dict] = None) -> list[str]:
        """The HF side's overrides: the shared ones at the HF recipe's own precision and dropout (BertConfig's
        0.1, which run_mlm.py keeps, whatever our config's recipe says)."""
        own = {"train.precision": self.hf_precision, "model.dropout": CLASSIC_RECIPE["model.dropout"]}
        return self.overrides(run_dir, extra={**own, **(extra or {})})

    def ours(self, run_dir: Path, seq_len: Optional[int] = None, extra: Optional[dict] = None) -> list[str]:
        """Our side's overrides: the shared ones, then the pass-through --set options (compile, vocab padding...)."""
        return self.overrides(run_dir, seq_len, extra) + list(self.args.set)


def with_changes(recipe: dict[str, Any], changes: list[str]) -> dict[str, Any]:
    """A recipe with a run's KEY=VALUE changes (--fast-set, --electra-set) on top."""
    return recipe | dict(item.split("=", 1) for item in changes)


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_valid(train: str) -> Optional[str]:
    """valid.txt beside a training file, when there is one; else None (hold out a share of the training text)."""
    sibling = Path(train).parent / "valid.txt"
    return str(sibling) if Path(train).is_file() and sibling.is_file() else None


def text_files(train: str, valid: Optional[str], work_dir: Path) -> tuple[Path, Path]:
    """Plain text, one document a line, that both sides train on (the HF recipe reads it with load_dataset("text")).

    A .txt training file with a validation source is used as it is; anything else (builtin:python-docs, a
    held-out share of the training documents, other formats) is written out once under the work dir.
    """
    if valid is not None and train.endswith(".txt") and Path(train).is_file():
        return Path(train).resolve(), Path(valid).resolve()
    from mlmtrain.corpus import corpus_splits

    train_corpus, valid_corpus = corpus_splits(DataConfig(train=train, validation=valid))
    folder = work_dir / f"text-{train_corpus.fingerprint()}"
    if not (folder / "COMPLETE").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name, corpus in (("train.txt", train_corpus), ("valid.txt", valid_corpus)):
            with open(folder / name, "w", encoding="utf-8") as out:
                out.writelines(" ".join(text.split()) + "\n" for text in corpus)  # one line per document
        (folder / "COMPLETE").write_text("ok\n")
    return (folder / "train.txt").resolve(), (folder / "valid.txt").resolve()


def prepare(args: argparse.Namespace) -> Setup:
    """Resolve device and data, then tokenize once: every contestant finds the tokenizer and store up to date."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BenchmarkError(f"--device {device}, but this torch sees no GPU; use --device cpu (or auto)")
    hf_precision = args.precision or ("bf16" if device.startswith("cuda") else "fp32")
    hf_precision = "fp32" if hf_precision == "bf16-head" else hf_precision  # the HF recipe has no head-only autocast
    work_dir = Path(args.work_dir)
    train_text, valid_text = text_files(args.train, args.valid, work_dir)
    digest = hashlib.blake2b(f"{train_text}\n{valid_text}".encode(), digest_size=4).hexdigest()
    data_dir = work_dir / f"data-v{args.vocab_size}-{digest}"
    setup = Setup(args, device, args.precision or "auto", hf_precision, train_text, valid_text, data_dir)
    tokenize_corpus(load_config(setup.config_path(), setup.overrides(setup.run_dir("tokenize"))), quiet=True)
    return setup


# ---------------------------------------------------------------------------------------------
# Timing: one rule for every contestant


def steady_tokens_per_s(points: list[tuple[int, float]], warmup_steps: int) -> float:
    """(tokens_n - tokens_k) / (t_n - t_k) over per-step (cumulative tokens, end time): k = warmup_steps, n = last."""
    if len(points) <= warmup_steps:
        raise BenchmarkError(f"only {len(points)} steps were timed; need more than --warmup-steps={warmup_steps}")
    (tokens_k, time_k), (tokens_n, time_n) = points[warmup_steps - 1], points[-1]
    return (tokens_n - tokens_k) / max(time_n - time_k, 1e-9)


def spread(values: list[float]) -> dict[str, Any]:
    return {"values": values, "median": statistics.median(values), "min": min(values), "max": max(values)}


def time_to_target(evals: list[dict[str, float]], target: float) -> Optional[float]:
    """Training seconds at which perplexity first reaches `target`: linear between the evaluations around it."""
    previous = None
    for point in evals:
        if point["eval_ppl"] <= target:
            if previous is None:  # already there at the first evaluation: its time is an upper bound
                return point["train_seconds"]
            t0, p0, t1, p1 = previous["train_seconds"], previous["eval_ppl"], point["train_seconds"], point["eval_ppl"]
            return t0 + (t1 - t0) * (p0 - target) / (p0 - p1)
        previous = point
    return None


# ---------------------------------------------------------------------------------------------
# Workers: the HF recipe and the bare step, each run as `benchmark.py --worker KIND --spec FILE`


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_device_memory(device: torch.device) -> dict[str, float]:
    """The GPU's peak allocation, for the report (host memory is measured from outside, by run_logged)."""
    return {"peak_device_mb": torch.cuda.max_memory_allocated(device) / 2**20} if device.type == "cuda" else {}


class StepClock(TrainerCallback):
    """Times the HF Trainer as our loop is timed: a stamp at the end of every optimizer step.

    With `evaluate`, it also scores the model every `eval_every` steps and at the end, pausing the clock while it
    does (the stamps are training seconds), and stops training once `budget` training seconds are spent.
    """

    def __init__(
        self,
        device: torch.device,
        evaluate: Optional[Callable[[Any], Any]] = None,
        eval_every: int = 0,
        budget: Optional[float] = None,
    ) -> None:
        self.device, self.evaluate, self.eval_every, self.budget = device, evaluate, eval_every, budget
        self.ends: list[float] = []
        self.evals: list[dict[str, float]] = []
        self.start, self.paused = 0.0, 0.0

    def seconds(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        _sync(self.device)  # the step's kernels must be done before it counts as ended (CUDA runs ahead)
        seconds = self.seconds()
        self.ends.append(seconds)
        spent = self.budget is not None and seconds >= self.budget
        if self.evaluate is not None and (state.global_step % self.eval_every == 0 or spent):
            self._score(model, state.global_step, seconds)
        if spent:
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self.evaluate is not None and (not self.evals or self.evals[-1]["step"] != state.global_step):
            self._score(model, state.global_step, self.seconds())  # the recipe ran out of epochs first

    def _score(self, model: Any, step: int, seconds: float) -> None:
        started = time.perf_counter()
        result = self.evaluate(model)
        self.evals.append(
            {
                "step": step,
                "train_seconds": seconds,
                "eval_loss": result.loss,
                "eval_ppl": result.perplexity,
                "eval_seconds": result.seconds,
            }
        )
        self.paused += time.perf_counter() - started


def _evaluator(cfg: Config, tokenizer: Any) -> Callable[[Any], Any]:
    """model -> EvalResult with our evaluator and settings: the blocks, masks, batch and precision `pretrain` uses."""
    vocab = VocabInfo.from_tokenizer(tokenizer)
    blocks, indices = eval_set(cfg, tokenizer)
    seed, batch_size, masking = cfg.masking.eval_seed, cfg.train.batch_size, evaluation_masking(cfg.masking)

    def evaluate(mlm: Any) -> Any:
        device = next(mlm.parameters()).device
        autocast_dtype = resolve_precision(cfg.train.precision, device).dtype
        return evaluate_blocks(mlm, blocks, indices, vocab, masking, seed, batch_size, device, autocast_dtype)

    return evaluate


def run_mlm_blocks(tokenizer: Any, text_file: str, seq_len: int, cache_dir: str) -> Any:
    """The training set as run_mlm.py builds it (no --line_by_line): every line tokenized with [CLS] … [SEP] and
    its special-tokens mask, all concatenated and cut into blocks of seq_len (the remainder dropped)."""
    from datasets import load_dataset

    raw = load_dataset("text", data_files={"train": text_file}, cache_dir=cache_dir)["train"]

    def tokenize(examples: dict[str, list]) -> Any:
        return tokenizer(examples["text"], return_special_tokens_mask=True)

    def group_texts(examples: dict[str, list]) -> dict[str, list]:
        joined = {key: list(itertools.chain(*examples[key])) for key in examples}
        total = len(joined["input_ids"]) // seq_len * seq_len
        return {key: [ids[i : i + seq_len] for i in range(0, total, seq_len)] for key, ids in joined.items()}

    tokenized = raw.map(tokenize, batched=True, remove_columns=["text"])
    return tokenized.map(group_texts, batched=True)


# The HF worker's modes that run our hyperparameters and our learning-rate schedule (`clocked_schedule`); the others
# (throughput, quality) run the recipe's own. One set for both, so the two cannot drift apart again.
OUR_SCHEDULE_MODES = ("recipe", "tuned", "downstream")


def recipe_arguments(cfg: Config, spec: dict[str, Any]) -> dict[str, Any]:
    """TrainingArguments as a run_mlm.py user passes them: only batch, precision and output are set, plus (for the
    throughput run) max_steps. Logging stays at its default (every 500 steps): the timing callback needs none, and
    logging every step would charge the recipe a host sync per step. No checkpoints, no reporting.

    Modes recipe, tuned and downstream give it our hyperparameters; their learning rate follows our schedule
    exactly (`clocked_schedule`), by step for recipe, over the time budget for tuned and downstream (whose clock
    ends the run)."""
    arguments = {
        "output_dir": spec["run_dir"],
        "per_device_train_batch_size": cfg.train.batch_size,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": cfg.train.device == "cpu",
        "bf16": cfg.train.precision == "bf16",
    }
    if spec["mode"] in ("throughput", "recipe"):
        arguments.update(max_steps=spec["steps"])
    if spec["mode"] in ("tuned", "downstream"):
        # the clock stops it: run_mlm.py's default of 3 epochs could end it before the budget (tiny on 1 M tokens
        # did 3 epochs in 376 of its 900 s), and equal time means equal time
        arguments.update(max_steps=10**7)
    if spec["mode"] in OUR_SCHEDULE_MODES:  # our hyperparameters: the two differ in head, masking, loop
        optim = cfg.optim
        arguments.update(
            learning_rate=optim.lr,
            warmup_steps=optim.warmup_steps,
            weight_decay=optim.weight_decay,
            adam_beta1=optim.beta1,
            adam_beta2=optim.beta2,
            adam_epsilon=optim.eps,
            max_grad_norm=optim.grad_clip,
            seed=cfg.train.seed,
        )
    # quality: its defaults (lr 5e-5, linear decay over 3 epochs, no warm-up, no weight decay)
    return arguments


def hf_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The HF recipe: Trainer + DataCollatorForLanguageModeling + BertForMaskedLM (dense head, as HF runs it)."""
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    cfg = load_config(spec["config"], spec["overrides"])
    device = torch.device(cfg.train.device)
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.tokenizer_dir))
    dataset = run_mlm_blocks(tokenizer, spec["train_text"], cfg.data.seq_len, spec["hf_cache"])
    torch.manual_seed(cfg.train.seed)  # the same initial weights as ours: same seed, same build_model
    model = build_model(cfg.model, vocab_size=len(tokenizer), pad_id=tokenizer.pad_token_id)

    evaluate = _evaluator(cfg, tokenizer) if spec["mode"] in ("quality", "tuned", "recipe") else None
    clock = StepClock(device, evaluate, spec.get("eval_every", 0), spec.get("budget"))
    ours = spec["mode"] in OUR_SCHEDULE_MODES
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**recipe_arguments(cfg, spec)),
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=HF_MLM_PROBABILITY),
        callbacks=[clock],
        optimizers=clocked_schedule(model, cfg, clock, spec) if ours else (None, None),
    )
    trainer.train()
    if spec.get("save"):  # the downstream section fine-tunes what the recipe pretrained
        model.save_pretrained(spec["save"])
        tokenizer.save_pretrained(spec["save"])
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len  # grouped blocks are full: no padding to count
    return {
        "points": [((i + 1) * tokens_per_step, t) for i, t in enumerate(clock.ends)],
        "evals": clock.evals,
        "steps": len(clock.ends),
        **_peak_device_memory(device),
    }


def clocked_schedule(model: Any, cfg: Config, clock: StepClock, spec: dict[str, Any]) -> tuple[Any, Any]:
    """Our AdamW (`build_optimizer`) and a LambdaLR that follows our `learning_rate`: progress is step / steps
    (recipe) or the recipe's training seconds / budget (tuned), so the HF recipe gets our lr, warm-up and schedule,
    stretched over its own time budget as `pretrain` stretches ours."""
    optimizer = build_optimizer(model, cfg.optim, torch.device(cfg.train.device))
    warmup_end = [0.0]

    def progress(step: int) -> float:
        if spec.get("budget"):
            return clock.seconds() / spec["budget"] if clock.start else 0.0  # 0 before training begins
        return step / spec["steps"]

    def factor(step: int) -> float:
        if step == cfg.optim.warmup_steps:
            warmup_end[0] = progress(step)
        return learning_rate(step, progress(step), cfg.optim, warmup_end[0]) / cfg.optim.lr

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def bare_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The limit: `train_step` (forward with the sparse head, backward, clip, lr, AdamW) on the parts `pretrain`
    builds (`build_parts`), fed micro-batches fetched beforehand: no data loading, logging or evaluation."""
    cfg = load_config(spec["config"], spec["overrides"])
    cfg.data.num_workers = 0  # the batches are fetched once, before the clock starts
    parts = build_parts(cfg, init_distributed(cfg.train.device))
    fetched = [[next(parts.batches) for _ in range(parts.layout.accum_steps)] for _ in range(min(spec["steps"], 8))]
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    points = []
    start = time.perf_counter()
    for step in range(1, spec["steps"] + 1):
        train_step(parts, fetched[step % len(fetched)], clock=lambda: 0.0)
        points.append((step * tokens_per_step, time.perf_counter() - start))
    return {
        "points": points,
        "parameters": sum(p.numel() for p in parts.mlm.parameters()),
        **_peak_device_memory(parts.ctx.device),
    }


WORKERS = {"hf": hf_worker, "bare": bare_worker}


# ---------------------------------------------------------------------------------------------
# Running contestants as subprocesses


def _child_env() -> dict[str, str]:
    """The children import mlmtrain from this checkout even where it is not installed."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def run_logged(command: list[str], run_dir: Path) -> float:
    """Run `command` with its output in run_dir/benchmark.log; returns its peak RSS in MiB (its process tree's)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "benchmark.log"
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + shlex.join(command) + "\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=_child_env())
        # wait4, not wait: its rusage is this child's own (RUSAGE_CHILDREN would be the max over all children so far)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
        raise BenchmarkError(f"{command[1:4]} failed with exit code {process.returncode}; {log} ends:\n{tail}")
    return usage.ru_maxrss / 1024


def run_worker(kind: str, spec: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, run_dir=str(run_dir))
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=1))
    rss = run_logged([sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--spec", str(run_dir)], run_dir)
    return dict(json.loads((run_dir / "result.json").read_text()), process_peak_rss_mb=rss)


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(train lines, eval lines) of a metrics.jsonl."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [m for m in lines if "loss" in m], [m for m in lines if "eval_ppl" in m]


def run_ours(setup: Setup, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """`python -m mlmtrain pretrain`, as a user runs it; its per-step points and evaluations come from metrics.jsonl."""
    command = [sys.executable, "-m", "mlmtrain", "pretrain", "--config", str(setup.config_path()), "--overwrite"]
    command += [arg for override in overrides for arg in ("--set", override)]
    rss = run_logged(command, run_dir)
    train, evals = read_metrics(run_dir / "metrics.jsonl")
    return {
        "points": [(m["tokens"], m["elapsed_s"]) for m in train],
        "evals": _training_clock(train, evals),
        "steps": train[-1]["step"] if train else 0,
        "process_peak_rss_mb": rss,
        "command": shlex.join(command),
    }


def _training_clock(train: list[dict], evals: list[dict]) -> list[dict[str, float]]:
    """Evaluations on the training clock: elapsed_s of the step evaluated, minus the evaluations before it.

    elapsed_s counts evaluation time; eval lines carry `eval_seconds` (0 if an older mlmtrain lacks it). Needs a
    train line at every evaluated step (log_every 1).
    """
    elapsed = {m["step"]: m["elapsed_s"] for m in train}
    out, paused = [], 0.0
    for m in evals:
        out.append(
            {
                "step": m["step"],
                "train_seconds": elapsed[m["step"]] - paused,
                "eval_loss": m["eval_loss"],
                "eval_ppl": m["eval_ppl"],
                "eval_seconds": m.get("eval_seconds", 0.0),
            }
        )
        paused += m.get("eval_seconds", 0.0)
    return out


# ---------------------------------------------------------------------------------------------
# Sections


def _contestants(sections: set[str]) -> list[str]:
    """Who runs in the timed rounds: ours whenever there is a ratio to make, the peer and the limit on request."""
    names = ["ours"]
    if "throughput" in sections:
        names.append("hf")
    if "limit" in sections:
        names.append("bare")
    return names


def _throughput_run(setup: Setup, name: str, round_number: int) -> dict[str, Any]:
    """One timed run of one contestant: eval off, a step's metrics every step, a checkpoint only at the end."""
    a = setup.args
    run_dir = setup.run_dir(f"throughput-{name}-r{round_number}")
    if name == "ours":
        overrides = setup.ours(run_dir, extra={"train.max_steps": a.steps, "train.log_every": 1, "train.eval_every": 0})
        return run_ours(setup, run_dir, overrides)
    spec = {"config": str(setup.config_path()), "steps": a.steps, "warmup_steps": a.warmup_steps}
    if name == "hf":
        spec.update(mode="throughput", train_text=str(setup.train_text), hf_cache=str(setup.work_dir / "hf-datasets"))
        return run_worker("hf", dict(spec, overrides=setup.hf(run_dir)), run_dir)
    return run_worker("bare", dict(spec, overrides=setup.ours(run_dir)), run_dir)


def measure_rounds(setup: Setup, sections: set[str]) -> dict[str, Any]:
    """Sections 1 and 2: the contestants interleaved round after round, who goes first rotating each round."""
    a = setup.args
    names = _contestants(sections)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for round_number in range(1, a.rounds + 1):
        shift = (round_number - 1) % len(names)
        for name in names[shift:] + names[:shift]:
            say(f"benchmark: round {round_number}/{a.rounds}: {LABELS[name]}")
            runs[name].append(_throughput_run(setup, name, round_number))
    out: dict[str, Any] = {}
    for name in names:
        out[name] = dict(
            spread([steady_tokens_per_s(run["points"], a.warmup_steps) for run in runs[name]]),
            peak_rss_mb=max(run["process_peak_rss_mb"] for run in runs[name]),
            # the workers report the GPU's peak; `pretrain` does not tell its own
            peak_device_mb=_max_or_none([run.get("peak_device_mb") for run in runs[name]]),
        )
    out["ours"]["command"] = runs["ours"][0]["command"]
    if "hf" in out:
        out["ratio"] = out["ours"]["median"] / out["hf"]["median"]
    if "bare" in out:
        out["ours_over_limit"] = out["ours"]["median"] / out["bare"]["median"]
    out["mfu"] = model_flops_utilisation(setup, out)
    return out


def _max_or_none(values: list[Optional[float]]) -> Optional[float]:
    known = [value for value in values if value is not None]
    return max(known) if known else None


def model_flops_utilisation(setup: Setup, rounds: dict[str, Any]) -> dict[str, Any]:
    """MFU = flops_per_token(sparse head) x tokens/s / peak FLOP/s, for every contestant measured."""
    cfg = load_config(setup.config_path(), setup.ours(setup.run_dir("flops")))
    vocab_size = len(load_tokenizer(cfg.tokenizer_dir))
    flops = flops_per_token(cfg.model, vocab_size, cfg.data.seq_len, cfg.masking.mlm_probability, sparse_head=True)
    peak = setup.args.peak_tflops * 1e12
    out: dict[str, Any] = {
        "formula": f"flops_per_token(sparse head) x tokens/s / ({setup.args.peak_tflops:g} TFLOP/s)",
        "flops_per_token": flops,
        "peak_tflops": setup.args.peak_tflops,
    }
    for name in ("ours", "hf", "bare"):
        if name in rounds:
            out[name] = flops * rounds[name]["median"] / peak
    return out


def _hf_spec(setup: Setup, run_dir: Path, mode: str, extra: Optional[dict] = None, **fields: Any) -> dict[str, Any]:
    """The HF worker's orders for an evaluated run (quality or recipe): config, text, evaluation cadence."""
    return {
        "config": str(setup.config_path()),
        "overrides": setup.hf(run_dir, extra=extra),
        "mode": mode,
        "eval_every": setup.args.eval_every,
        "train_text": str(setup.train_text),
        "hf_cache": str(setup.work_dir / "hf-datasets"),
        **fields,
    }


def _ours_for_time(setup: Setup, name: str, recipe: Optional[dict] = None) -> dict[str, Any]:
    """`pretrain` for --quality-budget seconds (train.max_time: the schedule stretches to fit), evaluated every
    --eval-every steps; `recipe` overrides come before the pass-through --set options."""
    a = setup.args
    say(f"benchmark: {name}: mlmtrain pretrain for {a.quality_budget:g} s")
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
    run = run_worker("hf", _hf_spec(setup, run_dir, mode, budget=a.quality_budget, **save), run_dir)
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
        "same_step": _same_step(ours["evals"], hf["evals"]),
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
    """Section 4: both sides with OUR hyperparameters for --recipe-steps steps, evaluated alike: per step, our
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
    hf = run_worker("hf", _hf_spec(setup, run_dir, "recipe", extra=extra, steps=a.recipe_steps), run_dir)
    return {
        "steps": a.recipe_steps,
        "warmup_steps": extra["optim.warmup_steps"],
        "ours": ours["evals"],
        "hf": hf["evals"],
        "same_step": _same_step(ours["evals"], hf["evals"]),
    }


def section_precision(setup: Setup) -> dict[str, Any]:
    """Section 6: ours in fp32 and in bf16 autocast (bf16-head on a CPU with AVX512-BF16 and no AMX, whether
    precision auto picks it there or not), same seed, same --recipe-steps steps: the speed-up, so that auto's
    choice on this machine is checked, and that learning per step is unchanged (validation perplexity at the same
    step within ~2 %)."""
    a = setup.args
    extra = {
        "optim.warmup_steps": max(1, a.recipe_steps // 10),
        "train.max_steps": a.recipe_steps,
        "train.log_every": 1,
        "train.eval_every": a.eval_every,
    }
    runs = {}
    auto = resolve_precision("auto", torch.device(setup.device)).name
    support = cpu_bf16_support() if setup.device == "cpu" else None
    other = "bf16-head" if auto == "bf16-head" or support == "avx512" else "bf16"
    for name in ("fp32", other):
        say(f"benchmark: precision: mlmtrain pretrain in {name}, {a.recipe_steps} steps")
        run_dir = setup.run_dir(f"precision-{name}")
        runs[name] = run_ours(setup, run_dir, setup.ours(run_dir, extra={**extra, "train.precision": name}))
    same = _same_step(runs[other]["evals"], runs["fp32"]["evals"])
    rates = {name: steady_tokens_per_s(run["points"], a.warmup_steps) for name, run in runs.items()}
    return {
        "steps": a.recipe_steps,
        "other": other,
        "auto": auto,
        "cpu_bf16_support": support and f"{support} ({cpu_vendor() or 'vendor unknown'})",
        "tokens_per_s": rates,
        "speedup": rates[other] / rates["fp32"],
        "evals": {name: run["evals"] for name, run in runs.items()},
        "same_step": same and {"step": same["step"], "bf16_ppl": same["ours_ppl"], "fp32_ppl": same["hf_ppl"]},
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


def _same_step(ours: list[dict], hf: list[dict]) -> Optional[dict[str, Any]]:
    """Perplexity of both at the last step both evaluated (issue 4: after the same number of steps)."""
    hf_by_step = {point["step"]: point["eval_ppl"] for point in hf}
    common = [point for point in ours if point["step"] in hf_by_step]
    if not common:
        return None
    last = common[-1]
    return {"step": last["step"], "ours_ppl": last["eval_ppl"], "hf_ppl": hf_by_step[last["step"]]}


def growth_cells(quick: bool) -> list[tuple[str, int]]:
    grid = QUICK_GROWTH if quick else GROWTH
    cells = [(grid["seq_size"], seq_len) for seq_len in grid["seq_lens"]]
    cells += [(size, grid["size_seq"]) for size in grid["sizes"]]
    return list(dict.fromkeys(cells))  # the cell the two lines share runs once


def section_growth(setup: Setup) -> dict[str, Any]:
    """Section 4: the bare step's tokens/s and peak memory per (size, seq_len), one process each."""
    a = setup.args
    # the bare step has no loader to start: a few warm-up steps do (and seq 512 steps are long on a CPU)
    warmup_steps = min(a.warmup_steps, a.growth_steps // 2)
    rows = []
    for size, seq_len in growth_cells(a.quick):
        say(f"benchmark: growth: bare step, {size}, seq_len {seq_len}")
        run_dir = setup.run_dir(f"growth-{size}-{seq_len}")
        spec = {"config": str(setup.config_path(size)), "steps": a.growth_steps, "warmup_steps": warmup_steps}
        run = run_worker("bare", dict(spec, overrides=setup.ours(run_dir, seq_len=seq_len)), run_dir)
        rows.append(
            {
                "size": size,
                "seq_len": seq_len,
                "parameters": run["parameters"],
                "tokens_per_s": steady_tokens_per_s(run["points"], warmup_steps),
                "peak_device_mb": run.get("peak_device_mb"),
                "peak_rss_mb": run["process_peak_rss_mb"],
            }
        )
    return {"batch": a.batch, "steps": a.growth_steps, "warmup_steps": warmup_steps, "rows": rows}


# Student's t, two-sided 95 %, by degrees of freedom: a handful of seeds is too few for the normal 1.96
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95 % interval over seeds (t with n - 1 degrees of freedom; 1.96 beyond 10; none for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"values": values, "mean": mean, "ci95": None, "half_width": float("nan")}
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return {"values": values, "mean": mean, "ci95": [mean - half, mean + half], "half_width": half}


# ---------------------------------------------------------------------------------------------
# Section 6: downstream


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


def probe_command(setup: Setup, model: Path, seed: int) -> list[str]:
    """The `mlmtrain probe` command line that gives one of the section's fine-tuning results."""
    a = setup.args
    command = ["mlmtrain", "probe", "--model", str(model), "--task", a.task, "--seed", str(seed)]
    command += ["--epochs", str(a.probe_epochs), "--lr", str(a.probe_lr), "--batch-size", str(a.probe_batch)]
    command += ["--max-length", str(a.probe_max_length), "--device", setup.device]
    if a.probe_train_examples:
        command += ["--max-train-examples", str(a.probe_train_examples)]
    if a.probe_eval_examples:
        command += ["--max-eval-examples", str(a.probe_eval_examples)]
    return command


def finetune_all(setup: Setup, models: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    """Each model fine-tuned for each seed, in this process, as `probe_command` runs it: the models share one
    tokenizer, so the task is read and tokenized once. Seeds outermost: the machine's drift touches all alike."""
    from mlmtrain.downstream import PreparedTask, ProbeSettings, encoder_config, probe_encoder
    from mlmtrain.tasks import TaskFields, load_task

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
    prepared = PreparedTask.build(load_task(a.task, TaskFields()), tokenizer, settings)
    device = torch.device(setup.device)
    reports: dict[str, list[dict[str, Any]]] = {name: [] for name in models}
    for seed in range(a.seeds):
        settings.seed = seed
        for name, folder in models.items():
            say(f"benchmark: downstream: fine-tune {LABELS[name]}, seed {seed}")
            result, _ = probe_encoder(str(folder), encoder_config(str(folder)), prepared, settings, device, False)
            report = {**result.as_dict(), "command": shlex.join(probe_command(setup, folder, seed))}
            report.update(train_examples=len(prepared.train), test_examples=len(prepared.test))
            reports[name].append(report)
    return reports


def section_electra(setup: Setup, downstream: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Section 8: MLM (ours) and ELECTRA, the same encoder size on the same tokenizer and token store, each pretrain
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
    """Section 6: ours and the HF recipe (our schedule) pretrain for the same budget from the same initial weights; the
    two and the untrained initial model are fine-tuned alike for --seeds seeds and scored on the task's test split."""
    a = setup.args
    initial = save_initial_model(setup, setup.run_dir("downstream-initial"))
    say(f"benchmark: downstream: mlmtrain pretrain for {a.downstream_budget:g} s")
    run_dir = setup.run_dir("downstream-ours")
    budget = {"train.max_steps": None, "train.max_time": a.downstream_budget, "train.eval_every": 0}
    ours = run_ours(setup, run_dir, setup.ours(run_dir, extra=budget))
    say(f"benchmark: downstream: the HF recipe (our schedule) for {a.downstream_budget:g} s")
    hf_dir = setup.run_dir("downstream-hf")
    hf_spec = _hf_spec(setup, hf_dir, "downstream", budget=a.downstream_budget, save=str(hf_dir / "model"))
    hf = run_worker("hf", hf_spec, hf_dir)
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


# ---------------------------------------------------------------------------------------------
# Verdicts and reports


@dataclass
class Verdict:
    figure: str
    value: Optional[float]
    comparison: str  # ">=", "<=" or ">"
    target: float

    @property
    def passed(self) -> bool:
        if self.value is None or math.isnan(self.value):
            return False
        compare = {">=": float.__ge__, "<=": float.__le__, ">": float.__gt__}[self.comparison]
        return compare(float(self.value), float(self.target))

    def row(self) -> list[str]:
        value = "not reached" if self.value is None else f"{self.value:.3f}"
        return [self.figure, value, f"{self.comparison} {self.target:.3g}", "PASS" if self.passed else "FAIL"]


def verdicts(results: dict[str, Any], device_type: str) -> list[Verdict]:
    targets = TARGETS[device_type]
    out = []
    rounds = results.get("rounds", {})
    if "ratio" in rounds:
        out.append(Verdict("throughput: ours / HF recipe", rounds["ratio"], ">=", targets["throughput_ratio"]))
        if "mfu" in targets:
            out.append(Verdict("MFU of ours", rounds["mfu"]["ours"], ">=", targets["mfu"]))
    if "ours_over_limit" in rounds:
        out.append(Verdict("ours / bare-step limit", rounds["ours_over_limit"], ">=", targets["limit_share"]))
    quality = results.get("quality")
    if quality:
        out.append(Verdict("time to target ppl: ours / HF", quality["time_ratio"], "<=", targets["time_ratio"]))
        same = quality["same_step"]
        ratio = same["ours_ppl"] / same["hf_ppl"] if same else None
        out.append(Verdict("ppl at the same step: ours / HF", ratio, "<=", targets["same_step_ppl_ratio"]))
    electra = results.get("electra")
    if electra:
        out.append(Verdict("electra - mlm test accuracy, equal time", electra["electra_minus_mlm"], ">=", 0.0))
    downstream = results.get("downstream")
    if downstream:
        ours, hf, untrained = (downstream[name]["score"] for name in ("ours", "hf", "untrained"))
        margin = ours["mean"] - untrained["mean"] - (ours["half_width"] + untrained["half_width"])
        out.append(Verdict("downstream: ours - untrained, beyond both intervals", margin, ">", 0.0))
        out.append(Verdict("downstream: ours / HF recipe at equal time", ours["mean"] / hf["mean"], ">=", 1.0))
    recipe = results.get("recipe")
    if recipe and recipe["same_step"]:
        same = recipe["same_step"]
        out.append(
            Verdict(
                "same recipe, ppl at the last step: ours / HF",
                same["ours_ppl"] / same["hf_ppl"],
                "<=",
                targets["same_step_ppl_ratio"],
            )
        )
    tuned = results.get("tuned")
    if tuned:
        figure = "time to the tuned HF recipe's ppl: ours / HF"
        out.append(Verdict(figure, tuned["time_ratio"], "<=", targets["tuned_time_ratio"]))
    precision = results.get("precision")
    if precision:
        same = precision["same_step"]
        drift = abs(same["bf16_ppl"] / same["fp32_ppl"] - 1) if same else None
        out.append(Verdict("bf16 vs fp32 ppl at the same step: |ratio - 1|", drift, "<=", targets["bf16_ppl_drift"]))
        # auto's choice is right when the precision it picked is the faster one
        other, auto = precision["other"], precision["auto"]
        figure = f"{other} / fp32 tokens/s (auto picks {auto})"
        out.append(Verdict(figure, precision["speedup"], "<=" if auto == "fp32" else ">=", 1.0))
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _number(value: Optional[float], digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _percent(share: float) -> str:
    """3 significant digits: a CPU's MFU against a GPU's peak is tiny but still tells sizes apart."""
    return f"{100 * share:.3g}%"


def markdown(results: dict[str, Any]) -> str:
    """The report as Markdown tables (what docs/benchmarks/ records)."""
    s, m = results["settings"], results["machine"]
    lines = [
        f"# mlmtrain benchmark, {results['created']}",
        "",
        f"- command: `{results['command']}`",
        f"- machine: {m['cpu']} ({m['cpu_count']} cores, {m['torch_threads']} torch threads)"
        + (f", {m['gpu']}" if m.get("gpu") else "")
        + f"; torch {m['versions']['torch']}, transformers {m['versions']['transformers']}",
        f"- settings: {s['size']}, seq_len {s['seq_len']}, batch {s['batch']}, {s['precision']} on {s['device']}, "
        f"{s['steps']} steps ({s['warmup_steps']} warm-up), {s['rounds']} rounds, vocab {s['vocab_size']}, "
        f"data {s['train_text']}" + (f", our --set {' '.join(s['set'])}" if s["set"] else ""),
        "",
    ]
    rounds = results.get("rounds")
    if rounds:
        rows = [
            [
                LABELS[name],
                _number(rounds[name]["median"]),
                f"{_number(rounds[name]['min'])}–{_number(rounds[name]['max'])}",
                _number(rounds[name]["peak_rss_mb"]),
                _number(rounds[name]["peak_device_mb"]),
                _percent(rounds["mfu"][name]),
            ]
            for name in ("ours", "hf", "bare")
            if name in rounds
        ]
        lines += ["## Throughput (tokens/s, steady state)", ""]
        lines += _table(["contestant", "median", "min–max", "peak RSS MiB", "peak device MiB", "MFU"], rows)
        lines += ["", f"MFU = {rounds['mfu']['formula']}; flops_per_token = {rounds['mfu']['flops_per_token']:.4g}", ""]
    for key, title in (("quality", "Time to quality"), ("tuned", "Time to quality, HF recipe given our schedule")):
        if results.get(key):
            lines += _race_lines(results[key], title)
    recipe = results.get("recipe")
    if recipe:
        hf_by_step = {point["step"]: point["eval_ppl"] for point in recipe["hf"]}
        rows = [[str(p["step"]), f"{p['eval_ppl']:.2f}", _number(hf_by_step.get(p["step"]), 2)] for p in recipe["ours"]]
        lines += [
            f"## Same recipe (our hyperparameters on both sides, warm-up {recipe['warmup_steps']} steps): "
            "validation perplexity by step",
            "",
        ]
        lines += _table(["step", "mlmtrain pretrain", "HF Trainer recipe"], rows)
        lines.append("")
    if results.get("precision"):
        lines += _precision_lines(results["precision"])
    if results.get("recipes"):
        lines += _recipes_lines(results["recipes"])
    growth = results.get("growth")
    if growth:
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
        lines += [f"## Cost growth (bare step, batch {growth['batch']}, {growth['steps']} steps)", ""]
        lines += _table(["size", "seq_len", "parameters", "tokens/s", "peak device MiB", "peak RSS MiB"], rows)
        lines.append("")
    electra = results.get("electra")
    if electra:
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
        lines += [
            f"## MLM and ELECTRA at equal time ({electra['budget_s']:g} s of pretraining each), fine-tuned on "
            f"{Path(electra['task']).name}: test accuracy over {electra['seeds']} seeds",
            "",
        ]
        lines += _table(["encoder", "mean accuracy", "95% interval", "pretraining tokens/s", "steps"], rows)
        recipe = ", ".join(f"{key}={value}" for key, value in electra.get("electra_recipe", {}).items())
        lines += ["", f"ELECTRA's changes to the shipped recipe: {recipe or 'none'}", ""]
    downstream = results.get("downstream")
    if downstream:
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
        lines += [
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
        lines += [
            "",
            f"Fine-tuning: {tune['epochs']} epochs, lr {tune['lr']:g}, batch {tune['batch_size']}, max length "
            f"{tune['max_length']}, {tune['train_examples']} train / {tune['test_examples']} test examples, "
            f"{downstream['seeds']} seeds; best epoch on valid."
            + (f" Majority-class accuracy {majority:.4f}." if majority is not None else ""),
            "",
        ]
    lines += ["## Targets", ""]
    lines += _table(["figure", "value", "target", "result"], [v.row() for v in results["verdicts"]])
    return "\n".join(lines) + "\n"


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


def machine(device: str) -> dict[str, Any]:
    cpu = cpuinfo_field("model name") or platform.processor() or platform.machine()
    versions = {}
    for name in ("torch", "transformers", "tokenizers", "datasets", "accelerate"):
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
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": versions,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    add = parser.add_argument
    add(
        "--size",
        choices=("tiny", "mini", "small", "medium", "base"),
        help="configs/<size>.yaml (default mini; tiny for --sections downstream,electra alone)",
    )
    add("--seq-len", type=int, help="tokens per block (default 128)")
    add("--batch", type=int, help="sequences per optimizer step (default 32)")
    add("--steps", type=int, help="steps per timed run (default 50)")
    add("--warmup-steps", type=int, help="steps left out of the timing (default 10)")
    add("--growth-steps", type=int, help="steps per bare-step run in the growth section (default 20)")
    add("--rounds", type=int, help="interleaved rounds of each contestant (default 3)")
    add(
        "--precision",
        choices=("auto", "fp32", "bf16", "bf16-head"),
        help="both sides (bf16-head: ours only, the HF recipe fp32); default: ours train.precision auto, the HF "
        "recipe bf16 on CUDA and fp32 on CPU",
    )
    add("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add("--train", help="training text: a file, glob or builtin:python-docs (the default)")
    add("--valid", help="validation text (default valid.txt beside --train, else 5 %% of the training documents)")
    add(
        "--vocab-size",
        type=int,
        help="WordPiece vocabulary (default 30522; 8000 for --sections downstream,electra alone)",
    )
    add(
        "--sections",
        default=",".join(DEFAULT_SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but downstream and electra)",
    )
    add(
        "--quality-budget",
        type=float,
        help="training seconds per side in the quality, tuned and recipes sections (default 300)",
    )
    add("--eval-every", type=int, help="steps between evaluations in the quality section (default 50)")
    add("--eval-blocks", type=int, help="validation blocks per evaluation (default 128)")
    add("--recipe-steps", type=int, help="steps per side in the recipe and precision sections (default 150)")
    add("--fast-set", action="append", default=[], metavar="KEY=VALUE", help="change the fast recipe (recipes)")
    add("--electra-set", action="append", default=[], metavar="KEY=VALUE", help="change ELECTRA's recipe (electra)")
    add("--target-ppl", type=float, help="default: the lowest perplexity the HF recipe reached in its budget")
    add("--peak-tflops", type=float, default=H200_DENSE_BF16_TFLOPS, help="peak for MFU (default H200 dense bf16)")
    add("--probe-epochs", type=int, help="downstream, electra, recipes: fine-tuning epochs (default 3)")
    add("--task", help="downstream, electra, recipes: a labeled task folder (train/valid/test) to fine-tune on")
    add(
        "--downstream-budget",
        type=float,
        help="downstream, electra: pretraining seconds per contestant (default 600; 900 for those sections alone)",
    )
    add("--seeds", type=int, help="downstream, electra, recipes: fine-tuning seeds per model (default 3)")
    add("--probe-lr", type=float, help="downstream: fine-tuning learning rate (default 3e-4)")
    add("--probe-batch", type=int, help="downstream: fine-tuning batch (default 32)")
    add(
        "--probe-max-length",
        type=int,
        help="downstream: tokens per example (default 128; 64 for downstream,electra alone)",
    )
    add(
        "--probe-train-examples",
        type=int,
        help="downstream: train examples, a fixed sample; 0: all (default 2000; all for downstream,electra alone)",
    )
    add("--probe-eval-examples", type=int, help="downstream: valid/test examples; 0: all (default all)")
    add("--set", action="append", default=[], metavar="KEY=VALUE", help="our side only, e.g. train.compile=true")
    add("--quick", action="store_true", help="tiny everything, for a smoke test")
    add("--out", default=str(REPO / "results"), help="folder for benchmark-<time>.json and .md")
    add("--work-dir", default=str(REPO / "runs" / "benchmark"), help="tokenizer, store and runs (reused)")
    add("--worker", choices=tuple(WORKERS), help=argparse.SUPPRESS)
    add("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else DEFAULTS
    if not args.quick and set(args.sections.replace(" ", "").split(",")) <= {"downstream", "electra"}:
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
    if args.task and not Path(args.task).is_dir():
        raise BenchmarkError(f"--task {args.task} is not a folder: pass a labeled task folder (train/valid/test files)")
    finetuned = {"downstream", "electra"} & sections
    if finetuned and not args.task:
        raise BenchmarkError(f"{min(finetuned)} needs a labeled task folder: pass --task FOLDER")
    if finetuned and args.seeds < 2:
        raise BenchmarkError("--seeds must be >= 2: the interval over seeds needs two")
    if {"throughput", "quality", "tuned", "recipe", "recipes", "downstream"} & sections:
        missing = [name for name in ("datasets", "accelerate") if importlib.util.find_spec(name) is None]
        if missing:
            raise BenchmarkError(
                f"the Hugging Face recipe needs {' and '.join(missing)}, not installed in {sys.executable}; "
                'install them (pip install -e ".[bench]", or pip install datasets accelerate); '
                "or run --sections limit,growth only"
            )
    return sections


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    sections = check_args(args)
    setup = prepare(args)
    results: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": shlex.join([Path(sys.argv[0]).name] + sys.argv[1:]),
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
    if "quality" in sections:
        results["quality"] = section_quality(setup)
    if "tuned" in sections:
        results["tuned"] = section_tuned(setup)
    if "recipe" in sections:
        results["recipe"] = section_recipe(setup)
    if "precision" in sections:
        results["precision"] = section_precision(setup)
    if "recipes" in sections:
        results["recipes"] = section_recipes(setup)
    if "growth" in sections:
        results["growth"] = section_growth(setup)
    if "downstream" in sections:
        results["downstream"] = section_downstream(setup)
    if "electra" in sections:  # after downstream: it reuses that section's MLM model and untrained scores
        results["electra"] = section_electra(setup, results.get("downstream"))
    results["verdicts"] = verdicts(results, "cuda" if setup.device.startswith("cuda") else "cpu")
    return results


def write_reports(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"benchmark-{time.strftime('%Y%m%d-%H%M%S')}"
    data = dict(results, verdicts=[dict(vars(v), passed=v.passed) for v in results["verdicts"]])
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(results))
    return stem.with_suffix(".json"), stem.with_suffix(".md")


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:  # inside a contestant's process
        run_dir = Path(args.spec)
        result = WORKERS[args.worker](json.loads((run_dir / "spec.json").read_text()))
        (run_dir / "result.json").write_text(json.dumps(result))
        return 0
    try:
        results = benchmark(args)
    except (BenchmarkError, UserError) as error:
        print(f"benchmark: {error}", file=sys.stderr)
        return 2
    json_path, md_path = write_reports(results, Path(args.out))
    print("\n" + markdown(results))  # the summary: every figure, its target, pass or fail
    print(f"written: {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
