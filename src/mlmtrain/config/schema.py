"""The whole config (`Config`): its sections, the rules between keys of several sections, and what is known of each
key without a file: its default, its type, whether a resume under another value changes training."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import yaml

from mlmtrain.config.data import DataConfig, MaskingConfig, TokenizerConfig
from mlmtrain.config.fields import check_fields, require
from mlmtrain.config.model import DistillConfig, ElectraConfig, ModelConfig
from mlmtrain.config.outputs import ProbeConfig, ReportConfig
from mlmtrain.config.phases import BUDGETS, PhaseConfig, decaying_phase
from mlmtrain.config.training import CheckpointConfig, OptimConfig, TrainConfig
from mlmtrain.config.urls import cached_copy, is_remote, local_path


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
    # the run's phases, in order (config/phases.py); empty: one phase, the train section's budgets; not a section
    phases: list[PhaseConfig] = field(default_factory=list, metadata={"section": False})
    # the `section.key`s the YAML file and the overrides state (`config_from_dict`); not a section
    stated: ClassVar[frozenset[str]] = frozenset()

    def value(self, dotted: str) -> Any:
        """The value of `section.key`."""
        section, key = dotted.split(".")
        return getattr(getattr(self, section), key)

    def set_by_user(self, dotted: str) -> bool:
        """Whether the user chose `section.key`: stated in the file or an override, even at its default value, or
        (a Config built in Python) set to a value other than its default."""
        return dotted in self.stated or self.value(dotted) != field_default(*dotted.split("."))

    def validate(self) -> None:
        for section in SECTIONS:  # each key's own check, then each section's rules between its keys
            check_fields(section, getattr(self, section))
            rules = getattr(getattr(self, section), "validate", None)
            if rules is not None:
                rules()
        if self.model.dropout is not None:  # model.dropout replaces both: a key the user set as well would be lost
            for name in ("hidden_dropout", "attention_dropout"):
                value = getattr(self.model, name)
                require(
                    value == self.model.dropout or not self.set_by_user(f"model.{name}"),
                    f"model.{name}",
                    f"({value}) contradicts model.dropout ({self.model.dropout}); set one of them",
                )
        steps = (  # a FLOP budget sets the length alone: a max_steps may not stand beside it
            "train.max_flops sets this run's length, and a max_steps beside it is refused: set train.max_steps in "
            "place of train.max_flops"
            if self.train.max_flops is not None
            else "set train.max_steps (beside max_time or max_tokens if you like)"
        )
        require(
            self.masking.schedule == "constant" or self.train.max_steps is not None,
            "masking.schedule",
            f"({self.masking.schedule}) follows the steps of train.max_steps, which is null; {steps}, or "
            "masking.schedule: constant without masking.mlm_probability_end",
        )
        train = self.train
        require(
            bool(self.phases)
            or any(v is not None for v in (train.max_steps, train.max_tokens, train.max_time, train.max_flops)),
            "train.max_steps",
            "is null, and so are max_tokens, max_time and max_flops: set at least one budget (or phases)",
        )
        require(
            self.masking.schedule == "constant" or not self.phases,
            "masking.schedule",
            f"({self.masking.schedule}) follows the run's steps, and the phases set the masking rate each trains "
            "with; set masking.mlm_probability in each phase's set:, and masking.schedule: constant",
        )
        require(
            not self.optim.decay or self.optim.schedule == "wsd",
            "optim.decay",
            f"is true, which places the decay of optim.schedule wsd, and optim.schedule is {self.optim.schedule}; "
            "set optim.schedule: wsd or drop optim.decay",
        )
        require(
            not self.checkpoint.save_ema or self.train.ema is not None,
            "checkpoint.save_ema",
            "is true but train.ema is null, so there is no average to save; set train.ema (e.g. 0.999) or drop "
            "checkpoint.save_ema",
        )
        if self.data.document_attention == "within":
            self.validate_within_documents()
        require(
            # the default names no choice: a saved config states it beside the base it continued
            not self.model.init_from or self.model.architecture == field_default("model", "architecture"),
            "model.architecture",
            f"({self.model.architecture}) builds a model from scratch, and model.init_from continues "
            f"{self.model.init_from} as it is built; drop model.architecture or model.init_from",
        )
        # the key that brings a tokenizer, the one the user set first (tokenizer.pretrained is filled from it)
        brings = "model.init_from" if self.model.init_from else "tokenizer.pretrained"
        require(
            self.tokenizer.kind == "wordpiece" or not (self.tokenizer.pretrained or self.model.init_from),
            "tokenizer.kind",
            f"({self.tokenizer.kind}) trains a tokenizer, and {brings} brings one; drop tokenizer.kind",
        )
        alphabet = self.tokenizer.limit_alphabet
        require(
            self.tokenizer.kind != "bpe" or alphabet == field_default("tokenizer", "limit_alphabet"),
            "tokenizer.limit_alphabet",
            f"({alphabet}) limits a WordPiece's alphabet, and tokenizer.kind bpe has none to limit (a byte-level BPE "
            "starts from the 256 bytes); drop tokenizer.limit_alphabet",
        )
        require(
            not self.tokenizer.extend_vocab or bool(self.model.init_from),
            "tokenizer.extend_vocab",
            "extends the tokenizer of an existing model: set model.init_from too, or drop tokenizer.extend_vocab",
        )
        # with model.init_from the lengths are checked against the base's positions once it is read (init_from.py)
        require(
            bool(self.model.init_from) or self.data.seq_len <= self.model.max_position_embeddings,
            "data.seq_len",
            f"({self.data.seq_len}) must be <= model.max_position_embeddings ({self.model.max_position_embeddings})",
        )
        require(
            not (self.probe.task and self.probe.every == 0 and self.train.eval_every == 0),
            "probe.every",
            "is 0 (probe at each evaluation) but train.eval_every is 0 too: set probe.every to a number of steps",
        )
        require(
            not self.probe.task
            or bool(self.model.init_from)
            or self.probe.max_length <= self.model.max_position_embeddings,
            "probe.max_length",
            f"({self.probe.max_length}) must be <= model.max_position_embeddings "
            f"({self.model.max_position_embeddings})",
        )

    def validate_within_documents(self) -> None:
        """Attention within documents needs packed blocks: the [SEP]s between documents say where each ends. Which
        objectives, architectures and bases can take it is theirs to say (their tables)."""
        require(
            self.data.packing,
            "data.document_attention",
            "is within, which keeps each document of a packed block to itself, but data.packing is false (one "
            "document per block already); set data.packing: true or data.document_attention: packed",
        )

    @property
    def cache_dir(self) -> Path:
        """Where copies of remote stores, tokenizers and MDS shards are kept (data.cache_dir)."""
        return self.data.cache_folder()

    @property
    def tokenizer_dir(self) -> Path:
        """The local tokenizer folder: tokenizer.path, its copy in the cache when it is a URL, or the run's own."""
        return self._local_folder(self.tokenizer.path, "tokenizer")

    @property
    def store_dir(self) -> Path:
        """The local token store folder: data.store, its copy in the cache when it is a URL, or the run's own."""
        return self._local_folder(self.data.store, "tokens")

    def _local_folder(self, value: Union[str, None], in_run_dir: str) -> Path:
        if not value:
            return Path(self.train.run_dir) / in_run_dir
        return cached_copy(self.cache_dir, value) if is_remote(value) else Path(local_path(value))

    def to_dict(self) -> dict[str, Any]:
        tree = dataclasses.asdict(self)
        # the dropouts the model gets: model.dropout, when set, is what both keys mean
        tree["model"].update(
            hidden_dropout=self.model.hidden_dropout_prob, attention_dropout=self.model.attention_dropout_prob
        )
        for section in other_objectives_sections(self.train.objective):
            del tree[section]  # e.g. an MLM run's saved config stays loadable: the electra section is ELECTRA-only
        # phases, when there are, as a config file writes them: each with its one budget
        tree["phases"] = [{key: value for key, value in phase.items() if value is not None} for phase in tree["phases"]]
        if not tree["phases"]:
            del tree["phases"]
        return tree

    def to_yaml(self) -> str:
        """The config as a YAML file writes it; with phases, comment lines after them say what each trains under."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False) + self.phases_in_force()

    def phases_in_force(self) -> str:
        """Comment lines for the end of the YAML: each phase's budget and the settings it trains under, its own
        set: and those of the phases before it (config/phases.py), as resolved; "" without phases."""
        if not self.phases:
            return ""
        lines = ["# each phase trains under the config above with its set: and those of the phases before it:"]
        decaying = decaying_phase(self.phases) if self.optim.schedule == "wsd" else None
        settings: dict[str, Any] = {}
        for index, phase in enumerate(self.phases):
            settings = {**settings, **phase.set}
            key = next(key for key in BUDGETS if getattr(phase, key) is not None)
            budget = f"{key} {yaml_value(getattr(phase, key))}" + ("; wsd decays here" if index == decaying else "")
            in_force = ", ".join(f"{dotted} {yaml_value(value)}" for dotted, value in settings.items())
            lines.append(f"#   {phase.name} ({budget}): {in_force or 'no setting'}")
        return "\n".join(lines) + "\n"


SECTIONS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Config) if f.metadata.get("section", True))


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
