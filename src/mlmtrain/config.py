"""Typed configuration: one dataclass per section, loaded from YAML plus `--set` overrides.

Every field has a default and a one-line `help`; `load_config` rejects unknown keys (with a
"did you mean"), wrong types and out-of-range values with a `UserError` that names the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import math
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, ClassVar, Literal, Optional, Union

import yaml

from mlmtrain.errors import UserError, first_line, shown
from mlmtrain.probe_settings import live_default
from mlmtrain.readers import load_yaml_text

Source = Union[str, list[str]]


RESUME_KINDS = ("note", "own-note", "silent")
"""What a resume under another value of a key does: `note`, the key changes what or how the run trains and the
resume note of training settings names the change; `own-note`, it changes training and has a note of its own
(dropout, the optimizer's settings); `silent`, it changes no weight (folders, cadences, evaluation, reports)."""


@dataclass(frozen=True)
class Check:
    """The rule one key's value must meet (null passes: a key that may be null says so in its type), and how an
    error line and `config fields` say it: `says` completes "optim.lr ..." ("must be > 0")."""

    holds: Callable[[Any], bool]
    says: str


def at_least(low: float) -> Check:
    return Check(lambda value: value >= low, f"must be >= {low:g}")


def above(low: float) -> Check:
    return Check(lambda value: value > low, f"must be > {low:g}")


def within(low: float, high: float, ends: str) -> Check:
    """low..high, each end closed by [ ] or open by ( )."""
    closed_low, closed_high = ends[0] == "[", ends[1] == "]"

    def holds(value: float) -> bool:
        return (value >= low if closed_low else value > low) and (value <= high if closed_high else value < high)

    return Check(holds, f"must be in {ends[0]}{low:g}, {high:g}{ends[1]}")


def _f(default: Any, help: str, *, resume: str, check: Optional[Check] = None) -> Any:
    """A dataclass field with a default, a one-line description, what a resume under another value says
    (`RESUME_KINDS`) and the rule its value must meet (`Check`; None: its type is the whole rule)."""
    if resume not in RESUME_KINDS:
        raise ValueError(f"resume must be one of {RESUME_KINDS} (got {resume!r})")
    metadata = {"help": help, "resume": resume, "check": check}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def _trains(default: Any, help: str, check: Optional[Check] = None) -> Any:
    """A key that changes what or how the run trains: `_f` with resume="note"."""
    return _f(default, help, resume="note", check=check)


def _health(default: Any, help: str, check: Check) -> Any:
    """A threshold of the report's health checks: changes no weight."""
    return _quiet(default, f"health: {help}", check)


def _quiet(default: Any, help: str, check: Optional[Check] = None) -> Any:
    """A key that changes no weight (a folder, a cadence, an evaluation or report setting): `_f` with
    resume="silent"."""
    return _f(default, help, resume="silent", check=check)


# The checks of one key each that are not a range
SOME_SOURCE = Check(bool, "must name at least one source")
GENERATOR_SHARE = Check(
    lambda share: 0 < share <= 1, "must be in (0, 1]: the generator may not be larger than the discriminator"
)
DURATION = Check(lambda value: parse_duration(value) > 0, "must be > 0")
DEVICE = Check(lambda name: bool(re.fullmatch(r"auto|cpu|cuda(:\d+)?", name)), "must be auto, cpu, cuda or cuda:N")
DISTINCT = Check(lambda names: len(set(names)) == len(names), "must not name a tracker twice")
LICENSE = Check(
    lambda name: bool(re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", name)),
    "must be a Hub license identifier such as apache-2.0 or mit",
)
LANGUAGES = Check(
    lambda codes: all(
        re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]+)*", code) for code in ([codes] if isinstance(codes, str) else codes)
    ),
    "must be language codes such as en or [en, de]",
)


def check_fields(section: str, values: Any) -> None:
    """Every key of one section against its own `Check` (null passes: the type said whether null may be)."""
    for found in dataclasses.fields(values):
        check, value = found.metadata["check"], getattr(values, found.name)
        if check is not None and value is not None and not check.holds(value):
            raise UserError("config", f"{section}.{found.name} {check.says} (got {shown(value)})")


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError("config", f"{key} {message}")


@dataclass
class DataConfig:
    train: Source = _trains(
        "builtin:python-docs",
        "training text: a path, glob or list of them (.txt .jsonl .json .parquet .csv), "
        "'builtin:python-docs', 'builtin:python-docstrings', or 'hf:NAME[/CONFIG]:SPLIT'",
        check=SOME_SOURCE,
    )
    validation: Union[Source, None] = _trains(
        None, "validation text (same forms as train); null splits validation_fraction off train"
    )
    validation_fraction: float = _trains(
        0.05,
        "share of training documents held out for validation when validation is null",
        check=within(0, 1, "[)"),
    )
    text_field: str = _trains(
        "text", "column / JSON key that holds the text in .jsonl .json .parquet .csv and hub data"
    )
    txt_documents: Literal["line", "paragraph"] = _trains(
        "line", "how a .txt file splits into documents: one per line, or blank-line-separated paragraphs"
    )
    seq_len: int = _trains(128, "tokens per training block, [CLS] and [SEP] included", check=at_least(8))
    packing: bool = _trains(
        True, "concatenate documents into full blocks (no padding); false: one document per block, padded"
    )
    document_attention: Literal["packed", "within", "auto"] = _trains(
        "packed",
        "packed: every token of a packed block attends to the whole block; within: only to its own document, whose "
        "positions start at 0 (BERT, RoBERTa and ModernBERT, train.objective mlm, data.packing true); auto: within "
        "where the run can, else packed",
    )
    store: Union[str, None] = _quiet(None, "token store folder written by `tokenize`; null: <run_dir>/tokens")
    use_store: bool = _trains(
        True, "read pre-tokenized blocks from the store; false: tokenize a live stream in the loader workers"
    )
    num_workers: int = _quiet(1, "DataLoader worker processes that cut blocks and draw masks", check=at_least(0))
    shuffle_buffer: int = _trains(
        10000, "blocks held for shuffling a live stream (the store shuffles exactly)", check=at_least(1)
    )


