"""An existing masked LM a run reads (`model.init_from`'s base, a distillation's teacher): where its folder is (a
folder or a Hub name), its config.json checked as a masked LM of a family mlmtrain continues (`model/families.py`),
the shape and tokenizer it gives a config (`take_shape`, `take_tokenizer`), and its weights (`load_base_model`).
Each base is read once into a `Base`, which the resolution, the checks and the loading share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.config import Config, TokenizerConfig, names_hub_repository
from mlmtrain.data.tokenizer import same_tokenizer
from mlmtrain.errors import UserError
from mlmtrain.evaluate.perplexity import load_masked_lm
from mlmtrain.model.context import quiet_transformers
from mlmtrain.model.families import Family, family_of, known_types
from mlmtrain.model.modernbert import set_rope_theta
from mlmtrain.model.pooler import read_pooler
from mlmtrain.runtime.hub import hub_model_folder
from mlmtrain.runtime.model_folder import ModelFolder, read_model_folder
from mlmtrain.train.added_words import add_word_rows

KEY = "model.init_from"
SUPPORTED = f"masked LMs of these model types: {known_types()}"
# TokenizerConfig keys that only matter when training a new WordPiece vocabulary
TRAINING_KEYS = ("vocab_size", "lowercase", "strip_accents", "min_frequency", "limit_alphabet")


def refuse(message: str, key: str = KEY) -> UserError:
    """A config error about the model that `key` names."""
    return UserError("config", f"{key} {message}")


@dataclass(frozen=True)
class Base:
    """A masked LM named by config key `key` (`name`: as the config says it), read once: its folder's config.json
    (checked) and its family."""

    name: str
    key: str
    saved: ModelFolder
    family: Family

    @property
    def folder(self) -> Path:
        return self.saved.folder

    @property
    def config(self) -> dict[str, Any]:
        return self.saved.config

    def positions(self) -> int:
        """The longest sequence it takes."""
        return self.family.positions(self.config)

    def load(self, cfg: Config) -> Any:
        """Its masked LM, of its family's class, in float32 whatever it was saved in, with `cfg`'s dropout."""
        with quiet_transformers():  # no load report for weights a masked LM does not use (a pooler)
            return self.family.load(self.saved, cfg.model).float()


def base_folder(name: str, key: str = KEY) -> Path:
    """The local folder of the model `key` names: `name` itself, or its hub snapshot (downloaded, or from the cache
    offline)."""
    path = Path(name).expanduser()
    if not names_hub_repository(name):
        if not path.is_dir():
            what = "is a file" if path.exists() else "does not exist"
            raise refuse(f"{name} {what}; pass a model folder (config.json, weights, tokenizer) or a hub name", key)
        return path
    return hub_model_folder(name, "config", key)


def read_base(name: str, key: str = KEY) -> Base:
    """The masked LM `key` names, read once and checked (`base_of`)."""
    try:
        saved = read_model_folder(base_folder(name, key))  # no code of the base's, and every key read of the right type
    except UserError as error:
        raise refuse(f"{name}: {error.message}", key) from None
    return base_of(saved, name, key)


def base_of(saved: ModelFolder, name: str, key: str = KEY) -> Base:
    """The model `key` names (as `name`) from its folder as read (or from a checkpoint that stands in for it), after
    checking it is one of a family mlmtrain reads with the shape keys it needs (UserError naming `key` otherwise)."""
    config = saved.config
    family = family_of(config["model_type"])
    if family is None:
        raise refuse(f"{name} is a {config['model_type']!r} model; mlmtrain reads {SUPPORTED}: use one of them", key)
    architectures = config.get("architectures") or []
    if architectures and not any(a in family.masked_lm for a in architectures):
        raise refuse(
            f"{name} is a {architectures[0]}, not a masked LM; mlmtrain reads a {family.name} model saved as "
            f"{' or '.join(family.masked_lm)}: use one with its masked-LM head",
            key,
        )
    for shape_key, base_key in family.shape.items():  # read below: present and a whole number, or refused here
        value = config.get(base_key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise refuse(
                f"{name}: its config.json has no whole number {base_key} (model.{shape_key}); use another model", key
            )
    return Base(name, key, saved, family)


def check_base(name: str, key: str = KEY) -> Base:
    """`read_base`, after checking that its weights load as a whole masked LM of its family and its tokenizer has the
    tokens MLM needs (UserError naming the problem otherwise)."""
    base = read_base(name, key)
    try:
        mlm, tokenizer = load_masked_lm(base.folder)
    except UserError as error:
        raise refuse(f"{name}: {error.message}", key) from None
    del mlm
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id >= base.config["vocab_size"]:
        raise refuse(f"{name}: its tokenizer has no [PAD] token within the model's vocabulary; use another model", key)
    return base


def take_shape(cfg: Config, base: Base, or_else: str = "", skip: tuple[str, ...] = ()) -> None:
    """The base's shape into `cfg.model` (by the config.json names of its family): keys the user did not set take it,
    a key set to another value (its default included) is refused (`or_else`: another way out, for the message); keys
    in `skip` stay the config's."""
    model, config, name = cfg.model, base.config, base.name
    for shape_key, base_key in base.family.shape.items():
        if shape_key in skip:
            continue
        value, base_value = getattr(model, shape_key), config[base_key]
        if value != base_value and cfg.set_by_user(f"model.{shape_key}"):
            raise refuse(
                f"{name} has {base_key}={base_value}, but model.{shape_key} is {value}; drop model.{shape_key}"
                + or_else,
                base.key,
            )
        setattr(model, shape_key, base_value)
    rows = config["vocab_size"]
    if rows % model.pad_vocab_multiple:
        raise refuse(
            f"{name} has {rows} embedding rows, not a multiple of model.pad_vocab_multiple "
            f"({model.pad_vocab_multiple}); drop model.pad_vocab_multiple" + or_else,
            base.key,
        )
    if model.dropout is None:  # dropout keys the user did not set take the base's (they may be set)
        for key, base_key in base.family.dropout.items():
            if not cfg.set_by_user(f"model.{key}") and base_key in config:
                setattr(model, key, float(config[base_key]))


