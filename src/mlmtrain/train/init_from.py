"""Starting from an existing masked LM (`model.init_from`): find the base (a folder or a hub name), check it is a
masked LM of a family mlmtrain continues (`model/families.py`) with a usable tokenizer, fill the config's model shape
and tokenizer from it (`resolve_init_from`), and load its weights for a fresh run (`load_base_model`). A resumed run
of a base (`resumed_base`) takes all of that from the checkpoint it resumes, so the base may have moved or the Hub be
out of reach.

The base's shape, weights and tokenizer win: shape keys the user did not set take the base's values, a shape key
set to another value (even its default) is refused, dropout keys may be set. Optimizer and schedule start fresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.config import Config, TokenizerConfig, names_hub_repository, read_yaml, records_setting
from mlmtrain.errors import UserError
from mlmtrain.model.families import Family, check_within_documents, family_of, known_types, model_positions
from mlmtrain.readers import read_json, read_saved_yaml
from mlmtrain.runtime.hub import hub_model_folder
from mlmtrain.runtime.model_folder import model_config

KEY = "model.init_from"
SUPPORTED = f"masked LMs of these model types: {known_types()}"
# TokenizerConfig keys that only matter when training a new WordPiece vocabulary
TRAINING_KEYS = ("vocab_size", "lowercase", "strip_accents", "min_frequency", "limit_alphabet")


def _refuse(message: str, key: str = KEY) -> UserError:
    return UserError("config", f"{key} {message}")


def base_folder(name: str, key: str = KEY) -> Path:
    """The local folder of the base (or of the model config `key` names): `name` itself, or its hub snapshot
    (downloaded, or from the cache offline)."""
    path = Path(name).expanduser()
    if not names_hub_repository(name):
        if not path.is_dir():
            what = "is a file" if path.exists() else "does not exist"
            raise _refuse(f"{name} {what}; pass a model folder (config.json, weights, tokenizer) or a hub name", key)
        return path
    return hub_model_folder(name, "config", key)


def base_config(folder: Path, name: str, key: str = KEY) -> dict[str, Any]:
    """The config.json of the masked LM in `folder` (named `name` by config key `key`), after checking it is one of
    a family mlmtrain reads with the shape keys it needs (UserError naming `key` otherwise)."""
    try:
        config = model_config(folder)  # no code of the base's, and every key read here of the right type
    except UserError as error:
        raise _refuse(f"{name}: {error.message}", key) from None
    family = family_of(config["model_type"])
    if family is None:
        raise _refuse(f"{name} is a {config['model_type']!r} model; mlmtrain reads {SUPPORTED}: use one of them", key)
    architectures = config.get("architectures") or []
    if architectures and not any(a in family.masked_lm for a in architectures):
        raise _refuse(
            f"{name} is a {architectures[0]}, not a masked LM; mlmtrain reads a {family.name} model saved as "
            f"{' or '.join(family.masked_lm)}: use one with its masked-LM head",
            key,
        )
    for shape_key, base_key in family.shape.items():  # read below: present and a whole number, or refused here
        value = config.get(base_key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _refuse(
                f"{name}: its config.json has no whole number {base_key} (model.{shape_key}); use another model", key
            )
    return config


def base_family(config: dict[str, Any]) -> Family:
    """The family of a base's config.json that `base_config` accepted."""
    family = family_of(config["model_type"])
    assert family is not None  # base_config refused any other
    return family


def check_base(name: str, key: str = KEY) -> dict[str, Any]:
    """The base's config.json (or that of the model config `key` names), after checking that its weights load as a
    whole masked LM of its family and its tokenizer has the tokens MLM needs (UserError naming the problem
    otherwise)."""
    from mlmtrain.evaluate.perplexity import load_masked_lm

    folder = base_folder(name, key)
    config = base_config(folder, name, key)
    try:
        mlm, tokenizer = load_masked_lm(folder)
    except UserError as error:
        raise _refuse(f"{name}: {error.message}", key) from None
    del mlm
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id >= config["vocab_size"]:
        raise _refuse(f"{name}: its tokenizer has no [PAD] token within the model's vocabulary; use another model", key)
    return config