@dataclass
class TokenizerConfig:
    path: Union[str, None] = _quiet(
        None, "tokenizer folder (written by `tokenize`, read by `pretrain`); null: <run_dir>/tokenizer"
    )
    pretrained: Union[str, None] = _trains(
        None, "reuse this existing tokenizer folder or hub name instead of training one"
    )
    kind: Literal["wordpiece", "bpe"] = _trains(
        "wordpiece",
        "the tokenizer `tokenize` trains: wordpiece (BERT's, '##' inside words) or bpe (byte-level BPE, 'Ġ' before "
        "words, no unknown characters); both with the specials [CLS] [SEP] [PAD] [MASK] [UNK]",
    )
    vocab_size: int = _trains(30522, "vocabulary size, special tokens included", check=at_least(16))
    lowercase: bool = _trains(True, "lower-case text before tokenizing")
    strip_accents: Union[bool, None] = _trains(None, "strip accents; null: follow lowercase, as BERT does")
    min_frequency: int = _trains(2, "a merge must occur this often to enter the vocabulary", check=at_least(1))
    limit_alphabet: int = _trains(
        1000,
        "at most this many distinct characters in the initial alphabet (wordpiece; bpe starts from the 256 bytes)",
        check=at_least(1),
    )
    extend_vocab: int = _trains(
        0,
        "with model.init_from: add up to this many whole words frequent in data.train that the base's tokenizer "
        "splits into several pieces, each new embedding row the mean of its pieces' rows; 0: none",
        check=at_least(0),
    )


@dataclass
class MaskingConfig:
    mlm_probability: float = _trains(0.15, "share of ordinary tokens selected for prediction", check=within(0, 1, "()"))
    mask_replace: float = _trains(0.8, "share of selected tokens replaced by [MASK]", check=within(0, 1, "[]"))
    random_replace: float = _trains(
        0.1, "share of selected tokens replaced by a random ordinary token", check=within(0, 1, "[]")
    )
    whole_word: bool = _trains(False, "select all pieces of a word together (WordPiece, byte-level BPE, SentencePiece)")
    fixed_count: bool = _trains(
        False,
        "select exactly round(rate x maskable tokens) per block instead of a coin per token; with packing the inner "
        "[SEP]s are not maskable, so the count varies a little between blocks (shapes are not fully static)",
    )
    schedule: Literal["constant", "linear", "cosine"] = _trains(
        "constant",
        "how the training rate moves from mlm_probability to mlm_probability_end over train.max_steps (evaluations "
        "keep eval_mlm_probability)",
    )
    mlm_probability_end: Union[float, None] = _trains(
        None,
        "with a linear or cosine masking.schedule: the rate of the last step; null: no schedule",
        check=within(0, 1, "()"),
    )
    eval_seed: int = _quiet(1234, "seed of the fixed evaluation masks")
    eval_mlm_probability: float = _quiet(
        0.15,
        "share of ordinary tokens evaluations mask, 80/10/10 and a coin per token, whatever the training masking "
        "above: perplexities stay comparable across recipes",
        check=within(0, 1, "()"),
    )

    def validate(self) -> None:
        scheduled = self.schedule != "constant"
        _check(
            scheduled == (self.mlm_probability_end is not None),
            "masking.mlm_probability_end",
            "is set but masking.schedule is constant; set masking.schedule: linear or cosine, or drop "
            "masking.mlm_probability_end"
            if not scheduled
            else f"is null but masking.schedule is {self.schedule}; set it to the rate of the last step (e.g. 0.15)",
        )
        _check(
            self.mask_replace + self.random_replace <= 1.0 + 1e-9,
            "masking.mask_replace",
            f"+ masking.random_replace must be <= 1 (got {self.mask_replace} + {self.random_replace})",
        )


