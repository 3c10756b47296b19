"""A model or tokenizer folder mlmtrain is handed, read as data only. A folder that asks for its own Python code
(`auto_map`, or a model type or tokenizer class transformers does not know) is refused before transformers opens it,
and every transformers loader goes through `from_pretrained` here (trust_remote_code=False, so no prompt ever asks
to run it); config.json is read by typed keys (`model_config`), and a sharded index names files inside the folder
only (`weight_map`).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Optional, Union

from safetensors import safe_open

from mlmtrain.config import names_hub_repository
from mlmtrain.errors import UserError, refused_pickle, shown
from mlmtrain.readers import read_json, read_saved_yaml
from mlmtrain.runtime.hub import hub_unreachable

CONFIG = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
SETTINGS = "mlmtrain.yaml"  # the resolved config of the run that wrote a folder
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLED_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")  # what torch.save wrote: a pickle
_INDEXES = (WEIGHTS_INDEX, PICKLED_WEIGHTS[1])
_NO_CODE = "mlmtrain never runs a model folder's own code"


def _json_object(path: Path) -> Optional[dict[str, Any]]:
    """The JSON object in `path`; None when it is missing, unreadable or not an object."""
    try:
        value = read_json(path)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _known_model_type(model_type: Any) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES  # transformers: heavy, loaded on use

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING_NAMES


def _known_tokenizer_class(name: Any) -> bool:
    # transformers: heavy, loaded on use
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    if not isinstance(name, str):
        return False
    # transformers 4 names fast classes BertTokenizerFast, transformers 5 drops the suffix: either spelling is known
    return any(tokenizer_class_from_name(c) is not None for c in (name, name.removesuffix("Fast"), name + "Fast"))


def check_folder(source: Union[str, Path]) -> None:
    """UserError when the local folder `source` asks for code of its own or names weights outside itself; nothing
    for a Hub name (transformers refuses its code under trust_remote_code=False)."""
    folder = Path(source).expanduser()
    if folder.is_dir():
        _check_settings(folder, _json_object(folder / CONFIG), _json_object(folder / TOKENIZER_CONFIG))


def _check_settings(folder: Path, config: Optional[dict[str, Any]], tokenizer_config: Optional[dict[str, Any]]) -> None:
    """`check_folder` on the folder's config.json and tokenizer_config.json as read (None: missing or no object)."""
    for topic, name, settings in (("model", CONFIG, config), ("tokenizer", TOKENIZER_CONFIG, tokenizer_config)):
        if settings is not None and "auto_map" in settings:
            raise UserError(
                topic,
                f"{folder / name} has an auto_map: it asks to run Python code from the folder, and {_NO_CODE}; "
                "delete auto_map from it or use a model that transformers loads as it is",
            )
    if config is not None and "model_type" in config and not _known_model_type(config["model_type"]):
        raise UserError(
            "model",
            f"{folder / CONFIG} has model_type {config['model_type']!r}, which transformers does not know: it would "
            f"need code from the folder, and {_NO_CODE}; use a model of a type transformers knows (bert, roberta, ...)",
        )
    name = (tokenizer_config or {}).get("tokenizer_class")
    if name is not None and not _known_tokenizer_class(name):
        raise UserError(
            "tokenizer",
            f"{folder / TOKENIZER_CONFIG} has tokenizer_class {name!r}, which transformers does not know: it would "
            f"need code from the folder, and {_NO_CODE}; set tokenizer_class to a transformers class "
            "(e.g. BertTokenizerFast) or use another tokenizer",
        )
    for index in _INDEXES:
        weight_map(folder, index)


def from_pretrained(loader: Callable[..., Any], source: Union[str, Path], **kwargs: Any) -> Any:
    """`loader.from_pretrained(source, **kwargs)` (a transformers class: AutoConfig, AutoTokenizer, a model) with no
    code of the folder's ever run: `check_folder` first, and trust_remote_code=False for what it cannot see. A Hub
    name is read from the cache alone in offline mode, as every library is told, or when the Hub is out of reach (at
    once, rather than after half a minute of retries)."""
    check_folder(source)
    if names_hub_repository(str(source)) and hub_unreachable():
        kwargs.setdefault("local_files_only", True)
    return _no_pickle(lambda: loader.from_pretrained(str(source), trust_remote_code=False, **kwargs), source)


def _no_pickle(load: Callable[[], Any], source: Union[str, Path]) -> Any:
    """`load()`, with a pickle that torch's weights_only refuses said in one line and how to convert it."""
    try:
        return load()
    except Exception as error:
        refused = refused_pickle(error)
        if refused is None:
            raise
        raise UserError(
            "model",
            f"the weights of {source} are a pickle ({' or '.join(PICKLED_WEIGHTS)}) holding a Python object "
            f"({refused}), not only tensors, and mlmtrain never unpickles one (that could run code); if you trust "
            "where it came from, convert it yourself: torch.load it with weights_only=False and save_pretrained the "
            "model into the folder (or save its tensors with safetensors' save_file as model.safetensors)",
        ) from None