def resumed_base(cfg: Config, resume_from: Optional[Path]) -> Optional[Path]:
    """The checkpoint that stands in for model.init_from's base when a run of that base resumes from it: its
    config.json has the base's shape, its tokenizer and pooler are the run's. None when there is no such resume,
    or when the checkpoint's mlmtrain.yaml names another base (by its name: a checkpoint holds no paths) or none
    (an older mlmtrain's): the base is read."""
    if not cfg.model.init_from or resume_from is None:
        return None
    saved = (read_saved_yaml(Path(resume_from) / "mlmtrain.yaml") or {}).get("model")  # None: no file, or damaged
    names_base = isinstance(saved, dict) and records_setting(KEY, saved.get("init_from"), cfg.model.init_from)
    return Path(resume_from) if names_base else None


def _resumed_config(folder: Path, name: str) -> dict[str, Any]:
    """`base_config` of a resumed checkpoint (`resumed_base`), with the base's vocabulary size as its mlmtrain.yaml
    records it (tokenizer.extend_vocab may have added rows since)."""
    config = base_config(folder, name)
    tokenizer = read_yaml(folder / "mlmtrain.yaml").get("tokenizer")
    rows = tokenizer.get("vocab_size") if isinstance(tokenizer, dict) else None
    return {**config, "vocab_size": rows} if isinstance(rows, int) and not isinstance(rows, bool) else config


def resolve_init_from(cfg: Config, check_weights: bool = True, resumed: Optional[Path] = None) -> None:
    """Fill `cfg` from the models it names: the objective's own (`Objective.resolve_models`), then the base named by
    model.init_from (nothing when it is null): the model's shape and the tokenizer are the base's, a conflicting key
    is refused; so is data.document_attention within where the objective or the model cannot keep a token to its
    document. `check_weights` false reads the base's config only;
    `resumed` (a checkpoint of this run, `resumed_base`) is read instead of the base, which is not opened."""
    from mlmtrain.train.objectives import objective_class

    objective_class(cfg).resolve_models(cfg, check_weights)  # a distillation's teacher
    name = cfg.model.init_from
    if not name:  # the architecture built from scratch is a model of its family (families.py)
        architecture = cfg.model.architecture
        _check_document_attention(cfg, family_of(architecture), f"model.architecture {architecture}")
        return
    if resumed is not None:
        config = _resumed_config(resumed, name)
    else:
        config = check_base(name) if check_weights else base_config(base_folder(name), name)
    family = base_family(config)
    if cfg.train.objective not in family.objectives:
        applies = " or ".join(family.objectives)
        raise _refuse(
            f"is set with train.objective {cfg.train.objective}; starting {cfg.train.objective} from an existing "
            f"model is not supported (a {family.name} base continues with {applies}): drop model.init_from or use "
            f"train.objective: {family.objectives[0]}"
        )
    _check_document_attention(cfg, family, f"{KEY} {name} (a {family.name} model)")
    take_shape(cfg, config, name, family)
    take_tokenizer(cfg.tokenizer, config, name)
    _check_tokenizer_use(cfg, name, resumed)
    positions = family.positions(config)
    lengths = [("data.seq_len", cfg.data.seq_len)] + (
        [("probe.max_length", cfg.probe.max_length)] if cfg.probe.task else []
    )
    for key, length in lengths:
        if length > positions:
            raise UserError(
                "config",
                f"{key} ({length}) is beyond the {positions} positions of {KEY} {name}; set {key} to {positions} "
                "or less",
            )
    cfg.validate()


def _check_document_attention(cfg: Config, family: Optional[Family], model: str) -> None:
    """UserError for data.document_attention within where the objective, or `model` (of `family`), cannot keep a
    token to its own document; auto becomes within unless within would be refused, else packed (in `cfg`, as saved)."""
    from mlmtrain.train.objectives import REGISTRY, objective_class

    if cfg.data.document_attention == "auto":
        cfg.data.document_attention = "within"
        try:  # the rules that refuse within (data.packing's in the config, the objective's and the model's) decide
            cfg.validate_within_documents()
            _check_document_attention(cfg, family, model)
        except UserError:
            cfg.data.document_attention = "packed"
        return
    if cfg.data.document_attention != "within":
        return
    if not objective_class(cfg).within_documents:
        able = " or ".join(name for name, objective in REGISTRY.items() if objective.within_documents)
        raise UserError(
            "config",
            f"data.document_attention is within, which train.objective {able} supports, not {cfg.train.objective}; "
            f"set train.objective: {able} or data.document_attention: packed",
        )
    check_within_documents(family, model)