@dataclass
class ModelConfig:
    architecture: Literal["bert", "modernbert"] = _trains(
        "bert",
        "the encoder built from scratch: bert (learned positions, GELU feed-forward, pooler) or modernbert (rotary "
        "positions, alternating global and 128-token local attention, GLU feed-forward, no biases; MLM only: "
        "model.dropout sets its MLP and attention dropout); with model.init_from the base's architecture applies",
    )
    hidden_size: int = _trains(256, "width of the encoder", check=at_least(1))
    num_layers: int = _trains(4, "transformer layers", check=at_least(1))
    num_heads: int = _trains(4, "attention heads; must divide hidden_size", check=at_least(1))
    intermediate_size: int = _trains(1024, "width of the feed-forward layer", check=at_least(1))
    max_position_embeddings: int = _trains(512, "longest sequence the model can take", check=at_least(1))
    dropout: Union[float, None] = _f(
        None,
        "hidden and attention dropout in one key (0: none, as Cramming and ModernBERT train); null: the two below",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    hidden_dropout: float = _f(
        0.1,
        "dropout on hidden states (model.dropout, when set, replaces it)",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    attention_dropout: float = _f(
        0.1,
        "dropout on attention probabilities (model.dropout, when set, replaces it)",
        resume="own-note",
        check=within(0, 1, "[)"),
    )
    sparse_head: bool = _quiet(True, "run the MLM head on the selected positions only (same loss, less work)")
    sparse_last_layer: bool = _quiet(
        True,
        "with sparse_head, run the last layer's queries, feed-forward and LayerNorms on the selected positions only "
        "(BERT and RoBERTa layers, packed blocks, on the CPU; same loss, less work)",
    )
    pad_vocab_multiple: int = _trains(
        1, "round the embedding rows up to a multiple of this (64 suits GPUs)", check=at_least(1)
    )
    init_from: Union[str, None] = _trains(
        None,
        "start from this masked LM (a folder or hub name; BERT, RoBERTa, DistilBERT, ModernBERT, DeBERTa-v2): its "
        "weights, shape and tokenizer; shape keys left at "
        "their defaults take the base's; optimizer and schedule start fresh",
    )

    def validate(self) -> None:
        _check(
            self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            f"({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})",
        )

    @property
    def hidden_dropout_prob(self) -> float:
        """The dropout on hidden states the model gets: model.dropout when set, else model.hidden_dropout."""
        return self.hidden_dropout if self.dropout is None else self.dropout

    @property
    def attention_dropout_prob(self) -> float:
        """The dropout on attention probabilities the model gets: model.dropout when set, else attention_dropout."""
        return self.attention_dropout if self.dropout is None else self.dropout


@dataclass
class ElectraConfig:
    generator_size: float = _trains(
        0.25,
        "generator width as a share of the discriminator's (hidden size, heads, feed-forward); "
        "ELECTRA found 1/4 to 1/2 best; at most 1",
        check=GENERATOR_SHARE,
    )
    generator_layers: Union[int, None] = _trains(
        None,
        "generator transformer layers; null: as many as model.num_layers",
        check=at_least(1),
    )
    discriminator_weight: float = _trains(
        50.0, "weight of the replaced-token loss against the generator's MLM loss", check=above(0)
    )
    temperature: float = _trains(1.0, "sampling temperature of the generator's replacements", check=above(0))

    def generator_shape(self, model: ModelConfig) -> dict[str, int]:
        """Hidden size, heads, feed-forward width and layers of the generator: the discriminator's scaled by
        `generator_size` (as the original ELECTRA code scales them), with at least one head."""
        heads = max(1, round(model.num_heads * self.generator_size))
        return {
            "hidden_size": max(heads, round(model.hidden_size * self.generator_size)),
            "num_heads": heads,
            "intermediate_size": max(1, round(model.intermediate_size * self.generator_size)),
            "num_layers": self.generator_layers or model.num_layers,
        }


@dataclass
class DistillConfig:
    teacher: Union[str, None] = _trains(
        None,
        "the masked LM that teaches (a folder or hub name; any family model.init_from takes): its tokenizer is the "
        "run's, it runs without gradients in eval mode; required with train.objective: distill",
    )
    temperature: float = _trains(
        2.0, "softmax temperature of the teacher's and the student's distributions (the KL is scaled by T^2)", above(0)
    )
    alpha: float = _trains(
        0.5,
        "weight of the KL to the teacher in the loss; the masked-LM loss gets 1 - alpha",
        check=within(0, 1, "[]"),
    )
    hidden_weight: float = _trains(
        0.0,
        "weight of a cosine loss between the student's and the teacher's last hidden states (through a learned "
        "projection, not saved in the student, when the widths differ); 0: none",
        check=at_least(0),
    )
    init: Literal["scratch", "teacher-layers"] = _trains(
        "scratch",
        "scratch: a BERT of the model section's shape; teacher-layers: the teacher's embeddings, head and evenly "
        "spaced layers (every other one for half the layers, as DistilBERT), its widths, of its family",
    )


@dataclass
class OptimConfig:
    lr: float = _trains(5e-4, "peak learning rate", check=above(0))
    weight_decay: float = _f(
        0.01, "AdamW weight decay (never on biases or LayerNorm)", resume="own-note", check=at_least(0)
    )
    beta1: float = _f(0.9, "AdamW beta1", resume="own-note", check=within(0, 1, "[)"))
    beta2: float = _f(0.98, "AdamW beta2", resume="own-note", check=within(0, 1, "[)"))
    eps: float = _f(1e-6, "AdamW epsilon", resume="own-note", check=above(0))
    warmup_steps: int = _trains(
        100,
        "steps of linear warm-up from 0 to lr; beside max_time, max_tokens or max_flops: the share "
        "warmup_steps / max_steps of whichever budget ends the run",
        check=at_least(0),
    )
    schedule: Literal["linear", "cosine", "constant", "one-cycle", "wsd"] = _trains(
        "linear",
        "decay after warm-up; one-cycle: a triangle over the budget (up to lr at cycle_peak, then down; "
        "warmup_steps unused), as Cramming trains; wsd: warm-up, constant lr, then a decay over the last "
        "decay_share of the budget",
    )
    decay_share: float = _trains(
        0.2, "wsd: the share of the budget, at its end, that the decay takes", check=within(0, 1, "()")
    )
    decay_shape: Literal["linear", "1-sqrt"] = _trains(
        "1-sqrt", "wsd: the decay's shape: linear, or 1 - sqrt(t), which stays high longer and falls at the end"
    )
    cycle_peak: float = _trains(
        0.5, "one-cycle: the share of the budget at which the learning rate peaks", check=within(0, 1, "()")
    )
    min_lr_ratio: float = _trains(0.0, "the schedule ends at lr x this", check=within(0, 1, "[]"))
    grad_clip: float = _trains(1.0, "clip the global gradient norm to this; 0 disables clipping", check=at_least(0))


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: Union[str, float, int, None], key: str = "train.max_time") -> Union[float, None]:
    """Seconds from a number or a string such as '90s', '10m', '2h', '1d'."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if value is None else float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise UserError("config", f"{key} must be seconds or a duration like '30m' or '2h' (got {shown(value)})")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


@dataclass
class TrainConfig:
    run_dir: str = _quiet("runs/default", "folder for checkpoints, metrics and the resolved config")
    batch_size: int = _trains(32, "global batch: sequences per optimizer step, over all processes", check=at_least(1))
    micro_batch_size: Union[int, None] = _trains(
        None,
        "sequences per forward pass on each process; null: batch_size / processes (no accumulation)",
        check=at_least(1),
    )
    max_steps: Union[int, None] = _trains(1000, "stop after this many optimizer steps", check=at_least(1))
    max_tokens: Union[int, None] = _trains(None, "stop after this many training tokens", check=at_least(1))
    max_time: Union[str, float, None] = _trains(
        None,
        "stop after this wall time (seconds or '30m', '2h'); the schedule stretches to fit",
        check=DURATION,
    )
    pause_after: Union[int, None] = _quiet(
        None,
        "save and stop once this many steps are done, as if interrupted (continue later with --resume)",
        check=at_least(1),
    )
    precision: Literal["auto", "bf16", "bf16-head", "fp16", "fp32"] = _trains(
        "auto",
        "autocast precision; bf16-head: bf16 for the MLM head only; auto: bf16 on CUDA where supported and on CPUs "
        "with AMX, bf16-head on AMD CPUs with AVX512-BF16, else fp32",
    )
    device: str = _quiet("auto", "auto, cpu, cuda or cuda:N", check=DEVICE)
    compile: Union[bool, Literal["auto"]] = _quiet(
        False,
        "torch.compile the model: faster steps after compiling first; needs a C++ compiler (CPU) or Triton (CUDA); "
        "auto: on a CPU where a compiler works and the budget is long enough to repay compiling (10 min, 1e14 FLOPs)",
    )
    seed: int = _trains(0, "seed of weights, data order and masks")
    objective: Literal["mlm", "electra", "mlm+nsp", "mlm+sop", "distill"] = _trains(
        "mlm",
        "mlm: masked language modeling; electra: replaced-token detection (settings in the electra section); "
        "mlm+nsp / mlm+sop: MLM on sentence pairs plus BERT's next-sentence or ALBERT's sentence-order prediction; "
        "distill: MLM taught by a bigger masked LM (settings in the distill section)",
    )
    log_every: int = _quiet(10, "steps between metric lines in metrics.jsonl", check=at_least(1))
    eval_every: int = _quiet(500, "steps between validation evaluations; 0 disables", check=at_least(0))
    eval_max_blocks: int = _quiet(64, "validation blocks per evaluation during training", check=at_least(1))
    max_nonfinite: int = _quiet(
        5,
        "stop after this many steps in a row skipped for a non-finite loss or gradient (checked at the next log, "
        "evaluation or checkpoint step: up to log_every - 1 steps later)",
        check=at_least(1),
    )
    tensorboard: bool = _quiet(
        False, "also log to TensorBoard (needs the tensorboard package); as trackers: [tensorboard]"
    )
    progress: bool = _quiet(True, "show a progress bar")
    max_flops: Union[float, None] = _trains(
        None,
        "stop after this many training FLOPs (the objective's FLOPs per token x tokens, e.g. 1e15); the schedule "
        "stretches to fit; replaces the default max_steps, and contradicts max_tokens and a max_steps you set",
        check=Check(lambda flops: flops > 0, "must be a finite number > 0"),
    )
    ema: Union[float, None] = _trains(
        None,
        "keep an exponential moving average of the weights, updated after every step with this decay (0.999: about "
        "the last 1,000 steps weigh), in fp32 beside the weights; evaluations report its figures too (ema_eval_*); "
        "null: none",
        check=within(0, 1, "()"),
    )
    trackers: list[Literal["tensorboard", "mlflow", "wandb"]] = _quiet(
        [],
        "experiment trackers that get the resolved config and every metrics line (each an optional package)",
        check=DISTINCT,
    )

    def validate(self) -> None:
        if self.micro_batch_size is not None:
            _check(
                self.batch_size % self.micro_batch_size == 0,
                "train.micro_batch_size",
                f"({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})",
            )
        _check(
            self.max_steps is not None
            or self.max_tokens is not None
            or self.max_time is not None
            or self.max_flops is not None,
            "train.max_steps",
            "is null, and so are max_tokens, max_time and max_flops: set at least one budget",
        )
        self.validate_max_flops()

    def validate_max_flops(self) -> None:
        """A FLOP budget sets the run's length alone: max_tokens counts the same tokens in another unit, and a
        max_steps beside it would end the run (and the schedule) somewhere else. max_time may still cap it."""
        if self.max_flops is None:
            return
        for key in ("max_tokens", "max_steps"):
            value = getattr(self, key)
            _check(
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
    save_every: int = _quiet(
        500, "steps between checkpoints (one is always written at the end); 0: only at the end", check=at_least(0)
    )
    keep_last: int = _quiet(3, "keep this many newest checkpoints; 0 keeps all", check=at_least(0))
    keep_best: bool = _quiet(False, "also keep the checkpoint with the lowest validation loss")
    save_ema: bool = _quiet(
        False,
        "with train.ema: each checkpoint's model is the moving average (its training state keeps the live weights, "
        "so a resume goes on exactly); false: the live weights, the average kept in the training state only",
    )
    license: str = _quiet(
        "other",
        "license in the model card's Hub metadata (e.g. apache-2.0, mit); other: none stated",
        check=LICENSE,
    )
    language: Union[str, list[str], None] = _quiet(
        None,
        "language code(s) of the model card's Hub metadata (e.g. en); null: none claimed",
        check=LANGUAGES,
    )


@dataclass
class ReportConfig:
    html: bool = _quiet(
        True, "write RUN_DIR/report.html (plots and health checks) at each checkpoint; needs matplotlib"
    )
    data_wait_share: float = _health(
        0.10, "the loop may wait for the next batch at most this share of the time", within(0, 1, "[]")
    )
    spike_factor: float = _health(
        1.5,
        "a logged loss above this multiple of the median of the lines before it is a spike",
        check=at_least(1),
    )
    nonfinite_steps: int = _health(0, "most steps the run may skip for a non-finite loss or gradient", at_least(0))
    divergence_factor: float = _health(
        1.3,
        "a final smoothed loss above this multiple of its minimum is divergence",
        check=at_least(1),
    )
    plateau_evals: int = _health(3, "evaluations without a new best validation loss that make a plateau", at_least(1))
    plateau_lr_share: float = _health(
        0.5, "a plateau counts while lr is above this share of its peak", within(0, 1, "[]")
    )
    overfit_epochs: float = _health(
        3.0, "passes over the training tokens before overfitting is looked for", at_least(0)
    )
    overfit_gap: float = _health(
        0.1,
        "growth of (validation - training loss) in nats that counts as overfitting",
        check=at_least(0),
    )
    unk_rate: float = _health(
        0.005, "largest acceptable share of [UNK] tokens in the validation split", within(0, 1, "[]")
    )
    tokens_per_word: float = _health(2.0, "largest acceptable WordPiece tokens per whitespace word", at_least(1))
    duplicate_share: float = _health(
        0.05, "largest acceptable share of exact duplicate training documents", within(0, 1, "[]")
    )
    tokens_per_param: float = _health(
        20.0, "fewest training tokens per model parameter the run should plan for", at_least(0)
    )
    warmup_share: float = _health(
        0.5,
        "largest share of the run that optim.warmup_steps (one-cycle: optim.cycle_peak) may take",
        check=within(0, 1, "[]"),
    )


@dataclass
class ProbeConfig:
    """The live probe: its settings are these keys (`ProbeSettings.from_section`), whose defaults (linear, one epoch,
    capped examples) keep probing cheap during pretraining; `live_default` takes them from beside ProbeSettings."""

    task: Union[str, None] = _quiet(
        None,
        "labeled task probed during pretraining (rank 0): a folder of train/valid/test .jsonl/.csv/.parquet files "
        "or hf:NAME[/CONFIG]; null: no live probe",
    )
    mode: Literal["linear", "finetune"] = _quiet(
        live_default("mode"),
        "linear: logistic regression on frozen pooled features (seconds); finetune: a copy is fine-tuned",
    )
    every: int = _quiet(
        0, "steps between probes; 0: at each evaluation (train.eval_every) and at the end", check=at_least(0)
    )
    max_train_examples: Union[int, None] = _quiet(
        live_default("max_train_examples"), "train examples the probe uses (a fixed sample); null: all", at_least(1)
    )
    max_eval_examples: Union[int, None] = _quiet(
        live_default("max_eval_examples"),
        "valid and test examples the probe uses (a fixed sample); null: all",
        check=at_least(1),
    )
    text_field: str = _quiet("text", "field holding the text (text_a/text_b are found on their own for pairs)")
    pair_field: Union[str, None] = _quiet(None, "field holding the second text of a sentence-pair task")
    label_field: str = _quiet("label", "field holding the label: int or string (classes) or float (regression)")
    pooling: Literal["mean", "cls"] = _quiet(
        live_default("pooling"), "linear mode: mean of the last layer over real tokens, or [CLS]"
    )
    max_length: int = _quiet(live_default("max_length"), "tokens per example, longer ones are cut", at_least(8))
    epochs: int = _quiet(live_default("epochs"), "finetune mode: epochs over the train examples", at_least(1))
    lr: float = _quiet(live_default("lr"), "finetune mode: peak learning rate", above(0))
    batch_size: int = _quiet(live_default("batch_size"), "examples per batch", at_least(1))


MIN_SEGMENT = 4  # tokens each segment of a sentence pair holds at least


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # a section that one objective alone reads names it: refused with any other, left out of their saved configs
    electra: ElectraConfig = field(default_factory=ElectraConfig, metadata={"objective": "electra"})
    distill: DistillConfig = field(default_factory=DistillConfig, metadata={"objective": "distill"})
    report: ReportConfig = field(default_factory=ReportConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    # the `section.key`s the YAML file and the overrides state (`config_from_dict`); not a section
    stated: ClassVar[frozenset[str]] = frozenset()

    def set_by_user(self, dotted: str) -> bool:
        """Whether the user chose `section.key`: stated in the file or an override, even at its default value, or
        (a Config built in Python) set to a value other than its default."""
        section, key = dotted.split(".")
        return dotted in self.stated or getattr(getattr(self, section), key) != field_default(section, key)

    def validate(self) -> None:
        for section in SECTIONS:  # each key's own check, then each section's rules between its keys
            check_fields(section, getattr(self, section))
            rules = getattr(getattr(self, section), "validate", None)
            if rules is not None:
                rules()
        if self.model.dropout is not None:  # model.dropout replaces both: a key the user set as well would be lost
            for name in ("hidden_dropout", "attention_dropout"):
                value = getattr(self.model, name)
                _check(
                    value == self.model.dropout or not self.set_by_user(f"model.{name}"),
                    f"model.{name}",
                    f"({value}) contradicts model.dropout ({self.model.dropout}); set one of them",
                )
        _check(
            self.masking.schedule == "constant" or self.train.max_steps is not None,
            "masking.schedule",
            f"({self.masking.schedule}) follows the steps of train.max_steps, which is null; set train.max_steps "
            "(beside max_time or max_tokens if you like), or masking.schedule: constant",
        )
        _check(
            not self.checkpoint.save_ema or self.train.ema is not None,
            "checkpoint.save_ema",
            "is true but train.ema is null, so there is no average to save; set train.ema (e.g. 0.999) or drop "
            "checkpoint.save_ema",
        )
        if objective_rule := OBJECTIVE_RULES.get(self.train.objective):
            objective_rule(self)
        if self.data.document_attention == "within":
            self.validate_within_documents()
        _check(
            self.model.architecture == "bert" or not self.model.init_from,
            "model.architecture",
            f"({self.model.architecture}) builds a model from scratch, and model.init_from continues "
            f"{self.model.init_from} as it is built; drop model.architecture or model.init_from",
        )
        _check(
            self.tokenizer.kind == "wordpiece" or not (self.tokenizer.pretrained or self.model.init_from),
            "tokenizer.kind",
            f"({self.tokenizer.kind}) trains a tokenizer, and tokenizer.pretrained or model.init_from brings one; "
            "drop tokenizer.kind or the tokenizer you bring",
        )
        _check(
            not self.tokenizer.extend_vocab or bool(self.model.init_from),
            "tokenizer.extend_vocab",
            "extends the tokenizer of an existing model: set model.init_from too, or drop tokenizer.extend_vocab",
        )
        # with model.init_from the lengths are checked against the base's positions once it is read (init_from.py)
        _check(
            bool(self.model.init_from) or self.data.seq_len <= self.model.max_position_embeddings,
            "data.seq_len",
            f"({self.data.seq_len}) must be <= model.max_position_embeddings ({self.model.max_position_embeddings})",
        )
        _check(
            not (self.probe.task and self.probe.every == 0 and self.train.eval_every == 0),
            "probe.every",
            "is 0 (probe at each evaluation) but train.eval_every is 0 too: set probe.every to a number of steps",
        )
        _check(
            not self.probe.task
            or bool(self.model.init_from)
            or self.probe.max_length <= self.model.max_position_embeddings,
            "probe.max_length",
            f"({self.probe.max_length}) must be <= model.max_position_embeddings "
            f"({self.model.max_position_embeddings})",
        )

    def validate_within_documents(self) -> None:
        """Attention within documents needs packed blocks: the [SEP]s between documents say where each ends. Which
        objectives, architectures and bases can take it is theirs to say (train/init_from.py)."""
        _check(
            self.data.packing,
            "data.document_attention",
            "is within, which keeps each document of a packed block to itself, but data.packing is false (one "
            "document per block already); set data.packing: true or data.document_attention: packed",
        )

    def validate_bert_objective(self) -> None:
        """An objective that builds a BERT's parts (the pooler and pair head, ELECTRA's pair of encoders) needs
        model.architecture bert."""
        _check(
            self.model.architecture == "bert",
            "model.architecture",
            f"({self.model.architecture}) trains train.objective mlm only, and {self.train.objective} builds "
            "BERT-style models (a pooler, pair or ELECTRA heads); set train.objective: mlm or model.architecture: bert",
        )

    def validate_electra(self) -> None:
        """The generator's share of the model's width keeps its heads whole."""
        self.validate_bert_objective()
        shape = self.electra.generator_shape(self.model)
        _check(
            shape["hidden_size"] % shape["num_heads"] == 0,
            "electra.generator_size",
            f"gives a generator of hidden size {shape['hidden_size']} and {shape['num_heads']} heads, which do "
            "not divide; choose a share that keeps hidden size / heads whole (e.g. 0.25 or 0.5)",
        )

    def validate_distill(self) -> None:
        """A teacher is named, and the student does not also continue a model."""
        _check(
            bool(self.distill.teacher),
            "distill.teacher",
            "is not set, and train.objective distill needs a teacher; set distill.teacher to a masked LM's folder or "
            "hub name",
        )
        _check(
            not self.model.init_from,
            "model.init_from",
            "is set with train.objective distill; the student starts from scratch or from the teacher's layers "
            "(distill.init: teacher-layers): drop model.init_from",
        )
        _check(
            self.model.architecture == "bert",
            "model.architecture",
            f"({self.model.architecture}) is not a student distillation builds: a student from scratch is a BERT, one "
            "from the teacher's layers the teacher's family; drop model.architecture",
        )

    def validate_pairs(self) -> None:
        """Sentence pairs are cut from the token store's documents, two segments of MIN_SEGMENT tokens or more."""
        self.validate_bert_objective()
        objective, shortest = self.train.objective, 3 + 2 * MIN_SEGMENT
        _check(
            self.data.seq_len >= shortest,
            "data.seq_len",
            f"({self.data.seq_len}) is too short for two segments of train.objective {objective}: [CLS] A [SEP] B "
            f"[SEP] needs at least {shortest}; raise data.seq_len",
        )
        _check(
            self.data.use_store,
            "data.use_store",
            f"is false, but train.objective {objective} cuts its pairs from the token store; set data.use_store: true",
        )

    @property
    def tokenizer_dir(self) -> Path:
        return Path(self.tokenizer.path) if self.tokenizer.path else Path(self.train.run_dir) / "tokenizer"

    @property
    def store_dir(self) -> Path:
        return Path(self.data.store) if self.data.store else Path(self.train.run_dir) / "tokens"

    def to_dict(self) -> dict[str, Any]:
        tree = dataclasses.asdict(self)
        # the dropouts the model gets: model.dropout, when set, is what both keys mean
        tree["model"].update(
            hidden_dropout=self.model.hidden_dropout_prob, attention_dropout=self.model.attention_dropout_prob
        )
        for section in other_objectives_sections(self.train.objective):
            del tree[section]  # e.g. an MLM run's saved config stays loadable: the electra section is ELECTRA-only
        return tree

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))
# Each train.objective's config checks beyond its sections' own. The objectives themselves are the classes of
# train/objectives/, which config, the lowest layer, cannot import.
OBJECTIVE_RULES: dict[str, Callable[[Config], None]] = {
    "electra": Config.validate_electra,
    "mlm+nsp": Config.validate_pairs,
    "mlm+sop": Config.validate_pairs,
    "distill": Config.validate_distill,
}


