"""The masked-LM families `model.init_from` continues, one `Family` each: the masked-LM class and where its encoder
and head live, the config.json names of the shape and dropout keys, the positions a sequence cannot use, the
attention it loads with and the objectives it trains. What differs between families is here and nowhere else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from mlmtrain.config import ModelConfig
from mlmtrain.errors import UserError
from mlmtrain.runtime.model_folder import ModelFolder, load_model

# a masked-LM head split at its vocabulary projection: (transform of hidden states, decoder weight, decoder bias), so
# the projection runs on the selected rows only
Head = tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor, Optional[torch.Tensor]]


def _bert_head(mlm: Any) -> Head:
    predictions = mlm.cls.predictions  # BertForMaskedLM and BertForPreTraining alike; DeBERTa's legacy head too
    return predictions.transform, predictions.decoder.weight, predictions.decoder.bias


def _roberta_head(mlm: Any) -> Head:
    head = mlm.lm_head
    return (lambda x: head.layer_norm(F.gelu(head.dense(x)))), head.decoder.weight, head.decoder.bias


def _distilbert_head(mlm: Any) -> Head:
    def transform(x: torch.Tensor) -> torch.Tensor:
        return mlm.vocab_layer_norm(mlm.activation(mlm.vocab_transform(x)))

    return transform, mlm.vocab_projector.weight, mlm.vocab_projector.bias


def _modernbert_head(mlm: Any) -> Head:
    return mlm.head, mlm.decoder.weight, mlm.decoder.bias


def _transformers_4() -> Optional[str]:
    """The installed transformers' version when it is a 4.x (what some families cannot do there), else None."""
    import transformers  # transformers: heavy, loaded on use

    return transformers.__version__ if int(transformers.__version__.split(".")[0]) < 5 else None


def _deberta_blocker(config: Mapping[str, Any]) -> Optional[str]:
    """DeBERTa's v3 head (config.json `legacy: false`) under transformers 4.x, which ties that head's dense layer to the
    word embeddings and so cannot run it."""
    version = _transformers_4()
    if config.get("legacy", True) is False and version:
        return (
            f"holds a DeBERTa with the v3 masked-LM head (config.json legacy: false), which transformers "
            f"{version} cannot run (4.x ties that head's dense layer to the word embeddings): "
            "install transformers>=5"
        )
    return None


def _deberta_head(mlm: Any) -> Head:
    if getattr(mlm, "legacy", True):  # config.legacy (the default): a BERT-style cls.predictions head
        return _bert_head(mlm)
    head = mlm.lm_predictions.lm_head  # projects onto the word embedding, with a bias of its own
    transform = lambda x: head.LayerNorm(head.transform_act_fn(head.dense(x)))  # noqa: E731
    return transform, mlm.deberta.embeddings.word_embeddings.weight, head.bias


def prepared_masks(mlm: Any) -> bool:
    """Whether the model builds its attention masks with transformers' masking utilities (5.x), which pass a prepared
    4-D mask to its layers as it is; 4.x's BERT extends a mask itself (get_extended_attention_mask, no 4-D)."""
    return hasattr(sys.modules[type(mlm).__module__], "create_bidirectional_mask")


def _one_mask(mlm: Any, same: torch.Tensor) -> torch.Tensor:
    """One bool mask for every layer, True where a query may attend (`same` [B,T,T]: same document): [B,1,T,T] where
    the model takes prepared masks (`prepared_masks`), [B,T,T] where it extends them itself."""
    return same[:, None] if prepared_masks(mlm) else same


def _layer_type_masks(mlm: Any, same: torch.Tensor) -> dict[str, torch.Tensor]:
    """A mask for each of ModernBERT's layer types (transformers 5 takes them as a dict): its global layers keep to the
    document, its local ones also to their window, as its own sliding-window mask draws it (distance <=
    config.sliding_window, half of local_attention)."""
    steps = torch.arange(same.shape[-1], device=same.device)
    half = getattr(mlm.config, "sliding_window", None) or mlm.config.local_attention // 2
    window = (steps[:, None] - steps[None, :]).abs() <= half
    return {"full_attention": same[:, None], "sliding_attention": (same & window)[:, None]}