def transformers_config(config: dict[str, Any]) -> Any:
    """The transformers config of a config.json's contents (of a model type transformers knows: `check_folder`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # transformers: heavy, loaded on use

    return CONFIG_MAPPING[config["model_type"]].from_dict(config)


def load_model(
    loader: Callable[..., Any], saved: ModelFolder, settings: Optional[dict[str, Any]] = None, **kwargs: Any
) -> Any:
    """The model of a folder read and checked already (`read_model_folder`), its config built from config.json as
    read with `settings` (config keys such as dropout) over it: transformers opens the weights, not the folder's
    settings again. `kwargs` go to `from_pretrained` (attn_implementation, output_loading_info, ...)."""
    config = transformers_config({**saved.config, **(settings or {})})
    load = lambda: loader.from_pretrained(str(saved.folder), config=config, trust_remote_code=False, **kwargs)  # noqa: E731
    return _no_pickle(load, saved.folder)


def _shards_root(folder: Path) -> Path:
    """What a shard of `folder` may resolve into: the folder, or for a Hub cache snapshot (whose files link to the
    repository's blobs) that repository's cache folder."""
    resolved = folder.resolve()
    if resolved.parent.name == "snapshots" and resolved.parent.parent.name.startswith("models--"):
        return resolved.parent.parent
    return resolved


def weight_map(folder: Path, index_name: str = WEIGHTS_INDEX) -> dict[str, str]:
    """Tensor name -> shard file of a sharded folder's index (none: {}), after checking every shard it names lies
    inside the folder (no absolute path, no `..`, no link out of it); UserError otherwise."""
    folder = Path(folder)
    index = folder / index_name
    if not index.is_file():
        return {}
    mapping = (_json_object(index) or {}).get("weight_map")
    if not isinstance(mapping, dict) or not all(isinstance(v, str) and isinstance(k, str) for k, v in mapping.items()):
        raise UserError("model", f"{index} has no weight_map of tensor names to shard files; copy the model again")
    root = _shards_root(folder)
    for shard in sorted(set(mapping.values())):
        path = PurePath(shard)
        escapes = path.is_absolute() or ".." in path.parts or not path.parts  # by its name, or by a link below
        if escapes or not (folder / path).resolve().is_relative_to(root):
            raise UserError(
                "model",
                f"{index} names the shard {shard!r}, outside {folder}; an index may name files in its own folder "
                "only: fix the index or use another model",
            )
    return mapping


def weight_files(folder: Union[str, Path]) -> list[Path]:
    """The safetensors files that hold a model folder's weights: model.safetensors, else the shards its index lists
    (each checked to lie inside the folder: `weight_map`), in name order; [] when it has neither."""
    folder = Path(folder)
    if (folder / WEIGHTS).is_file():
        return [folder / WEIGHTS]
    return [folder / shard for shard in sorted(set(weight_map(folder).values()))]


def _pickled_files(folder: Path) -> list[Path]:
    """The pickled weight files of a folder without safetensors ones: pytorch_model.bin, or the shards its index
    lists (checked to lie inside the folder)."""
    if (folder / PICKLED_WEIGHTS[0]).is_file():
        return [folder / PICKLED_WEIGHTS[0]]
    return [folder / shard for shard in sorted(set(weight_map(folder, PICKLED_WEIGHTS[1]).values()))]


def weights_fingerprint(folder: Union[str, Path]) -> str:
    """What identifies a model folder's weights by their content, not by the folder's name or path: "sha256:" and
    the hex digest of every weight file's name and bytes (`weight_files`, else the pickled ones, hashed as bytes and
    never loaded), streamed and parsed not at all. Any other tensor, dtype or value gives another fingerprint,
    however the folder is named or linked; reading the files once is all it costs. UserError for a folder without
    weights."""
    folder = Path(folder)
    files = weight_files(folder) or _pickled_files(folder)
    if not files:
        raise UserError("model", f"{folder} holds no weights ({WEIGHTS} or {PICKLED_WEIGHTS[0]}); pass a model folder")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode("utf-8") + b"\0")
        try:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
        except OSError as error:
            raise UserError("model", f"cannot read {path}: {error.strerror or error}; copy the model again") from None
    return f"sha256:{digest.hexdigest()}"


def weights_parameter_count(folder: Union[str, Path]) -> int:
    """The numbers in a model folder's saved weights (`weight_files`; tied ones are saved, and counted, once), read
    from the safetensors headers alone."""

    total = 0
    for path in weight_files(folder):
        with safe_open(str(path), "pt") as opened:
            total += sum(math.prod(opened.get_slice(name).get_shape()) for name in opened.keys())
    return total


# The keys mlmtrain reads of a model's config.json by the name transformers gives them, and the kind each must be;
# a model type's config.json must hold the size keys its config class writes (its own names: DistilBERT's `dim`).
_POSITIVE = "a positive whole number"
_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_SIZES += ("max_position_embeddings",)
_OPTIONAL = {
    "hidden_dropout_prob": "a number in [0, 1)",
    "attention_probs_dropout_prob": "a number in [0, 1)",
    "initializer_range": "a number >= 0",
    "is_decoder": "true or false",
    "is_encoder_decoder": "true or false",
    "architectures": "a list of class names",
}


def _fits(value: Any, kind: str) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return {
        _POSITIVE: isinstance(value, int) and not isinstance(value, bool) and value > 0,
        "a number in [0, 1)": number and 0 <= value < 1,
        "a number >= 0": number and value >= 0,
        "true or false": isinstance(value, bool),
        "a list of class names": isinstance(value, list) and all(isinstance(item, str) for item in value),
    }[kind]


@functools.cache
def _json_names(model_type: str) -> dict[str, str]:
    """{transformers attribute: its config.json key} of the keys mlmtrain reads that `model_type` writes; only the
    optional ones for a type with no masked-LM head, which the commands refuse for that reason."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # transformers: heavy, loaded on use

    # transformers: heavy, loaded on use
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    config_class = CONFIG_MAPPING[model_type]
    try:
        written = config_class().to_dict() if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES else {}
    except Exception:  # a composite config (encoder-decoder) builds no default: none of its keys is required
        written = {}
    names = {key: config_class.attribute_map.get(key, key) for key in (*_SIZES, *_OPTIONAL)}
    return {key: name for key, name in names.items() if name in written or key in _OPTIONAL}