def other_objectives_sections(objective: str) -> dict[str, str]:
    """{section: the objective that alone reads it} of the sections another objective than `objective` reads (their
    field's metadata names it)."""
    owners = {f.name: f.metadata.get("objective") for f in dataclasses.fields(Config)}
    return {section: owner for section, owner in owners.items() if owner not in (None, objective)}


def section_fields(section: str) -> tuple[dataclasses.Field, ...]:
    """The fields (keys) of one config section."""
    return dataclasses.fields(typing.get_type_hints(Config)[section])


def field_default(section: str, key: str) -> Any:
    """The declared default of `section.key`."""
    found = next(f for f in section_fields(section) if f.name == key)
    return found.default if found.default is not dataclasses.MISSING else found.default_factory()  # type: ignore[misc]


# The keys whose change on --resume the note of training settings names: derived from each field's `resume`.
TRAINING_KEYS: tuple[str, ...] = tuple(
    f"{section}.{f.name}" for section in SECTIONS for f in section_fields(section) if f.metadata["resume"] == "note"
)


# ---------------------------------------------------------------------------------------------
# Loading: YAML file -> nested dict -> overrides -> typed, validated Config


def _yaml_error(path: str, error: yaml.YAMLError) -> UserError:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return UserError("config", f"{path}: malformed YAML{where}: {problem}; fix the syntax there")


