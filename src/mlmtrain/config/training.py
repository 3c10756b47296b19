"""The optim, train and checkpoint sections: AdamW and its schedule, the budgets and cadences of the loop, and what
each checkpoint keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from mlmtrain.config.fields import (
    DEVICE,
    DISTINCT,
    DURATION,
    LANGUAGES,
    LICENSE,
    Check,
    above,
    at_least,
    parse_duration,
    quiet,
    require,
    setting,
    trains,
    within,
)


@dataclass
class OptimConfig:
    lr: float = trains(5e-4, "peak learning rate", check=above(0))
    weight_decay: float = setting(
        0.01, "AdamW weight decay (never on biases or LayerNorm)", resume="own-note", check=at_least(0)
    )
    beta1: float = setting(0.9, "AdamW beta1", resume="own-note", check=within(0, 1, "[)"))
    beta2: float = setting(0.98, "AdamW beta2", resume="own-note", check=within(0, 1, "[)"))
    eps: float = setting(1e-6, "AdamW epsilon", resume="own-note", check=above(0))
    warmup_steps: int = trains(
        100,
        "steps of linear warm-up from 0 to lr; beside max_time, max_tokens or max_flops: the share "
        "warmup_steps / max_steps of whichever budget ends the run",
        check=at_least(0),
    )
    schedule: Literal["linear", "cosine", "constant", "one-cycle", "wsd"] = trains(
        "linear",
        "decay after warm-up; one-cycle: a triangle over the budget (up to lr at cycle_peak, then down; "
        "warmup_steps unused), as Cramming trains; wsd: warm-up, constant lr, then a decay over the last "
        "decay_share of the budget",
    )
    decay_share: float = trains(
        0.2, "wsd: the share of the budget, at its end, that the decay takes", check=within(0, 1, "()")
    )
    decay: bool = trains(
        False,
        "wsd: decay over this whole budget in place of its last decay_share; with phases, set it in the phase that "
        "decays (without one, the last phase does)",
    )
    decay_shape: Literal["linear", "1-sqrt"] = trains(
        "1-sqrt", "wsd: the decay's shape: linear, or 1 - sqrt(t), which stays high longer and falls at the end"
    )
    cycle_peak: float = trains(
        0.5, "one-cycle: the share of the budget at which the learning rate peaks", check=within(0, 1, "()")
    )
    min_lr_ratio: float = trains(0.0, "the schedule ends at lr x this", check=within(0, 1, "[]"))
    grad_clip: float = trains(1.0, "clip the global gradient norm to this; 0 disables clipping", check=at_least(0))


@dataclass
class TrainConfig:
    run_dir: str = quiet("runs/default", "folder for checkpoints, metrics and the resolved config", path="local")
    batch_size: int = trains(32, "global batch: sequences per optimizer step, over all processes", check=at_least(1))
    micro_batch_size: Union[int, None] = trains(
        None,
        "sequences per forward pass on each process; null: batch_size / processes (no accumulation)",
        check=at_least(1),
    )
    batch_warmup_tokens: int = trains(
        0,
        "grow the global batch linearly from train.batch_size_start to train.batch_size over the run's first this "
        "many tokens (Ettin's batch warm-up; each step a whole number of micro-batches), the learning rate's warm-up "
        "following tokens; 0: the batch is batch_size from the first step",
        check=at_least(0),
    )
    batch_size_start: Union[int, None] = trains(
        None,
        "with train.batch_warmup_tokens: the global batch of the first step (with a null micro_batch_size, it sets "
        "the micro-batch: batch_size_start / processes)",
        check=at_least(1),
    )
    max_steps: Union[int, None] = trains(1000, "stop after this many optimizer steps", check=at_least(1))
    max_tokens: Union[int, None] = trains(None, "stop after this many training tokens", check=at_least(1))
    max_time: Union[str, float, None] = trains(
        None,
        "stop after this wall time (seconds or '30m', '2h'); the schedule stretches to fit",
        check=DURATION,
    )
    pause_after: Union[int, None] = quiet(
        None,
        "save and stop once this many steps are done, as if interrupted (continue later with --resume)",
        check=at_least(1),
    )
    precision: Literal["auto", "bf16", "bf16-head", "fp16", "fp32"] = trains(
        "auto",
        "autocast precision; bf16-head: bf16 for the MLM head only; auto: bf16 on CUDA where supported and on CPUs "
        "with AMX, bf16-head on AMD CPUs with AVX512-BF16, else fp32",
    )
    device: str = quiet("auto", "auto, cpu, cuda or cuda:N", check=DEVICE)
    compile: Union[bool, Literal["auto"]] = quiet(
        False,
        "torch.compile the model: faster steps after compiling first; needs a C++ compiler (CPU) or Triton (CUDA); "
        "auto: on a CPU where a compiler works and the budget is long enough to repay compiling (10 min, 1e14 FLOPs)",
    )
    seed: int = trains(0, "seed of weights, data order and masks")
    objective: str = trains(
        "mlm",
        "what a step optimises: mlm (masked language modeling), or another objective of the registry "
        "(`mlmtrain config fields` lists them); a section only one objective reads (electra, distill) holds its "
        "settings",
    )
    log_every: int = quiet(10, "steps between metric lines in metrics.jsonl", check=at_least(1))
    eval_every: int = quiet(500, "steps between validation evaluations; 0 disables", check=at_least(0))
    eval_max_blocks: int = quiet(64, "validation blocks per evaluation during training", check=at_least(1))
    max_nonfinite: int = quiet(
        5,
        "stop after this many steps in a row skipped for a non-finite loss or gradient (checked at the next log, "
        "evaluation or checkpoint step: up to log_every - 1 steps later)",
        check=at_least(1),
    )
    tensorboard: bool = quiet(
        False, "also log to TensorBoard (needs the tensorboard package); as trackers: [tensorboard]"
    )
    progress: bool = quiet(True, "show a progress bar")
    max_flops: Union[float, None] = trains(
        None,
        "stop after this many training FLOPs (the objective's FLOPs per token x tokens, e.g. 1e15); the schedule "
        "stretches to fit; replaces the default max_steps, and contradicts max_tokens and a max_steps you set",
        check=Check(lambda flops: flops > 0, "must be a finite number > 0"),
    )
    ema: Union[float, None] = trains(
        None,
        "keep an exponential moving average of the weights, updated after every step with this decay (0.999: about "
        "the last 1,000 steps weigh), in fp32 beside the weights; evaluations report its figures too (ema_eval_*); "
        "null: none",
        check=within(0, 1, "()"),
    )
    trackers: list[Literal["tensorboard", "mlflow", "wandb"]] = quiet(
        [],
        "experiment trackers that get the resolved config and every metrics line (each an optional package)",
        check=DISTINCT,
    )

    def validate(self) -> None:
        if self.micro_batch_size is not None:
            require(
                self.batch_size % self.micro_batch_size == 0,
                "train.micro_batch_size",
                f"({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})",
            )
        self.validate_max_flops()
        self.validate_batch_warmup()

    def validate_batch_warmup(self) -> None:
        start, warming = self.batch_size_start, self.batch_warmup_tokens > 0
        require(
            warming == (start is not None),
            "train.batch_size_start" if start is not None else "train.batch_warmup_tokens",
            f"({start}) is the batch a warm-up starts from, and train.batch_warmup_tokens is 0; set "
            "train.batch_warmup_tokens (e.g. 1000000) or drop train.batch_size_start"
            if start is not None
            else f"({self.batch_warmup_tokens}) grows the batch from train.batch_size_start, which is null; set it "
            f"(e.g. {max(self.batch_size // 4, 1)})",
        )
        if start is None:
            return
        require(
            start <= self.batch_size,
            "train.batch_size_start",
            f"({start}) must be <= train.batch_size ({self.batch_size}): the batch grows toward batch_size",
        )
        require(
            self.micro_batch_size is None or start % self.micro_batch_size == 0,
            "train.batch_size_start",
            f"({start}) must be a multiple of train.micro_batch_size ({self.micro_batch_size})",
        )
        require(
            start >= self.batch_size or self.batch_size % start == 0 or self.micro_batch_size is not None,
            "train.batch_size_start",
            f"({start}) sets the micro-batch (train.micro_batch_size is null), and train.batch_size "
            f"({self.batch_size}) is no multiple of it; set train.micro_batch_size to a divisor of both",
        )

    def validate_max_flops(self) -> None:
        """A FLOP budget sets the run's length alone: max_tokens counts the same tokens in another unit, and a
        max_steps beside it would end the run (and the schedule) somewhere else. max_time may still cap it."""
        if self.max_flops is None:
            return
        for key in ("max_tokens", "max_steps"):
            value = getattr(self, key)
            require(
                value is None,
                f"train.{key}",
                f"({value}) contradicts train.max_flops ({self.max_flops:g}): both set the run's length; "
                f"set train.{key}: null or drop train.max_flops",
            )

    @property
    def max_time_seconds(self) -> Union[float, None]:
        return parse_duration(self.max_time)

    @property
    def active_trackers(self) -> list[str]:
        """train.trackers, with tensorboard added when the older key train.tensorboard is true."""
        return [*self.trackers, *(["tensorboard"] if self.tensorboard and "tensorboard" not in self.trackers else [])]


@dataclass
class CheckpointConfig:
    save_every: int = quiet(
        500, "steps between checkpoints (one is always written at the end); 0: only at the end", check=at_least(0)
    )
    keep_last: int = quiet(3, "keep this many newest checkpoints; 0 keeps all", check=at_least(0))
    keep_best: bool = quiet(False, "also keep the checkpoint with the lowest validation loss")
    save_ema: bool = quiet(
        False,
        "with train.ema: each checkpoint's model is the moving average (its training state keeps the live weights, "
        "so a resume goes on exactly); false: the live weights, the average kept in the training state only",
    )
    license: str = quiet(
        "other",
        "license in the model card's Hub metadata (e.g. apache-2.0, mit); other: none stated",
        check=LICENSE,
    )
    language: Union[str, list[str], None] = quiet(
        None,
        "language code(s) of the model card's Hub metadata (e.g. en); null: none claimed",
        check=LANGUAGES,
    )
