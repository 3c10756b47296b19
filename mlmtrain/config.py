"""Typed configuration: one dataclass per section, loaded from YAML plus `--set` overrides.

Every field has a default and a one-line `help`; `load_config` rejects unknown keys (with a
"did you mean"), wrong types and out-of-range values with a `UserError` that names the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from mlmtrain.errors import UserError

Source = Union[str, list[str]]


def _f(default: Any, help: str) -> Any:
    """A dataclass field with a default and a one-line description."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError("config", f"{key} {message}")


@dataclass
class DataConfig:
    train: Source = _f(
        "builtin:python-docs",
        "training text: a path, glob or list of them (.txt .jsonl .json .parquet .csv), "
        "'builtin:python-docs', or 'hf:NAME[/CONFIG]:SPLIT'",
    )
    validation: Union[Source, None] = _f(
        None, "validation text (same forms as train); null splits validation_fraction off train"
    )
    validation_fraction: float = _f(0.05, "share of training documents held out for validation when validation is null")
    text_field: str = _f("text", "column / JSON key that holds the text in .jsonl .json .parquet .csv and hub data")
    txt_documents: Literal["line", "paragraph"] = _f(
        "line", "how a .txt file splits into documents: one per line, or blank-line-separated paragraphs"
    )
    seq_len: int = _f(128, "tokens per training block, [CLS] and [SEP] included")
    packing: bool = _f(
        True, "concatenate documents into full blocks (no padding); false: one document per block, padded"
    )
    store: Union[str, None] = _f(None, "token store folder written by `tokenize`; null: <run_dir>/tokens")
    use_store: bool = _f(
        True, "read pre-tokenized blocks from the store; false: tokenize a live stream in the loader workers"
    )
    num_workers: int = _f(1, "DataLoader worker processes that cut blocks and draw masks")
    shuffle_buffer: int = _f(10000, "blocks held for shuffling a live stream (the store shuffles exactly)")

    def validate(self) -> None:
        _check(0.0 <= self.validation_fraction < 1.0, "data.validation_fraction", "must be in [0, 1)")
        _check(self.seq_len >= 8, "data.seq_len", f"must be >= 8 (got {self.seq_len})")
        _check(self.num_workers >= 0, "data.num_workers", f"must be >= 0 (got {self.num_workers})")
        _check(self.shuffle_buffer >= 1, "data.shuffle_buffer", "must be >= 1")
        _check(bool(self.train), "data.train", "must name at least one source")


@dataclass
class TokenizerConfig:
    path: Union[str, None] = _f(
        None, "tokenizer folder (written by `tokenize`, read by `pretrain`); null: <run_dir>/tokenizer"
    )
    pretrained: Union[str, None] = _f(None, "reuse this existing tokenizer folder or hub name instead of training one")
    vocab_size: int = _f(30522, "WordPiece vocabulary size, special tokens included")
    lowercase: bool = _f(True, "lower-case text before tokenizing")
    strip_accents: Union[bool, None] = _f(None, "strip accents; null: follow lowercase, as BERT does")
    min_frequency: int = _f(2, "a merge must occur this often to enter the vocabulary")
    limit_alphabet: int = _f(1000, "at most this many distinct characters in the initial alphabet")

    def validate(self) -> None:
        _check(self.vocab_size >= 16, "tokenizer.vocab_size", f"must be >= 16 (got {self.vocab_size})")
        _check(self.min_frequency >= 1, "tokenizer.min_frequency", "must be >= 1")
        _check(self.limit_alphabet >= 1, "tokenizer.limit_alphabet", "must be >= 1")