def _check_tokenizer_use(cfg: Config, name: str, resumed: Optional[Path]) -> None:
    """UserError now, before anything is written, for what the run would ask of the base's tokenizer (a resumed
    checkpoint's: `resumed`) and it cannot do: extend its vocabulary (tokenizer.extend_vocab; a resume's tokenizer is
    extended already), or mark whole words (masking.whole_word)."""
    from mlmtrain.data.masking import check_whole_words
    from mlmtrain.data.tokenizer import extendable_vocab, load_tokenizer

    extend = bool(cfg.tokenizer.extend_vocab) and resumed is None
    if not (extend or cfg.masking.whole_word):
        return
    tokenizer = load_tokenizer(resumed or name)
    if extend:
        extendable_vocab(tokenizer, name)
    if cfg.masking.whole_word:
        check_whole_words(tokenizer, name)


def take_shape(
    cfg: Config,
    config: dict[str, Any],
    name: str,
    family: Family,
    key: str = KEY,
    or_else: str = "",
    skip: tuple[str, ...] = (),
) -> None:
    """The base's shape into `cfg.model` (by the config.json names of its family; the model config `key` names): keys
    the user did not set take it, a key set to another value (its default included) is refused (`or_else`: another
    way out, for the message); keys in `skip` stay the config's."""
    model = cfg.model
    for shape_key, base_key in family.shape.items():
        if shape_key in skip:
            continue
        value, base_value = getattr(model, shape_key), config[base_key]
        if value != base_value and cfg.set_by_user(f"model.{shape_key}"):
            raise _refuse(
                f"{name} has {base_key}={base_value}, but model.{shape_key} is {value}; drop model.{shape_key}"
                + or_else,
                key,
            )
        setattr(model, shape_key, base_value)
    rows = config["vocab_size"]
    if rows % model.pad_vocab_multiple:
        raise _refuse(
            f"{name} has {rows} embedding rows, not a multiple of model.pad_vocab_multiple "
            f"({model.pad_vocab_multiple}); drop model.pad_vocab_multiple" + or_else,
            key,
        )
    if model.dropout is None:  # dropout keys the user did not set take the base's (they may be set)
        for key, base_key in family.dropout.items():
            if not cfg.set_by_user(f"model.{key}") and base_key in config:
                setattr(model, key, float(config[base_key]))


def take_tokenizer(tokenizer: TokenizerConfig, config: dict[str, Any], name: str, key: str = KEY) -> None:
    """The base's tokenizer (that of the model config `key` names) as tokenizer.pretrained; keys that would train a
    new WordPiece vocabulary are refused, and so is another tokenizer.pretrained (the same tokenizer in another
    folder passes)."""
    from mlmtrain.data.tokenizer import same_tokenizer

    if tokenizer.pretrained not in (None, name) and not same_tokenizer(tokenizer.pretrained, name):
        raise _refuse(
            f"{name} brings its own tokenizer, but tokenizer.pretrained is {tokenizer.pretrained}, another one; "
            "drop tokenizer.pretrained",
            key,
        )
    defaults = TokenizerConfig()
    for setting in TRAINING_KEYS:
        value = getattr(tokenizer, setting)
        if value != getattr(defaults, setting) and not (setting == "vocab_size" and value == config["vocab_size"]):
            raise _refuse(
                f"{name} brings its own tokenizer, and tokenizer.{setting} ({value}) would train a new WordPiece "
                f"vocabulary; drop tokenizer.{setting}",
                key,
            )
    tokenizer.pretrained = name
    tokenizer.vocab_size = config["vocab_size"]


def kept_pooler(base: Optional[Path]) -> Optional[dict[str, torch.Tensor]]:
    """The pooler every checkpoint of a model.init_from run keeps, read once at the start (the folder may go away
    during the run) from `base`, where the run reads its base (`ResolvedRun.base`: a resumed checkpoint, which kept
    it, else the base's folder); None without a base, or when it has none (checkpoints then draw one from the seed)."""
    from mlmtrain.model.pooler import read_pooler

    return read_pooler(base) if base is not None else None


def load_base_model(cfg: Config) -> Any:
    """The base's masked LM, of its family's class, in float32, with the config's dropout (a resolved config:
    `resolve_init_from`)."""
    from mlmtrain.model.context import quiet_transformers

    folder = base_folder(cfg.model.init_from)
    with quiet_transformers():
        model = base_family(model_config(folder)).load(folder, cfg.model).float()  # float32 whatever it was saved in
    add_word_rows(model, cfg)
    return model


ADDED_WORDS = "added_words.txt"  # beside the run: the words tokenizer.extend_vocab added, one a line, in id order
ADDED_WORDS_HEADER = "# the words tokenizer.extend_vocab added to the base's vocabulary, written by mlmtrain\n"