def rotary_head_problem(hidden_size: int, num_heads: int) -> Optional[str]:
    """Why heads of hidden_size / num_heads dimensions cannot take rotary positions (ModernBERT's), None when they
    can: a rotary embedding turns each head's dimensions in pairs, so a head needs an even number of them (an odd
    one fails in the first forward pass, or, at 1, broadcasts silently to 2)."""
    head = hidden_size // num_heads
    if hidden_size % num_heads or head % 2 == 0:
        return None  # heads that do not divide the width are refused for that reason
    return (
        f"heads of {head} dimension(s) ({hidden_size} / {num_heads}), and rotary positions turn a head's dimensions "
        "in pairs: a head needs an even number of them"
    )


def even_heads(hidden_size: int, num_heads: int) -> str:
    """The nearest change of model.num_heads (else of hidden_size) that gives heads of an even size."""
    even = [n for n in range(1, hidden_size + 1) if hidden_size % n == 0 and (hidden_size // n) % 2 == 0]
    if not even:
        return f"set model.hidden_size to {num_heads * (hidden_size // num_heads + 1)}"
    return f"set model.num_heads to {min(even, key=lambda n: (abs(n - num_heads), -n))}"


def check_rotary_bases(family: Family, cfg: ModelConfig, what: str) -> None:
    """UserError for model.global_rope_theta or local_rope_theta set for `what`, a model of `family`, whose positions
    are not rotary (BERT's are learned): the setting would be recorded and change nothing."""
    for key in ("global_rope_theta", "local_rope_theta"):
        if getattr(cfg, key) is not None and not family.rotary:
            raise UserError(
                "config",
                f"model.{key} sets the base of rotary positions, and {what} learns its positions (a {family.name} "
                f"model); drop model.{key}",
            )


def check_rotary_heads(cfg: ModelConfig) -> None:
    """UserError for a model section whose heads rotary positions cannot turn (`rotary_head_problem`), naming the
    model.num_heads that works."""
    problem = rotary_head_problem(cfg.hidden_size, cfg.num_heads)
    if problem is not None:
        raise UserError(
            "config",
            f"model.num_heads ({cfg.num_heads}) gives model.architecture modernbert {problem}; "
            f"{even_heads(cfg.hidden_size, cfg.num_heads)}",
        )


def _rotary_blocker(config: Mapping[str, Any]) -> Optional[str]:
    """A ModernBERT whose heads have an odd number of dimensions, which its rotary positions cannot turn (transformers
    fails in the first forward pass, or at 1 broadcasts silently)."""
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if not (isinstance(hidden, int) and isinstance(heads, int) and heads > 0):
        return None
    reason = rotary_head_problem(hidden, heads)
    return f"holds a ModernBERT with {reason}: no model of that shape runs; use another model" if reason else None


def _modernbert_within_blocker() -> Optional[str]:
    """Why the installed transformers cannot keep ModernBERT's attention to each document: 4.x draws its global and
    local masks itself from a padding mask."""
    version = _transformers_4()
    if version:
        return f"transformers {version} builds ModernBERT's local and global masks itself; install transformers>=5"
    return None


_BERT_SHAPE = {
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
}
_BERT_DROPOUT = {"hidden_dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob"}
# beside the shape, the config keys that fix which modules and tensors a model has (those its config class has are
# compared on resume); dropout is not among them: it only changes training, and the config's applies on resume
_FIXED_KEYS = (
    "embedding_size",
    "vocab_size",
    "type_vocab_size",
    "pad_token_id",
    "hidden_act",
    "layer_norm_eps",
    "position_embedding_type",
    "tie_word_embeddings",
    "is_decoder",
    "add_cross_attention",
)


def _after_padding(config: Mapping[str, Any]) -> int:
    """RoBERTa's positions count from padding_idx + 1: that many of max_position_embeddings are never used."""
    pad = config.get("pad_token_id")
    return pad + 1 if isinstance(pad, int) and not isinstance(pad, bool) and pad >= 0 else 0


@dataclass(frozen=True)
class Family:
    name: str  # as the docs and messages call it
    model_types: tuple[str, ...]  # config.json's model_type
    masked_lm: tuple[str, ...]  # the architectures that hold a whole masked LM; the first is the class trained
    encoder: str  # the masked LM's attribute that holds the encoder
    head: Callable[[Any], Head]
    tokenizers: str  # the tokenizers its published models bring (docs)
    shape: Mapping[str, str] = field(default_factory=lambda: _BERT_SHAPE)  # ModelConfig key -> config.json key
    dropout: Mapping[str, str] = field(default_factory=lambda: _BERT_DROPOUT)  # ModelConfig key -> config.json key
    sdpa: bool = True  # loads with attn_implementation="sdpa"; DeBERTa's disentangled attention has only its own
    unused_positions: Callable[[Mapping[str, Any]], int] = lambda config: 0
    layers: str = "encoder.layer"  # the encoder's list of transformer layers, below `encoder`
    # why the installed transformers cannot run the model of config.json `config`; None when it can
    blocker: Callable[[Mapping[str, Any]], Optional[str]] = lambda config: None
    # data.document_attention within: its encoder takes a mask per query and position ids (BERT's and RoBERTa's
    # absolute positions); DistilBERT's takes no position ids before transformers 5, and ModernBERT's local windows
    # and DeBERTa's own attention build their masks themselves
    within_documents: bool = False
    # the mask(s) that keep each token to its document, from `same` [B,T,T] (True: same document)
    document_masks: Callable[[Any, torch.Tensor], Any] = _one_mask
    # why the installed transformers cannot keep this family within documents; None when it can
    within_blocker: Callable[[], Optional[str]] = lambda: None
    # its layers are BERT's (attention.self.query/key/value, attention.output, intermediate, output): the last one can
    # run on the selected positions alone (last_layer.py)
    bert_layout: bool = False
    # its positions are rotary (ModernBERT's): model.global_rope_theta and local_rope_theta set their bases
    rotary: bool = False

    @property
    def architecture_keys(self) -> tuple[str, ...]:
        """The config keys a resumed checkpoint's model must share with the model the run builds: its shape, then the
        keys that fix its modules and tensors (`_FIXED_KEYS`)."""
        return (*self.shape.values(), *_FIXED_KEYS)

    def masked_lm_class(self, model_type: Any = None) -> Any:
        """The class a model of this family trains and is saved as: the masked LM of its own `model_type` (an
        XLM-RoBERTa base stays an XLMRobertaForMaskedLM, not its family's RobertaForMaskedLM), else the family's
        first (a BertForPreTraining base continues as a BertForMaskedLM)."""
        import transformers  # transformers: heavy, loaded on use
        from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES  # transformers: heavy

        own = MODEL_FOR_MASKED_LM_MAPPING_NAMES.get(model_type) if model_type in self.model_types else None
        return getattr(transformers, own if own in self.masked_lm else self.masked_lm[0])

    def positions(self, config: Mapping[str, Any]) -> int:
        """The longest sequence a model of this family with config.json `config` takes."""
        return config[self.shape["max_position_embeddings"]] - self.unused_positions(config)

    def dropout_settings(self, model: ModelConfig) -> dict[str, float]:
        """The config.json dropout keys of this family, as `model` (a resolved config) sets them."""
        values = {"hidden_dropout": model.hidden_dropout_prob, "attention_dropout": model.attention_dropout_prob}
        return {name: values[key] for key, name in self.dropout.items()}

    def check_runs(self, config: Mapping[str, Any], where: Union[str, Path]) -> None:
        """A UserError when the installed transformers cannot run the model of `where`, whose config.json is
        `config`."""
        reason = self.blocker(config)
        if reason:
            raise UserError("model", f"{where} {reason}")

    def load(self, saved: ModelFolder, model: ModelConfig, model_class: Any = None, **kwargs: Any) -> Any:
        """The masked LM of the folder's own model type (`masked_lm_class`; or `model_class`) of the folder `saved`
        (read once), with `model`'s dropout and its family's attention."""
        self.check_runs(saved.config, saved.folder)
        if self.sdpa:
            kwargs["attn_implementation"] = "sdpa"
        model_class = model_class or self.masked_lm_class(saved.config["model_type"])
        return load_model(model_class, saved, self.dropout_settings(model), **kwargs)


BERT = Family(
    "BERT",
    ("bert",),
    ("BertForMaskedLM", "BertForPreTraining"),
    "bert",
    head=_bert_head,
    tokenizers="WordPiece",
    within_documents=True,
    bert_layout=True,
)
ROBERTA = Family(
    "RoBERTa",
    ("roberta", "xlm-roberta", "camembert"),
    ("RobertaForMaskedLM", "XLMRobertaForMaskedLM", "CamembertForMaskedLM"),
    "roberta",
    head=_roberta_head,
    tokenizers="byte-level BPE (RoBERTa), SentencePiece (XLM-RoBERTa, CamemBERT)",
    unused_positions=_after_padding,
    within_documents=True,
    bert_layout=True,
)
DISTILBERT = Family(
    "DistilBERT",
    ("distilbert",),
    ("DistilBertForMaskedLM",),
    "distilbert",
    head=_distilbert_head,
    tokenizers="WordPiece",
    shape={
        **_BERT_SHAPE,
        **{"hidden_size": "dim", "num_layers": "n_layers", "num_heads": "n_heads"},
        "intermediate_size": "hidden_dim",
    },
    dropout={"hidden_dropout": "dropout", "attention_dropout": "attention_dropout"},
    layers="transformer.layer",
)
MODERNBERT = Family(
    "ModernBERT",
    ("modernbert",),
    ("ModernBertForMaskedLM",),
    "model",
    head=_modernbert_head,
    tokenizers="byte-level BPE",
    dropout={"hidden_dropout": "mlp_dropout", "attention_dropout": "attention_dropout"},
    layers="layers",
    blocker=_rotary_blocker,
    rotary=True,
    within_documents=True,
    document_masks=_layer_type_masks,
    within_blocker=_modernbert_within_blocker,
)
DEBERTA = Family(
    "DeBERTa-v2/v3",
    ("deberta-v2",),
    ("DebertaV2ForMaskedLM",),
    "deberta",
    head=_deberta_head,
    tokenizers="SentencePiece (Unigram)",
    sdpa=False,
    blocker=_deberta_blocker,
)
FAMILIES = (BERT, ROBERTA, DISTILBERT, MODERNBERT, DEBERTA)
_BY_TYPE = {model_type: family for family in FAMILIES for model_type in family.model_types}


def family_of(model_type: Any) -> Optional[Family]:
    """The family of config.json's `model_type`; None for a model type mlmtrain does not continue."""
    return _BY_TYPE.get(model_type) if isinstance(model_type, str) else None


def model_family(mlm: Any) -> Family:
    """The family of a loaded masked LM (BERT for a model mlmtrain built)."""
    return family_of(getattr(mlm.config, "model_type", None)) or BERT


def shape_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The shape of the model whose config.json is `config`, by ModelConfig's key names (num_layers, hidden_size, ...),
    read under its family's names (BERT's for a model of no family); a key it lacks is None."""
    family = family_of(config.get("model_type")) or BERT
    return {key: config.get(name) for key, name in family.shape.items()}


def model_positions(config: Any) -> Optional[int]:
    """The longest sequence the model of a transformers config (or config.json's dict) takes: its
    max_position_embeddings less what its family never uses (RoBERTa's padding offset); None when it does not say."""
    values = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    try:
        return (family_of(values.get("model_type")) or BERT).positions(values)
    except (KeyError, TypeError):
        return None


def known_types() -> str:
    """The model types of every family, for a message: 'bert, roberta, ...'."""
    return ", ".join(_BY_TYPE)


_WITHIN = [family.name for family in FAMILIES if family.within_documents]
WITHIN_DOCUMENTS = f"{', '.join(_WITHIN[:-1])} or {_WITHIN[-1]}"  # for messages: "BERT, RoBERTa or ModernBERT"


def check_within_documents(family: Optional[Family], what: str) -> None:
    """UserError when data.document_attention within is asked of `what`, a model of `family` (None: of no family
    mlmtrain knows), whose encoder cannot keep a token to its own document."""
    if family is None or not family.within_documents:
        raise UserError(
            "config",
            f"data.document_attention within needs a {WITHIN_DOCUMENTS} model, and {what} is not one; set "
            "data.document_attention: packed",
        )
    reason = family.within_blocker()
    if reason:
        raise UserError(
            "config",
            f"data.document_attention within, asked of {what}: {reason} or set data.document_attention: packed",
        )


def document_attention(mlm: Any, document_ids: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """(attention mask, position ids) that keep each token of a packed block to its own document (`document_ids`
    [B,T], masking.py), with positions from 0 (RoBERTa's after its padding offset) at each document's start: a
    document's hidden states are then those it has alone. The mask is bool, True where a query may attend, in the
    form the family's encoder takes (`Family.document_masks`)."""
    family = model_family(mlm)
    steps = torch.arange(document_ids.shape[1], device=document_ids.device)
    starts = F.pad(document_ids[:, 1:] != document_ids[:, :-1], (1, 0), value=True)
    first = torch.cummax(torch.where(starts, steps, 0), dim=1).values  # where each token's document starts
    positions = steps - first + family.unused_positions(vars(mlm.config))
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return family.document_masks(mlm, same), positions


def encode(
    mlm: Any,
    input_ids: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    document_ids: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> torch.Tensor:
    """The encoder's last hidden states [B,T,H] of a masked LM of any family (no head); with `document_ids`, each
    token attends within its own document only (`document_attention`; packed blocks have no padding mask)."""
    if document_ids is not None:
        attention_mask, kwargs["position_ids"] = document_attention(mlm, document_ids)
    encoder = getattr(mlm, model_family(mlm).encoder)
    return encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state


def _layers_home(mlm: Any) -> tuple[Any, str]:
    """(the module that holds the transformer layers of a masked LM of any family, the attribute that holds them)."""
    family = model_family(mlm)
    *path, name = f"{family.encoder}.{family.layers}".split(".")
    parent = mlm
    for attribute in path:
        parent = getattr(parent, attribute)
    return parent, name


def transformer_layers(mlm: Any) -> torch.nn.ModuleList:
    """The transformer layers of a masked LM of any family, in order."""
    return getattr(*_layers_home(mlm))


def keep_layers(mlm: Any, kept: list[int]) -> None:
    """Keep only the transformer layers `kept` (indices, in order) of a masked LM of any family, and say so in its
    config (`kept_layers_config`)."""
    parent, name = _layers_home(mlm)
    layers = getattr(parent, name)
    setattr(parent, name, torch.nn.ModuleList([layers[index] for index in kept]))
    for key, value in kept_layers_config(mlm.config.to_dict(), kept).items():
        setattr(mlm.config, key, value)


def kept_layers_config(config: Mapping[str, Any], kept: list[int]) -> dict[str, Any]:
    """The config.json keys that change when a model of config `config` keeps only the layers `kept`: its layer count
    and, for ModernBERT, its list of local and global attention (one entry a layer)."""
    family = family_of(config.get("model_type")) or BERT
    layers = config[family.shape["num_layers"]]
    changed: dict[str, Any] = {family.shape["num_layers"]: len(kept)}
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        changed["layer_types"] = [kinds[index] for index in kept]
    return changed


def head_logits(mlm: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The masked-LM head of a model of any family on `hidden` (the rows it should score)."""
    transform, weight, bias = model_family(mlm).head(mlm)
    return F.linear(transform(hidden), weight, bias)
