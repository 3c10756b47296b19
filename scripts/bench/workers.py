"""The contestants that run inside the benchmark's own process, `benchmark.py --worker KIND --spec FOLDER`: the HF
Trainer recipe (`hf_worker`) and the bare training step (`bare_worker`), each timed per step."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any, Optional

import torch
from transformers import TrainerCallback

from bench.setup import HF_MLM_PROBABILITY
from mlmtrain.config import Config, load_config
from mlmtrain.data.masking import VocabInfo, evaluation_masking
from mlmtrain.evaluate.perplexity import evaluate_blocks
from mlmtrain.model.bert import build_model
from mlmtrain.model.optim import build_optimizer, learning_rate
from mlmtrain.runtime.distributed import init_distributed
from mlmtrain.train.loop import eval_set
from mlmtrain.train.objectives import objective_of
from mlmtrain.train.precision import resolve_precision
from mlmtrain.train.step import build_setup, train_step


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
    objective = objective_of(cfg, vocab)
    blocks, indices = eval_set(objective, cfg.store_dir, tokenizer, cfg.train.eval_max_blocks)
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
OUR_SCHEDULE_MODES = ("recipe", "tuned", "downstream", "adapt")


# TrainingArguments' name for each of our optim settings that the HF recipe is given
HF_OPTIM_NAMES = {
    "learning_rate": "lr",
    "warmup_steps": "warmup_steps",
    "weight_decay": "weight_decay",
    "adam_beta1": "beta1",
    "adam_beta2": "beta2",
    "adam_epsilon": "eps",
    "max_grad_norm": "grad_clip",
}


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
    if spec["mode"] in ("tuned", "downstream", "adapt"):
        # the clock stops it: run_mlm.py's default of 3 epochs could end it before the budget (tiny on 1 M tokens
        # did 3 epochs in 376 of its 900 s), and equal time means equal time
        arguments.update(max_steps=10**7)
    if spec["mode"] in OUR_SCHEDULE_MODES:  # our hyperparameters: the two differ in head, masking, loop
        arguments.update({hf: getattr(cfg.optim, ours) for hf, ours in HF_OPTIM_NAMES.items()}, seed=cfg.train.seed)
    # quality: its defaults (lr 5e-5, linear decay over 3 epochs, no warm-up, no weight decay)
    return arguments


def hf_worker(spec: dict[str, Any], callbacks: tuple[TrainerCallback, ...] = ()) -> dict[str, Any]:
    """The HF recipe: Trainer + DataCollatorForLanguageModeling + BertForMaskedLM (dense head, as HF runs it);
    `callbacks` join the step clock (scripts/profile_step.py profiles the recipe's steps through one)."""
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    cfg = load_config(spec["config"], spec["overrides"])
    device = torch.device(cfg.train.device)
    if spec.get("base"):  # continued pretraining: the model and tokenizer as run_mlm.py --model_name_or_path loads them
        from transformers import AutoModelForMaskedLM

        tokenizer = AutoTokenizer.from_pretrained(spec["base"], trust_remote_code=False)
        torch.manual_seed(cfg.train.seed)
        model = AutoModelForMaskedLM.from_pretrained(spec["base"], trust_remote_code=False)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(cfg.tokenizer_dir), trust_remote_code=False)
        torch.manual_seed(cfg.train.seed)  # the same initial weights as ours: same seed, same build_model
        model = build_model(cfg.model, vocab_size=len(tokenizer), pad_id=tokenizer.pad_token_id)
    dataset = run_mlm_blocks(tokenizer, spec["train_text"], cfg.data.seq_len, spec["hf_cache"])

    evaluate = _evaluator(cfg, tokenizer) if spec["mode"] in ("quality", "tuned", "recipe") else None
    clock = StepClock(device, evaluate, spec.get("eval_every", 0), spec.get("budget"))
    ours = spec["mode"] in OUR_SCHEDULE_MODES
    trainer = Trainer(
        model=model,
        args=TrainingArguments(**recipe_arguments(cfg, spec)),
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=HF_MLM_PROBABILITY),
        callbacks=[clock, *callbacks],
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
    """The limit: `train_step` (forward with the sparse head, backward, clip, lr, AdamW) on the training setup
    `pretrain` builds (`build_setup`), fed micro-batches fetched beforehand: no data loading, logging or evaluation."""
    cfg = load_config(spec["config"], spec["overrides"])
    cfg.data.num_workers = 0  # the batches are fetched once, before the clock starts
    setup = build_setup(cfg, init_distributed(cfg.train.device))
    fetched = [[next(setup.batches) for _ in range(setup.layout.accum_steps)] for _ in range(min(spec["steps"], 8))]
    tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
    points = []
    start = time.perf_counter()
    for step in range(1, spec["steps"] + 1):
        train_step(setup, fetched[step % len(fetched)], clock=lambda: 0.0)
        _sync(setup.ctx.device)  # the step no longer waits for the device itself: stamp its end, as the HF side does
        points.append((step * tokens_per_step, time.perf_counter() - start))
    return {
        "points": points,
        "parameters": sum(p.numel() for p in setup.mlm.parameters()),
        **_peak_device_memory(setup.ctx.device),
    }


WORKERS = {"hf": hf_worker, "bare": bare_worker}