def read_yaml(path: Union[str, Path]) -> dict[str, Any]:
    """The mapping in a YAML config file; a clear UserError for a missing or malformed file."""
    path = Path(path)
    if path.is_dir():
        raise UserError("config", f"{path} is a folder, not a file; pass a YAML file to --config")
    if not path.is_file():
        raise UserError("config", f"file {path} does not exist; pass an existing YAML file to --config")
    try:
        loaded = load_yaml_text(path.read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as error:
        raise _yaml_error(str(path), error) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError("config", f"cannot read {path}: {first_line(error)}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(
            "config", f"{path} must hold a mapping of sections (data:, model:, ...), not a {type(loaded).__name__}"
        )
    return loaded


def _suggest(name: str, options: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if close:
        return f"; did you mean '{prefix}{close[0]}'?"
    return f"; known keys: {', '.join(prefix + o for o in options)}"


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply one `section.key=value` (value parsed as a YAML scalar) to a nested dict in place."""
    if "=" not in assignment:
        raise UserError("config", f"--set {assignment!r} must look like section.key=value")
    dotted, raw = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise UserError("config", f"--set {dotted!r} must name section.key, e.g. optim.lr=1e-3")
    try:
        value = load_yaml_text(raw, f"--set {dotted}") if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    set_value(tree, dotted.strip(), value)


def set_value(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `section.key` to `value` (a Python value, validated later with the rest) in a nested dict in place."""
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise UserError("config", f"override {dotted!r} must name section.key, e.g. optim.lr")
    if tree.get(parts[0]) is None:  # absent, or an empty `optim:` in the file, which loads as an empty section
        tree[parts[0]] = {}
    section = tree[parts[0]]
    if not isinstance(section, dict):
        raise UserError("config", f"{parts[0]} must be a mapping of keys, not {shown(section)}")
    section[parts[1]] = value


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is list:
        return f"a list of {_type_name(typing.get_args(annotation)[0])}"
    return getattr(annotation, "__name__", str(annotation))


LARGEST_INT = 2**63 - 1  # torch, numpy and the tokenizers library take counts and seeds as 64-bit integers


def _coerce(value: Any, annotation: Any) -> tuple[bool, Any]:
    """(matches, value) for a YAML value against a field's type; ints are accepted as floats."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        for option in typing.get_args(annotation):
            ok, coerced = _coerce(value, option)
            if ok:
                return True, coerced
        return False, value
    if origin is Literal:
        return value in typing.get_args(annotation), value
    if origin is list:
        (item,) = typing.get_args(annotation)
        if not isinstance(value, list):
            return False, value
        coerced = [_coerce(v, item) for v in value]
        return all(ok for ok, _ in coerced), [v for _, v in coerced]
    if annotation is type(None):
        return value is None, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, (int, float)):
            try:
                return True, float(value)
            except OverflowError:  # an integer of hundreds of digits: no float holds it, `_build_section` says so
                return True, math.inf
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    return False, value


def _has_nonfinite(value: Any) -> bool:
    """Whether a coerced value is, or (a list) holds, a float that is nan or infinite."""
    if isinstance(value, list):
        return any(_has_nonfinite(item) for item in value)
    return isinstance(value, float) and not math.isfinite(value)


def _got(value: Any) -> str:
    """What a wrong value was, for a message: a boolean says how YAML made it one (`yes` is true)."""
    if isinstance(value, bool):
        return f"{str(value).lower()}: YAML reads true/false, yes/no and on/off as booleans"
    return shown(value)


def _build_section(name: str, cls: type, values: Any) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError("config", f"section '{name}' must be a mapping of keys, not {shown(values)}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            where = shown(f"{name}.{key}")  # a key may be megabytes long: quoted short
            raise UserError("config", f"unknown key {where}{_suggest(str(key)[:100], known, name + '.')}")
        ok, coerced = _coerce(value, hints[key])
        if not ok:
            raise UserError("config", f"{name}.{key} must be {_type_name(hints[key])} (got {_got(value)})")
        if isinstance(coerced, int) and not isinstance(coerced, bool) and not -LARGEST_INT <= coerced <= LARGEST_INT:
            raise UserError("config", f"{name}.{key} is out of range (got {value}); it must lie within ±{LARGEST_INT}")
        if _has_nonfinite(coerced):  # nan passes every `x > 0` check by failing none of them; inf is no setting
            raise UserError("config", f"{name}.{key} must be a finite number (got {shown(value)})")
        kwargs[key] = coerced
    return cls(**kwargs)


def config_from_dict(tree: dict[str, Any]) -> Config:
    """A validated Config from a nested dict of sections."""
    for name in tree:
        if name not in SECTIONS:
            raise UserError("config", f"unknown section {shown(str(name))}{_suggest(str(name)[:100], list(SECTIONS))}")
    hints = typing.get_type_hints(Config)
    config = Config(**{name: _build_section(name, hints[name], tree.get(name)) for name in SECTIONS})
    config.stated = frozenset(f"{name}.{key}" for name in SECTIONS for key in tree.get(name) or {})
    if config.train.max_flops is not None and "train.max_steps" not in config.stated:
        config.train.max_steps = None  # a FLOP budget replaces the default step budget, not one the user set
    for section, owner in other_objectives_sections(config.train.objective).items():
        if stated := sorted(tree.get(section) or {}):
            raise UserError(
                "config",
                f"{section}.{stated[0]} is set but train.objective is '{config.train.objective}'; "
                f"set train.objective: {owner}, or drop the {section} section",
            )
    config.validate()
    return config


def load_config(
    path: Union[str, Path, None], overrides: Union[list[str], tuple[str, ...], dict[str, Any], None] = ()
) -> Config:
    """Read a YAML config (or start from defaults when path is None), apply overrides, validate.

    `overrides` are `section.key=value` strings as `--set` takes them (values parsed as YAML), or a dict of
    `{"section.key": value}` with Python values."""
    return config_from_dict(stated_settings(path, overrides))


def stated_settings(
    path: Union[str, Path, None], overrides: Union[list[str], tuple[str, ...], dict[str, Any], None] = ()
) -> dict[str, Any]:
    """The sections and keys the YAML file and the overrides state, before defaults and checks (`load_config`)."""
    tree = read_yaml(path) if path is not None else {}
    if isinstance(overrides, dict):
        for dotted, value in overrides.items():
            set_value(tree, str(dotted), value)
    else:
        for assignment in overrides or ():
            apply_override(tree, assignment)
    return tree


SAVED_CONFIG_HEADER = "# The resolved config of this output, written by mlmtrain.\n"


def save_config(config: Config, folder: Union[str, Path], name: str = "mlmtrain.yaml", published: bool = False) -> Path:
    """Write the resolved config beside an output, so the output says how it was made; `published` (a checkpoint,
    which is shared) names files and folders without the paths of this machine (`published_settings`)."""
    target = Path(folder) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    text = published_yaml(config) if published else config.to_yaml()
    target.write_text(SAVED_CONFIG_HEADER + text, encoding="utf-8")
    return target


def replaceable_config(path: Path, config: Config) -> bool:
    """True if the file at `path` is a config mlmtrain saved, or holds exactly what saving `config` writes (as
    `mlmtrain config show` prints it): replacing it loses nothing. A config the user wrote there is neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return text.startswith(SAVED_CONFIG_HEADER) or text == config.to_yaml()


def describe_fields() -> list[tuple[str, str, str, str]]:
    """(section.key, default as YAML writes it, help, its check or "") for every field, for docs and
    `config fields`."""
    return [
        (
            f"{name}.{f.name}",
            yaml_value(field_default(name, f.name)),
            f.metadata["help"],
            f.metadata["check"].says if f.metadata["check"] else _choices(section_hints(name)[f.name]),
        )
        for name in SECTIONS
        for f in section_fields(name)
    ]


def section_hints(section: str) -> dict[str, Any]:
    """The type of each key of one section."""
    return typing.get_type_hints(typing.get_type_hints(Config)[section])


def _choices(annotation: Any) -> str:
    """'must be one of a, b, c' for a key whose type lists its values; "" for any other."""
    options = [a for a in typing.get_args(annotation) if typing.get_origin(a) is Literal] or [annotation]
    values = [v for option in options if typing.get_origin(option) is Literal for v in typing.get_args(option)]
    return f"must be one of {', '.join(values)}" if values else ""


def yaml_value(value: Any) -> str:
    """A value as it is written in a YAML config: null, true, 5.0e-04, [tensorboard], text unquoted."""
    return yaml.safe_dump(value, default_flow_style=True, width=1_000_000).removesuffix("...\n").strip()


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optim.lr": 5e-4, ...} from a nested config."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# ---------------------------------------------------------------------------------------------
# What a checkpoint publishes: files and folders by their names, never the paths of the machine that trained it

# the keys that may name a local file, folder or glob; True for those that may name a Hub repository instead
PATH_KEYS = {
    "data.train": False,
    "data.validation": False,
    "data.store": False,
    "tokenizer.path": False,
    "tokenizer.pretrained": True,
    "model.init_from": True,
    "distill.teacher": True,
    "train.run_dir": False,
    "probe.task": False,
}
_NAMED_SOURCES = ("builtin:", "hf:")  # sources named by mlmtrain or the Hub, not by a path


def looks_like_path(name: str) -> bool:
    # Hub ids are NAME or ORG/NAME; anything else that is not on disk is a mistyped local path.
    return name.startswith((".", "/", "~", "\\")) or name.count("/") > 1 or "\\" in name


def names_hub_repository(name: str) -> bool:
    """True when a value that may name a folder or a Hub repository (model.init_from, tokenizer.pretrained) names
    a Hub repository id: NAME or ORG/NAME, not on disk here."""
    return not (Path(name).expanduser().exists() or looks_like_path(name))


def local_name(path: str) -> str:
    """A local path by the name of its file or folder; a glob keeps its folder's name too (`books/*.txt`), since
    the pattern alone names nothing."""
    pure = PurePath(path)
    name = pure.name or path
    return f"{pure.parent.name}/{name}" if glob.has_magic(name) and pure.parent.name else name


def published_value(key: str, value: Any, hub: Union[bool, None] = None) -> Any:
    """`value` of config key `key` as a published config holds it: a local path by its name (`local_name`);
    `builtin:`, `hf:` sources and Hub ids unchanged. `hub` False takes a value as local whether on disk or not."""
    if key not in PATH_KEYS or value is None:
        return value
    if isinstance(value, list):
        return [published_value(key, entry, hub) for entry in value]
    if not isinstance(value, str) or value.startswith(_NAMED_SOURCES):
        return value
    on_hub = PATH_KEYS[key] and (names_hub_repository(value) if hub is None else hub)
    return value if on_hub else local_name(value)


def records_setting(key: str, saved: Any, value: Any) -> bool:
    """True when `saved`, from a checkpoint's mlmtrain.yaml, records `value` of config key `key`: as given (an
    older mlmtrain saved paths) or by name, whether or not the folder it names is still there."""
    return saved in (value, published_value(key, value), published_value(key, value, hub=False))


def published_settings(config: Config) -> dict[str, Any]:
    """`config.to_dict()` with every local path by its name (`published_value`): what a checkpoint holds."""
    tree = config.to_dict()
    for dotted in PATH_KEYS:
        section, key = dotted.split(".")
        if section in tree:
            tree[section][key] = published_value(dotted, tree[section][key])
    return tree


def published_yaml(config: Config) -> str:
    return yaml.safe_dump(published_settings(config), sort_keys=False)