@dataclass
class MaskingConfig:
    mlm_probability: float = _f(0.15, "share of ordinary tokens selected for prediction")
    mask_replace: float = _f(0.8, "share of selected tokens replaced by [MASK]")
    random_replace: float = _f(0.1, "share of selected tokens replaced by a random ordinary token")
    whole_word: bool = _f(False, "select all WordPiece pieces of a word together")
    fixed_count: bool = _f(
        False, "select exactly round(rate x maskable tokens) per block (static shapes) instead of a coin per token"
    )
    eval_seed: int = _f(1234, "seed of the fixed evaluation masks")

    def validate(self) -> None:
        _check(
            0.0 < self.mlm_probability < 1.0,
            "masking.mlm_probability",
            f"must be in (0, 1) (got {self.mlm_probability})",
        )
        _check(0.0 <= self.mask_replace <= 1.0, "masking.mask_replace", "must be in [0, 1]")
        _check(0.0 <= self.random_replace <= 1.0, "masking.random_replace", "must be in [0, 1]")
        _check(
            self.mask_replace + self.random_replace <= 1.0 + 1e-9,
            "masking.mask_replace",
            f"+ masking.random_replace must be <= 1 (got {self.mask_replace} + {self.random_replace})",
        )


@dataclass
class ModelConfig:
    hidden_size: int = _f(256, "width of the encoder")
    num_layers: int = _f(4, "transformer layers")
    num_heads: int = _f(4, "attention heads; must divide hidden_size")
    intermediate_size: int = _f(1024, "width of the feed-forward layer")
    max_position_embeddings: int = _f(512, "longest sequence the model can take")
    hidden_dropout: float = _f(0.1, "dropout on hidden states")
    attention_dropout: float = _f(0.1, "dropout on attention probabilities")
    sparse_head: bool = _f(True, "run the MLM head on the selected positions only (same loss, less work)")
    pad_vocab_multiple: int = _f(1, "round the embedding rows up to a multiple of this (64 suits GPUs)")

    def validate(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_position_embeddings",
            "pad_vocab_multiple",
        ):
            _check(getattr(self, name) >= 1, f"model.{name}", f"must be >= 1 (got {getattr(self, name)})")
        _check(
            self.hidden_size % self.num_heads == 0,
            "model.hidden_size",
            f"({self.hidden_size}) must be divisible by model.num_heads ({self.num_heads})",
        )
        for name in ("hidden_dropout", "attention_dropout"):
            _check(0.0 <= getattr(self, name) < 1.0, f"model.{name}", "must be in [0, 1)")


@dataclass
class OptimConfig:
    lr: float = _f(5e-4, "peak learning rate")
    weight_decay: float = _f(0.01, "AdamW weight decay (never on biases or LayerNorm)")
    beta1: float = _f(0.9, "AdamW beta1")
    beta2: float = _f(0.98, "AdamW beta2")
    eps: float = _f(1e-6, "AdamW epsilon")
    warmup_steps: int = _f(100, "steps of linear warm-up from 0 to lr")
    schedule: Literal["linear", "cosine", "constant"] = _f("linear", "decay after warm-up")
    min_lr_ratio: float = _f(0.0, "the schedule ends at lr x this")
    grad_clip: float = _f(1.0, "clip the global gradient norm to this; 0 disables clipping")

    def validate(self) -> None:
        _check(self.lr > 0, "optim.lr", f"must be > 0 (got {self.lr})")
        _check(self.weight_decay >= 0, "optim.weight_decay", f"must be >= 0 (got {self.weight_decay})")
        _check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "optim.beta1", "and optim.beta2 must be in [0, 1)")
        _check(self.eps > 0, "optim.eps", "must be > 0")
        _check(self.warmup_steps >= 0, "optim.warmup_steps", f"must be >= 0 (got {self.warmup_steps})")
        _check(0 <= self.min_lr_ratio <= 1, "optim.min_lr_ratio", "must be in [0, 1]")
        _check(self.grad_clip >= 0, "optim.grad_clip", "must be >= 0")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: Union[str, float, int, None], key: str = "train.max_time") -> Union[float, None]:
    """Seconds from a number or a string such as '90s', '10m', '2h', '1d'."""
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return None if value is None else float(value)
    match = _DURATION.match(str(value))
    if not match:
        raise UserError("config", f"{key} must be seconds or a duration like '30m' or '2h' (got {value!r})")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