def added_words(cfg: Config) -> list[str]:
    """The words tokenizer.extend_vocab added to the run's tokenizer (as its mlmtrain-tokenizer.json records)."""
    from mlmtrain.data.tokenizer import tokenizer_record

    return list((tokenizer_record(cfg.tokenizer_dir) or {}).get("added_words") or [])


def write_added_words(cfg: Config, run_dir: Path) -> None:
    """RUN_DIR/added_words.txt, when the run's tokenizer has words tokenizer.extend_vocab added."""
    words = added_words(cfg)
    if words:
        text = ADDED_WORDS_HEADER + "".join(word + "\n" for word in words)
        (run_dir / ADDED_WORDS).write_text(text, encoding="utf-8")


def check_added_words_file(cfg: Config, run_dir: Path) -> None:
    """UserError when a run that extends the vocabulary would replace an added_words.txt mlmtrain did not write."""
    path = Path(run_dir) / ADDED_WORDS
    if not cfg.tokenizer.extend_vocab or not (path.exists() or path.is_symlink()):
        return
    try:
        ours = not path.is_symlink() and path.read_text(encoding="utf-8").startswith(ADDED_WORDS_HEADER)
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise UserError(
            "run",
            f"{path} is not the list of added words mlmtrain writes there (tokenizer.extend_vocab), and this run would "
            "replace it; move or rename it, or choose another train.run_dir",
        )


def add_word_rows(model: Any, cfg: Config) -> None:
    """Rows for the words tokenizer.extend_vocab added to the run's tokenizer (none: nothing): each word's
    embedding row and output bias start as the mean of those of the base's pieces of it."""
    from mlmtrain.data.tokenizer import load_tokenizer

    words = added_words(cfg)
    if not words:
        return
    base, extended = load_tokenizer(cfg.model.init_from).backend_tokenizer, load_tokenizer(cfg.tokenizer_dir)
    ids = extended.convert_tokens_to_ids(words)
    model.resize_token_embeddings(max(model.config.vocab_size, max(ids) + 1), mean_resizing=False)
    tables = [model.get_input_embeddings().weight, model.get_output_embeddings().weight]
    bias = model.get_output_embeddings().bias
    with torch.no_grad():
        for word, new_id in zip(words, ids, strict=True):
            pieces = [token.id for token in base.model.tokenize(word)]
            for table in {id(t): t for t in tables}.values():  # the decoder is the embedding when they are tied
                table[new_id] = table[pieces].mean(0)
            if bias is not None:
                bias[new_id] = bias[pieces].mean()


# ---------------------------------------------------------------------------------------------
# A second phase: a longer data.seq_len than the checkpoint or base was trained with


def _trained_seq_len(folder: Path) -> Optional[int]:
    """data.seq_len of the mlmtrain.yaml beside a model (None: no such file, or not one mlmtrain wrote)."""
    data = (read_saved_yaml(folder / "mlmtrain.yaml") or {}).get("data")
    value = data.get("seq_len") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positions(folder: Path) -> Optional[int]:
    """The longest sequence the model in `folder` takes (None: no readable config.json of a family's model)."""
    try:
        config = read_json(folder / "config.json")
    except (OSError, ValueError):
        return None
    return model_positions(config) if isinstance(config, dict) else None


def second_phase_note(cfg: Config, folder: Optional[Path]) -> Optional[str]:
    """The note for a run that continues `folder`, a checkpoint (--resume) or a base (model.init_from), at a longer
    data.seq_len than it was trained with (None otherwise, and for a model from scratch: no folder); UserError for a
    seq_len beyond its positions."""
    if folder is None:
        return None
    seq_len, positions = cfg.data.seq_len, _positions(folder)
    if positions is not None and seq_len > positions:
        raise UserError(
            "config",
            f"data.seq_len ({seq_len}) is beyond the {positions} positions of {folder}; set data.seq_len to "
            f"{positions} or less",
        )
    before = _trained_seq_len(folder)
    if before is None or seq_len <= before:
        return None
    return (
        f"note: second phase: data.seq_len {seq_len}, up from the {before} that {folder} was trained with (the "
        f"model has {positions} positions); positions past {before} start barely trained, as in BERT's second "
        "phase (90 % of the steps at 128 tokens, the rest at 512), and evaluations at the new length are not "
        "comparable with the earlier ones"
    )