@dataclass(frozen=True)
class ModelFolder:
    """A model folder read once and checked (`read_model_folder`): its config.json, its tokenizer_config.json (None:
    none) and the mlmtrain.yaml beside it (the resolved config of the run that wrote it; {}: none, or not readable)."""

    folder: Path
    config: dict[str, Any]
    tokenizer_config: Optional[dict[str, Any]]

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """Its mlmtrain.yaml, read on first use."""
        return read_saved_yaml(self.folder / SETTINGS) or {}

    def setting(self, section: str, key: str) -> Any:
        """`section.key` of its mlmtrain.yaml; None where the file does not say."""
        values = self.settings.get(section)
        return values.get(key) if isinstance(values, dict) else None


def read_model_folder(
    folder: Union[str, Path], topic: str = "model", fix: str = "pass a folder written by save_pretrained"
) -> ModelFolder:
    """The model folder `folder`, each settings file read once: `check_folder`'s checks, then those of every
    config.json key mlmtrain reads (its type, and that hidden_size divides by num_attention_heads): a UserError
    naming the file and the key otherwise, with `fix` for a config.json that is no JSON object."""
    folder = Path(folder).expanduser()
    path = folder / CONFIG
    config, tokenizer_config = _json_object(path), _json_object(folder / TOKENIZER_CONFIG)
    _check_settings(folder, config, tokenizer_config)
    if config is None:
        raise UserError(topic, f"{path} is missing or damaged (not a JSON object); {fix}")
    if "model_type" not in config:
        raise UserError(topic, f"{path} has no model_type; {fix}")
    names = _json_names(config["model_type"])
    for key, name in names.items():
        kind = _OPTIONAL.get(key, _POSITIVE)
        if name not in config and kind == _POSITIVE:
            raise UserError(topic, f"{path} has no {name}; {fix}")
        if name in config and not _fits(config[name], kind):
            raise UserError(topic, f"{path}: {name} must be {kind} (got {shown(config[name])}); {fix}")
    if "hidden_size" in names and "num_attention_heads" in names:
        hidden, heads = config[names["hidden_size"]], config[names["num_attention_heads"]]
        if hidden % heads:
            raise UserError(
                topic,
                f"{path} is inconsistent: hidden_size {hidden} is not a multiple of num_attention_heads {heads}, so "
                "the folder is not a valid model; restore its config.json or use another model",
            )
    return ModelFolder(folder, config, tokenizer_config)


def model_config(
    folder: Union[str, Path], topic: str = "model", fix: str = "pass a folder written by save_pretrained"
) -> dict[str, Any]:
    """The config.json of the model folder `folder`, checked (`read_model_folder`)."""
    return read_model_folder(folder, topic, fix).config