@dataclass
class TrainConfig:
    run_dir: str = _f("runs/default", "folder for checkpoints, metrics and the resolved config")
    batch_size: int = _f(32, "global batch: sequences per optimizer step, over all processes")
    micro_batch_size: Union[int, None] = _f(
        None, "sequences per forward pass on each process; null: batch_size / processes (no accumulation)"
    )
    max_steps: Union[int, None] = _f(1000, "stop after this many optimizer steps")
    max_tokens: Union[int, None] = _f(None, "stop after this many training tokens")
    max_time: Union[str, float, None] = _f(
        None, "stop after this wall time (seconds or '30m', '2h'); the schedule stretches to fit"
    )
    pause_after: Union[int, None] = _f(
        None, "save and stop once this many steps are done, as if interrupted (continue later with --resume)"
    )
    precision: Literal["auto", "bf16", "fp16", "fp32"] = _f(
        "auto", "autocast precision; auto: bf16 on CUDA where supported, else fp32"
    )
    device: str = _f("auto", "auto, cpu, cuda or cuda:N")
    compile: bool = _f(False, "torch.compile the model")
    seed: int = _f(0, "seed of weights, data order and masks")
    log_every: int = _f(10, "steps between metric lines in metrics.jsonl")
    eval_every: int = _f(500, "steps between validation evaluations; 0 disables")
    eval_max_blocks: int = _f(64, "validation blocks per evaluation during training")
    max_nonfinite: int = _f(5, "stop after this many non-finite losses in a row")
    tensorboard: bool = _f(False, "also log to TensorBoard (needs the tensorboard package)")
    progress: bool = _f(True, "show a progress bar")

    def validate(self) -> None:
        _check(self.batch_size >= 1, "train.batch_size", f"must be >= 1 (got {self.batch_size})")
        if self.micro_batch_size is not None:
            _check(self.micro_batch_size >= 1, "train.micro_batch_size", "must be >= 1")
            _check(
                self.batch_size % self.micro_batch_size == 0,
                "train.micro_batch_size",
                f"({self.micro_batch_size}) must divide train.batch_size ({self.batch_size})",
            )
        _check(
            self.max_steps is not None or self.max_tokens is not None or self.max_time is not None,
            "train.max_steps",
            "is null, and so are max_tokens and max_time: set at least one budget",
        )
        if self.max_steps is not None:
            _check(self.max_steps >= 1, "train.max_steps", f"must be >= 1 (got {self.max_steps})")
        if self.max_tokens is not None:
            _check(self.max_tokens >= 1, "train.max_tokens", f"must be >= 1 (got {self.max_tokens})")
        if self.pause_after is not None:
            _check(self.pause_after >= 1, "train.pause_after", f"must be >= 1 (got {self.pause_after})")
        seconds = parse_duration(self.max_time)
        if seconds is not None:
            _check(seconds > 0, "train.max_time", "must be > 0")
        _check(
            bool(re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device)),
            "train.device",
            f"must be auto, cpu, cuda or cuda:N (got {self.device!r})",
        )
        _check(self.log_every >= 1, "train.log_every", "must be >= 1")
        _check(self.eval_every >= 0, "train.eval_every", "must be >= 0")
        _check(self.eval_max_blocks >= 1, "train.eval_max_blocks", "must be >= 1")
        _check(self.max_nonfinite >= 1, "train.max_nonfinite", "must be >= 1")

    @property
    def max_time_seconds(self) -> Union[float, None]:
        return parse_duration(self.max_time)


@dataclass
class CheckpointConfig:
    save_every: int = _f(500, "steps between checkpoints (one is always written at the end); 0: only at the end")
    keep_last: int = _f(3, "keep this many newest checkpoints; 0 keeps all")
    keep_best: bool = _f(False, "also keep the checkpoint with the lowest validation loss")

    def validate(self) -> None:
        _check(self.save_every >= 0, "checkpoint.save_every", "must be >= 0")
        _check(self.keep_last >= 0, "checkpoint.keep_last", "must be >= 0")


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def validate(self) -> None:
        for section in SECTIONS:
            getattr(self, section).validate()
        _check(
            self.data.seq_len <= self.model.max_position_embeddings,
            "data.seq_len",
            f"({self.data.seq_len}) must be <= model.max_position_embeddings ({self.model.max_position_embeddings})",
        )

    @property
    def tokenizer_dir(self) -> Path:
        return Path(self.tokenizer.path) if self.tokenizer.path else Path(self.train.run_dir) / "tokenizer"

    @property
    def store_dir(self) -> Path:
        return Path(self.data.store) if self.data.store else Path(self.train.run_dir) / "tokens"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config))