def take_tokenizer(tokenizer: TokenizerConfig, base: Base) -> None:
    """The base's tokenizer as tokenizer.pretrained; keys that would train a new WordPiece vocabulary are refused, and
    so is another tokenizer.pretrained (the same tokenizer in another folder passes)."""
    name = base.name
    if tokenizer.pretrained not in (None, name) and not same_tokenizer(tokenizer.pretrained, name):
        raise refuse(
            f"{name} brings its own tokenizer, but tokenizer.pretrained is {tokenizer.pretrained}, another one; "
            "drop tokenizer.pretrained",
            base.key,
        )
    defaults = TokenizerConfig()
    for setting in TRAINING_KEYS:
        value = getattr(tokenizer, setting)
        if value != getattr(defaults, setting) and not (setting == "vocab_size" and value == base.config["vocab_size"]):
            raise refuse(
                f"{name} brings its own tokenizer, and tokenizer.{setting} ({value}) would train a new WordPiece "
                f"vocabulary; drop tokenizer.{setting}",
                base.key,
            )
    tokenizer.pretrained = name
    tokenizer.vocab_size = base.config["vocab_size"]


def kept_pooler(base: Optional[Base]) -> Optional[dict[str, torch.Tensor]]:
    """The pooler every checkpoint of a model.init_from run keeps, read once at the start (the folder may go away
    during the run) from where the run reads its base (a resumed checkpoint, which kept it, else the base's folder);
    None without a base, or when it has none (checkpoints then draw one from the seed)."""
    return read_pooler(base.saved) if base is not None else None


def load_base_model(cfg: Config, base: Base) -> Any:
    """The base's masked LM in float32 with the config's dropout (a resolved config), with rows for the words
    tokenizer.extend_vocab added."""
    model = base.load(cfg)
    add_word_rows(model, cfg)
    set_rope_theta(model, cfg.model)  # a ModernBERT base at the rotary bases the run sets
    return model