# ---------------------------------------------------------------------------------------------
# Loading: YAML file -> nested dict -> overrides -> typed, validated Config


def _yaml_error(path: str, error: yaml.YAMLError) -> UserError:
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return UserError("config", f"{path}: malformed YAML{where}: {problem}; fix the syntax there")


def _refuse_duplicate_keys(node: yaml.Node, parents: list[str], name: str) -> None:
    """UserError for a key given twice in one mapping: plain YAML keeps the last one silently, so a second
    `optim:` section would reset every key the first one set."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, parents, name)
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key in seen:
            where = ".".join([*parents, key])
            raise UserError("config", f"{name}: '{where}' appears twice (lines {seen[key]} and {line}); keep one")
        seen[key] = line
        _refuse_duplicate_keys(value_node, [*parents, key], name)


def load_yaml_text(text: str, name: str) -> Any:
    """yaml.safe_load that refuses duplicate keys (`name` says where the text came from)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, [], name)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: Union[str, Path]) -> dict[str, Any]:
    """The mapping in a YAML config file; a clear UserError for a missing or malformed file."""
    path = Path(path)
    if not path.is_file():
        raise UserError("config", f"file {path} does not exist; pass an existing YAML file to --config")
    try:
        loaded = load_yaml_text(path.read_text(encoding="utf-8"), str(path))
    except yaml.YAMLError as error:
        raise _yaml_error(str(path), error) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError("config", f"cannot read {path}: {error}") from None
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
    section = tree.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise UserError("config", f"{parts[0]} must be a mapping of keys, not {section!r}")
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
            return True, float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return True, float(value)
            except ValueError:
                return False, value
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    return False, value


def _build_section(name: str, cls: type, values: Any) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError("config", f"section '{name}' must be a mapping of keys, not {values!r}")
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in values.items():
        if key not in known:
            raise UserError("config", f"unknown key '{name}.{key}'{_suggest(str(key), known, name + '.')}")
        ok, coerced = _coerce(value, hints[key])
        if not ok:
            raise UserError("config", f"{name}.{key} must be {_type_name(hints[key])} (got {value!r})")
        kwargs[key] = coerced
    return cls(**kwargs)


def config_from_dict(tree: dict[str, Any]) -> Config:
    """A validated Config from a nested dict of sections."""
    for name in tree:
        if name not in SECTIONS:
            raise UserError("config", f"unknown section '{name}'{_suggest(str(name), list(SECTIONS))}")
    hints = typing.get_type_hints(Config)
    config = Config(**{name: _build_section(name, hints[name], tree.get(name)) for name in SECTIONS})
    config.validate()
    return config


def load_config(path: Union[str, Path, None], overrides: Union[list[str], tuple[str, ...]] = ()) -> Config:
    """Read a YAML config (or start from defaults when path is None), apply overrides, validate."""
    tree = read_yaml(path) if path is not None else {}
    for assignment in overrides:
        apply_override(tree, assignment)
    return config_from_dict(tree)


def save_config(config: Config, folder: Union[str, Path], name: str = "mlmtrain.yaml") -> Path:
    """Write the resolved config beside an output, so the output says how it was made."""
    target = Path(folder) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(config.to_yaml(), encoding="utf-8")
    return target


def describe_fields() -> list[tuple[str, Any, str]]:
    """(section.key, default, help) for every field, for docs and `config fields`."""
    rows = []
    for name in SECTIONS:
        section = typing.get_type_hints(Config)[name]
        for f in dataclasses.fields(section):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            rows.append((f"{name}.{f.name}", default, f.metadata["help"]))
    return rows
